"""Reading a stored tree: its root object and tree chunks, fetched in parallel.

Only tree objects are read here (each re-hashed by the codec); data objects
are listed, not fetched. A missing or corrupt tree chunk loses the folder
records that overlap it; reading resumes at the next intact chunk's first
record. A folder whose record is lost is reported with its whole subtree by
its path ending in ``/`` (the root is ``./``); the rest stays readable.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import NamedTuple, TypeVar

from tenure.errors import IntegrityError
from tenure.objects import ObjectMissingError, ObjectStore
from tenure.objects.codec import codec_of
from tenure.snapshots.errors import SnapshotDamagedError, TreeFormatError
from tenure.snapshots.treeformat import (
    NO_RECORD,
    BadTreeError,
    ChunkRef,
    FileItem,
    Root,
    SymlinkItem,
    Tree,
    check_name,
    decode_ids,
    decode_root,
    format_error,
    iter_records,
    read_record,
)

_R = TypeVar("_R")


class Listing(NamedTuple):
    root: str
    dirs: list[tuple[bytes, Tree]]  # breadth first: a folder before its sub-folders
    files: list[tuple[bytes, FileItem]]
    symlinks: list[tuple[bytes, SymlinkItem]]
    trees: dict[str, int]  # tree objects read (root, chunks) with their stored sizes
    lost_dirs: list[bytes]  # folders whose records are lost, with their subtrees
    tree_missing: set[str]
    tree_corrupt: set[str]
    ids: set[str]  # the data ids the root lists (when asked for)

    def data_oids(self) -> frozenset[str]:
        return frozenset(ref[0] for _, item in self.files for ref in item.refs)

    @property
    def damaged(self) -> bool:
        return bool(self.lost_dirs)

    def lost_folders(self) -> list[str]:
        return [folder_label(rel) for rel in self.lost_dirs]

    def tree_problems(self) -> tuple[set[str], set[str]]:
        """``(missing, corrupt)`` tree object ids."""
        return self.tree_missing, self.tree_corrupt


class TreeEntry(NamedTuple):
    """One path of a stored tree, as :func:`iter_tree` lists it."""

    path: str  # relative, "/"-separated ("" for the root folder)
    kind: str  # "file" | "dir" | "symlink"
    mode: int
    mtime_ns: int
    size: int  # files only (0 otherwise)
    target: str | None  # symlinks: the link target
    link: str | None  # hard-linked files: the group's first path


def folder_label(rel: bytes) -> str:
    return os.fsdecode(rel) + "/" if rel else "./"


def join(rel: bytes, name: bytes) -> bytes:
    return rel + b"/" + name if rel else name


def load_listing(root: str, objects: ObjectStore, workers: int | None = None, *, with_ids: bool = False) -> Listing:
    """Read the tree objects of ``root``; damage is recorded in the listing, not raised.

    ``with_ids`` also reads the id chunks (into ``Listing.ids``; an id chunk
    that is missing or corrupt leaves them incomplete, and is recorded).
    """
    listing = _empty(root)
    parsed = _root(objects, listing)
    if parsed is None:
        return listing
    chunks = parsed.chunks
    wanted = chunks + parsed.id_chunks if with_ids else chunks
    with ThreadPoolExecutor(workers or os.cpu_count() or 1, thread_name_prefix="tenure-trees") as pool:
        parts = list(pool.map(lambda c: _fetch(objects, c.oid, listing, c.length), wanted))
    if with_ids:
        id_parts = [p for p in parts[len(chunks) :] if p is not None]
        if len(id_parts) == len(parsed.id_chunks):
            listing.ids.update(_ids(root, parsed, id_parts))
        parts = parts[: len(chunks)]
    records: dict[bytes, Tree] = {}
    intact = all(p is not None for p in parts)
    for segment in _segments(chunks, parts):
        for path, tree in iter_records(segment, strict=intact, root=root):
            if path in records:
                raise TreeFormatError(f"tree {root} lists folder {path!r} twice", oid=root, problem="duplicate-folder")
            records[path] = tree
    _expand(listing, records)
    if intact and (listing.lost_dirs or len(listing.dirs) != len(records)):
        raise TreeFormatError(
            f"tree {root}: folder records do not match the folders listed", oid=root, problem="bad-structure"
        )
    return listing


def _empty(root: str) -> Listing:
    return Listing(root, [], [], [], {}, [], set(), set(), set())


def _root(objects: ObjectStore, listing: Listing) -> Root | None:
    """The parsed root object, or ``None`` (then the whole tree is lost)."""
    plain = _fetch(objects, listing.root, listing)
    if plain is None:
        listing.lost_dirs.append(b"")
        return None
    return decode_root(listing.root, plain)


def _ids(root: str, parsed: Root, parts: Sequence[bytes]) -> list[str]:
    """The data ids a root lists: inline, or in its (intact) id chunks."""
    if not parsed.id_chunks:
        return parsed.ids
    try:
        return decode_ids(b"".join(parts))
    except BadTreeError as exc:
        raise format_error(root, "has a malformed id list", exc) from None


def _fetch(objects: ObjectStore, oid: str, listing: Listing, length: int | None = None) -> bytes | None:
    """The plain content of a tree object, or ``None`` (recorded as missing or corrupt)."""
    try:
        payload = objects.get(oid)
    except ObjectMissingError:
        listing.tree_missing.add(oid)
        return None
    listing.trees[oid] = len(payload)
    try:
        plain = codec_of(objects).decode(oid, payload)
    except IntegrityError:
        plain = None
    if plain is None or (length is not None and len(plain) != length):
        listing.tree_corrupt.add(oid)
        return None
    return plain


def _segments(chunks: Sequence[ChunkRef], parts: Sequence[bytes | None]) -> Iterator[bytes]:
    """Runs of intact chunks, each starting at a record boundary."""
    run: list[bytes] = []
    resync = False
    for ref, part in zip(chunks, parts):
        if part is None:
            if run:
                yield b"".join(run)
            run, resync = [], True
        elif resync:
            if ref.first != NO_RECORD:
                run, resync = [part[ref.first :]], False
        else:
            run.append(part)
    if run:
        yield b"".join(run)


def _expand(listing: Listing, records: dict[bytes, Tree]) -> None:
    """Walk the records from the root, breadth first; note folders whose record is lost.

    Names were checked when the records were parsed, so every child path is
    longer than its parent's and the walk visits each record at most once;
    it still checks both, so a listing made any other way cannot loop.
    """
    if b"" not in records:
        listing.lost_dirs.append(b"")
        return
    queue = deque([b""])
    visited = 0
    while queue:
        rel = queue.popleft()
        visited += 1
        if visited > len(records):
            raise TreeFormatError(
                f"tree {listing.root} lists a folder more than once", oid=listing.root, problem="bad-structure"
            )
        tree = records[rel]
        listing.dirs.append((rel, tree))
        for item in tree.items:
            try:
                check_name(item.name)
            except BadTreeError as exc:
                raise format_error(listing.root, f"folder {rel!r}", exc) from None
            path = join(rel, item.name)
            if isinstance(item, FileItem):
                listing.files.append((path, item))
            elif isinstance(item, SymlinkItem):
                listing.symlinks.append((path, item))
            elif path in records:
                queue.append(path)
            else:
                listing.lost_dirs.append(path)


def damaged_error(
    listing: Listing,
    missing: set[str] | frozenset[str] = frozenset(),
    corrupt: set[str] | frozenset[str] = frozenset(),
    lost_files: list[str] | None = None,
) -> SnapshotDamagedError:
    lost = listing.lost_folders() + (lost_files or [])
    return SnapshotDamagedError.of(
        listing.root, lost, set(missing) | listing.tree_missing, set(corrupt) | listing.tree_corrupt
    )


def tree_closure(root: str, objects: ObjectStore) -> frozenset[str]:
    """Every object id reachable from ``root``, root included (reads tree objects only).

    Reads the root object and its id chunks, not the file records: the
    closure is the root, its tree and id chunks, and the data ids it lists.
    Tree chunks are named, not read, so a missing one shows up when the
    caller checks the closure against the store. If id chunks are damaged,
    the closure is taken from the file records instead. Raises
    :class:`SnapshotDamagedError` when neither way can tell the whole closure
    (the root, or a folder record, is lost).
    """
    listing = _empty(root)
    parsed = _root(objects, listing)
    if parsed is None:
        raise damaged_error(listing)
    named = {root} | {c.oid for c in parsed.chunks} | {c.oid for c in parsed.id_chunks}
    with ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="tenure-trees") as pool:
        parts = list(pool.map(lambda c: _fetch(objects, c.oid, listing, c.length), parsed.id_chunks))
    intact = [p for p in parts if p is not None]
    if len(intact) == len(parts):
        return frozenset(named.union(_ids(root, parsed, intact)))
    full = load_listing(root, objects)
    if full.damaged:
        raise damaged_error(full)
    return frozenset(named) | full.data_oids()


def iter_tree(root: str, objects: ObjectStore) -> Iterator[TreeEntry]:
    """List a stored tree (folders breadth first, then symlinks, then files)."""
    listing = load_listing(root, objects)
    if listing.damaged:
        raise damaged_error(listing)
    for rel, tree in listing.dirs:
        yield TreeEntry(os.fsdecode(rel), "dir", tree.mode, tree.mtime_ns, 0, None, None)
    for rel, link in listing.symlinks:
        yield TreeEntry(os.fsdecode(rel), "symlink", link.mode, link.mtime_ns, 0, os.fsdecode(link.target), None)
    for rel, f in listing.files:
        yield TreeEntry(
            os.fsdecode(rel), "file", f.mode, f.mtime_ns, f.size, None, os.fsdecode(f.link) if f.link else None
        )


# --------------------------------------------------------------------------- streaming (restore)


class TreeCheck(NamedTuple):
    """What :func:`check_tree` found: the parsed root, whether every tree object verified, data ids not stored."""

    parsed: Root | None
    intact: bool  # root, tree chunks and id chunks all present and verified
    missing: frozenset[str]  # data ids the root lists that the store lacks (when intact)


class TreeChanged(Exception):
    """A tree chunk that verified a moment ago could not be read again (restore falls back to a full listing)."""


_ID_BATCH = 4096


def check_tree(root: str, objects: ObjectStore, pool: Executor) -> TreeCheck:
    """Verify every tree object of ``root`` and ask which listed data ids are not stored, holding none of them.

    Tree chunks are fetched and hash-checked, then dropped; the id list is
    read chunk by chunk and checked against the store in batches. Nothing
    here grows with the number of files.
    """
    listing = _empty(root)
    parsed = _root(objects, listing)
    if parsed is None:
        return TreeCheck(None, False, frozenset())

    def intact(c: ChunkRef) -> bool:
        return _fetch(objects, c.oid, listing, c.length) is not None

    if not all(list(pool.map(intact, parsed.chunks))):
        return TreeCheck(parsed, False, frozenset())
    missing: set[str] = set()
    if not parsed.id_chunks:
        for start in range(0, len(parsed.ids), _ID_BATCH):
            batch = parsed.ids[start : start + _ID_BATCH]
            missing.update(set(batch) - objects.has_many(batch))
        return TreeCheck(parsed, True, frozenset(missing))
    carry = b""
    for part in _ahead(pool, lambda c: _fetch(objects, c.oid, listing, c.length), parsed.id_chunks, 2):
        if part is None:
            return TreeCheck(parsed, False, frozenset())
        carry += part
        whole = len(carry) - len(carry) % 32
        batch = decode_ids(carry[:whole])
        carry = carry[whole:]
        missing.update(set(batch) - objects.has_many(batch))
    if carry:
        raise format_error(
            root, "has a malformed id list", BadTreeError("bad-ids", "an id stream is whole 32-byte ids")
        )
    return TreeCheck(parsed, True, frozenset(missing))


def stream_records(
    root: str, objects: ObjectStore, chunks: Sequence[ChunkRef], pool: Executor
) -> Iterator[tuple[bytes, Tree]]:
    """The folder records of an intact tree, in stream order, holding a few chunks at a time.

    A record split across chunks is parsed again only once the buffered
    bytes have doubled, so a huge folder record costs linear time. A chunk
    that fails now raises :class:`TreeChanged`; a malformed record raises
    :class:`TreeFormatError` as :func:`iter_records` does in strict mode.
    """
    listing = _empty(root)
    buf = b""
    retry_at = 0
    parts = _ahead(pool, lambda c: _fetch(objects, c.oid, listing, c.length), chunks, 2)
    for i, part in enumerate(parts, 1):
        if part is None:
            raise TreeChanged(root)
        buf = buf + part if buf else part
        if len(buf) < retry_at and i < len(chunks):
            continue
        pos = 0
        while pos < len(buf):
            try:
                try:
                    path, tree, end = read_record(buf, pos)
                except struct.error:
                    break
            except BadTreeError as exc:
                if exc.problem == "truncated":
                    break
                raise format_error(root, "has a malformed record", exc) from None
            yield path, tree
            pos = end
        buf = buf[pos:]
        retry_at = 2 * len(buf)
    if buf:
        list(iter_records(buf, strict=True, root=root))  # raises "is cut short" (or the record's own problem)
        raise TreeFormatError(f"tree {root} is cut short", oid=root, problem="truncated")


def _ahead(pool: Executor, call: Callable[[ChunkRef], _R], items: Sequence[ChunkRef], depth: int) -> Iterator[_R]:
    """``call(item)`` for each item on ``pool``, in order, at most ``depth`` results waiting."""
    futures: deque[Future[_R]] = deque()
    rest = iter(items)
    for item in rest:
        futures.append(pool.submit(call, item))
        if len(futures) >= depth:
            break
    while futures:
        result = futures.popleft().result()
        item_next = next(rest, None)
        if item_next is not None:
            futures.append(pool.submit(call, item_next))
        yield result
