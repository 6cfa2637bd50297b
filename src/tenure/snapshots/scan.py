"""Listing a folder: one ``lstat`` per entry, names sorted by their bytes.

Symlinks are recorded as links and never followed. Sockets, FIFOs and
device files are reported as skipped and never opened, so a socket left by a
running program cannot block a checkpoint. Paths are raw bytes end to end;
relative paths are ``/``-joined names below the folder.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from operator import attrgetter
from typing import NamedTuple

from tenure.snapshots.errors import FolderChangedError, UnreadableFileError
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

    __slots__ = ("name", "rel", "mode", "mtime_ns", "size", "key", "inode", "refs", "pending", "digest",
                 "link", "indexed")

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
    dirs: list[DirNode]                 # pre-order: every folder before its sub-folders
    files: list[FileNode]               # folder by folder (in ``dirs`` order), names in byte order
    skipped: list[tuple[str, str]]      # (relative path, "socket" | "fifo" | "device")


_by_name = attrgetter("name")
_SKIPPED_KINDS = {stat.S_IFSOCK: "socket", stat.S_IFIFO: "fifo", stat.S_IFCHR: "device",
                  stat.S_IFBLK: "device"}


class Scanner:
    """Lists a folder (an absolute path) depth-first, one folder at a time.

    ``exclude`` holds relative paths to leave out. One thread: listing is
    mostly per-entry Python work, which more threads only make contend for
    the GIL (measured: slower on local disks).
    """

    def __init__(self, folder: bytes, ignore: IgnoreRules, exclude: frozenset[bytes] = frozenset()) -> None:
        self.folder = folder
        self.ignore = ignore
        self.exclude = exclude
        self.root = DirNode(b"", b"", os.stat(folder))

    def walk(self) -> Iterator[DirNode]:
        """Yield every folder in pre-order, its ``children`` filled in."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack += reversed(_scan_one(self.folder, node, self.ignore, self.exclude))
            yield node

    def result(self) -> Scan:
        """The whole listing in canonical order (after :meth:`walk` is exhausted)."""
        return _flatten(self.root)


def scan_folder(folder: bytes, ignore: IgnoreRules, exclude: frozenset[bytes] = frozenset()) -> Scan:
    """List ``folder`` completely (see :class:`Scanner`)."""
    scanner = Scanner(folder, ignore, exclude)
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


def _scan_one(folder: bytes, node: DirNode, ignore: IgnoreRules, exclude: frozenset[bytes]) -> list[DirNode]:
    """Fill ``node.children`` (in name order) and ``node.skipped``; return the sub-folders.

    Runs once per entry of the whole tree: written for speed (locals, no helper calls).
    """
    prefix = node.rel + b"/" if node.rel else b""
    subdirs: list[DirNode] = []
    add = node.children.append
    ignored = ignore.ignored if ignore.active else None
    for entry in _list(folder, node.rel):
        rel = prefix + entry.name
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
            add(FileNode(entry.name, rel, st))
        elif fmt == _DIR:
            sub = DirNode(entry.name, rel, st)
            subdirs.append(sub)
            add(sub)
        elif fmt == _LINK:
            target = _readlink(entry.path, rel)
            if target is not None:
                add(SymlinkNode(entry.name, st, target))
        else:
            node.skipped.append((os.fsdecode(rel), _SKIPPED_KINDS.get(fmt, "device")))
    return subdirs


_FORMAT, _FILE, _DIR, _LINK = 0o170000, stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK


def _list(folder: bytes, rel: bytes) -> list[os.DirEntry[bytes]]:
    path = os.path.join(folder, rel) if rel else folder
    try:
        with os.scandir(path) as entries:
            return sorted(entries, key=_by_name)
    except (FileNotFoundError, NotADirectoryError):
        raise FolderChangedError(f"folder {os.fsdecode(rel)!r} vanished during the scan",
                            path=os.fsdecode(rel)) from None
    except OSError as exc:
        raise UnreadableFileError(f"cannot read folder {os.fsdecode(rel or b'.')!r}: {exc.strerror}",
                             path=os.fsdecode(rel or b"."), reason=exc.strerror) from None


def _readlink(path: bytes, rel: bytes) -> bytes | None:
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableFileError(f"cannot read symlink {os.fsdecode(rel)!r}: {exc.strerror}",
                             path=os.fsdecode(rel), reason=exc.strerror) from None
