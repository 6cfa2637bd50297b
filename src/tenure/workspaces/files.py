"""A workspace folder's files as the API reads and writes them: never through a symlink, never outside.

Every path is relative to a root folder (a project's workspace folder, or a preserved delta) and is checked
twice: lexically (:func:`check_path`: no absolute path, ``..``, NUL or lone surrogate) and on the file
system, where each component is opened one at a time with ``O_NOFOLLOW`` relative to its parent, so a
symlink swapped in after the check is refused too. A FIFO or device is never opened for reading
(``O_NONBLOCK``, then a regular-file check). Writes replace a file atomically (a temporary name in the same
folder, then ``rename``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tenure.errors import ConflictError, DiskFullError, InvalidInputError, NotFoundError, TenureError
from tenure.fsio import FULL_ERRNOS, tmp_name, write_all

__all__ = [
    "BadPathError",
    "StagedFile",
    "check_path",
    "chunks",
    "delete_path",
    "list_folder",
    "open_file",
    "stage_error",
    "write_file",
]

#: bytes read at a time when a file is streamed out
CHUNK = 1024 * 1024


class BadPathError(InvalidInputError):
    code = "bad-path"
    default_hint = "give a relative path inside the workspace folder, without '..' and not through a symlink"


def check_path(path: str) -> list[str]:
    """The components of a relative path; ``bad-path`` for an absolute one, ``..`` or a NUL."""
    if "\x00" in path:
        raise BadPathError("a path may not hold a NUL character", path=path)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise BadPathError("a path must be UTF-8 text (it holds a lone surrogate)", path=repr(path)) from None
    if path.startswith(("/", "\\")) or os.path.isabs(path):
        raise BadPathError(f"{path!r} is absolute; give a path relative to the workspace folder", path=path)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadPathError(f"{path!r} climbs out with '..'", path=path)
    return parts


def _inside(root: str, parts: list[str], path: str) -> None:
    """The resolved path must stay inside the (resolved) folder: a symlink may not lead out of it."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, *parts))
    if real != real_root and not real.startswith(real_root + os.sep):
        raise BadPathError(f"{path!r} resolves outside the workspace folder", path=path)


def _os_error(exc: OSError, path: str) -> TenureError:
    if exc.errno == errno.ENOENT:
        return NotFoundError(f"no file or folder {path!r} in the workspace folder", code="file-not-found", path=path)
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return BadPathError(f"{path!r} goes through a symlink, which the API does not follow", path=path)
    if exc.errno == errno.ENOTDIR:
        return BadPathError(f"a component of {path!r} is not a folder", path=path)
    if exc.errno == errno.ENAMETOOLONG:
        return BadPathError(f"a component of {path!r} is longer than the file system allows", path=path)
    if exc.errno == errno.ENOTEMPTY:
        return ConflictError(
            f"folder {path!r} is not empty",
            code="folder-not-empty",
            path=path,
            hint="delete what it holds first",
        )
    if exc.errno == errno.EISDIR:
        return InvalidInputError(f"{path!r} is a folder", code="not-a-file", path=path)
    if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # a UNIX socket, a device without a driver
        return InvalidInputError(f"{path!r} is not a regular file", code="not-a-file", path=path)
    if exc.errno in FULL_ERRNOS:
        return DiskFullError(
            f"no room left to write {path!r} in the workspace folder ({os.strerror(exc.errno)}); the file is as it was",
            path=path,
            hint="free space on the pod's data folder, or write less, and retry",
        )
    raise exc


#: a folder of the path: never through a symlink; O_DIRECTORY refuses a FIFO or device before it is opened
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextmanager
def _parent(root: str, parts: list[str], path: str, *, create: bool = False, last: bool = True) -> Iterator[int]:
    """An open descriptor of the folder holding the last component, reached one component at a time
    with ``O_NOFOLLOW`` (no symlink is followed, even one swapped in after the check). ``last`` False
    leaves the last component unresolved (deleting a symlink removes the link itself)."""
    _inside(root, parts if last else parts[:-1], path)
    flags = _FOLDER_FLAGS
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _entry(entry: os.DirEntry[str], fd: int) -> dict[str, Any]:
    st = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(st.st_mode):
        kind = "folder"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    found: dict[str, Any] = {
        "name": entry.name,
        "type": kind,
        "size": st.st_size if kind == "file" else None,
        "mtime": st.st_mtime,
        "executable": bool(st.st_mode & 0o111) if kind == "file" else None,
    }
    if kind == "symlink":
        found["target"] = os.readlink(entry.name, dir_fd=fd)
    return found


