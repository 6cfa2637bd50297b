"""File-system primitives of the intake: atomic JSON files and non-blocking OS locks.

Durable writes use tenure's one set of helpers (:mod:`tenure.fsio`):
``.tmp-<random>`` in the same folder, fsynced, ``os.replace``d over the
target, then the folder fsynced. A reader sees the old file or the new one,
never a part.

Locks are native, non-blocking and never stolen: ``flock`` on POSIX,
``msvcrt.locking`` on Windows. The OS drops them when the holder exits, crash
included. Lock files are created once and never deleted (deleting one would
let two holders lock two different inodes of "the same" file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from tenure.fsio import TMP_PREFIX, atomic_write, fsync_dir, fsync_file, make_dirs_durable, tmp_name

__all__ = [
    "TMP_PREFIX",
    "atomic_write_json",
    "remove_abandoned_temp",
    "remove_files",
    "safe_text",
    "fsync_dir",
    "fsync_file",
    "make_dirs_durable",
    "FileLock",
    "tmp_name",
]


def atomic_write_json(path: Path, value: Any) -> None:
    """Write ``value`` as JSON via temp file, fsync and atomic replace.

    A lone surrogate (a file name that was not UTF-8) is written as its
    ``\\udcXX`` escape, so the file is always valid UTF-8.
    """
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write(path, text.encode("utf-8", "backslashreplace"))


def safe_text(name: str) -> str:
    """``name`` as valid Unicode text: undecodable bytes of a file name become ``\\xNN``."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def remove_abandoned_temp(folder: Path) -> int:
    """Remove ``.tmp-*`` files from ``folder``; the caller holds the lock under which they are written.

    Every temporary file of the intake is written under a lock (the case
    lock for a package folder, the worker lock for ``cache/`` and
    ``quarantine/``); whoever holds that lock knows that any temporary file
    there belongs to a writer that died. Returns how many were removed.
    """
    try:
        names = [n for n in os.listdir(folder) if n.startswith(TMP_PREFIX)]
    except FileNotFoundError:
        return 0
    return remove_files(folder, names)


def remove_files(folder: Path, names: list[str]) -> int:
    """Remove the files ``names`` of ``folder`` (one already gone is no error), durably; return how many."""
    for name in names:
        try:
            os.unlink(folder / name)
        except FileNotFoundError:
            pass
    if names:
        fsync_dir(folder)
    return len(names)


class FileLock:
    """A non-blocking exclusive lock on a persistent lock file.

    ``acquire()`` returns False at once when another holder has it. Locks
    are per open file: two ``FileLock`` objects on one path exclude each
    other even inside one process.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this object")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _try_lock(fd):
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        _unlock(fd)
        os.close(fd)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


if os.name == "nt":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
