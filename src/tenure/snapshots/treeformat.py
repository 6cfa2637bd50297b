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
unclean paths.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import pyfastcdc

from tenure.snapshots.errors import TreeFormatError

MAGIC = b"TNTR"
VERSION = 1
KiB = 1 << 10
STREAM_MIN, STREAM_AVG, STREAM_MAX = 64 * KiB, 128 * KiB, 512 * KiB
NO_RECORD = 0xFFFFFFFF
INLINE_IDS = 2048

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
    first: int          # offset of the first record starting in this chunk, or NO_RECORD


class Root(NamedTuple):
    """What a root object holds."""

    chunks: list[ChunkRef]      # the tree stream
    ids: list[str]              # data ids, when there are at most INLINE_IDS
    id_chunks: list[ChunkRef]   # the id stream, when there are more


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


def cut_stream(stream: bytes, record_starts: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(offset, length, first)`` of each tree chunk of ``stream``."""
    chunker = pyfastcdc.FastCDC(avg_size=STREAM_AVG, min_size=STREAM_MIN, max_size=STREAM_MAX)
    cuts = [(c.offset, c.length) for c in chunker.cut_buf(stream)] if stream else []
    out: list[tuple[int, int, int]] = []
    i = 0
    for offset, length in cuts:
        while i < len(record_starts) and record_starts[i] < offset:
            i += 1
        first = record_starts[i] - offset if i < len(record_starts) and record_starts[i] < offset + length \
            else NO_RECORD
        out.append((offset, length, first))
    return out


def encode_root(root: Root) -> bytes:
    return b"".join((
        _ROOT.pack(MAGIC, VERSION, len(root.chunks)), _chunk_list(root.chunks),
        _COUNT.pack(len(root.ids)), b"".join(bytes.fromhex(oid) for oid in root.ids),
        _COUNT.pack(len(root.id_chunks)), _chunk_list(root.id_chunks),
    ))


def _chunk_list(chunks: Sequence[ChunkRef]) -> bytes:
    return b"".join(_CHUNK.pack(bytes.fromhex(c.oid), c.length, c.first) for c in chunks)


def id_stream(oids: Iterable[str]) -> bytes:
    """The sorted, distinct data ids as 32-byte raw values, concatenated."""
    return b"".join(sorted({bytes.fromhex(oid) for oid in oids}))


def decode_ids(data: bytes) -> list[str]:
    if len(data) % 32:
        raise ValueError("an id stream is a whole number of 32-byte ids")
    return [data[i:i + 32].hex() for i in range(0, len(data), 32)]


# --------------------------------------------------------------------------- decoding

def decode_root(oid: str, data: bytes) -> Root:
    """Parse a root object; :class:`TreeFormatError` if it is not one."""
    try:
        magic, version, count = _ROOT.unpack_from(data, 0)
        if magic != MAGIC:
            raise ValueError("not a tree root object")
        if version != VERSION:
            raise ValueError(f"tree format version {version} is not supported (this build reads {VERSION})")
        chunks, pos = _chunks_at(data, _ROOT.size, count)
        (inline,) = _COUNT.unpack_from(data, pos)
        pos += _COUNT.size
        ids = decode_ids(_take(data, pos, 32 * inline))
        (count,) = _COUNT.unpack_from(data, pos + 32 * inline)
        id_chunks, pos = _chunks_at(data, pos + 32 * inline + _COUNT.size, count)
        if pos != len(data):
            raise ValueError("trailing bytes")
        return Root(chunks, ids, id_chunks)
    except (struct.error, ValueError, _Truncated) as exc:
        raise TreeFormatError(f"object {oid} is not a valid tree root: {exc}", oid=oid) from None


def _chunks_at(data: bytes, pos: int, count: int) -> tuple[list[ChunkRef], int]:
    end = pos + count * _CHUNK.size
    raw_list = _take(data, pos, end - pos)
    return [ChunkRef(raw.hex(), length, first) for raw, length, first in _CHUNK.iter_unpack(raw_list)], end


def iter_records(segment: bytes, *, strict: bool, root: str = "") -> Iterator[tuple[bytes, Tree]]:
    """Parse consecutive records. ``strict``: a truncated last record is an error, else it is dropped."""
    pos = 0
    while pos < len(segment):
        try:
            path, tree, pos = _record(segment, pos)
        except (struct.error, _Truncated, IndexError) as exc:
            if strict:
                raise TreeFormatError(f"tree {root} is cut short: {exc}", oid=root) from None
            return
        except ValueError as exc:
            raise TreeFormatError(f"tree {root} has a malformed record: {exc}", oid=root) from None
        yield path, tree


class _Truncated(Exception):
    pass


def _take(data: bytes, pos: int, n: int) -> bytes:
    out = data[pos:pos + n]
    if len(out) != n:
        raise _Truncated("record cut short")
    return out


def _record(data: bytes, pos: int) -> tuple[bytes, Tree, int]:
    """One folder record (the hot path of every read: one call per folder, a loop per entry)."""
    kind, path_len = _RECORD.unpack_from(data, pos)
    if kind != _R:
        raise ValueError("expected a folder record")
    pos += _RECORD.size
    path = _take(data, pos, path_len)
    if path:
        check_relpath(path)
    pos += path_len
    mode, mtime_ns, count = _FOLDER.unpack_from(data, pos)
    pos += _FOLDER.size
    items: list[Item] = []
    previous = b""
    for _ in range(count):
        item, pos = _entry(data, pos)
        if item.name <= previous:
            raise ValueError(f"names out of order at {item.name!r}")
        previous = item.name
        items.append(item)
    return path, Tree(_mode(mode), mtime_ns, tuple(items)), pos


def _entry(data: bytes, pos: int) -> tuple[Item, int]:
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
            raise ValueError(f"file {name!r}: refs do not add up to its size")
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
            raise ValueError(f"symlink {name!r}: bad target")
        return SymlinkItem(name, _mode(mode), mtime_ns, target), pos + name_len + target_len
    raise ValueError(f"unknown entry kind {kind}")


def _name_at(data: bytes, pos: int, length: int) -> bytes:
    name = _take(data, pos, length)
    if b"/" in name or b"\0" in name or name in _DOTS:
        raise ValueError(f"illegal name {name!r}")
    return name


_DOTS = (b".", b"..")


def _refs(data: bytes, pos: int, count: int) -> tuple[tuple[Ref, ...], int]:
    if count == 1:
        raw, offset, length = _REF.unpack_from(data, pos)
        return ((_hex(raw), offset, length),), pos + _REF.size
    end = pos + count * _REF.size
    if end > len(data):
        raise _Truncated("record cut short")
    return tuple((_hex(raw), offset, length) for raw, offset, length in _REF.iter_unpack(data[pos:end])), end


@functools.lru_cache(maxsize=4096)
def _hex(raw: bytes) -> str:
    """One shared string per object id: thousands of packed files name the same pack."""
    return raw.hex()


def _check_name(name: bytes) -> None:
    if not name or name in (b".", b"..") or b"/" in name or b"\0" in name:
        raise ValueError(f"illegal name {name!r}")


def _mode(mode: int) -> int:
    if mode > 0o7777:
        raise ValueError(f"mode {mode:o} has bits beyond 0o7777")
    return mode


def check_relpath(path: bytes) -> None:
    """Raise ``ValueError`` unless ``path`` is a clean relative path (no ``..``, no empty parts)."""
    for part in path.split(b"/"):
        _check_name(part)
