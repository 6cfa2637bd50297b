"""Writing a listed tree into an empty folder, one fetch per object, on a thread pool.

:class:`Plan` maps every data object to the file slices it fills. A file
made of one slice is created, written, given its mode and mtime and closed
by one worker call; a file of several slices is created empty first, its
slices are written with ``pwrite`` as their objects arrive, and it gets its
mode and mtime once all are written. Each fetched object is decoded (hash
checked) once, then its slices are written in groups on the pool, so file
creation, the costly part, runs on every core. At most ``workers`` objects
are fetched ahead and ``2 × workers`` write groups are queued.

Modes are applied through :class:`ModeFilter`: by default ``S_ISUID`` and
``S_ISGID`` are dropped from files and folders and the sticky bit from
files (it stays on folders), so tenant content restored by root never
becomes a root-owned setuid program; ``keep_special_bits`` applies every
stored bit.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Concatenate, Generic, NamedTuple, ParamSpec, TypeVar

import blake3

from tenure.errors import IntegrityError
from tenure.objects import ObjectMissingError, ObjectStore
from tenure.objects.codec import codec_of
from tenure.snapshots.chunking import CHUNKED_FROM
from tenure.snapshots.fsutil import PATH_ROOM, open_parent
from tenure.snapshots.index import RACY_MARGIN_NS, StatKey, stat_key
from tenure.snapshots.treeformat import FileItem, Ref, SymlinkItem, Tree
from tenure.snapshots.walk import Listing

GROUP = 128
_T = TypeVar("_T")
_P = ParamSpec("_P")
_F = TypeVar("_F")
_PieceT = TypeVar("_PieceT")
_RowT = TypeVar("_RowT")
SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


class ModeFilter:
    """The mode bits restore applies: all of them, or all but the special bits (sticky kept on folders)."""

    __slots__ = ("file_bits", "dir_bits")

    def __init__(self, keep_special_bits: bool) -> None:
        self.file_bits = 0o7777 if keep_special_bits else 0o7777 & ~SPECIAL_BITS
        self.dir_bits = 0o7777 if keep_special_bits else 0o7777 & ~(stat.S_ISUID | stat.S_ISGID)

    def dropped(self, listing: Listing) -> list[str]:
        """Relative paths whose stored mode has bits this filter drops."""
        out = [os.fsdecode(rel) for rel, tree in listing.dirs if tree.mode & ~self.dir_bits]
        out += [os.fsdecode(rel) for rel, item in listing.files if item.mode & ~self.file_bits]
        return out


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_REOPEN = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class Piece(NamedTuple, Generic[_F]):
    file: _F  # the file it fills: an index into Plan.files (or, streaming, the file itself)
    offset: int  # in the object
    length: int
    at: int  # in the file
    whole: bool  # the file's only slice: create, write, finish in one go


def add_pieces(jobs: dict[str, list[Piece[_F]]], file: _F, refs: tuple[Ref, ...]) -> None:
    """File the slices of ``file`` (its ``refs``, at least one) under the objects that hold them."""
    if len(refs) == 1:
        oid, offset, length = refs[0]
        piece = Piece(file, offset, length, 0, True)
        if oid in jobs:
            jobs[oid].append(piece)
        else:
            jobs[oid] = [piece]
        return
    at = 0
    for oid, offset, length in refs:
        jobs.setdefault(oid, []).append(Piece(file, offset, length, at, False))
        at += length


class Plan:
    """Which files get content, which are hard links to them, and what each object fills."""

    def __init__(self, listing: Listing) -> None:
        self.files: list[tuple[bytes, FileItem]] = []
        self.followers: list[tuple[bytes, bytes]] = []  # (path, leader path)
        by_path = dict(listing.files) if any(item.link for _, item in listing.files) else {}
        for rel, item in listing.files:
            leader = by_path.get(item.link) if item.link and item.link != rel else None
            if leader is not None and not leader.link:
                self.followers.append((rel, item.link))
            else:
                self.files.append((rel, item))
        self.jobs: dict[str, list[Piece[int]]] = {}
        self.empty: list[int] = []
        self.multi: list[int] = []
        for i, (_, item) in enumerate(self.files):
            refs = item.refs
            if not refs:
                self.empty.append(i)
                continue
            if len(refs) > 1:
                self.multi.append(i)
            add_pieces(self.jobs, i, refs)

    def data_oids(self) -> frozenset[str]:
        return frozenset(self.jobs)

    def files_using(self, oids: set[str] | frozenset[str]) -> set[int]:
        return {p.file for oid in oids for p in self.jobs.get(oid, ())}

    def paths_using(self, oids: set[str] | frozenset[str]) -> list[str]:
        lost = {self.files[i][0] for i in self.files_using(oids)}
        lost |= {rel for rel, leader in self.followers if leader in lost}
        return sorted(os.fsdecode(rel) for rel in lost)


def _fetch(objects: ObjectStore, oid: str) -> tuple[bytes | None, bool]:
    """``(plain, False)``, or ``(None, missing?)`` when the object is gone or corrupt."""
    try:
        return codec_of(objects).decode(oid, objects.get(oid)), False
    except ObjectMissingError:
        return None, True
    except IntegrityError:
        return None, False


def _write_all(fd: int, view: memoryview, at: int | None = None) -> None:
    while view:
        n = os.write(fd, view) if at is None else os.pwrite(fd, view, at)
        view = view[n:]
        if at is not None:
            at += n


WriteResult = tuple[int, list[tuple[int, StatKey | None, bytes]]]


class WriteQueue(Generic[_PieceT, _RowT]):
    """Slices written on the pool in groups of ``GROUP``; at most ``2 × workers`` groups wait, taken back in order.

    ``write(plain, group)`` runs on the pool and returns the bytes it wrote
    and its result rows; ``take(written, rows)`` gets them back on the
    caller's thread.
    """

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        workers: int,
        write: Callable[[bytes, list[_PieceT]], tuple[int, list[_RowT]]],
        take: Callable[[int, list[_RowT]], None],
    ) -> None:
        self._pool = pool
        self._limit = 2 * workers
        self._write = write
        self._take = take
        self._groups: deque[Future[tuple[int, list[_RowT]]]] = deque()

    def put(self, plain: bytes, pieces: list[_PieceT]) -> None:
        """Queue the slices of ``plain``, one group at a time, taking results back while too many wait."""
        for start in range(0, len(pieces), GROUP):
            self._groups.append(self._pool.submit(self._write, plain, pieces[start : start + GROUP]))
            while len(self._groups) > self._limit:
                self.take_one()

    def take_one(self) -> None:
        written, rows = self._groups.popleft().result()
        self._take(written, rows)

    def drain(self) -> None:
        while self._groups:
            self.take_one()


class WriteOptions(NamedTuple):
    """How a restore writes: where its objects come from, on how many threads, what it reports and keeps."""

    objects: ObjectStore
    workers: int
    progress: Callable[[int, int], None] | None
    want_index: bool  # gather the stats of an index of the restored folder
    modes: ModeFilter


class Materializer:
    """Creates the folders, symlinks and files of a plan below ``temp``."""

    def __init__(self, temp: bytes, options: WriteOptions) -> None:
        self.temp = temp
        self.objects, self.workers, self.progress, self.want_index, self.modes = options
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tenure-restore")
        self.corrupt: set[str] = set()
        self.vanished: set[str] = set()
        self.files = 0
        self.bytes_written = 0
        self._done = self._total = 0
        self._writes: WriteQueue[Piece[int], tuple[int, StatKey | None, bytes]] = WriteQueue(
            self.pool, self.workers, self._write_group, self._take_finished
        )
        self._finished: dict[int, tuple[StatKey | None, bytes]] = {}
        self._index: dict[bytes, tuple[object, ...]] = {}
        self._racy_from = time.time_ns() - RACY_MARGIN_NS
        self._masked = _creation_mask(temp)
        self._plan: Plan | None = None

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def path(self, rel: bytes) -> bytes:
        return self.temp + b"/" + rel if rel else self.temp

    def at(
        self, rel: bytes, call: Callable[Concatenate[bytes, int | None, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """``call(path, None, ...)`` for ``temp/rel``; ``call(name, folder_fd, ...)`` when that path is too long.

        The build stores paths of any length (it opens nothing by path), so
        restore must write them too: beyond ``PATH_ROOM`` bytes the folder is
        reached in hops (:func:`~tenure.snapshots.fsutil.open_parent`).
        """
        path = self.path(rel)
        if len(path) < PATH_ROOM:
            return call(path, None, *args, **kwargs)
        fd, name = open_parent(self.temp, rel)
        try:
            return call(name, fd, *args, **kwargs)
        finally:
            os.close(fd)

    # ----------------------------------------------------------------- folders and symlinks

    def make_folders(self, dirs: Sequence[tuple[bytes, Tree]]) -> None:
        """Create the folders (owner-only until :meth:`finish_folders`), one depth at a time in parallel."""
        levels: dict[int, list[bytes]] = {}
        for rel, _ in dirs:
            if rel:
                levels.setdefault(rel.count(b"/"), []).append(rel)
        for depth in sorted(levels):
            level = levels[depth]
            groups = [level[i : i + GROUP] for i in range(0, len(level), GROUP)]
            for future in [self.pool.submit(self._mkdirs, group) for group in groups]:
                future.result()

    def _mkdirs(self, rels: Sequence[bytes]) -> None:
        for rel in rels:
            self.at(rel, _mkdir)

    def make_symlinks(self, links: Sequence[tuple[bytes, SymlinkItem]]) -> None:
        futures = [self.pool.submit(self._symlinks, links[i : i + GROUP]) for i in range(0, len(links), GROUP)]
        for future in futures:
            future.result()

    def _symlinks(self, links: Sequence[tuple[bytes, SymlinkItem]]) -> None:
        for rel, item in links:
            self.at(rel, _symlink, item)

    def finish_folders(self, dirs: Sequence[tuple[bytes, Tree]]) -> None:
        """Folder modes and mtimes, deepest first, after all content."""
        bits = self.modes.dir_bits
        for rel, tree in reversed(dirs):
            self.at(rel, _finish, tree.mode & bits, tree.mtime_ns)

    # ----------------------------------------------------------------- files

    def write_files(self, plan: Plan, missing: frozenset[str] | set[str]) -> None:
        """Write every file whose objects are all stored; record corrupt objects."""
        self._plan = plan
        skip = plan.files_using(missing)
        self._total = sum(item.size for i, (_, item) in enumerate(plan.files) if i not in skip)
        for i in plan.multi:
            if i not in skip:
                self.at(plan.files[i][0], _create_empty)
        self._writes.put(b"", [Piece(i, 0, 0, 0, True) for i in plan.empty])
        fetches: deque[tuple[str, list[Piece[int]], Future[tuple[bytes | None, bool]]]] = deque()
        for oid, pieces in plan.jobs.items():
            if oid in missing:
                continue
            wanted = [p for p in pieces if p.file not in skip]
            fetches.append((oid, wanted, self.pool.submit(_fetch, self.objects, oid)))
            if len(fetches) > self.workers:
                self._land(*fetches.popleft())
        while fetches:
            self._land(*fetches.popleft())
        self._writes.drain()
        self._report()

    def _land(self, oid: str, pieces: list[Piece[int]], future: Future[tuple[bytes | None, bool]]) -> None:
        plain, gone = future.result()
        if plain is None or any(p.offset + p.length > len(plain) for p in pieces):
            (self.vanished if gone else self.corrupt).add(oid)
            return
        self._writes.put(plain, pieces)

    def _take_finished(self, written: int, finished: list[tuple[int, StatKey | None, bytes]]) -> None:
        for i, st, digest in finished:
            self._finished[i] = (st, digest)
        self._wrote(written)

    def _wrote(self, written: int) -> None:
        self._done += written
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self._done, self._total)

    def _write_group(self, plain: bytes, pieces: list[Piece[int]]) -> WriteResult:
        assert self._plan is not None
        files = self._plan.files
        view = memoryview(plain)
        prefix = self.temp + b"/"
        written = 0
        finished: list[tuple[int, StatKey | None, bytes]] = []
        for p in pieces:
            rel, item = files[p.file]
            data = view[p.offset : p.offset + p.length]
            path = prefix + rel
            if len(path) >= PATH_ROOM:  # too long to name at once: through its folder's descriptor
                finished += self.at(rel, self._write_piece, p, data, item)
            elif p.whole:
                finished.append(self._write_whole(p.file, path, None, data, item))
            else:
                self._write_slice(path, None, data, p.at)
            written += p.length
        return written, finished

    def _write_piece(
        self, path: bytes, dir_fd: int | None, p: Piece[int], data: memoryview, item: FileItem
    ) -> list[tuple[int, StatKey | None, bytes]]:
        if p.whole:
            return [self._write_whole(p.file, path, dir_fd, data, item)]
        self._write_slice(path, dir_fd, data, p.at)
        return []

    @staticmethod
    def _write_slice(path: bytes, dir_fd: int | None, data: memoryview, at: int) -> None:
        fd = os.open(path, _REOPEN, dir_fd=dir_fd)
        try:
            _write_all(fd, data, at)
        finally:
            os.close(fd)

    def _write_whole(
        self, i: int, path: bytes, dir_fd: int | None, data: memoryview, item: FileItem
    ) -> tuple[int, StatKey | None, bytes]:
        key = self._create_whole(path, dir_fd, item.mode & self.modes.file_bits, item.mtime_ns, data, self.want_index)
        return i, key, self._racy_digest(item.size, item.mtime_ns, data) if self.want_index else b""

    def _create_whole(
        self, path: bytes, dir_fd: int | None, mode: int, mtime_ns: int, data: memoryview, want_key: bool
    ) -> StatKey | None:
        """Create, fill and finish a one-slice file (the hot path: one call per small file); its stat key if wanted."""
        direct = not mode & self._masked  # the mode survives creation as is: no fchmod needed
        fd = os.open(path, _CREATE, mode if direct else 0o600, dir_fd=dir_fd)
        try:
            if data:
                _write_all(fd, data[os.write(fd, data) :])
            if not direct:
                os.fchmod(fd, mode)
            os.utime(fd, ns=(mtime_ns, mtime_ns))
            return stat_key(os.fstat(fd)) if want_key else None
        finally:
            os.close(fd)

    def _racy_digest(self, size: int, mtime_ns: int, data: memoryview) -> bytes:
        """The content hash an index row keeps for a small file whose mtime is too recent to vouch for it."""
        racy = 0 < size < CHUNKED_FROM and mtime_ns >= self._racy_from
        return blake3.blake3(data).digest() if racy else b""

    # ----------------------------------------------------------------- after the content

    def link_and_finish(self, plan: Plan, lost_oids: set[str] | frozenset[str]) -> None:
        """Drop lost files, finish multi-slice files, create hard links; gather index stats."""
        lost = plan.files_using(lost_oids)
        for i in plan.multi:
            rel, item = plan.files[i]
            if i in lost:
                self.at(rel, _unlink_quietly)
                continue
            self.at(rel, _finish, item.mode & self.modes.file_bits, item.mtime_ns)
            self._finished[i] = (None, b"")
        restored = {plan.files[i][0]: i for i in range(len(plan.files)) if i not in lost}
        linked: list[tuple[bytes, int]] = []
        for rel, leader in plan.followers:
            if leader in restored:
                self.at(leader, self._link, rel)
                linked.append((rel, restored[leader]))
        self.files = len(restored) + len(linked)
        self.bytes_written = sum(plan.files[i][1].size for i in restored.values())
        if self.want_index:
            self._gather_index(plan, restored, linked)

    def _link(self, leader: bytes, leader_fd: int | None, rel: bytes) -> None:
        """Hard-link ``rel`` to ``leader`` (as :meth:`at` hands it over)."""
        self.at(rel, _link, leader, leader_fd)

    def _gather_index(self, plan: Plan, restored: dict[bytes, int], linked: list[tuple[bytes, int]]) -> None:
        relinked = {i for _, i in linked}
        for rel, i in restored.items():
            key, digest = self._finished[i]
            if key is None or i in relinked:
                key = stat_key(self.at(rel, _lstat))
            self._index[rel] = key + (digest, plan.files[i][1].refs)
        for rel, i in linked:
            self._index[rel] = stat_key(self.at(rel, _lstat)) + (self._finished[i][1], plan.files[i][1].refs)

    def index_entries(self) -> dict[bytes, tuple[object, ...]]:
        return self._index


def _creation_mask(folder: bytes) -> int:
    """Mode bits that creating a file in ``folder`` might not keep (so they need an ``fchmod``)."""
    try:
        os.getxattr(folder, "system.posix_acl_default")
        return 0o7777  # a default ACL decides the mode: always fchmod
    except OSError:
        pass
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8) | 0o7000
    except (OSError, ValueError):
        pass
    return 0o7777


def _mkdir(path: bytes, dir_fd: int | None) -> None:
    os.mkdir(path, 0o700, dir_fd=dir_fd)


def _symlink(path: bytes, dir_fd: int | None, item: SymlinkItem) -> None:
    os.symlink(item.target, path, dir_fd=dir_fd)
    os.utime(path, ns=(item.mtime_ns, item.mtime_ns), dir_fd=dir_fd, follow_symlinks=False)


def _finish(path: bytes, dir_fd: int | None, mode: int, mtime_ns: int) -> None:
    os.chmod(path, mode, dir_fd=dir_fd)
    os.utime(path, ns=(mtime_ns, mtime_ns), dir_fd=dir_fd)


def _link(path: bytes, dir_fd: int | None, leader: bytes, leader_fd: int | None) -> None:
    os.link(leader, path, src_dir_fd=leader_fd, dst_dir_fd=dir_fd)


def _create_empty(path: bytes, dir_fd: int | None) -> None:
    os.close(os.open(path, _CREATE, 0o600, dir_fd=dir_fd))


def _lstat(path: bytes, dir_fd: int | None) -> os.stat_result:
    return os.lstat(path, dir_fd=dir_fd)


def _unlink_quietly(path: bytes, dir_fd: int | None) -> None:
    try:
        os.unlink(path, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
