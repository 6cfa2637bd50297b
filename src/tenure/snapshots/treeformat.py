"""Tree encoding: one record per folder, in one stream, cut into content-defined chunks.

The **stream** is every folder's record in pre-order (a folder, then each
sub-folder's records in name order, recursively); all integers little-endian::

    record  := "R" path_len:u32 path mode:u32 mtime_ns:i64 count:u32 entry{count}
    entry   := file | symlink | folder                    (sorted by name bytes)
    file    := "f" name_len:u16 mode:u32 mtime_ns:i64 size:u64 nrefs:u32 link_len:u32 name link ref{nrefs}
    ref     := oid:32 raw bytes, offset:u64, length:u64
    symlink := "l" name_len:u16 mode:u32 mtime_ns:i64 target_len:u32 name target
    folder  := "d" name_len:u16 name                      (its own record follows later)

``path`` is the folder's relative path (``/``-joined raw names; empty for
the root). A file's content is the concatenation of its refs, each a slice
``[offset, offset + length)`` of a data object. ``link`` is empty, or the
relative path of the hard-link group's first member (by byte order).

The stream is cut with FastCDC (``STREAM_*`` sizes) into **tree chunks**,
stored as objects. The **root object** lists them, and every data object
the files refer to (sorted, distinct), so that the closure of a tree is
known without parsing every file record::

    root    := "TNTR" version:u8 count:u32 chunk{count} inline:u32 oid{inline} idcount:u32 idchunk{idcount}
    chunk   := oid:32 raw bytes, length:u32, first:u32     (first record start in the chunk, or 2³²-1)
    idchunk := oid:32 raw bytes, length:u32, 0xFFFFFFFF

Up to ``INLINE_IDS`` data ids are stored in the root itself (``inline``);
more are concatenated (32 raw bytes each) into an **id stream**, cut like
the tree stream into **id chunks**.

The root's id names the tree. Everything is canonical (sorted names,
pre-order, deterministic cuts), so equal folders give equal ids, and a
changed entry changes only the chunk(s) around it. ``first`` lets a reader
resume after a damaged chunk: folders whose records are lost are reported,
the rest stays readable.

The decoder rejects anything that could escape the restore folder: empty
names, ``.``, ``..``, ``/`` or NUL in names, unsorted or duplicate names,
unclean paths. Stored objects are untrusted input: every count and length is
checked against the bytes left before it is used, and every refusal is a
:class:`TreeFormatError` (``tree-format``) whose ``context["problem"]`` says
which rule was broken (:data:`PROBLEMS`).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import pyfastcdc

from tenure.snapshots.errors import TreeFormatError

MAGIC = b"TNTR"
VERSION = 1
KiB = 1 << 10
STREAM_MIN, STREAM_AVG, STREAM_MAX = 64 * KiB, 128 * KiB, 512 * KiB
NO_RECORD = 0xFFFFFFFF
INLINE_IDS = 2048
NAME_MAX = 255  # bytes in one name: the limit of every Linux file system

Ref = tuple[str, int, int]
"""``(oid, offset, length)``: a slice of a data object."""


class FileItem(NamedTuple):
    name: bytes
    mode: int
    mtime_ns: int
    size: int
    refs: tuple[Ref, ...]
    link: bytes


class SymlinkItem(NamedTuple):
    name: bytes
    mode: int
    mtime_ns: int
    target: bytes


class DirItem(NamedTuple):
    name: bytes


Item = FileItem | SymlinkItem | DirItem


class Tree(NamedTuple):
    """One folder's record."""

    mode: int
    mtime_ns: int
    items: tuple[Item, ...]


class ChunkRef(NamedTuple):
    oid: str
    length: int
    first: int  # offset of the first record starting in this chunk, or NO_RECORD


class Root(NamedTuple):
    """What a root object holds."""

    chunks: list[ChunkRef]  # the tree stream
    ids: list[str]  # data ids, when there are at most INLINE_IDS
    id_chunks: list[ChunkRef]  # the id stream, when there are more


_ROOT = struct.Struct("<4sBI")
_COUNT = struct.Struct("<I")
_CHUNK = struct.Struct("<32sII")
_RECORD = struct.Struct("<BI")
_FOLDER = struct.Struct("<IqI")
_FOLDER_ENTRY = struct.Struct("<BH")
_FILE = struct.Struct("<BHIqQII")
_REF = struct.Struct("<32sQQ")
_SYMLINK = struct.Struct("<BHIqI")
_R, _F, _L, _D = ord("R"), ord("f"), ord("l"), ord("d")


