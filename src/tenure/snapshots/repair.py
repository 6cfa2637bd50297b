"""Rebuilding a stored tree's lost data objects from the files of a folder.

:func:`repair_tree` reads the tree's objects (:func:`~tenure.snapshots.walk.load_listing`),
asks the store once which data objects it lacks, and looks for their content
in a folder, at the paths the tree records. An object is put back only when
the bytes found hash to its id (the codec names objects by their plain
content), so nothing the folder holds can put wrong content under a stored
id; the tree itself, and so the root id, never changes.

* **Chunks** (a file with several refs, each ``(chunk id, 0, length)``): the
  file at the same path, of the recorded size, is cut again exactly as the
  build cuts it (:func:`~tenure.snapshots.chunking.iter_chunks`, same
  chunker); every chunk so produced that the store lacks and the file
  records is put back.
* **Packs and single-object files** (a file whose one ref is a slice
  ``(id, offset, length)``): the object is the concatenation of its slices
  in offset order. It is rebuilt only when the slices this tree records of
  it follow each other from offset 0 without a gap, every file holding a
  slice is in the folder with its recorded size, and the concatenation
  hashes to the id. A pack made by an earlier checkpoint together with files
  this tree no longer records (changed or removed since; unchanged files
  keep their refs into it through the local index) has a gap, or bytes past
  its last recorded slice, that no file of the folder can give back.
* **Tree objects** (the root, tree chunks) are never rebuilt: a folder whose
  record they held is reported lost. Id chunks are rebuilt from the data ids
  of the intact records (they are a pure function of them).

The folder is only read: it is opened once, and every file below it by name
relative to its parent's descriptor, never through a symlink
(:class:`~tenure.snapshots.fsutil.Beneath`); a symlink, a folder or a FIFO
where the tree records a file is reported, never followed or opened for
reading. Objects are stored through ``ObjectStore.put_many`` (durable when
it returns).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tenure.objects import ObjectStore
from tenure.objects.codec import codec_of
from tenure.snapshots.build import folder_bytes, open_folder
from tenure.snapshots.chunking import CHUNKED_FROM, iter_chunks, new_chunker
from tenure.snapshots.fsutil import Beneath
from tenure.snapshots.treeformat import FileItem, cut_stream, id_stream
from tenure.snapshots.walk import Listing, load_listing

Progress = Callable[[int, int], None]

#: Objects stored per ``put_many`` call (and at most about this many plain bytes held for it).
BATCH_OBJECTS = 256
BATCH_BYTES = 8 << 20

#: Why a path could not be repaired (``Unrepairable.reason``), a stable word each.
REASONS = {
    "missing": "the folder has no file at this path",
    "not-a-file": "the folder has a symlink, a folder or a special file at this path (never followed)",
    "unreadable": "the file at this path cannot be read",
    "changed": "the file's size or content differs from the snapshot's",
    "pack-incomplete": "its pack also holds files this snapshot does not record (packed by an earlier checkpoint)",
    "pack-member-unrepairable": "a file packed together with it is missing, changed or unreadable in the folder",
    "pack-mismatch": "the files packed together with it do not give back the pack: one changed at the same size,"
    " or the pack holds bytes of files this snapshot does not record",
    "tree-lost": "the folder's record is in a lost tree object; tree objects are not rebuilt from files",
}


@dataclass(frozen=True)
class Unrepairable:
    """A path whose lost content the folder cannot give back."""

    path: str  # relative, "/"-separated; a lost folder ends with "/" (the root is "./")
    reason: str  # a key of REASONS
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class RepairResult:
    """The outcome of :func:`repair_tree`."""

    root: str
    lost: frozenset[str]  # the objects the store lacked (data and id chunks; tree chunks when known)
    repaired: frozenset[str]  # objects put back
    unrepairable: tuple[Unrepairable, ...]  # sorted by path
    bytes_read: int  # bytes read from the folder
    bytes_new: int  # stored (compressed) bytes put back

    @property
    def still_missing(self) -> frozenset[str]:
        return self.lost - self.repaired


@dataclass
class _Slice:
    offset: int
    length: int
    paths: list[bytes] = field(default_factory=list)


class _Reader:
    """Reads files below the folder's descriptor; remembers why a path could not be read."""

    def __init__(self, root_fd: int, progress: Progress | None, total: int) -> None:
        self.opener = Beneath(root_fd)
        self.progress = progress
        self.total = total
        self.done = 0
        self.failed: dict[bytes, tuple[str, str]] = {}

    def open(self, rel: bytes, size: int) -> int | None:
        """A descriptor of the regular file ``rel`` of exactly ``size`` bytes, or None (the reason noted)."""
        try:
            fd = self.opener.open_file(rel)
        except OSError as exc:
            self.failed[rel] = _open_failure(exc)
            return None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            self.failed[rel] = ("unreadable", f"cannot read it: {exc.strerror}")
            return None
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self.failed[rel] = ("not-a-file", "the folder has a special file (FIFO, socket or device) here")
            return None
        if st.st_size != size:
            os.close(fd)
            self.failed[rel] = ("changed", f"its size is {st.st_size} bytes, the snapshot's {size}")
            return None
        return fd

    def read(self, rel: bytes, size: int) -> bytes | None:
        """The ``size`` bytes of file ``rel`` (one of the recorded size), or None (the reason noted)."""
        fd = self.open(rel, size)
        if fd is None:
            return None
        try:
            data = bytearray()
            while len(data) < size:
                part = os.read(fd, size - len(data))
                if not part:
                    break
                data += part
        except OSError as exc:
            self.failed[rel] = ("unreadable", f"cannot read it: {exc.strerror}")
            return None
        finally:
            os.close(fd)
        self.advance(len(data))
        if len(data) != size:
            self.failed[rel] = ("changed", f"it shrank to {len(data)} bytes while it was read")
            return None
        return bytes(data)

    def advance(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, max(self.done, self.total))

    def close(self) -> None:
        self.opener.close()


