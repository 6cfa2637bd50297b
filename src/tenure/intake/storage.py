"""Managed case storage: confirmed generations, publication and the local index.

A package folder ``cases/<case-hash>/<package-hash>/`` holds immutable
generations ``gNNNNNNNN.zip`` and ``current.json``. The current generation is
always recovered from the generation files: the highest-numbered file is
validated in full (its name checked against its manifest) and is the answer,
or the call fails with ``storage-corrupt``; there is never a fallback to an
older file. ``current.json`` is a lookup index, rewritten when stale.

A generation in stored format v2 (ADR 0110) continues the history of the
generation its record links to. Loading it loads that one first, and so on
down the links (each validated once per process and cached): a missing or
damaged link is ``storage-corrupt`` with the cause ``generation-link-missing``
or ``generation-link-mismatch``, never a shorter history. The generations
reached this way from the newest are the folder's *referenced* generations;
:meth:`CaseStorage.referenced` lists them and the collector (:mod:`.collect`)
removes the others.

Publication gives a validated temporary file its final name with a hard
link, which fails rather than replace an existing generation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import zipfile
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tenure.faults import crash_point, register
from tenure.fsio import sync_filesystem

from .canonical import id_hash, to_utc_text, utc_now
from .config import IntakeConfig
from .errors import PackageRejectedError, StorageCorruptError
from .fsio import TMP_PREFIX, atomic_write_json, fsync_dir
from .package import Package, generation_name, read_link, read_package
from .workspace import Workspace

__all__ = ["CaseStorage", "generation_name", "INDEX", "Staged", "sync_folders", "Layout"]

GENERATION_NAMED = register(
    "intake.batch.generation-named",
    "group commit: one more generation of the batch named (and its index); the folders not yet synced",
)
#: a generation of a group commit: (validated temporary package, its folder, its temporary index file)
Staged = tuple[Package, Path, Path]

INDEX = "current.json"
_GENERATION = re.compile(r"^g(\d{8})\.zip$")
_CACHE_SIZE = 256
#: what the validated generations kept in memory may weigh (:func:`_weight`), the newest one always kept
_CACHE_BYTES = 64 * 1024 * 1024


def _weight(package: Package) -> int:
    """A generous estimate of what a validated generation holds in memory, in bytes.

    About a kilobyte an entry (its scan record, CRC, content hash) plus its
    name, and the parsed manifest at up to 48 times its canonical size (a
    mebibyte of small lists parses into some 45 MiB of objects).
    """
    names = sum(len(entry.filename) for entry in package.zip_entries)
    manifest = sum(map(len, package.manifest_parts.values())) if package.manifest_parts else 0
    return 1024 * len(package.zip_entries) + names + 48 * manifest


class _Validated(OrderedDict[tuple[Any, ...], Package]):
    """Validated generations by file identity, most recently remembered last.

    Bounded in number and in estimated memory, so a pass that stores many
    large packages does not keep them all: each one is judged within the
    same memory as the first.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weights: dict[tuple[Any, ...], int] = {}

    def remember(self, key: tuple[Any, ...], package: Package) -> None:
        self[key] = package
        self.move_to_end(key)
        self.weights[key] = _weight(package)
        total = sum(self.weights.values()) if len(self.weights) == len(self) else self._resync()
        while len(self) > 1 and (len(self) > _CACHE_SIZE or total > _CACHE_BYTES):
            oldest, _ = self.popitem(last=False)
            total -= self.weights.pop(oldest, 0)

    def _resync(self) -> int:
        self.weights = {key: self.weights.get(key) or _weight(package) for key, package in self.items()}
        return sum(self.weights.values())

    def clear(self) -> None:
        super().clear()
        self.weights.clear()


