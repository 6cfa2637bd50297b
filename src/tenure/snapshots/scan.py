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
import struct
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import NamedTuple, cast

from tenure.snapshots.errors import FolderChangedError, UnreadableFileError
from tenure.snapshots.folders import LINKED, RESCAN, FolderCache
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
        "folder",
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
        self.folder: DirNode | None = None  # a streaming build: the folder waiting for this file's refs

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
    __slots__ = ("name", "rel", "mode", "mtime_ns", "children", "skipped", "waiting", "linked", "seq")

    def __init__(self, name: bytes, rel: bytes, st: os.stat_result) -> None:
        self.name = name
        self.rel = rel
        self.mode = st.st_mode & 0o7777
        self.mtime_ns = st.st_mtime_ns
        self.children: list[FileNode | SymlinkNode | DirNode] = []
        self.skipped: list[tuple[str, str]] = []
        self.waiting = 0  # a streaming build: files whose refs are not known yet
        self.linked = False  # a streaming build: holds hard-linked files (done only once the listing is)
        self.seq = 0  # a streaming build: its place in the listing (pre-order)


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


class NeedWalk(Exception):
    """A build told what changed cannot rely on the folder cache this time: it lists everything instead."""


Unit = DirNode | int | tuple[int, DirNode]
"""One folder of a partial listing, in pre-order: listed again (a :class:`DirNode`), taken from the folder
cache as it was (its number there), or taken from the cache with its own mode and mtime changed."""


class PartialScanner:
    """Lists only the folders a change journal named; every other folder comes from the folder cache (ADR 0030).

    ``folders`` are listed again (their entries only), ``trees`` with
    everything below them, and so is every folder the cache does not know
    (new, or moved in). A folder the cache marks :data:`~tenure.snapshots.folders.RESCAN`
    is always listed again. The listing happens in :meth:`prepare`, before
    anything is read: it raises :class:`NeedWalk` when a listed folder holds
    a file with more than one link, or held one at the last build (a
    journal sees a change only under the name it was made through), so the
    caller can fall back to a full walk before any work is done.
    """

    def __init__(
        self,
        root_fd: int,
        ignore: IgnoreRules,
        exclude: frozenset[bytes],
        cache: FolderCache,
        folders: frozenset[bytes],
        trees: frozenset[bytes],
    ) -> None:
        self.root_fd = root_fd
        self.ignore = ignore
        self.exclude = exclude
        self.cache = cache
        self.folders = folders
        self.trees = trees
        self.units: list[Unit] = []
        self.listed: list[DirNode] = []

    def prepare(self) -> None:
        """List what must be listed (pre-order) and decide every other folder's unit."""
        cache, units, listed = self.cache, self.units, self.listed
        if b"" in self.trees:
            raise NeedWalk("the whole folder is named as changed")
        beneath = Beneath(self.root_fd)
        try:
            stack: list[tuple[int, DirNode | None] | DirNode] = [(0, DirNode(b"", b"", os.fstat(self.root_fd)))]
            while stack:
                item = stack.pop()
                if type(item) is DirNode:
                    self._whole(beneath, item)
                    continue
                i, seen = cast(tuple[int, DirNode | None], item)
                rel = cache.paths[i]
                if rel in self.folders or cache.flags[i] & RESCAN:
                    if cache.flags[i] & LINKED:
                        raise NeedWalk(f"{os.fsdecode(rel or b'.')!r} held a hard-linked file")
                    fd = _open_folder(beneath, rel)
                    node = seen if seen is not None else DirNode(rel.rpartition(b"/")[2], rel, os.fstat(fd))
                    subdirs = _scan_one(fd, node, self.ignore, self.exclude)
                    _no_links(node)
                    units.append(node)
                    listed.append(node)
                    for sub in reversed(subdirs):
                        j = cache.position.get(sub.rel)
                        stack.append(sub if j is None or sub.rel in self.trees else (j, sub))
                    continue
                units.append(i if seen is None or _same_header(cache.record(i), seen) else (i, seen))
                for j in reversed(cache.children[i]):
                    sub_rel = cache.paths[j]
                    if sub_rel in self.trees:
                        stack.append(DirNode(sub_rel.rpartition(b"/")[2], sub_rel, _fstat(beneath, sub_rel)))
                    else:
                        stack.append((j, None))
        finally:
            beneath.close()

    def _whole(self, beneath: Beneath, top: DirNode) -> None:
        stack = [top]
        while stack:
            node = stack.pop()
            subdirs = _scan_one(_open_folder(beneath, node.rel), node, self.ignore, self.exclude)
            _no_links(node)
            self.units.append(node)
            self.listed.append(node)
            stack += reversed(subdirs)

    def walk(self) -> Iterator[DirNode]:
        """The folders listed again, in pre-order (:meth:`prepare` has run)."""
        return iter(self.listed)

    def result(self) -> Scan:
        """The folders listed again and their files (the rest is in the cache)."""
        files: list[FileNode] = []
        skipped: list[tuple[str, str]] = []
        for node in self.listed:
            skipped += node.skipped
            files += [c for c in node.children if type(c) is FileNode]
        root = self.listed[0] if self.listed and not self.listed[0].rel else DirNode(b"", b"", os.fstat(self.root_fd))
        return Scan(root, self.listed, files, skipped)


def _no_links(node: DirNode) -> None:
    for c in node.children:
        if type(c) is FileNode and c.inode is not None:
            raise NeedWalk(f"{os.fsdecode(c.rel)!r} has more than one link")


def _fstat(beneath: Beneath, rel: bytes) -> os.stat_result:
    return os.fstat(_open_folder(beneath, rel))


_HEADER = struct.Struct("<BI")
_MODE_MTIME = struct.Struct("<Iq")


def _same_header(record: memoryview, node: DirNode) -> bool:
    """Whether a cached record's own mode and mtime are those ``node`` was listed with."""
    _, path_len = _HEADER.unpack_from(record, 0)
    mode, mtime_ns = _MODE_MTIME.unpack_from(record, _HEADER.size + path_len)
    return bool(mode == node.mode and mtime_ns == node.mtime_ns)


def with_header(record: memoryview, node: DirNode) -> bytes:
    """A cached record with ``node``'s mode and mtime (its entries unchanged)."""
    at = _HEADER.size + _HEADER.unpack_from(record, 0)[1]
    return b"".join((record[:at], _MODE_MTIME.pack(node.mode, node.mtime_ns), record[at + _MODE_MTIME.size :]))