def _open_failure(exc: OSError) -> tuple[str, str]:
    if exc.errno == errno.ENOENT:
        return "missing", "the folder has no file at this path"
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO):
        return "not-a-file", f"the folder has a symlink or a folder on the way or at this path ({exc.strerror})"
    return "unreadable", f"cannot open it: {exc.strerror}"


class _Sink:
    """Batches rebuilt objects into ``put_many`` calls."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self.codec = codec_of(objects)
        self.batch: list[tuple[str, bytes]] = []
        self.plain = 0
        self.stored: set[str] = set()
        self.bytes_new = 0

    def put(self, oid: str, plain: bytes | memoryview) -> None:
        got, payload = self.codec.encode(plain)
        assert got == oid, "only content that hashes to the lost id is stored"
        self.stored.add(oid)
        self.batch.append((oid, payload))
        self.plain += len(plain)
        if len(self.batch) >= BATCH_OBJECTS or self.plain >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            self.objects.put_many(self.batch)
            self.bytes_new += sum(len(p) for _, p in self.batch)
            self.batch, self.plain = [], 0


def repair_tree(root: str, objects: ObjectStore, folder: str, *, progress: Progress | None = None) -> RepairResult:
    """Put back the lost objects of tree ``root`` whose content ``folder`` still holds (see the module docstring).

    Objects the store holds are never read or replaced (a corrupt one must
    be set aside first, ``verify.set_aside``, to count as lost).
    ``progress(bytes_done, bytes_total)`` counts the bytes read from the folder.
    """
    root_b = folder_bytes(folder)
    listing = load_listing(root, objects, with_ids=True)
    users: dict[str, list[tuple[bytes, FileItem]]] = {}
    for rel, item in listing.files:
        for oid, _, _ in item.refs:
            users.setdefault(oid, []).append((rel, item))
    lost_data = frozenset(users) - objects.has_many(users)
    tree_lost = frozenset(listing.tree_missing | listing.tree_corrupt)
    sink = _Sink(objects)
    _rebuild_id_chunks(root, listing, objects, tree_lost, sink)
    chunked = sorted(
        {rel: item for oid in lost_data for rel, item in users[oid] if len(item.refs) > 1}.items(),
        key=lambda pair: pair[0],
    )
    packs = {oid: _slices(users[oid]) for oid in sorted(lost_data)}
    total = sum(item.size for _, item in chunked) + sum(s.length for sl in packs.values() for s in sl)
    reasons: dict[bytes, tuple[str, str]] = {}
    root_fd = open_folder(root_b, folder)
    reader = _Reader(root_fd, progress, total)
    try:
        for rel, item in chunked:
            _rechunk(rel, item, lost_data, reader, sink, reasons)
        for oid, slices in packs.items():
            if oid not in sink.stored and slices:
                _rebuild_pack(oid, slices, reader, sink, reasons)
        sink.flush()
    finally:
        reader.close()
        os.close(root_fd)
    for rel, why in reader.failed.items():
        reasons.setdefault(rel, why)
    still = lost_data - sink.stored
    unknown = ("changed", "the folder's file does not give back its content")
    unrepairable = [
        Unrepairable(os.fsdecode(rel), *reasons.get(rel, unknown))
        for rel, item in listing.files
        if any(ref[0] in still for ref in item.refs)
    ]
    unrepairable += [Unrepairable(label, "tree-lost", REASONS["tree-lost"]) for label in listing.lost_folders()]
    return RepairResult(
        root=root,
        lost=lost_data | tree_lost,
        repaired=frozenset(sink.stored),
        unrepairable=tuple(sorted(unrepairable, key=lambda u: u.path)),
        bytes_read=reader.done,
        bytes_new=sink.bytes_new,
    )


def _rebuild_id_chunks(
    root: str, listing: Listing, objects: ObjectStore, tree_lost: frozenset[str], sink: _Sink
) -> None:
    """Id chunks are a pure function of the data ids: rebuilt from the records when those are all intact."""
    if not tree_lost or listing.damaged:
        return
    ids = id_stream(listing.data_oids())
    for offset, length, _ in cut_stream(ids, []):
        piece = memoryview(ids)[offset : offset + length]
        oid = sink.codec.object_id(piece)
        if oid in tree_lost:
            sink.put(oid, piece)


def _slices(users: Sequence[tuple[bytes, FileItem]]) -> list[_Slice]:
    """The distinct slices single-ref files record of one object, in offset order (hard links share one)."""
    found: dict[tuple[int, int], _Slice] = {}
    for rel, item in users:
        if len(item.refs) == 1:
            _, offset, length = item.refs[0]
            found.setdefault((offset, length), _Slice(offset, length)).paths.append(rel)
    for s in found.values():
        s.paths.sort()
    return sorted(found.values(), key=lambda s: (s.offset, s.length))


def _rechunk(
    rel: bytes,
    item: FileItem,
    lost: frozenset[str],
    reader: _Reader,
    sink: _Sink,
    reasons: dict[bytes, tuple[str, str]],
) -> None:
    """Cut the folder's file at ``rel`` as the build does; store every lost chunk of it that comes out."""
    wanted = {oid for oid, _, _ in item.refs if oid in lost and oid not in sink.stored}
    if not wanted:
        return
    fd = reader.open(rel, item.size)
    if fd is None:
        return
    produced: list[str] = []
    try:
        for chunk in iter_chunks(fd, item.size, new_chunker()):
            oid = sink.codec.object_id(chunk)
            produced.append(oid)
            if oid in wanted:
                sink.put(oid, chunk)
                wanted.discard(oid)
            reader.advance(len(chunk))
    except OSError as exc:
        reasons[rel] = ("unreadable", f"cannot read it: {exc.strerror}")
        return
    finally:
        os.close(fd)
    if wanted:
        same = sum(1 for a, b in zip(produced, item.refs) if a == b[0])
        reasons[rel] = (
            "changed",
            f"its content differs from the snapshot's: {same} of its {len(item.refs)} chunks are the same,"
            f" {len(wanted)} lost ones are not among them",
        )


