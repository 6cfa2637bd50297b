"""Small file-system helpers of the tree engine: forced removal, whole-file-system sync.

Durable writes use :mod:`tenure.fsio`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat


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
    """Flush every dirty page of the file system holding ``path`` (``syncfs``; ``sync`` elsewhere)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)