# --------------------------------------------------------------------------- encoding


def encode_record(path: bytes, mode: int, mtime_ns: int, items: Iterable[Item]) -> bytes:
    """The canonical bytes of one folder's record (items are sorted here)."""
    entries = []
    for item in sorted(items, key=_name):
        if isinstance(item, FileItem):
            entries.append(file_entry(*item))
        elif isinstance(item, SymlinkItem):
            entries.append(symlink_entry(*item))
        else:
            entries.append(folder_entry(item.name))
    return record(path, mode, mtime_ns, entries)


def record(path: bytes, mode: int, mtime_ns: int, entries: Sequence[bytes]) -> bytes:
    """A folder record from encoded entries, which must already be in name order."""
    return b"".join((_RECORD.pack(_R, len(path)), path, _FOLDER.pack(mode, mtime_ns, len(entries)), *entries))


def file_entry(name: bytes, mode: int, mtime_ns: int, size: int, refs: Sequence[Ref], link: bytes) -> bytes:
    head = _FILE.pack(_F, len(name), mode, mtime_ns, size, len(refs), len(link))
    if len(refs) == 1:
        oid, offset, length = refs[0]
        return b"".join((head, name, link, _REF.pack(bytes.fromhex(oid), offset, length)))
    packed = [_REF.pack(bytes.fromhex(oid), offset, length) for oid, offset, length in refs]
    return b"".join((head, name, link, *packed))


def symlink_entry(name: bytes, mode: int, mtime_ns: int, target: bytes) -> bytes:
    return b"".join((_SYMLINK.pack(_L, len(name), mode, mtime_ns, len(target)), name, target))


def folder_entry(name: bytes) -> bytes:
    return _FOLDER_ENTRY.pack(_D, len(name)) + name


def _name(item: Item) -> bytes:
    return item.name


