"""Small file-system helpers of the tree engine: opening below a folder, forced removal, sync.

:class:`Beneath` opens paths below a folder's descriptor one name at a time,
each relative to its parent's descriptor and never through a symlink, so no
path it opens can lead outside the folder, however the folder changes
meanwhile. Durable writes use :mod:`tenure.fsio`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat

#: Opening a folder below another: never through a symlink, never one that became something else.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Opening a file to read: never through a symlink, never blocking on a FIFO put in its place.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Beneath:
    """Opens relative paths below the folder ``root_fd`` refers to, one name at a time.

    Each folder on the way is opened with :data:`DIR_FLAGS` relative to its
    parent's descriptor, so a folder replaced by a symlink (to anywhere) after
    it was listed makes the open fail (``ENOTDIR`` or ``ELOOP``) instead of
    leading outside. The descriptors of the last folder opened and of its
    ancestors are kept, so consecutive paths in one folder, or in folders
    visited in pre-order, cost one ``openat`` each. One instance per thread;
    :meth:`close` releases what it opened (never ``root_fd``).
    """

    __slots__ = ("root_fd", "_names", "_fds")

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self._names: list[bytes] = []
        self._fds: list[int] = []

    def folder(self, rel: bytes) -> int:
        """The descriptor of folder ``rel`` (``b""``: the root); owned by this object."""
        parts = rel.split(b"/") if rel else []
        names = self._names
        keep = 0
        while keep < len(names) and keep < len(parts) and names[keep] == parts[keep]:
            keep += 1
        self._drop(keep)
        fd = self._fds[-1] if self._fds else self.root_fd
        for name in parts[keep:]:
            fd = os.open(name, DIR_FLAGS, dir_fd=fd)
            self._fds.append(fd)
            names.append(name)
        return fd

    def open_file(self, rel: bytes) -> int:
        """A new descriptor of file ``rel``, for reading (the caller closes it)."""
        parent, _, name = rel.rpartition(b"/")
        return os.open(name, READ_FLAGS, dir_fd=self.folder(parent))

    def close(self) -> None:
        self._drop(0)

    def _drop(self, keep: int) -> None:
        while len(self._fds) > keep:
            os.close(self._fds.pop())
            self._names.pop()


def force_rmtree(path: str) -> None:
    """Remove a folder tree even where restored modes forbid it (read-only folders)."""
    if not os.path.lexists(path):
        return
    if stat.S_ISDIR(os.lstat(path).st_mode):
        _open_up(path)
    shutil.rmtree(path)


def _open_up(top: str) -> None:
    """Give the owner ``rwx`` on every folder below ``top`` that lacks it."""
    stack = [top]
    while stack:
        folder = stack.pop()
        mode = stat.S_IMODE(os.lstat(folder).st_mode)
        if mode & stat.S_IRWXU != stat.S_IRWXU:
            os.chmod(folder, mode | stat.S_IRWXU)
        with os.scandir(folder) as entries:
            stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))


def sync_filesystem(path: str) -> None:
    """Flush every dirty page of the file system holding ``path`` (``syncfs``; ``sync`` elsewhere).

    ``path`` must be a folder the caller may read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)