def _rebuild_pack(
    oid: str, slices: list[_Slice], reader: _Reader, sink: _Sink, reasons: dict[bytes, tuple[str, str]]
) -> None:
    """Concatenate the slices of ``oid`` read from the folder; store it if that hashes to ``oid``."""
    every = [p for s in slices for p in s.paths]

    def blame(reason: str, detail: str) -> None:
        for p in every:
            reasons.setdefault(p, (reason, detail))

    position = 0
    for s in slices:
        if s.offset != position:
            first = os.fsdecode(s.paths[0])
            blame(
                "pack-incomplete",
                f"bytes {position}–{s.offset} of its pack {oid[:12]} (before {first!r}) belong to files this"
                " snapshot does not record",
            )
            return
        position = s.offset + s.length
    parts: list[bytes] = []
    for s in slices:
        data = _read_any(s, reader)
        if data is None:
            bad = os.fsdecode(s.paths[0])
            why = reader.failed.get(s.paths[0], ("changed", ""))
            for p in s.paths:
                reasons.setdefault(p, reader.failed.get(p, why))
            blame(
                "pack-member-unrepairable",
                f"{bad!r}, packed together with it in {oid[:12]}, cannot be read back ({why[0]})",
            )
            return
        parts.append(data)
    plain = b"".join(parts)
    if sink.codec.object_id(plain) == oid:
        sink.put(oid, plain)
        return
    if len(slices) == 1 and slices[0].length >= CHUNKED_FROM:
        blame("changed", "its content differs from the snapshot's (a chunk of it does not come out the same)")
    else:
        blame(
            "pack-mismatch",
            f"the {len(slices)} files recorded in pack {oid[:12]} have their sizes but together do not hash to"
            " it: one changed at the same size, or the pack holds more files than this snapshot records",
        )


def _read_any(s: _Slice, reader: _Reader) -> bytes | None:
    """The slice's bytes from the first of its paths (hard links share a slice) that reads back whole."""
    for p in s.paths:
        data = reader.read(p, s.length)
        if data is not None:
            return data
    return None