def cut_stream(stream: bytes | bytearray, record_starts: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(offset, length, first)`` of each tree chunk of ``stream``."""
    chunker = pyfastcdc.FastCDC(avg_size=STREAM_AVG, min_size=STREAM_MIN, max_size=STREAM_MAX)
    cuts = [(c.offset, c.length) for c in chunker.cut_buf(stream)] if stream else []
    out: list[tuple[int, int, int]] = []
    i = 0
    for offset, length in cuts:
        while i < len(record_starts) and record_starts[i] < offset:
            i += 1
        first = (
            record_starts[i] - offset if i < len(record_starts) and record_starts[i] < offset + length else NO_RECORD
        )
        out.append((offset, length, first))
    return out


def encode_root(root: Root) -> bytes:
    return b"".join(
        (
            _ROOT.pack(MAGIC, VERSION, len(root.chunks)),
            _chunk_list(root.chunks),
            _COUNT.pack(len(root.ids)),
            b"".join(bytes.fromhex(oid) for oid in root.ids),
            _COUNT.pack(len(root.id_chunks)),
            _chunk_list(root.id_chunks),
        )
    )


def _chunk_list(chunks: Sequence[ChunkRef]) -> bytes:
    return b"".join(_CHUNK.pack(bytes.fromhex(c.oid), c.length, c.first) for c in chunks)


def id_stream(oids: Iterable[str]) -> bytes:
    """The sorted, distinct data ids as 32-byte raw values, concatenated."""
    return b"".join(sorted({bytes.fromhex(oid) for oid in oids}))


# --------------------------------------------------------------------------- decoding
#
# Tree objects come from storage that may have been tampered with: every
# count and length read from the data is checked against the bytes left
# before anything is sliced or looped over, every name and path is checked
# explicitly, and every refusal is a TreeFormatError whose ``problem`` is
# one of PROBLEMS.

PROBLEMS = frozenset(
    {
        "truncated",  # a count or length runs past the end of the data
        "bad-root",  # not a root object (magic), or trailing bytes after it
        "bad-version",  # a format version this build does not read
        "bad-kind",  # an unknown record or entry tag
        "bad-name",  # an empty name, ".", "..", a name holding "/" or NUL, or longer than NAME_MAX
        "duplicate-name",  # two entries of one folder with the same name
        "unsorted-names",  # entries not in name-byte order
        "bad-path",  # a record path or hard-link path that is not clean and relative
        "bad-mode",  # mode bits beyond 0o7777
        "bad-size",  # a file's refs do not add up to its size
        "bad-target",  # an empty symlink target, or one holding NUL
        "bad-ids",  # an id list that is not whole 32-byte ids
        "duplicate-folder",  # two records for one folder
        "bad-structure",  # records no folder lists, folders without records, a folder listed twice
    }
)

_MIN_ENTRY = _FOLDER_ENTRY.size  # no entry is shorter than a folder entry's header


class BadTreeError(ValueError):
    """Raised by the parsing helpers; callers turn it into :class:`TreeFormatError` with its problem."""

    def __init__(self, problem: str, message: str) -> None:
        assert problem in PROBLEMS, problem
        super().__init__(message)
        self.problem = problem


def format_error(oid: str, what: str, exc: BadTreeError) -> TreeFormatError:
    return TreeFormatError(f"tree {oid} {what}: {exc}", oid=oid, problem=exc.problem)


def decode_root(oid: str, data: bytes) -> Root:
    """Parse a root object; :class:`TreeFormatError` if it is not one."""
    try:
        magic, version, count = _unpack(_ROOT, data, 0)
        if magic != MAGIC:
            raise BadTreeError("bad-root", "not a tree root object")
        if version != VERSION:
            raise BadTreeError(
                "bad-version", f"tree format version {version} is not supported (this build reads {VERSION})"
            )
        chunks, pos = _chunks_at(data, _ROOT.size, count)
        (inline,) = _unpack(_COUNT, data, pos)
        pos += _COUNT.size
        ids = decode_ids(_take(data, pos, 32 * inline))
        pos += 32 * inline
        (count,) = _unpack(_COUNT, data, pos)
        id_chunks, pos = _chunks_at(data, pos + _COUNT.size, count)
        if pos != len(data):
            raise BadTreeError("bad-root", "trailing bytes")
        return Root(chunks, ids, id_chunks)
    except BadTreeError as exc:
        raise TreeFormatError(f"object {oid} is not a valid tree root: {exc}", oid=oid, problem=exc.problem) from None


def decode_ids(data: bytes) -> list[str]:
    if len(data) % 32:
        raise BadTreeError("bad-ids", "an id stream is a whole number of 32-byte ids")
    return [data[i : i + 32].hex() for i in range(0, len(data), 32)]


def _chunks_at(data: bytes, pos: int, count: int) -> tuple[list[ChunkRef], int]:
    raw_list = _take(data, pos, count * _CHUNK.size)
    return (
        [ChunkRef(raw.hex(), length, first) for raw, length, first in _CHUNK.iter_unpack(raw_list)],
        pos + len(raw_list),
    )


def iter_records(segment: bytes, *, strict: bool, root: str = "") -> Iterator[tuple[bytes, Tree]]:
    """Parse consecutive records. ``strict``: a truncated last record is an error, else it is dropped.

    Every refusal is a :class:`TreeFormatError` with ``context["problem"]``
    (see :data:`PROBLEMS`); each record consumes at least its fixed header,
    so the loop ends within ``len(segment)`` steps.
    """
    pos = 0
    while pos < len(segment):
        try:
            try:
                path, tree, pos = _record(segment, pos)
            except struct.error:  # a fixed-size header past the end
                raise _truncated("a header") from None
        except BadTreeError as exc:
            if exc.problem == "truncated":
                if strict:
                    raise format_error(root, "is cut short", exc) from None
                return
            raise format_error(root, "has a malformed record", exc) from None
        yield path, tree


def _truncated(what: str) -> BadTreeError:
    return BadTreeError("truncated", f"{what} runs past the end of the data")


def _take(data: bytes, pos: int, n: int) -> bytes:
    if n > len(data) - pos:
        raise _truncated("a length")
    return data[pos : pos + n]


def _unpack(layout: struct.Struct, data: bytes, pos: int) -> tuple[Any, ...]:
    if layout.size > len(data) - pos:
        raise _truncated("a header")
    return layout.unpack_from(data, pos)


def read_record(data: bytes, pos: int) -> tuple[bytes, Tree, int]:
    """One folder record at ``pos`` and the offset after it (for readers that stream).

    Raises :class:`BadTreeError` (``truncated`` when the record runs past the end
    of ``data``) or ``struct.error`` (a fixed-size header past the end).
    """
    return _record(data, pos)


def _record(data: bytes, pos: int) -> tuple[bytes, Tree, int]:
    """One folder record (the hot path of every read: one call per folder, a loop per entry).

    A fixed-size header past the end raises ``struct.error``, which
    :func:`iter_records` reports as ``truncated``; every variable length is
    checked before it is sliced, and the entry count before the loop.
    """
    kind, path_len = _RECORD.unpack_from(data, pos)
    if kind != _R:
        raise BadTreeError("bad-kind", f"expected a folder record, found tag {kind}")
    pos += _RECORD.size
    path = _take(data, pos, path_len)
    if path:
        check_relpath(path)
    pos += path_len
    mode, mtime_ns, count = _FOLDER.unpack_from(data, pos)
    pos += _FOLDER.size
    if count > (len(data) - pos) // _MIN_ENTRY:
        raise _truncated(f"folder {path!r}: {count} entries")
    items: list[Item] = []
    previous = b""
    for _ in range(count):
        item, pos = _entry(data, pos)
        name = item.name
        if name <= previous and items:
            raise BadTreeError(
                "duplicate-name" if name == previous else "unsorted-names",
                f"folder {path!r}: {name!r} {'twice' if name == previous else 'out of order'}",
            )
        previous = name
        items.append(item)
    return path, Tree(_mode(mode), mtime_ns, tuple(items)), pos


def _entry(data: bytes, pos: int) -> tuple[Item, int]:
    if pos >= len(data):
        raise _truncated("an entry")
    kind = data[pos]
    if kind == _F:
        _, name_len, mode, mtime_ns, size, nrefs, link_len = _FILE.unpack_from(data, pos)
        pos += _FILE.size
        name = _name_at(data, pos, name_len)
        pos += name_len
        link = b""
        if link_len:
            link = _take(data, pos, link_len)
            check_relpath(link)
            pos += link_len
        refs, pos = _refs(data, pos, nrefs)
        if sum(r[2] for r in refs) != size:
            raise BadTreeError("bad-size", f"file {name!r}: refs do not add up to its size")
        return FileItem(name, _mode(mode), mtime_ns, size, refs, link), pos
    if kind == _D:
        _, name_len = _FOLDER_ENTRY.unpack_from(data, pos)
        pos += _FOLDER_ENTRY.size
        return DirItem(_name_at(data, pos, name_len)), pos + name_len
    if kind == _L:
        _, name_len, mode, mtime_ns, target_len = _SYMLINK.unpack_from(data, pos)
        pos += _SYMLINK.size
        name = _name_at(data, pos, name_len)
        target = _take(data, pos + name_len, target_len)
        if not target or b"\0" in target:
            raise BadTreeError("bad-target", f"symlink {name!r}: empty target or NUL in it")
        return SymlinkItem(name, _mode(mode), mtime_ns, target), pos + name_len + target_len
    raise BadTreeError("bad-kind", f"unknown entry kind {kind}")


def _name_at(data: bytes, pos: int, length: int) -> bytes:
    if length > len(data) - pos:
        raise _truncated("a name")
    name = data[pos : pos + length]
    if not name or name == b"." or name == b".." or b"/" in name or b"\0" in name or length > NAME_MAX:
        raise BadTreeError("bad-name", f"illegal name {name!r}")
    return name


def _refs(data: bytes, pos: int, count: int) -> tuple[tuple[Ref, ...], int]:
    if count == 1:
        raw, offset, length = _REF.unpack_from(data, pos)
        return ((_hex(raw), offset, length),), pos + _REF.size
    block = _take(data, pos, count * _REF.size)
    return tuple((_hex(raw), offset, length) for raw, offset, length in _REF.iter_unpack(block)), pos + len(block)


@functools.lru_cache(maxsize=4096)
def _hex(raw: bytes) -> str:
    """One shared string per object id: thousands of packed files name the same pack."""
    return raw.hex()


def check_name(name: bytes) -> None:
    """Raise :class:`BadTreeError` (``bad-name``) unless ``name`` is one legal file name."""
    if not name or name == b"." or name == b".." or b"/" in name or b"\0" in name or len(name) > NAME_MAX:
        raise BadTreeError("bad-name", f"illegal name {name!r}")


def _mode(mode: int) -> int:
    if mode > 0o7777:
        raise BadTreeError("bad-mode", f"mode {mode:o} has bits beyond 0o7777")
    return mode


def check_relpath(path: bytes) -> None:
    """Raise :class:`BadTreeError` (``bad-path``) unless ``path`` is a clean relative path (no ``..``, no empty
    parts)."""
    for part in path.split(b"/"):
        try:
            check_name(part)
        except BadTreeError:
            raise BadTreeError("bad-path", f"path {path!r} is not a clean relative path") from None
