"""Listing a folder: one ``lstat`` per entry, names sorted by their bytes.

Symlinks are recorded as links and never followed. Sockets, FIFOs and
device files are reported as skipped and never opened, so a socket left by a
running program cannot block a checkpoint. Paths are raw bytes end to end;
relative paths are ``/``-joined names below the folder.

Nothing is opened by path. The folder is opened once; every sub-folder is
opened relative to its parent's descriptor with ``O_NOFOLLOW |
O_DIRECTORY`` (:class:`~tenure.snapshots.fsutil.Beneath`), listed with
``scandir`` on that descriptor, and its entries are ``lstat``-ed and
``readlink``-ed relative to it. Files are read the same way
(:mod:`~tenure.snapshots.feed`). So when a folder is replaced by a symlink
after its parent was listed, the build cannot follow it out of the folder:
opening it fails, and the build fails with :class:`FolderChangedError`
(``folder-changed``, retryable) naming the path; a retry stores the symlink
as a symlink. Renaming the checked-in folder itself away mid-build changes
nothing: the build keeps reading the folder it opened.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import NamedTuple

from tenure.snapshots.errors import FolderChangedError, UnreadableFileError
from tenure.snapshots.fsutil import Beneath
from tenure.snapshots.ignore import IgnoreRules
from tenure.snapshots.index import StatKey
from tenure.snapshots.treeformat import Ref


class Slot:
    """The id of a data object that is still being encoded (set when it is done)."""

    __slots__ = ("oid",)

    def __init__(self) -> None:
        self.oid = ""


PendingRef = tuple[Slot | str, int, int]


class FileNode:
    """A regular file as scanned, and later the refs of its content."""

    __slots__ = (
        "name",
        "rel",
        "mode",
        "mtime_ns",
        "size",
        "key",
        "inode",
        "refs",
        "pending",
        "digest",
        "link",
        "indexed",
    )

    def __init__(self, name: bytes, rel: bytes, st: os.stat_result) -> None:
        self.name = name
        self.rel = rel
        self.mode = st.st_mode & 0o7777
        self.mtime_ns = st.st_mtime_ns
        self.size = st.st_size
        self.key: StatKey = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)
        self.inode = (st.st_dev, st.st_ino) if st.st_nlink > 1 else None
        self.refs: tuple[Ref, ...] = ()
        self.pending: list[PendingRef] | None = None
        self.digest = b""
        self.link = b""
        self.indexed = True

    def resolve(self) -> None:
        """Replace refs to chunks still being encoded by their ids (once they are done)."""
        if self.pending is not None:
            self.refs = tuple((r if isinstance(r, str) else r.oid, off, n) for r, off, n in self.pending)
            self.pending = None


class SymlinkNode:
    __slots__ = ("name", "mode", "mtime_ns", "target")

    def __init__(self, name: bytes, st: os.stat_result, target: bytes) -> None:
        self.name = name
        self.mode = stat.S_IMODE(st.st_mode)
        self.mtime_ns = st.st_mtime_ns
        self.target = target


class DirNode:
    __slots__ = ("name", "rel", "mode", "mtime_ns", "children", "skipped")

    def __init__(self, name: bytes, rel: bytes, st: os.stat_result) -> None:
        self.name = name
        self.rel = rel
        self.mode = st.st_mode & 0o7777
        self.mtime_ns = st.st_mtime_ns
        self.children: list[FileNode | SymlinkNode | DirNode] = []
        self.skipped: list[tuple[str, str]] = []


class Scan(NamedTuple):
    root: DirNode
    dirs: list[DirNode]  # pre-order: every folder before its sub-folders
    files: list[FileNode]  # folder by folder (in ``dirs`` order), names in byte order
    skipped: list[tuple[str, str]]  # (relative path, "socket" | "fifo" | "device")


#: Called with each folder's relative path right after the folder is listed, before anything in it
#: is read and before any of its sub-folders is opened (on the listing thread). A seam for tests that
#: change the folder under a running build; ``None`` otherwise.
after_listing: Callable[[bytes], None] | None = None

_first = itemgetter(0)
_fsencode = os.fsencode
_SKIPPED_KINDS = {stat.S_IFSOCK: "socket", stat.S_IFIFO: "fifo", stat.S_IFCHR: "device", stat.S_IFBLK: "device"}


class Scanner:
    """Lists the folder ``root_fd`` refers to, depth-first, one folder at a time.

    ``exclude`` holds relative paths to leave out. One thread: listing is
    mostly per-entry Python work, which more threads only make contend for
    the GIL (measured: slower on local disks). The caller keeps ``root_fd``
    open until the listing is done.
    """

    def __init__(self, root_fd: int, ignore: IgnoreRules, exclude: frozenset[bytes] = frozenset()) -> None:
        self.root_fd = root_fd
        self.ignore = ignore
        self.exclude = exclude
        self.root = DirNode(b"", b"", os.fstat(root_fd))

    def walk(self) -> Iterator[DirNode]:
        """Yield every folder in pre-order, its ``children`` filled in."""
        stack = [self.root]
        folders = Beneath(self.root_fd)
        try:
            while stack:
                node = stack.pop()
                subdirs = _scan_one(_open_folder(folders, node.rel), node, self.ignore, self.exclude)
                if after_listing is not None:
                    after_listing(node.rel)
                stack += reversed(subdirs)
                yield node
        finally:
            folders.close()

    def result(self) -> Scan:
        """The whole listing in canonical order (after :meth:`walk` is exhausted)."""
        return _flatten(self.root)


def scan_folder(root_fd: int, ignore: IgnoreRules, exclude: frozenset[bytes] = frozenset()) -> Scan:
    """List the folder ``root_fd`` refers to completely (see :class:`Scanner`)."""
    scanner = Scanner(root_fd, ignore, exclude)
    for _ in scanner.walk():
        pass
    return scanner.result()


def _flatten(root: DirNode) -> Scan:
    dirs: list[DirNode] = []
    files: list[FileNode] = []
    skipped: list[tuple[str, str]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        dirs.append(node)
        skipped += node.skipped
        files += [c for c in node.children if type(c) is FileNode]
        stack += reversed([c for c in node.children if type(c) is DirNode])
    return Scan(root, dirs, files, skipped)


def _scan_one(fd: int, node: DirNode, ignore: IgnoreRules, exclude: frozenset[bytes]) -> list[DirNode]:
    """Fill ``node.children`` (in name order) and ``node.skipped`` from folder ``fd``; return the sub-folders.

    Runs once per entry of the whole tree: written for speed (locals, no helper calls).
    """
    prefix = node.rel + b"/" if node.rel else b""
    subdirs: list[DirNode] = []
    add = node.children.append
    ignored = ignore.ignored if ignore.active else None
    for name, entry in _list(fd, node.rel):
        rel = prefix + name
        if exclude and rel in exclude:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # deleted since the listing: as if it was never there
        fmt = st.st_mode & _FORMAT
        if ignored is not None and ignored(rel, fmt == _DIR):
            continue
        if fmt == _FILE:
            add(FileNode(name, rel, st))
        elif fmt == _DIR:
            sub = DirNode(name, rel, st)
            subdirs.append(sub)
            add(sub)
        elif fmt == _LINK:
            target = _readlink(fd, name, rel)
            if target is not None:
                add(SymlinkNode(name, st, target))
        else:
            node.skipped.append((os.fsdecode(rel), _SKIPPED_KINDS.get(fmt, "device")))
    return subdirs


_FORMAT, _FILE, _DIR, _LINK = 0o170000, stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK


def _open_folder(folders: Beneath, rel: bytes) -> int:
    try:
        return folders.folder(rel)
    except (FileNotFoundError, NotADirectoryError):
        raise _changed(rel) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _changed(rel) from None
        raise UnreadableFileError(
            f"cannot open folder {os.fsdecode(rel)!r}: {exc.strerror}", path=os.fsdecode(rel), reason=exc.strerror
        ) from None


def _changed(rel: bytes) -> FolderChangedError:
    return FolderChangedError(
        f"folder {os.fsdecode(rel)!r} vanished or was replaced during the scan", path=os.fsdecode(rel)
    )


def _list(fd: int, rel: bytes) -> list[tuple[bytes, os.DirEntry[str]]]:
    """``(name, entry)`` of folder ``fd``, sorted by name bytes; each ``entry.stat`` is taken relative to ``fd``.

    ``scandir`` on a descriptor gives ``str`` names (undecodable bytes as
    surrogate escapes), which ``fsencode`` turns back into the raw bytes.
    """
    try:
        with os.scandir(fd) as entries:
            return sorted(((_fsencode(e.name), e) for e in entries), key=_first)
    except (FileNotFoundError, NotADirectoryError):
        raise _changed(rel) from None
    except OSError as exc:
        raise UnreadableFileError(
            f"cannot read folder {os.fsdecode(rel or b'.')!r}: {exc.strerror}",
            path=os.fsdecode(rel or b"."),
            reason=exc.strerror,
        ) from None


def _readlink(fd: int, name: bytes, rel: bytes) -> bytes | None:
    try:
        return os.readlink(name, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # no longer a symlink: it changed since it was listed
            raise FolderChangedError(
                f"{os.fsdecode(rel)!r} changed while it was being read", path=os.fsdecode(rel)
            ) from None
        raise UnreadableFileError(
            f"cannot read symlink {os.fsdecode(rel)!r}: {exc.strerror}", path=os.fsdecode(rel), reason=exc.strerror
        ) from None
