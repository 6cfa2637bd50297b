"""Small file-system helpers of the tree engine: opening below a folder, forced removal, sync.

:class:`Beneath` opens paths below a folder's descriptor one name at a time,
each relative to its parent's descriptor and never through a symlink, so no
path it opens can lead outside the folder, however the folder changes
meanwhile. :func:`open_parent` reaches paths too long to name at once
(``PATH_MAX``) in hops. Durable writes use :mod:`tenure.fsio`.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat

from tenure.fsio import sync_filesystem

__all__ = ["DIR_FLAGS", "READ_FLAGS", "Beneath", "force_rmtree", "sync_filesystem"]

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


#: Paths below a folder longer than this (in bytes) are opened in hops, never named at once (PATH_MAX is 4096).
PATH_ROOM = 3072


def open_parent(base: bytes, rel: bytes) -> tuple[int, bytes]:
    """``(descriptor of rel's folder, rel's last name)`` for a path below ``base`` of any length.

    The folders are opened in hops of fewer than :data:`PATH_ROOM` bytes, each
    relative to the previous one. For folders this process created itself
    (a restore's temporary folder): symlinks on the way are not guarded
    against. The caller closes the descriptor.
    """
    parent, _, name = rel.rpartition(b"/")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        while parent:
            cut = len(parent) if len(parent) < PATH_ROOM else parent.rfind(b"/", 0, PATH_ROOM)
            if cut <= 0:
                raise OSError(errno.ENAMETOOLONG, "a name in the path is too long", os.fsdecode(rel))
            hop, parent = parent[:cut], parent[cut + 1 :]
            following = os.open(hop, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = following
    except BaseException:
        os.close(fd)
        raise
    return fd, name


def force_rmtree(path: str) -> None:
    """Remove a folder tree even where restored modes forbid it (read-only folders), however deep."""
    if not os.path.lexists(path):
        return
    if stat.S_ISDIR(os.lstat(path).st_mode):
        _open_up(path)
    shutil.rmtree(path)


def _open_up(top: str) -> None:
    """Give the owner ``rwx`` on every folder below ``top`` that lacks it (through descriptors: any depth)."""
    mode = stat.S_IMODE(os.lstat(top).st_mode)
    if mode & stat.S_IRWXU != stat.S_IRWXU:
        os.chmod(top, mode | stat.S_IRWXU)
    for _, dirs, _, dir_fd in os.fwalk(top):
        for name in dirs:  # before fwalk opens them
            mode = stat.S_IMODE(os.lstat(name, dir_fd=dir_fd).st_mode)
            if mode & stat.S_IRWXU != stat.S_IRWXU:
                os.chmod(name, mode | stat.S_IRWXU, dir_fd=dir_fd)