def list_folder(root: str, path: str) -> list[dict[str, Any]]:
    parts = check_path(path)
    try:
        with _parent(root, parts, path) as fd:
            if parts:
                folder = os.open(parts[-1], _FOLDER_FLAGS, dir_fd=fd)
            else:
                folder = os.dup(fd)
            try:
                with os.scandir(folder) as entries:
                    found = [_entry(e, folder) for e in entries]
            finally:
                os.close(folder)
    except OSError as exc:
        raise _os_error(exc, path) from None
    return sorted(found, key=lambda e: str(e["name"]))


def open_file(root: str, path: str) -> tuple[int, int]:
    """An open descriptor of a regular file (never through a symlink) and its size.

    The file is opened with ``O_NONBLOCK``: opening a FIFO (or a device) would otherwise wait for a
    writer and hold the request's thread for good. Anything that is not a regular file is refused
    (``not-a-file``) before a byte is read; ``O_NONBLOCK`` is cleared again for reading the file.
    """
    parts = check_path(path)
    if not parts:
        raise InvalidInputError("the workspace folder itself is not a file", code="not-a-file", path=path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        with _parent(root, parts, path) as parent:
            fd = os.open(parts[-1], flags, dir_fd=parent)
    except OSError as exc:
        raise _os_error(exc, path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInputError(f"{path!r} is not a regular file", code="not-a-file", path=path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def chunks(fd: int) -> Iterator[bytes]:
    try:
        while chunk := os.read(fd, CHUNK):
            yield chunk
    finally:
        os.close(fd)


@dataclass(frozen=True)
class StagedFile:
    """A complete upload in the pod's staging folder (on the data folder's file system, outside every
    workspace folder, so no checkpoint, change journal or project process sees it while it arrives):
    :func:`write_file` moves it into place, or copies it where the workspace is on another file system."""

    folder: str
    name: str

    @property
    def path(self) -> str:
        return os.path.join(self.folder, self.name)


def stage_error(exc: OSError, path: str) -> TenureError:
    """What an upload's staging write met, as the API answers it (``disk-full`` for a full data folder)."""
    return _os_error(exc, path) if exc.errno in FULL_ERRNOS else TenureError(f"staging {path!r} failed: {exc}")


def write_file(root: str, path: str, data: bytes | StagedFile) -> bool:
    """Write ``data`` to ``path`` (parents created, replaced atomically); True if the file is new.

    A :class:`StagedFile` is renamed into place (the staged file is gone afterwards, whatever happens)."""
    parts = check_path(path)
    if not parts:
        raise InvalidInputError("the workspace folder itself is not a file", code="not-a-file", path=path)
    name = parts[-1]
    try:
        with _parent(root, parts, path, create=True) as parent:
            mode = 0o644
            created = True
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISLNK(st.st_mode):
                    raise BadPathError(f"{path!r} is a symlink, which the API does not follow", path=path)
                if not stat.S_ISREG(st.st_mode):
                    raise InvalidInputError(f"{path!r} is not a regular file", code="not-a-file", path=path)
                mode, created = stat.S_IMODE(st.st_mode), False
            if isinstance(data, StagedFile) and _moved_into_place(data, parent, name, mode):
                return created
            tmp = tmp_name()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
            try:
                try:
                    if isinstance(data, StagedFile):
                        _copy_staged(data, fd)
                    else:
                        write_all(fd, data)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=parent)
                except OSError:
                    pass
                raise
    except OSError as exc:
        raise _os_error(exc, path) from None
    return created


def _moved_into_place(staged: StagedFile, parent: int, name: str, mode: int) -> bool:
    """Rename ``staged`` to ``name`` in the folder ``parent`` with ``mode``; False when they are on different
    file systems (the caller copies it instead)."""
    try:
        os.chmod(staged.path, mode)
        os.replace(staged.path, name, dst_dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            return False
        raise
    return True


def _copy_staged(staged: StagedFile, fd: int) -> None:
    src = os.open(staged.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        while chunk := os.read(src, CHUNK):
            write_all(fd, chunk)
    finally:
        os.close(src)


def delete_path(root: str, path: str) -> None:
    """Delete a file or symlink (the link itself), or an empty folder."""
    parts = check_path(path)
    if not parts:
        raise BadPathError("the workspace folder itself cannot be deleted", path=path)
    try:
        with _parent(root, parts, path, last=False) as parent:
            st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(parts[-1], dir_fd=parent)
            else:
                os.unlink(parts[-1], dir_fd=parent)
    except OSError as exc:
        raise _os_error(exc, path) from None