_validated = _Validated()


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the next generation on top of a stored one is written (ADR 0110).

    ``linked``: the generation its record links to; ``carried``: checkpoints
    of the generations it links past (path -> bytes), which it holds from
    now on; ``anchor``: it starts a span.
    """

    linked: Package
    carried: dict[str, bytes]
    anchor: bool


def _cache_key(path: Path, config: IntakeConfig) -> tuple[Any, ...]:
    st = os.stat(path)
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, config)


def _remember(key: tuple[Any, ...], package: Package) -> None:
    _validated.remember(key, package)


class CaseStorage:
    """Reads and publishes the generations of one workspace."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.config = workspace.config

    # ------------------------------------------------------------------ reading

    @staticmethod
    def generations(folder: Path) -> list[int]:
        """Confirmed generation numbers in ``folder`` (temporary files excluded)."""
        if not folder.is_dir():
            return []
        numbers = [int(m.group(1)) for m in map(_GENERATION.match, os.listdir(folder)) if m]
        return sorted(numbers)

    def load_generation(self, folder: Path, generation: int) -> Package:
        """One stored generation, fully validated against its name and folder, with its whole history.

        A v2 generation's links are followed down to a generation already
        validated in this process or to one that holds its whole history;
        then each is validated from the oldest up, with the one it links to.
        """
        pending: list[tuple[Path, int, tuple[Any, ...]]] = []
        linked: Package | None = None
        path, number = folder / generation_name(generation), generation
        while True:
            try:
                key = _cache_key(path, self.config)
            except FileNotFoundError:
                if not pending:
                    raise StorageCorruptError(f"stored generation {path} disappeared", path=str(path)) from None
                referrer = pending[-1][0]
                raise StorageCorruptError(
                    f"stored generation {referrer} is invalid: its history continues in {path.name}, which is missing",
                    path=str(referrer),
                    cause="generation-link-missing",
                    missing=path.name,
                ) from None
            cached = _validated.get(key)
            if cached is not None:
                linked = cached
                break
            pending.append((path, number, key))
            try:
                record = read_link(path, self.config)
            except PackageRejectedError as error:
                raise StorageCorruptError(
                    f"stored generation {path} is invalid: {error.message}", path=str(path), cause=error.code
                ) from None
            if record is None or record[1] is None:
                break
            link = record[1]
            if link.generation >= number:
                raise StorageCorruptError(
                    f"stored generation {path} is invalid: it links to {link.file}, not an earlier generation",
                    path=str(path),
                    cause="generation-link-mismatch",
                )
            path, number = folder / link.file, link.generation
        for path, number, key in reversed(pending):
            try:
                package = read_package(path, self.config, stored=True, linked=linked)
            except PackageRejectedError as error:
                raise StorageCorruptError(
                    f"stored generation {path} is invalid: {error.message}", path=str(path), cause=error.code
                ) from None
            except FileNotFoundError:
                raise StorageCorruptError(f"stored generation {path} disappeared", path=str(path)) from None
            self._check_place(package, folder, number)
            _remember(key, package)
            linked = package
        assert linked is not None
        return linked

    def linked(self, package: Package) -> Package | None:
        """The generation ``package``'s record links to (loaded and validated), or None."""
        if package.link is None:
            return None
        return self.load_generation(package.path.parent, package.link.generation)

    def referenced(self, package: Package) -> list[int]:
        """The generations ``package`` needs, itself included: the ones its links reach, newest first."""
        numbers = [package.generation]
        current: Package | None = package
        while current is not None and current.link is not None:
            numbers.append(current.link.generation)
            current = self.linked(current)
        return numbers

    def layout(self, current: Package) -> Layout:
        """Where the next generation on top of ``current`` links, and what it carries.

        It links to ``current`` while fewer than ``chain_span`` generations in
        a row would hold one checkpoint each; the one that would make it
        ``chain_span`` instead links to where that run started (the last
        generation that starts a span, or a v1 generation) and carries the
        run's checkpoints, so the run is no longer referenced.
        """
        if current.stored_format == 1 or current.tail + 1 < self.config.chain_span:
            return Layout(current, {}, False)
        carried: dict[str, bytes] = {}
        run: Package | None = current
        while run is not None and run.tail > 0:
            with zipfile.ZipFile(run.path) as zf:
                for name in run.own_checkpoints():
                    carried[name] = zf.read(name)
            run = self.linked(run)
        assert run is not None
        return Layout(run, carried, True)

    def _check_place(self, package: Package, folder: Path, generation: int) -> None:
        expected = (folder.parent.name, folder.name, generation)
        actual = (id_hash(package.case_id), id_hash(package.package_id), package.generation)
        if expected != actual:
            raise StorageCorruptError(
                f"{folder / generation_name(generation)} holds generation "
                f"{package.generation} of another case or package",
                path=str(folder / generation_name(generation)),
            )

    def load_dir(self, folder: Path, *, repair: bool = False) -> Package | None:
        """The current generation of a package folder, or None if it has none.

        ``repair`` (callers holding the case lock) rewrites a stale index
        and removes the temporary files a writer that died left (the case
        lock proves it is gone), from the same listing of the folder.
        """
        if not folder.is_dir():
            return None
        names = os.listdir(folder)
        numbers = sorted(int(m.group(1)) for m in map(_GENERATION.match, names) if m)
        if repair:
            abandoned = [n for n in names if n.startswith(TMP_PREFIX)]
            for name in abandoned:
                (folder / name).unlink(missing_ok=True)
            if abandoned:
                fsync_dir(folder)
        if not numbers:
            return None
        package = self.load_generation(folder, numbers[-1])
        if repair:
            self.repair_index(folder, package)
        return package

    def load_current(self, case_id: str, package_id: str, *, repair: bool = False) -> Package | None:
        return self.load_dir(self.workspace.case_dir(case_id, package_id), repair=repair)

    def load_any(self, case_id: str, package_id: str, generation: int) -> Package | None:
        """A specific stored generation, or None if it is not stored here."""
        folder = self.workspace.case_dir(case_id, package_id)
        if generation not in self.generations(folder):
            return None
        return self.load_generation(folder, generation)

    # ------------------------------------------------------------------ index

    @staticmethod
    def read_index(folder: Path) -> dict[str, Any] | None:
        try:
            value = json.loads((folder / INDEX).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def repair_index(self, folder: Path, package: Package) -> None:
        """Rewrite ``current.json`` unless it already describes ``package``."""
        index = self.read_index(folder)
        if (
            index is None
            or index.get("fingerprint") != package.fingerprint
            or index.get("file") != generation_name(package.generation)
        ):
            self.write_index(folder, package)

    def write_index(self, folder: Path, package: Package) -> None:
        atomic_write_json(folder / INDEX, index_record(package))

    def index_hint(self, folder: Path) -> dict[str, Any] | None:
        """The index if it names the newest generation file (a cheap, unauthoritative hint)."""
        numbers = self.generations(folder)
        index = self.read_index(folder)
        if not numbers or index is None or index.get("file") != generation_name(numbers[-1]):
            return None
        return index

    # ------------------------------------------------------------------ publishing

    def publish(self, package: Package, folder: Path) -> Package:
        """Give a validated temporary package its generation name (no clobber)."""
        final = folder / generation_name(package.generation)
        try:
            os.link(package.path, final)
        finally:
            os.unlink(package.path)
        fsync_dir(folder)
        published = dataclasses.replace(package, path=final)
        _remember(_cache_key(final, self.config), published)
        return published

    def publish_many(self, staged: Sequence[Staged], also: Iterable[Path] = ()) -> list[Package | OSError]:
        """Name every staged generation of a group commit, then make their folders durable.

        The temporary generations and index files are already synced (the
        caller's first barrier). For each one the index is renamed into place
        first — an index naming a generation that is not there yet is stale
        and ignored — then the generation is linked to its final name (no
        clobber). Then every folder touched, and the folders in ``also``, are
        synced: one fsync each, or one ``syncfs`` for many. Only then does it
        return; an entry whose naming failed is returned as its error.
        """
        results: list[Package | OSError] = []
        folders: list[Path] = []
        for package, folder, index_tmp in staged:
            final = folder / generation_name(package.generation)
            try:
                os.replace(index_tmp, folder / INDEX)
                try:
                    os.link(package.path, final)
                finally:
                    os.unlink(package.path)
            except OSError as error:
                results.append(error)
                continue
            folders.append(folder)
            results.append(dataclasses.replace(package, path=final))
            crash_point(GENERATION_NAMED)
        sync_folders([*folders, *also], self.workspace.root, self.config.syncfs_from)
        for result in results:
            if isinstance(result, Package):
                _remember(_cache_key(result.path, self.config), result)
        return results


def sync_folders(folders: Iterable[Path], root: Path, syncfs_from: int) -> None:
    """Make the entries of ``folders`` durable: one fsync each, or one ``syncfs`` when there are many."""
    unique = list(dict.fromkeys(folders))
    if syncfs_from and len(unique) >= syncfs_from:
        sync_filesystem(root)
        return
    for folder in unique:
        fsync_dir(folder)


def index_record(package: Package) -> dict[str, Any]:
    return {
        "format": "tenure-intake-index",
        "format_version": 1,
        "case_id": package.case_id,
        "package_id": package.package_id,
        "generation": package.generation,
        "file": generation_name(package.generation),
        "fingerprint": package.fingerprint,
        "state": package.state.value,
        "analysis_revision": package.analysis_revision,
        "routing": package.routing,
        "retry_count": package.retry_count,
        "retry_at": package.blocked["retry_at"] if package.blocked else None,
        "updated_at": to_utc_text(utc_now()),
    }
