"""File-system primitives: atomic JSON files, fsync, non-blocking OS locks.

Atomic replacement: write ``.tmp-<random>`` in the same folder, flush and
fsync it, ``os.replace`` it over the target, then fsync the folder where the
platform allows. A reader sees the old file or the new one, never a part.

Locks are native, non-blocking and never stolen: ``flock`` on POSIX,
``msvcrt.locking`` on Windows. The OS drops them when the holder exits, crash
included. Lock files are created once and never deleted (deleting one would
let two holders lock two different inodes of "the same" file).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_json", "fsync_dir", "FileLock", "tmp_name"]

TMP_PREFIX = ".tmp-"


def tmp_name(suffix: str = "") -> str:
    """A fresh temporary name; never mistaken for a confirmed file."""
    return f"{TMP_PREFIX}{uuid.uuid4().hex}{suffix}"


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries where the OS supports it (POSIX)."""
    if os.name == "nt":  # pragma: no cover - Windows cannot open folders
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durable(folder: Path) -> None:
    """Create ``folder`` and its missing parents, fsyncing the parent of each one created.

    A generation acknowledged inside a new case folder must not lose that
    folder's entry on power loss.
    """
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.parent / tmp_name(path.suffix)
    with open(tmp, "xb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(path: Path, value: Any) -> None:
    """Write ``value`` as JSON via temp file, fsync and atomic replace."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
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
