"""``.tenureignore``: gitignore patterns at the root of a checked-in folder.

Only the file at the root counts (no per-folder ignore files). Patterns use
git's syntax and semantics through :class:`pathspec.GitIgnoreSpec`: a
pattern ending in ``/`` matches folders only, ``!`` re-includes, and a file
inside an ignored folder cannot be re-included (the scan never descends into
it). The ``.tenureignore`` file itself is always stored.

Patterns given by the caller (``tenure workspace checkpoint --exclude``)
are read after the file's, in the same syntax, so they win where the two
disagree (a later pattern overrides an earlier one, as in git).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

import pathspec

from tenure.errors import InvalidInputError
from tenure.snapshots.errors import UnreadableFileError

IGNORE_FILE = ".tenureignore"
_IGNORE_FILE_B = os.fsencode(IGNORE_FILE)


class IgnoreRules:
    """Decides which relative paths the scan leaves out."""

    def __init__(self, spec: pathspec.GitIgnoreSpec | None, source: bytes = b"") -> None:
        self._spec = spec
        self.source = source
        """The patterns, one per line with where each came from (equal rules, equal bytes)."""

    @property
    def active(self) -> bool:
        return self._spec is not None

    def ignored(self, rel: bytes, is_dir: bool) -> bool:
        if self._spec is None or rel == _IGNORE_FILE_B:
            return False
        path = os.fsdecode(rel) + ("/" if is_dir else "")
        return bool(self._spec.match_file(path))


def load_ignore(root_fd: int, extra: Sequence[str] = ()) -> IgnoreRules:
    """Read ``.tenureignore`` in the folder ``root_fd`` if it is a regular file (never through a symlink).

    ``extra`` patterns follow the file's lines.
    """
    lines = _read_ignore_file(root_fd)
    if lines is None and not extra:
        return IgnoreRules(None)
    patterns = [(IGNORE_FILE, line) for line in lines or ()] + [("--exclude", p) for p in extra]
    source = "\n".join(f"{where}\0{pattern}" for where, pattern in patterns)
    return IgnoreRules(_spec(patterns), source.encode("utf-8", "surrogateescape"))


def _spec(patterns: list[tuple[str, str]]) -> pathspec.GitIgnoreSpec:
    """One gitignore spec over every pattern, in order; a malformed one is refused, named with its source."""
    for source, pattern in patterns:
        try:
            pathspec.GitIgnoreSpec.from_lines([pattern])
        except ValueError as exc:
            raise InvalidInputError(
                f"{source} pattern {pattern!r} is not a valid gitignore pattern: {exc}",
                code="invalid-ignore-pattern",
                pattern=pattern,
                source=source,
                hint="use gitignore syntax, e.g. 'build/', '*.log', '!keep.log'",
            ) from None
    return pathspec.GitIgnoreSpec.from_lines([pattern for _, pattern in patterns])


def _read_ignore_file(root_fd: int) -> list[str] | None:
    """The lines of ``.tenureignore``, or None when there is no such regular file."""
    try:
        fd = os.open(_IGNORE_FILE_B, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=root_fd)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise UnreadableFileError(
            f"cannot read {IGNORE_FILE!r}: {exc.strerror}", path=IGNORE_FILE, reason=exc.strerror
        ) from None
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = fh.read()
    return raw.decode("utf-8", "surrogateescape").splitlines()
