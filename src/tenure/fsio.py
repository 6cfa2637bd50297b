"""The durable-write primitives every layer shares: one fsync helper, one atomic write.

The persistence rules (restic's write sequence, see docs/architecture.md):

* a file's data is synced (:func:`fsync_file`) before it is renamed into place;
* the folder is synced (:func:`fsync_dir`) after the rename, before the
  operation is acknowledged;
* a new folder's parent is synced (:func:`make_dirs_durable`).

:func:`atomic_write` does all three for a whole-file replacement: a reader,
and a machine that lost power, sees the old file or the new one, never a
part, and at most a stray ``.tmp-<hex>`` file beside it.
"""

from __future__ import annotations

import errno
import os
import uuid

__all__ = [
    "FULL_ERRNOS",
    "READ_ONLY_ERRNOS",
    "TMP_PREFIX",
    "atomic_write",
    "fsync_dir",
    "fsync_file",
    "make_dirs_durable",
    "sync_filesystem",
    "tmp_name",
    "write_all",
]

TMP_PREFIX = ".tmp-"

#: errnos of a write refused for want of permission (a read-only folder or mount) and for want of room (no space,
#: a quota, a file-size limit): the object folder (tenure.objects.local) and a restore (tenure.snapshots.restore)
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

PathLike = str | bytes | os.PathLike[str]


def tmp_name(suffix: str = "") -> str:
    """A fresh temporary file name; never mistaken for a confirmed file."""
    return f"{TMP_PREFIX}{uuid.uuid4().hex}{suffix}"


def fsync_file(fd: int) -> None:
    """Flush one open file's data and metadata to stable storage."""
    os.fsync(fd)


def fsync_dir(folder: PathLike) -> None:
    """Flush a folder's entries (names created, renamed or removed in it)."""
    if os.name == "nt":  # pragma: no cover - Windows cannot open folders
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: PathLike) -> None:
    """Flush every dirty page of the file system holding ``path`` (``syncfs``; ``sync`` where it is missing)."""
    import ctypes

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def make_dirs_durable(folder: PathLike) -> None:
    """Create ``folder`` and its missing parents, syncing the parent of each one created."""
    path = os.fsdecode(folder)
    missing: list[str] = []
    current = path
    while not os.path.exists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for created in reversed(missing):
        try:
            os.mkdir(created)
        except FileExistsError:
            pass
        fsync_dir(os.path.dirname(created) or ".")


def atomic_write(path: PathLike, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: temp file → fsync → rename → fsync folder."""
    target = os.fsdecode(path)
    parent = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(parent, tmp_name())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        write_all(fd, data)
        fsync_file(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_dir(parent)
