"""Checking a folder in: folder → data objects + tree objects → root id.

Sequence of :func:`build_tree`:

1. **List** the folder (:mod:`~tenure.snapshots.scan`), honouring
   ``.tenureignore``, on a listing thread. As each folder is listed, each
   file is **decided**: unchanged per the index (all five stat fields equal,
   not racy) → its refs are reused without reading; otherwise it is queued
   for reading. Hard-linked files (same device and inode) wait for the end
   of the listing; only each group's leader, the member whose relative path
   sorts first, is read.
2. **Read** queued files in scan order while listing continues
   (:mod:`~tenure.snapshots.feed`). Files under 1 MiB are packed: their
   bytes are appended to the current pack, flushed at ``PACK_TARGET`` bytes
   or ``PACK_FILES`` files;
   a file is never split across packs. A packed file read again whose digest
   matches its index entry keeps its old refs. Larger files are chunked
   (:mod:`~tenure.snapshots.chunking`). Encoding and storing run on other
   threads (:mod:`~tenure.snapshots.pipeline`); each upload batch is pinned
   before the store is asked about it.
3. Hard-link followers take their leader's refs.
4. **Encode the tree**: one record per folder in pre-order, one stream, cut
   into content-defined tree chunks, plus a root object listing them
   (:mod:`~tenure.snapshots.treeformat`).
5. **Check the closure**: ``pin(closure)``, then one ``has_many`` over every
   id this run did not store itself. Files whose objects are gone are read
   and stored again (then pinned and checked once more); tree objects the
   store lacks are stored, and those it holds but the tree hint does not
   name are read back first (ADR 0032). A file whose refs the store lacks (gone, or
   moved aside as corrupt) is thus read again even when the index says it
   is unchanged; each lost pack is rebuilt from its own files, so it gets
   its old id back when they are all still there.
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

import contextlib
import functools
import gc
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from uuid import uuid4

import blake3

from tenure.faults import crash_point, register
from tenure.objects import ObjectStore
from tenure.objects.codec import Codec, codec_of
from tenure.snapshots import folders, known_trees
from tenure.snapshots.chunking import iter_chunks, new_chunker
from tenure.snapshots.errors import (
    FolderChangedError,
    NotAFolderError,
    UnreadableFileError,
    UploadIncompleteError,
)
from tenure.snapshots.feed import ReadAhead, open_file, read_error
from tenure.snapshots.heap import fix_mmap_threshold
from tenure.snapshots.ignore import IgnoreRules, load_ignore
from tenure.snapshots.index import RACY_MARGIN_NS, Index, IndexEntry, Rows, encode_body, load_index, write_index
from tenure.snapshots.pipeline import Uploader
from tenure.snapshots.results import BuildResult
from tenure.snapshots.scan import (
    DirNode,
    FileNode,
    NeedWalk,
    PartialScanner,
    Scan,
    Scanner,
    Slot,
    SymlinkNode,
    Unit,
    with_header,
)
from tenure.snapshots.treeformat import (
    INLINE_IDS,
    ChunkRef,
    FileItem,
    Root,
    cut_stream,
    encode_root,
    file_entry,
    folder_entry,
    id_stream,
    iter_records,
    record,
    symlink_entry,
)
from tenure.snapshots.verify import set_aside

AFTER_OBJECTS_WRITTEN = register(
    "build.after_objects_written",
    "every object of the new tree is durable in the object store; the local index is not saved yet",
)
AFTER_INDEX_SAVED = register(
    "build.after_index_saved", "the new tree is stored and the local index describes the folder as checked in"
)

MiB = 1 << 20
PACK_TARGET = 4 * MiB
TICK_FOLDERS = 32  # a streaming build's listing gives the reading thread a turn this often (in folders)
PACK_SPAN_FOLDERS = 256  # a streaming build stores a pack whose first file is this many folders behind
PACK_FILES = 4096  # a pack of tiny files ends here too: a streaming build holds a pack's files until it is stored
PROGRESS_STEP = 4 * MiB
_ROUNDS = 3

Progress = Callable[[int, int], None]
Pin = Callable[[frozenset[str]], None]


@runtime_checkable
class FileProgress(Protocol):
    """A progress callback that also takes file counts (``tenure workspace checkpoint``'s progress line).

    ``files(done, total, bytes_total, listed)``: files checked (taken from
    the index or read) out of the files listed so far, and the bytes to read
    found so far; ``listed`` is True once the whole folder is listed, and
    from then on both totals are final. It may be called from the listing
    thread.
    """

    def __call__(self, done: int, total: int) -> None: ...

    def files(self, done: int, total: int, bytes_total: int, listed: bool) -> None: ...


class ChangeSet(Protocol):
    """What a change journal saw change in a folder (:class:`tenure.snapshots.journal.Changes`)."""

    @property
    def folders(self) -> frozenset[bytes]: ...  # folders whose own entries must be listed again

    @property
    def trees(self) -> frozenset[bytes]: ...  # folders to list with everything below them


class Journal(Protocol):
    def take(self) -> ChangeSet | None: ...


@dataclass(frozen=True)
class Interval:
    """What changed between two takes of a change journal: ``changes`` since ``since``, up to ``mark``.

    ``changes`` is ``None`` when the journal is in doubt. A build given an
    interval lists only the folders it names when the folder cache was
    written by the build that followed the take marked ``since``; else it
    walks everything. Either way it writes the cache under ``mark``.
    """

    since: str
    mark: str
    changes: ChangeSet | None


class JournalCursor:
    """Numbers the takes of one change journal, so each build knows which interval its changes cover."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._name = uuid4().hex
        self._taken = 0

    def take(self) -> Interval:
        """The changes since the previous take (take right before a build lists the folder)."""
        changes = self.journal.take()
        since = f"{self._name}:{self._taken}"
        self._taken += 1
        return Interval(since, f"{self._name}:{self._taken}", changes)


def build_tree(
    folder: str,
    objects: ObjectStore,
    *,
    index_path: str | None = None,
    pin: Pin | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
    exclude: Sequence[str] = (),
    leave_out: Sequence[str] = (),
    interval: Interval | None = None,
) -> BuildResult:
    """Store ``folder`` as a tree of objects and return its root id (see the module docstring).

    ``index_path`` (a file, best outside the folder; if inside, it is left
    out of the tree) makes the build incremental. ``exclude`` holds
    gitignore patterns read after ``.tenureignore``'s; ``leave_out`` holds
    paths (files or folders, typically tenure's own data) left out of the
    tree when they lie inside the folder. ``pin`` receives each
    upload batch, and then the new tree's closure, before the store is asked
    what it holds, so a concurrent GC spares them. ``progress(bytes_done,
    bytes_total)`` counts the bytes to read; the total grows while the folder
    is still being listed. A :class:`FileProgress` is also told file counts
    and when the listing is complete (the totals final).
    ``workers`` threads read and as many encode (default: one per core).
    ``interval`` (with ``index_path``): what a change journal saw change
    since the last build; only the folders it names are listed (ADR 0030).
    """
    fix_mmap_threshold()
    with gc_paused():
        return _build_tree(folder, objects, index_path, pin, progress, workers, exclude, leave_out, interval)


def _build_tree(
    folder: str,
    objects: ObjectStore,
    index_path: str | None,
    pin: Pin | None,
    progress: Progress | None,
    workers: int | None,
    exclude: Sequence[str],
    leave_out: Sequence[str],
    interval: Interval | None,
) -> BuildResult:
    root = folder_bytes(folder)
    index = load_index(index_path)
    journaled = interval is not None and index_path is not None
    cache = folders.load(index_path) if journaled else None
    root_fd = open_folder(root, folder)
    try:
        ignore = load_ignore(root_fd, exclude)
        hints = [folders.cache_path(index_path), known_trees.hint_path(index_path)] if index_path else []
        excluded = _excluded(root, [index_path, *hints, *leave_out])
        rules = _rules(ignore, excluded)
        new_build = functools.partial(
            _Build,
            root,
            root_fd,
            objects,
            index,
            workers or os.cpu_count() or 1,
            progress,
            pin or _no_pin,
            known_trees=known_trees.load(index_path),
        )
        layout: _Layout | None = None
        if interval is not None and interval.changes is not None and cache is not None:
            if cache.mark == interval.since and cache.rules == rules:
                layout = _partial(new_build(), root_fd, ignore, excluded, cache, interval.changes)
        if layout is None:
            try:
                layout = _Whole(new_build(stream=True), Scanner(root_fd, ignore, excluded))
            except _Restart:  # objects it relies on are gone: a build that keeps every file can repair them
                layout = _Whole(new_build(), Scanner(root_fd, ignore, excluded))
    finally:
        os.close(root_fd)
    crash_point(AFTER_OBJECTS_WRITTEN)
    if index_path is not None:
        layout.save_index(index, index_path)
        crash_point(AFTER_INDEX_SAVED)
        if interval is not None:
            folders.save(index_path, layout.cache_body(interval.mark, rules))
        else:
            folders.drop(index_path)  # the index moved on without it
        known_trees.save(index_path, layout.trees)
    build = layout.build
    return BuildResult(
        root=build.root_oid,
        files=layout.files,
        bytes_read=build.bytes_read,
        bytes_new=build.bytes_new,
        objects=frozenset(layout.trees) | layout.data,
        skipped=tuple(layout.skipped),
        folders_listed=layout.folders_listed,
        walked=isinstance(layout, _Whole),
        replaced=build.replaced,
    )


class _Restart(Exception):
    """A streaming build found objects it relies on gone: the build starts again keeping every file."""


def _partial(
    build: _Build,
    root_fd: int,
    ignore: IgnoreRules,
    excluded: frozenset[bytes],
    cache: folders.FolderCache,
    changes: ChangeSet,
) -> _Layout | None:
    """A build that lists only what ``changes`` names, or ``None`` when it has to walk after all."""
    scanner = PartialScanner(root_fd, ignore, excluded, cache, changes.folders, changes.trees)
    try:
        scanner.prepare()
        return _Partial(build, scanner, cache)
    except NeedWalk:
        return None


def _rules(ignore: IgnoreRules, excluded: frozenset[bytes]) -> bytes:
    """A digest of what decides which entries a listing keeps (ignore patterns, left-out paths)."""
    return blake3.blake3(ignore.source + b"\0\0" + b"\0".join(sorted(excluded))).digest()


FolderRow = folders.Row


class _Layout:
    """A finished build: the folders of its tree, in pre-order, and what the index and cache get."""

    build: _Build
    trees: dict[str, bytes]
    data: frozenset[str]
    files: int
    folders_listed: int
    skipped: list[tuple[str, str]]

    def index_body(self, index: Index) -> bytes | None:
        """The new index's body, or ``None`` when nothing in it changed."""
        raise NotImplementedError

    def save_index(self, index: Index, path: str) -> None:
        """Write the new index, unless it holds what ``index`` does (then the file and its racy time stay)."""
        body = self.index_body(index)
        if body is not None and not index.same_body(body):
            write_index(path, body)

    def cache_body(self, mark: str, rules: bytes) -> bytes:
        raise NotImplementedError


class _Whole(_Layout):
    """A build that listed the whole folder: streaming (bounded memory), or keeping every file (to repair)."""

    def __init__(self, build: _Build, scanner: Scanner) -> None:
        self.build = build
        scan = build.run(scanner)
        rows = build.rows if build.stream else []

        def repair(lost: frozenset[str]) -> None:
            if build.stream:
                raise _Restart
            build.repair(scan, lost)

        def layout() -> tuple[bytes | bytearray, list[int], frozenset[str]]:
            if build.stream:
                return build.tree, build.starts, _union(rows)
            rows[:] = [_row(d) for d in scan.dirs]
            return (*_joined([r[1] for r in rows]), _union(rows))

        self.trees, self.data = build.settle(layout, repair)
        self._rows = rows
        self._scan = scan
        self.files = build.files if build.stream else len(scan.files)
        self.folders_listed = len(rows)
        self.skipped = scan.skipped

    def index_body(self, index: Index) -> bytes | None:
        return encode_body({f.rel: f.key + (f.digest, f.refs) for f in self._scan.files if f.indexed})

    def save_index(self, index: Index, path: str) -> None:
        if not self.build.stream:
            super().save_index(index, path)
            return
        rows = self.build.index_rows  # compared and written part by part, never encoded whole
        if not (index.written_ns > 0 and rows.matches(index.body())):
            rows.save(path)

    def cache_body(self, mark: str, rules: bytes) -> bytes:
        rows = self._rows
        if self.build.stream:  # the records are in the tree stream, one after another
            tree, ends = memoryview(self.build.tree), [*self.build.starts[1:], len(self.build.tree)]
            rows = [(r[0], tree[a:b], *r[2:]) for r, a, b in zip(rows, self.build.starts, ends)]
        return folders.encode(mark, rules, rows)


class _Partial(_Layout):
    """A build that listed only the folders a change journal named; the rest came from the folder cache."""

    def __init__(self, build: _Build, scanner: PartialScanner, cache: folders.FolderCache) -> None:
        self.build = build
        self.cache = cache
        self.units: list[Unit] = scanner.units
        self.scan = build.run(scanner)
        self._rows = [self._unit_row(u) for u in self.units]

        def layout() -> tuple[bytes | bytearray, list[int], frozenset[str]]:
            return (*_joined([r[1] for r in self._rows]), _union(self._rows))

        def repair(_lost: frozenset[str]) -> None:
            raise NeedWalk("objects the folder cache names are gone")

        self.trees, self.data = build.settle(layout, repair)
        self.files = sum(r[3] for r in self._rows)
        self.folders_listed = len(self.scan.dirs)
        self.skipped = self.scan.skipped

    def _unit_row(self, unit: Unit) -> FolderRow:
        cache = self.cache
        if isinstance(unit, DirNode):
            return _row(unit)
        record_bytes: bytes | memoryview
        if isinstance(unit, int):
            i, record_bytes = unit, cache.record(unit)
        else:
            i, record_bytes = unit[0], with_header(cache.record(unit[0]), unit[1])
        return (cache.paths[i], record_bytes, cache.subs[i], cache.files[i], cache.flags[i], cache.data_oids(i))

    def index_body(self, index: Index) -> bytes | None:
        """The index as it was, less the files of every folder not taken from the cache, plus those listed."""
        cache = self.cache
        kept = {u if isinstance(u, int) else u[0] for u in self.units if not isinstance(u, DirNode)}
        removed: list[bytes] = []
        for i in range(len(cache.paths)):
            if i not in kept:
                prefix = cache.paths[i] + b"/" if cache.paths[i] else b""
                for _, tree in iter_records(bytes(cache.record(i)), strict=True):
                    removed += [prefix + item.name for item in tree.items if type(item) is FileItem]
        added = {f.rel: f.key + (f.digest, f.refs) for f in self.scan.files if f.indexed}
        if not removed and not added:
            return None
        return index.patched(removed, added)

    def cache_body(self, mark: str, rules: bytes) -> bytes:
        return folders.encode(mark, rules, self._rows)


def _row(d: DirNode) -> FolderRow:
    files = [c for c in d.children if type(c) is FileNode]
    flags = folders.LINKED if any(f.inode is not None for f in files) else 0
    if d.skipped or not all(f.indexed for f in files):
        flags |= folders.RESCAN
    oids = sorted({ref[0] for f in files for ref in f.refs})
    subs = sum(1 for c in d.children if type(c) is DirNode)
    return (d.rel, _record(d), subs, len(files), flags, oids)


def _joined(records: Sequence[bytes | memoryview]) -> tuple[bytes, list[int]]:
    """The tree stream of ``records`` (pre-order) and where each starts in it."""
    starts: list[int] = []
    position = 0
    for part in records:
        starts.append(position)
        position += len(part)
    return b"".join(records), starts


def _union(rows: Sequence[FolderRow]) -> frozenset[str]:
    data: set[str] = set()
    for r in rows:
        data.update(r[5])
    return frozenset(data)


def _no_pin(_oids: frozenset[str]) -> None:
    pass


_gc_lock = threading.Lock()
_gc_builds = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while builds run (nested and concurrent builds share one pause).

    A build allocates a few objects per file (scan nodes, index rows, tree
    entries) and keeps most of them alive until it ends, which no cycle
    collection can free: each pass would only walk the growing heap again
    (measured: about a quarter of an incremental build's CPU time on 100,000
    files). Reference counting still frees everything as usual; the
    collector is enabled again, as it was, when the last running build ends.
    """
    global _gc_builds, _gc_was_enabled
    with _gc_lock:
        if _gc_builds == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_builds += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_builds -= 1
            if _gc_builds == 0 and _gc_was_enabled:
                gc.enable()


def folder_bytes(folder: str) -> bytes:
    path = os.fsencode(os.path.abspath(folder))
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            return path
    except OSError:
        pass
    raise NotAFolderError(f"{folder!r} is not a folder", path=folder)


def open_folder(root: bytes, folder: str) -> int:
    """The descriptor every path of the build is opened below (the folder itself may be a symlink)."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise NotAFolderError(f"{folder!r} is not a folder", path=folder) from None
    except OSError as exc:
        raise UnreadableFileError(
            f"cannot open folder {folder!r}: {exc.strerror}", path=".", reason=exc.strerror
        ) from None


def _excluded(root: bytes, paths: Sequence[str | None]) -> frozenset[bytes]:
    """The relative paths of those of ``paths`` that lie inside the folder ``root`` (symlinks resolved)."""
    real_root = os.path.realpath(root)
    found = set()
    for path in paths:
        if path is None:
            continue
        for base, candidate in (
            (root, os.fsencode(os.path.abspath(path))),
            (real_root, os.fsencode(os.path.realpath(path))),
        ):
            if candidate.startswith(base.rstrip(b"/") + b"/"):
                found.add(candidate[len(base.rstrip(b"/")) + 1 :])
    return frozenset(found)


def _data_oids(files: Sequence[FileNode]) -> frozenset[str]:
    return frozenset(ref[0] for f in files for ref in f.refs)


class _Build:
    """The state of one build: counters, the pack being filled, the upload pipeline."""

    def __init__(
        self,
        root: bytes,
        root_fd: int,
        objects: ObjectStore,
        index: Index,
        workers: int,
        progress: Progress | None,
        pin: Pin,
        *,
        stream: bool = False,
        known_trees: frozenset[str] = frozenset(),
    ) -> None:
        self.root = root
        self.root_fd = root_fd
        self.pin = pin
        #: tree-layer ids the last build of this index stored or checked (tenure.snapshots.known_trees)
        self.known_trees = known_trees
        #: streaming (ADR 0031): each folder is encoded and its files' objects dropped as soon as their
        #: refs are known, so memory does not grow with the number of files; else every node is kept
        self.stream = stream
        self._fifo: deque[DirNode] = deque()  # folders listed, not yet encoded (pre-order)
        self._unresolved: deque[tuple[Slot, list[FileNode], list[tuple[int, int]]] | FileNode] = deque()
        self._links_done = False
        self._ticks = 0  # ticks of the listing seen (streaming)
        self._pack_from = 0  # where in the listing the current pack's first file's folder is (streaming)
        self.rows: list[FolderRow] = []  # streaming: each folder's row, its record only in ``tree``
        self.tree = bytearray()  # streaming: the tree stream, folder records appended as they are done
        self.starts: list[int] = []  # streaming: where each folder's record starts in ``tree``
        self.index_rows = Rows()
        self.files = 0
        self.skipped: list[tuple[str, str]] = []
        self.objects = objects
        self.index = index
        self.workers = workers
        self.progress = progress
        self.bytes_read = 0
        self.bytes_new = 0
        self.written: set[str] = set()
        #: stored objects found damaged and stored again (tenure.snapshots.pipeline)
        self.replaced = 0
        self.root_oid = ""
        self._chunker = new_chunker()
        self._racy_from = time.time_ns() - RACY_MARGIN_NS
        self._followers: list[tuple[FileNode, FileNode]] = []
        self._done = self._reported = 0
        self._feed: ReadAhead | None = None
        # File counts for a FileProgress: each counter has one writer (the listing or the reading thread).
        self._files_listed = self._files_reused = self._files_read = self._bytes_listed = 0
        self._listed = self._first_pass = False
        self._told = 0.0
        self._pack = bytearray()
        self._members: list[FileNode] = []
        self._slices: list[tuple[int, int]] = []
        self._packs: list[tuple[Slot, list[FileNode], list[tuple[int, int]]]] = []

    # ----------------------------------------------------------------- reading

    def run(self, scanner: Scanner | PartialScanner) -> Scan:
        """List the folder and give every file its refs: from the index, or by reading it.

        Streaming, every folder is encoded into :attr:`rows` (and its files
        into :attr:`index_rows`) along the way, and the scan returned holds
        no folders or files.
        """
        self._first_pass = True
        self._read_all(self._to_read(scanner), trust_index=True)
        self._first_pass = False
        if self.stream:
            self._advance_stream()  # every object is stored: every leader gets its refs
        _follow(self._followers)
        if not self.stream:
            return scanner.result()
        self._links_done = True
        self._advance_stream()
        if self._fifo or self._unresolved:
            raise AssertionError("a streaming build ended with folders not encoded")
        return Scan(DirNode(b"", b"", os.fstat(self.root_fd)), [], [], self.skipped)

    def _advance_stream(self) -> None:
        """Give files the refs now known, then encode every folder at the front whose files all have theirs."""
        pending = self._unresolved
        while pending:
            item = pending[0]
            if isinstance(item, FileNode):  # a large file: its chunks
                if any(isinstance(r, Slot) and not r.oid for r, _, _ in item.pending or ()):
                    break
                item.resolve()
                if item.folder is not None:
                    item.folder.waiting -= 1
            else:
                slot, members, slices = item
                oid = slot.oid
                if not oid:
                    break
                for f, (offset, size) in zip(members, slices):
                    f.refs = ((oid, offset, size),)
                    if f.folder is not None:
                        f.folder.waiting -= 1
            pending.popleft()
        fifo = self._fifo
        while fifo and fifo[0].waiting == 0 and (self._links_done or not fifo[0].linked):
            self._encode_folder(fifo.popleft())

    def _tick(self, uploader: Uploader) -> None:
        """The listing has gone ``TICK_FOLDERS`` folders further: encode what is ready.

        A pack whose first file lies ``PACK_SPAN_FOLDERS`` folders or more
        behind is stored now, although not full: its files' folders, and every
        folder listed after them, wait for its id (on an incremental build,
        where few files are read, it would otherwise fill only at the end).
        Ticks come at fixed places in the listing, so where packs end stays
        a function of the folder and the index, never of timing.
        """
        self._ticks += 1
        if self._pack and self._ticks * TICK_FOLDERS - self._pack_from >= PACK_SPAN_FOLDERS:
            self._flush_pack(uploader)
            uploader.collect()
        self._advance_stream()

    def _encode_folder(self, d: DirNode) -> None:
        """A streaming build's folder whose files all have their refs: its record and index rows; drop its nodes."""
        path, record_bytes, *rest = _row(d)
        self.starts.append(len(self.tree))
        self.tree += record_bytes
        self.rows.append((path, b"", *rest))  # type: ignore[arg-type]
        files = [f for f in d.children if type(f) is FileNode]
        kept = [f for f in files if f.indexed] if not all(f.indexed for f in files) else files
        self.index_rows.add_folder(
            [f.rel for f in kept], [f.key for f in kept], [f.digest for f in kept], [f.refs for f in kept]
        )
        self.files += len(files)
        self.skipped += d.skipped
        d.children = []

    def _to_read(self, scanner: Scanner | PartialScanner) -> Iterator[FileNode | None]:
        """The files to read, in scan order, as the folder is listed (runs on the listing thread).

        Hard-linked files wait for the end of the listing, when each group's
        first path (its leader) is known; only leaders are read.
        """
        linked: list[FileNode] = []
        stream = self.stream
        listed = 0
        for folder in scanner.walk():
            to_read: list[FileNode] = []
            linked_here = False
            for f in folder.children:
                if type(f) is FileNode:
                    self._files_listed += 1
                    if f.inode is not None:
                        linked.append(f)
                        linked_here = True
                    elif not self._reuse(f):
                        self._bytes_listed += f.size
                        to_read.append(f)
                    else:
                        self._files_reused += 1
            if stream:  # counted before any of them is handed out: the reading thread counts down
                for f in to_read:
                    f.folder = folder
                folder.waiting, folder.linked, folder.seq = len(to_read), linked_here, listed
                self._fifo.append(folder)
                listed += 1
                if listed % TICK_FOLDERS == 0:
                    yield None  # the reading thread encodes what is ready, also when little is read
            yield from to_read
            self._tell_files()
        leaders, self._followers = _link_groups(linked)
        for f in leaders:
            if not self._reuse(f):
                self._bytes_listed += f.size
                yield f
            else:
                self._files_reused += 1
        self._files_reused += len(self._followers)
        self._listed = True  # every file to read has been handed out: the byte total is final
        self._tell_files(force=True)

    def _reuse(self, f: FileNode) -> bool:
        content = self.index.content(f.rel, f.key)
        if content is None:
            return False
        f.digest, f.refs = content
        return True

    def _read_all(self, files: Iterator[FileNode | None], *, trust_index: bool) -> None:
        """Read ``files`` in order: small ones ahead on reader threads, packed here; large ones chunked here."""
        self._done = self._reported = 0
        uploader = Uploader(self.objects, self.workers, self.index.oids if trust_index else None, self.pin)
        feed = self._feed = ReadAhead(self.root_fd, files, self.workers)
        pending: list[FileNode] = []
        try:
            for group, contents in feed:
                if not group:  # a tick of the listing (streaming: folders may be ready)
                    if self.stream:
                        self._tick(uploader)
                    continue
                if contents is None:
                    self._read_large(group[0], uploader, trust_index)
                    if self.stream:
                        self._unresolved.append(group[0])
                    else:
                        pending.append(group[0])
                else:
                    self._take_batch(group, contents, uploader, trust_index)
                    self._advance(sum(f.size for f in group))
                if self._first_pass:
                    self._files_read += len(group)
                if self.stream:
                    self._advance_stream()
            self._flush_pack(uploader)
            uploader.finish()
        finally:
            feed.close()
            uploader.close()
        self.written |= uploader.written
        self.bytes_new += uploader.bytes_new
        self.replaced += uploader.replaced
        self._resolve_packs()
        for f in pending:
            f.resolve()
        self._report(force=True)

    def _take_batch(
        self, group: Sequence[FileNode], contents: Sequence[bytes], uploader: Uploader, trust_index: bool
    ) -> None:
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
                if f.folder is not None:
                    f.folder.waiting -= 1
                continue
            if previous is not None and self._same_as_before(f, data, previous(f.rel)):
                if f.folder is not None:
                    f.folder.waiting -= 1
                continue
            f.digest = blake3.blake3(data).digest() if f.mtime_ns >= self._racy_from else b""
            if not self._members:
                self._pack_from = f.folder.seq if f.folder is not None else self._ticks * TICK_FOLDERS
            self._members.append(f)
            self._slices.append((len(pack), size))
            pack += data
            if len(pack) >= PACK_TARGET or len(self._slices) >= PACK_FILES:
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
            if self.stream:
                self._unresolved.append((slot, self._members, self._slices))
            else:
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
        fd = open_file(self.root_fd, f.rel)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FolderChangedError(f"{os.fsdecode(f.rel)!r} is no longer a regular file", path=os.fsdecode(f.rel))
            pending: list[tuple[Slot | str, int, int]] = []
            for chunk in iter_chunks(fd, f.size, self._chunker):
                pending.append((uploader.add_chunk(chunk, probe=probe), 0, len(chunk)))
                self.bytes_read += len(chunk)
                self._advance(len(chunk))
        except OSError as exc:
            raise read_error(f.rel, exc) from None
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
        if self.progress is not None and self._feed is not None and (force or self._done != self._reported):
            self._reported = self._done
            self._tell_files(force=True)
            self.progress(self._done, max(self._done, self._feed.total))

    def _tell_files(self, force: bool = False) -> None:
        """File counts for a :class:`FileProgress` (first pass only; at most ten a second unless ``force``)."""
        if not self._first_pass or not isinstance(self.progress, FileProgress):
            return
        now = time.monotonic()
        if not force and now - self._told < 0.1:
            return
        self._told = now
        total = self._files_listed
        self.progress.files(min(total, self._files_reused + self._files_read), total, self._bytes_listed, self._listed)

    # ----------------------------------------------------------------- trees and closure

    def settle(
        self,
        layout: Callable[[], tuple[bytes | bytearray, list[int], frozenset[str]]],
        repair: Callable[[frozenset[str]], None],
    ) -> tuple[dict[str, bytes], frozenset[str]]:
        """Encode the tree, pin and check the closure, repair, store the tree; return its objects and data ids.

        ``layout()`` gives the tree stream (the folders' records in
        pre-order), where each record starts, and the data ids the files
        use (asked again after each repair); ``repair(lost)``
        reads again the files whose objects are gone.
        """
        confirmed: set[str] = set()
        for _ in range(_ROUNDS):
            stream, starts, data = layout()
            self.root_oid, trees = _encode_trees(stream, starts, data, self.workers, codec_of(self.objects))
            closure = frozenset(trees) | data
            self.pin(closure)
            ask = closure - self.written - confirmed
            present = self.objects.has_many(ask) if ask else set()
            confirmed |= present
            # S-12: a stored tree object this index has not vouched for is read back before it is trusted
            suspect = [oid for oid in trees if oid in present and oid not in self.known_trees]
            if suspect:
                moved = set_aside(self.objects, suspect)
                confirmed -= moved
                self.replaced += len(moved)
            lost = ask - present - trees.keys()
            if not lost:
                self._store_trees({oid: p for oid, p in trees.items() if oid not in confirmed})
                return trees, data
            repair(lost)
        raise UploadIncompleteError(
            f"objects kept vanishing from {self.objects.url} while the tree was stored", folder=os.fsdecode(self.root)
        )

    def repair(self, scan: Scan, lost: frozenset[str]) -> None:
        """Read again every file whose stored content is gone, trusting no index.

        The files are read one lost object at a time, in the order of their
        slices of it, each group into packs of its own: when every file of a
        lost pack is still there unchanged, the pack comes out byte for byte
        as before, under its old id, so the snapshots that use it are whole
        again (a verify makes a DEGRADED one READY).
        """
        leaders, followers = _link_groups(scan.files)
        groups: dict[str, list[tuple[int, FileNode]]] = {}
        for f in leaders:
            hit = next((ref for ref in f.refs if ref[0] in lost), None)
            if hit is not None:
                groups.setdefault(hit[0], []).append((hit[1], f))
        for oid in sorted(groups):
            members = sorted(groups[oid], key=lambda pair: pair[0])
            self._read_all(iter([f for _, f in members]), trust_index=False)
        _follow(followers)

    def _store_trees(self, trees: dict[str, bytes]) -> None:
        if trees:
            self.objects.put_many(trees.items())
            self.bytes_new += sum(len(p) for p in trees.values())


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


def _encode_trees(
    stream: bytes | bytearray, starts: Sequence[int], data_oids: frozenset[str], workers: int, codec: Codec
) -> tuple[str, dict[str, bytes]]:
    """Cut and encode the tree stream (folder records in pre-order, each starting at ``starts``) and the data
    ids, then the root.

    Returns the root id and ``id → payload`` of the root and every tree and id chunk.
    """
    inline = len(data_oids) <= INLINE_IDS
    ids = b"" if inline else id_stream(data_oids)
    tree_cuts, id_cuts = cut_stream(stream, starts), cut_stream(ids, [])
    views = [memoryview(stream)[o : o + n] for o, n, _ in tree_cuts] + [
        memoryview(ids)[o : o + n] for o, n, _ in id_cuts
    ]
    with ThreadPoolExecutor(workers, thread_name_prefix="tenure-trees") as pool:
        encoded = list(pool.map(codec.encode, views))
    refs = [ChunkRef(oid, n, first) for (oid, _), (_, n, first) in zip(encoded, tree_cuts + id_cuts)]
    root = Root(refs[: len(tree_cuts)], sorted(data_oids) if inline else [], refs[len(tree_cuts) :])
    oid, payload = codec.encode(encode_root(root))
    return oid, {oid: payload, **dict(encoded)}


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
