"""Checking a folder in: folder → data objects + tree objects → root id.

Sequence of :func:`build_tree`:

1. **Scan** the folder (:mod:`~tenure.snapshots.scan`), honouring
   ``.tenureignore``; group hard links (same device and inode) and name the
   member whose relative path sorts first as the group's leader.
2. **Decide** per file: unchanged per the index (all five stat fields equal,
   not racy) → reuse its refs without reading; otherwise read it.
3. **Read** changed files in scan order. Files under 1 MiB are packed:
   their bytes are appended to the current pack, flushed at ``PACK_TARGET``
   bytes; a file is never split across packs. Larger files are chunked
   (:mod:`~tenure.snapshots.chunking`). Encoding and storing run on other
   threads (:mod:`~tenure.snapshots.pipeline`). A packed file read again
   whose digest matches its index entry keeps its old refs.
4. **Encode the tree**: one record per folder in pre-order, one stream, cut
   into content-defined tree chunks, plus a root object listing them
   (:mod:`~tenure.snapshots.treeformat`).
5. **Check the closure**: ``pin(closure)``, then one ``has_many`` over every
   id this run did not store itself. Files whose objects are gone are read
   and stored again (then pinned and checked once more); tree objects the
   store lacks are stored.
6. ``build.after_objects_written`` → save the index → ``build.after_index_saved``.

The root id depends only on the folder's content and metadata and on each
file's refs. Refs of unchanged files come from the index, so checking in an
unchanged folder again with the same index gives the same root; so does a
checkpoint right after a restore that wrote the index. Files read afresh are
packed in scan order, so two builds from scratch of the same folder also
agree; an incremental build may differ from a from-scratch build of equal
content (different packs), which is correct but is a different root.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import blake3

from tenure.faults import crash_point, register
from tenure.objects import ObjectStore
from tenure.objects.codec import encode
from tenure.snapshots.chunking import CHUNKED_FROM, iter_chunks, new_chunker
from tenure.snapshots.errors import FolderChanged, NotAFolder, UnreadableFile, UploadIncomplete
from tenure.snapshots.ignore import load_ignore
from tenure.snapshots.index import RACY_MARGIN_NS, Index, IndexEntry, load_index, save_index
from tenure.snapshots.pipeline import Uploader
from tenure.snapshots.results import BuildResult
from tenure.snapshots.scan import DirNode, FileNode, Scan, Slot, SymlinkNode, scan_folder
from tenure.snapshots.treeformat import (
    ChunkRef,
    cut_stream,
    encode_root,
    file_entry,
    folder_entry,
    record,
    symlink_entry,
)

AFTER_OBJECTS_WRITTEN = register(
    "build.after_objects_written",
    "every object of the new tree is durable in the object store; the local index is not saved yet")
AFTER_INDEX_SAVED = register(
    "build.after_index_saved",
    "the new tree is stored and the local index describes the folder as checked in")

MiB = 1 << 20
PACK_TARGET = 4 * MiB
PROGRESS_STEP = 4 * MiB
READ_BATCH_FILES = 256
READ_BATCH_BYTES = 4 * MiB
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_ROUNDS = 3

Progress = Callable[[int, int], None]
Pin = Callable[[frozenset[str]], None]


def build_tree(folder: str, objects: ObjectStore, *, index_path: str | None = None, pin: Pin | None = None,
               progress: Progress | None = None, workers: int | None = None) -> BuildResult:
    """Store ``folder`` as a tree of objects and return its root id (see the module docstring).

    ``index_path`` (a file, best outside the folder; if inside, it is left
    out of the tree) makes the build incremental. ``pin`` receives the new
    tree's closure, and each upload batch, before the store is asked what it
    holds, so a concurrent GC spares them. ``progress(bytes_done, bytes_total)`` counts the bytes to
    read. ``workers`` threads scan, read and encode (default: one per core).
    """
    root = _folder_bytes(folder)
    workers = workers or os.cpu_count() or 1
    index = load_index(index_path)
    scan = scan_folder(root, load_ignore(root), _excluded(root, index_path))
    build = _Build(root, objects, index, workers, progress, pin or _no_pin)
    build.run(scan)
    trees = build.settle(scan, build.pin)
    crash_point(AFTER_OBJECTS_WRITTEN)
    if index_path is not None:
        save_index(index_path, {f.rel: f.key + (f.digest, f.refs) for f in scan.files if f.indexed})
        crash_point(AFTER_INDEX_SAVED)
    return BuildResult(root=build.root_oid, files=len(scan.files), bytes_read=build.bytes_read,
                       bytes_new=build.bytes_new, objects=frozenset(trees) | _data_oids(scan.files),
                       skipped=tuple(scan.skipped))


def _no_pin(_oids: frozenset[str]) -> None:
    pass


def _folder_bytes(folder: str) -> bytes:
    path = os.fsencode(os.path.abspath(folder))
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            return path
    except OSError:
        pass
    raise NotAFolder(f"{folder!r} is not a folder", path=folder)


def _excluded(root: bytes, index_path: str | None) -> frozenset[bytes]:
    if index_path is None:
        return frozenset()
    index = os.fsencode(os.path.abspath(index_path))
    if not index.startswith(root + b"/"):
        return frozenset()
    return frozenset({index[len(root) + 1:]})


def _data_oids(files: Sequence[FileNode]) -> frozenset[str]:
    return frozenset(ref[0] for f in files for ref in f.refs)


class _Build:
    """The state of one build: counters, the pack being filled, the upload pipeline."""

    def __init__(self, root: bytes, objects: ObjectStore, index: Index, workers: int,
                 progress: Progress | None, pin: Pin) -> None:
        self.root = root
        self.pin = pin
        self.objects = objects
        self.index = index
        self.workers = workers
        self.progress = progress
        self.bytes_read = 0
        self.bytes_new = 0
        self.written: set[str] = set()
        self.root_oid = ""
        self._chunker = new_chunker()
        self._racy_from = time.time_ns() - RACY_MARGIN_NS
        self._done = self._total = self._reported = 0
        self._pack = bytearray()
        self._members: list[FileNode] = []
        self._slices: list[tuple[int, int]] = []
        self._packs: list[tuple[Slot, list[FileNode], list[tuple[int, int]]]] = []

    # ----------------------------------------------------------------- reading

    def run(self, scan: Scan) -> None:
        """Give every file its refs: from the index, or by reading it."""
        leaders, followers = _link_groups(scan.files)
        to_read = [f for f in leaders if not self._reuse(f)]
        self._read_all(to_read, trust_index=True)
        _follow(followers)

    def _reuse(self, f: FileNode) -> bool:
        entry = self.index.unchanged(f.rel, f.key)
        if entry is None:
            return False
        f.refs, f.digest = entry.refs, entry.digest
        return True

    def _read_all(self, files: Sequence[FileNode], *, trust_index: bool) -> None:
        """Read ``files`` in order: small ones on reader threads, a batch at a time, ahead of packing."""
        self._done, self._total, self._reported = 0, sum(f.size for f in files), 0
        probing = trust_index and any(f.size >= CHUNKED_FROM and self.index.previous(f.rel) for f in files)
        uploader = Uploader(self.objects, self.workers, self.index.oids() if probing else frozenset(), self.pin)
        readers = ThreadPoolExecutor(self.workers, thread_name_prefix="tenure-read")
        try:
            for group, contents in _read_ahead(self.root, _batches(files), readers, 2 * self.workers):
                if contents is None:
                    self._read_large(group[0], uploader, trust_index)
                else:
                    self._take_batch(group, contents, uploader, trust_index)
                self._advance(sum(f.size for f in group))
            self._flush_pack(uploader)
            uploader.finish()
        finally:
            readers.shutdown(wait=True, cancel_futures=True)
            uploader.close()
        self.written |= uploader.written
        self.bytes_new += uploader.bytes_new
        self._resolve_packs()
        for f in files:
            if f.pending is not None:
                f.resolve()
        self._report(force=True)

    def _take_batch(self, group: Sequence[FileNode], contents: Sequence[bytes], uploader: Uploader,
                    trust_index: bool) -> None:
        """Pack a batch of small files (the hot loop: kept lean on purpose)."""
        previous = self.index.previous if trust_index and len(self.index) else None
        pack = self._pack
        for f, data in zip(group, contents):
            size = len(data)
            self.bytes_read += size
            if size != f.size:
                f.size, f.indexed = size, False
            if not size:
                f.refs, f.digest = (), b""
                continue
            if previous is not None and self._same_as_before(f, data, previous(f.rel)):
                continue
            if f.mtime_ns >= self._racy_from:
                f.digest = blake3.blake3(data).digest()
            self._members.append(f)
            self._slices.append((len(pack), size))
            pack += data
            if len(pack) >= PACK_TARGET:
                self._flush_pack(uploader)
                pack = self._pack

    @staticmethod
    def _same_as_before(f: FileNode, data: bytes, entry: IndexEntry | None) -> bool:
        """Reuse the old refs of a file read again (racy, or only touched) whose content is unchanged."""
        if entry is None or not entry.digest or entry.size != len(data):
            return False
        if blake3.blake3(data).digest() != entry.digest:
            return False
        f.refs, f.digest = entry.refs, entry.digest
        return True

    def _flush_pack(self, uploader: Uploader) -> None:
        if self._pack:
            slot = Slot()
            uploader.add_pack(self._pack, slot)
            self._packs.append((slot, self._members, self._slices))
            self._pack, self._members, self._slices = bytearray(), [], []

    def _resolve_packs(self) -> None:
        """Give packed files their refs and digests, now that every pack has its id."""
        for slot, members, slices in self._packs:
            oid = slot.oid
            for f, (offset, size) in zip(members, slices):
                f.refs = ((oid, offset, size),)
        self._packs = []

    def _read_large(self, f: FileNode, uploader: Uploader, trust_index: bool) -> None:
        probe = trust_index and self.index.previous(f.rel) is not None
        fd = _open(self.root, f.rel)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FolderChanged(f"{os.fsdecode(f.rel)!r} is no longer a regular file", path=os.fsdecode(f.rel))
            pending: list[tuple[Slot | str, int, int]] = []
            for chunk in iter_chunks(fd, f.size, self._chunker):
                pending.append((uploader.add_chunk(chunk, probe=probe), 0, len(chunk)))
                self.bytes_read += len(chunk)
        except OSError as exc:
            raise _read_error(f.rel, exc) from None
        finally:
            os.close(fd)
        got = sum(r[2] for r in pending)
        if got != f.size:
            f.size, f.indexed = got, False
        f.pending, f.digest = pending, b""

    def _advance(self, size: int) -> None:
        self._done += size
        if self._done - self._reported >= PROGRESS_STEP:
            self._report()

    def _report(self, force: bool = False) -> None:
        if self.progress is not None and (force or self._done != self._reported):
            self._reported = self._done
            self.progress(self._done, self._total)

    # ----------------------------------------------------------------- trees and closure

    def settle(self, scan: Scan, pin: Pin) -> dict[str, bytes]:
        """Encode the tree, pin and check the closure, repair, store the tree; return its objects."""
        confirmed: set[str] = set()
        for _ in range(_ROUNDS):
            self.root_oid, trees = _encode_trees(scan.dirs, self.workers)
            closure = frozenset(trees) | _data_oids(scan.files)
            pin(closure)
            ask = closure - self.written - confirmed
            present = self.objects.has_many(ask) if ask else set()
            confirmed |= present
            lost = ask - present - trees.keys()
            if not lost:
                self._store_trees({oid: p for oid, p in trees.items() if oid not in confirmed})
                return trees
            self._repair(scan, lost)
        raise UploadIncomplete(f"objects kept vanishing from {self.objects.url} while the tree was stored",
                               folder=os.fsdecode(self.root))

    def _repair(self, scan: Scan, lost: frozenset[str]) -> None:
        """Read again every file whose stored content is gone, trusting no index."""
        leaders, followers = _link_groups(scan.files)
        damaged = [f for f in leaders if any(ref[0] in lost for ref in f.refs)]
        self._read_all(damaged, trust_index=False)
        _follow(followers)

    def _store_trees(self, trees: dict[str, bytes]) -> None:
        if trees:
            self.objects.put_many(trees.items())
            self.bytes_new += sum(len(p) for p in trees.values())


def _batches(files: Sequence[FileNode]) -> Iterator[tuple[list[FileNode], bool]]:
    """Consecutive small files in batches (``True``), each large file alone (``False``)."""
    batch: list[FileNode] = []
    size = 0
    for f in files:
        if f.size >= CHUNKED_FROM:
            if batch:
                yield batch, True
                batch, size = [], 0
            yield [f], False
            continue
        batch.append(f)
        size += f.size
        if len(batch) >= READ_BATCH_FILES or size >= READ_BATCH_BYTES:
            yield batch, True
            batch, size = [], 0
    if batch:
        yield batch, True


def _read_ahead(root: bytes, batches: Iterator[tuple[list[FileNode], bool]], readers: ThreadPoolExecutor,
                depth: int) -> Iterator[tuple[list[FileNode], list[bytes] | None]]:
    """Yield batches in order with their contents, read up to ``depth`` batches ahead (large: ``None``)."""
    ahead: deque[tuple[list[FileNode], Future[list[bytes]] | None]] = deque()
    for group, small in batches:
        ahead.append((group, readers.submit(_read_batch, root, group) if small else None))
        if len(ahead) > depth:
            yield _landed(*ahead.popleft())
    while ahead:
        yield _landed(*ahead.popleft())


def _landed(group: list[FileNode], future: Future[list[bytes]] | None) -> tuple[list[FileNode], list[bytes] | None]:
    return group, None if future is None else future.result()


def _read_batch(root: bytes, files: Sequence[FileNode]) -> list[bytes]:
    """Read small files whole (at most the size ``lstat`` reported)."""
    out = []
    for f in files:
        fd = _open(root, f.rel)
        try:
            out.append(os.read(fd, f.size) if f.size else b"")
        except OSError as exc:
            raise _read_error(f.rel, exc) from None
        finally:
            os.close(fd)
    return out


def _open(root: bytes, rel: bytes) -> int:
    try:
        return os.open(root + b"/" + rel, _READ_FLAGS)
    except OSError as exc:
        raise _read_error(rel, exc) from None


def _read_error(rel: bytes, exc: OSError) -> Exception:
    path = os.fsdecode(rel)
    if exc.errno in (errno.ENOENT, errno.ELOOP, errno.EISDIR, errno.ENOTDIR, errno.EAGAIN):
        return FolderChanged(f"{path!r} changed while it was being read ({exc.strerror})", path=path)
    return UnreadableFile(f"cannot read {path!r}: {exc.strerror}", path=path, reason=exc.strerror)


def _link_groups(files: Sequence[FileNode]) -> tuple[list[FileNode], list[tuple[FileNode, FileNode]]]:
    """Split files into leaders (read) and followers (share the leader's content)."""
    groups: dict[tuple[int, int], list[FileNode]] = {}
    for f in files:
        if f.inode is not None:
            groups.setdefault(f.inode, []).append(f)
    followers: list[tuple[FileNode, FileNode]] = []
    for members in groups.values():
        if len(members) > 1:
            leader = min(members, key=lambda m: m.rel)
            followers += [(m, leader) for m in members if m is not leader]
    if not followers:
        return list(files), []
    following = {id(m) for m, _ in followers}
    return [f for f in files if id(f) not in following], followers


def _follow(followers: Sequence[tuple[FileNode, FileNode]]) -> None:
    for f, leader in followers:
        f.link = leader.rel
        f.refs, f.digest, f.size, f.indexed = leader.refs, leader.digest, leader.size, leader.indexed


def _encode_trees(dirs: Sequence[DirNode], workers: int) -> tuple[str, dict[str, bytes]]:
    """Encode the tree stream (folders in pre-order), cut it, encode the chunks and the root.

    Returns the root id and ``id → payload`` of the root and every tree chunk.
    """
    parts: list[bytes] = []
    starts: list[int] = []
    position = 0
    for d in dirs:
        part = _record(d)
        starts.append(position)
        parts.append(part)
        position += len(part)
    stream = b"".join(parts)
    cuts = cut_stream(stream, starts)
    view = memoryview(stream)
    with ThreadPoolExecutor(workers, thread_name_prefix="tenure-trees") as pool:
        encoded = list(pool.map(lambda cut: encode(view[cut[0]:cut[0] + cut[1]]), cuts))
    chunks = [ChunkRef(oid, length, first) for (oid, _), (_, length, first) in zip(encoded, cuts)]
    root, payload = encode(encode_root(chunks))
    return root, {root: payload, **dict(encoded)}


def _record(d: DirNode) -> bytes:
    entries = []
    for c in d.children:
        if type(c) is FileNode:
            entries.append(file_entry(c.name, c.mode, c.mtime_ns, c.size, c.refs, c.link))
        elif type(c) is DirNode:
            entries.append(folder_entry(c.name))
        else:
            assert isinstance(c, SymlinkNode)
            entries.append(symlink_entry(c.name, c.mode, c.mtime_ns, c.target))
    return record(d.rel, d.mode, d.mtime_ns, entries)
