"""The checkpoint history of a package, shared between its generations.

A package's history is every checkpoint of its chain, oldest first. With
stored generation format v2 (ADR 0110) a generation holds only its own
checkpoints and continues the history of the generation it links to, so the
history of generation *n + 1* is the history of *n* plus one checkpoint.
:class:`History` is an immutable view of the first *n* entries of a shared,
append-only log: extending the newest view appends to the log in place, so
an advance costs the same after 1,000 checkpoints as after one. Extending
an older view (a write that was discarded, a second branch) copies the log
once ("fork"); two views never see different checkpoints at one position.

The content fingerprint needs every file's ``(path, sha256)`` in sorted
order. Checkpoint paths all start with ``history/checkpoints/`` and have one
length, so their records form one contiguous, fixed-width block of the
fingerprint's input: :meth:`History.block` keeps it sorted and hands it to
the view that extends it, which inserts its new records instead of sorting
everything again.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .package import Checkpoint

__all__ = ["History", "fingerprint_record"]


def fingerprint_record(path: str, sha256_hex: str) -> bytes:
    """One file's part of the content fingerprint's input (see :func:`~tenure.intake.canonical.fingerprint`)."""
    encoded = path.encode("utf-8")
    return len(encoded).to_bytes(4, "big") + encoded + bytes.fromhex(sha256_hex)


class _Log:
    """Checkpoints oldest first and where each path is; only ever appended to."""

    __slots__ = ("items", "index", "lock")

    def __init__(self, items: list[Checkpoint]) -> None:
        self.items = items
        self.index = {cp.path: i for i, cp in enumerate(items)}
        self.lock = threading.Lock()


class _Block:
    """The sorted checkpoint paths and their fingerprint records, concatenated."""

    __slots__ = ("paths", "data", "width")

    def __init__(self, paths: list[str], data: bytes, width: int) -> None:
        self.paths, self.data, self.width = paths, data, width


class History:
    """The first ``len(self)`` checkpoints of a shared log (oldest first); immutable."""

    __slots__ = ("_log", "_n", "_block")

    def __init__(self, log: _Log, n: int) -> None:
        self._log = log
        self._n = n
        self._block: _Block | None = None

    @classmethod
    def of(cls, oldest_first: Sequence[Checkpoint]) -> History:
        return cls(_Log(list(oldest_first)), len(oldest_first))

    def __len__(self) -> int:
        return self._n

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self.get(path) is not None

    def __iter__(self) -> Iterator[Checkpoint]:
        """Oldest first."""
        items = self._log.items
        return (items[i] for i in range(self._n))

    def get(self, path: str) -> Checkpoint | None:
        """The checkpoint at ``path`` if this history holds it."""
        position = self._log.index.get(path)
        if position is None or position >= self._n:
            return None
        return self._log.items[position]

    def position(self, path: str) -> int | None:
        """0 for the oldest checkpoint; None if this history does not hold ``path``."""
        position = self._log.index.get(path)
        return None if position is None or position >= self._n else position

    @property
    def latest(self) -> Checkpoint | None:
        return self._log.items[self._n - 1] if self._n else None

    def newest_first(self) -> tuple[Checkpoint, ...]:
        return tuple(reversed(self._log.items[: self._n]))

    def upto(self, path: str) -> History:
        """The history ending with the checkpoint at ``path`` (which this history holds)."""
        position = self.position(path)
        if position is None:
            raise KeyError(path)
        return self if position + 1 == self._n else History(self._log, position + 1)

    def extend(self, newer: Sequence[Checkpoint]) -> History:
        """This history followed by ``newer`` (oldest first; paths not yet in it)."""
        if not newer:
            return self
        log, n, k = self._log, self._n, len(newer)
        with log.lock:
            items = log.items
            if len(items) == n:
                for offset, cp in enumerate(newer):
                    items.append(cp)
                    log.index[cp.path] = n + offset
                extended = History(log, n + k)
            elif len(items) >= n + k and all(
                items[n + j].path == cp.path and items[n + j].sha256 == cp.sha256 for j, cp in enumerate(newer)
            ):
                extended = History(log, n + k)  # the log already continues with exactly these (a roll-up)
            else:
                extended = History(_Log([*items[:n], *newer]), n + k)
        block, self._block = self._block, None  # handed over: the newest view is the one extended next
        if block is not None:
            extended._block = _insert(block, newer)
        return extended

    def block(self) -> bytes:
        """The fingerprint records of every checkpoint, sorted by path, concatenated."""
        if self._block is None:
            items = self._log.items[: self._n]
            pairs = sorted((cp.path, cp.sha256) for cp in items)
            records = [fingerprint_record(path, sha) for path, sha in pairs]
            widths = {len(r) for r in records}
            width = widths.pop() if len(widths) == 1 else 0
            self._block = _Block([path for path, _ in pairs], b"".join(records), width)
        return self._block.data


def _insert(block: _Block, newer: Sequence[Checkpoint]) -> _Block | None:
    """``block`` with the records of ``newer`` inserted in order (None: recompute when asked)."""
    paths, data, width = list(block.paths), block.data, block.width
    for cp in newer:
        record = fingerprint_record(cp.path, cp.sha256)
        if paths and len(record) != width:
            return None
        width = len(record)
        at = bisect.bisect_left(paths, cp.path)
        paths.insert(at, cp.path)
        data = data[: at * width] + record + data[at * width :]
    return _Block(paths, data, width)
