"""``.tenureignore``: gitignore patterns at the root of a checked-in folder.

Only the file at the root counts (no per-folder ignore files). Patterns use
git's syntax and semantics through :class:`pathspec.GitIgnoreSpec`: a
pattern ending in ``/`` matches folders only, ``!`` re-includes, and a file
inside an ignored folder cannot be re-included (the scan never descends into
it). The ``.tenureignore`` file itself is always stored.
"""

from __future__ import annotations

import errno
import os
import stat

import pathspec

from tenure.snapshots.errors import UnreadableFileError

IGNORE_FILE = ".tenureignore"
_IGNORE_FILE_B = os.fsencode(IGNORE_FILE)


class IgnoreRules:
    """Decides which relative paths the scan leaves out."""

    def __init__(self, spec: pathspec.GitIgnoreSpec | None) -> None:
        self._spec = spec

    @property
    def active(self) -> bool:
        return self._spec is not None

    def ignored(self, rel: bytes, is_dir: bool) -> bool:
        if self._spec is None or rel == _IGNORE_FILE_B:
            return False
        path = os.fsdecode(rel) + ("/" if is_dir else "")
        return bool(self._spec.match_file(path))


def load_ignore(root_fd: int) -> IgnoreRules:
    """Read ``.tenureignore`` in the folder ``root_fd`` if it is a regular file (never through a symlink)."""
    try:
        fd = os.open(_IGNORE_FILE_B, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=root_fd)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return IgnoreRules(None)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return IgnoreRules(None)
        raise UnreadableFileError(f"cannot read {IGNORE_FILE!r}: {exc.strerror}",
                             path=IGNORE_FILE, reason=exc.strerror) from None
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return IgnoreRules(None)
        raw = fh.read()
    lines = raw.decode("utf-8", "surrogateescape").splitlines()
    return IgnoreRules(pathspec.GitIgnoreSpec.from_lines(lines))
