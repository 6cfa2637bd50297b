"""Tree encoding: one record per folder, in one stream, cut into content-defined chunks.

The **stream** is every folder's record in pre-order (a folder, then each
sub-folder's records in name order, recursively); all integers little-endian::

    record  := "R" path_len:u32 path mode:u32 mtime_ns:i64 count:u32 entry{count}
    entry   := kind:u8 name_len:u16 name body            (entries sorted by name bytes)
    file    := "f" … mode:u32 mtime_ns:i64 size:u64 nrefs:u32 link_len:u32 link ref{nrefs}
    ref     := oid:32 raw bytes, offset:u64, length:u64
    symlink := "l" … mode:u32 mtime_ns:i64 target_len:u32 target
    folder  := "d" …                                      (its own record follows later)

``path`` is the folder's relative path (``/``-joined raw names; empty for
the root). A file's content is the concatenation of its refs, each a slice
``[offset, offset + length)`` of a data object. ``link`` is empty, or the
relative path of the hard-link group's first member (by byte order).

The stream is cut with FastCDC (``STREAM_*`` sizes) into **tree chunks**,
stored as objects. The **root object** lists them::

    root    := "TNTR" version:u8 count:u32 chunk{count}
    chunk   := oid:32 raw bytes, length:u32, first:u32     (first record start in the chunk, or 2³²-1)

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


_ROOT = struct.Struct("<4sBI")
_CHUNK = struct.Struct("<32sII")
_RECORD = struct.Struct("<BI")
_FOLDER = struct.Struct("<IqI")
_ENTRY = struct.Struct("<BH")
_FILE = struct.Struct("<IqQII")
_REF = struct.Struct("<32sQQ")
_SYMLINK = struct.Struct("<IqI")
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
    head = b"".join((_ENTRY.pack(_F, len(name)), name,
                     _FILE.pack(mode, mtime_ns, size, len(refs), len(link)), link))
    if len(refs) == 1:
        oid, offset, length = refs[0]
        return head + _REF.pack(bytes.fromhex(oid), offset, length)
    return head + b"".join(_REF.pack(bytes.fromhex(oid), offset, length) for oid, offset, length in refs)


def symlink_entry(name: bytes, mode: int, mtime_ns: int, target: bytes) -> bytes:
    return b"".join((_ENTRY.pack(_L, len(name)), name, _SYMLINK.pack(mode, mtime_ns, len(target)), target))


def folder_entry(name: bytes) -> bytes:
    return _ENTRY.pack(_D, len(name)) + name


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


def encode_root(chunks: Sequence[ChunkRef]) -> bytes:
    return _ROOT.pack(MAGIC, VERSION, len(chunks)) + b"".join(
        _CHUNK.pack(bytes.fromhex(c.oid), c.length, c.first) for c in chunks)


# --------------------------------------------------------------------------- decoding

def decode_root(oid: str, data: bytes) -> list[ChunkRef]:
    """The chunk list of a root object; :class:`TreeFormatError` if it is not one."""
    try:
        magic, version, count = _ROOT.unpack_from(data, 0)
        if magic != MAGIC:
            raise ValueError("not a tree root object")
        if version != VERSION:
            raise ValueError(f"tree format version {version} is not supported (this build reads {VERSION})")
        if len(data) != _ROOT.size + count * _CHUNK.size:
            raise ValueError("wrong length")
        return [ChunkRef(raw.hex(), length, first)
                for raw, length, first in _CHUNK.iter_unpack(data[_ROOT.size:])]
    except (struct.error, ValueError) as exc:
        raise TreeFormatError(f"object {oid} is not a valid tree root: {exc}", oid=oid) from None


def iter_records(segment: bytes, *, strict: bool, root: str = "") -> Iterator[tuple[bytes, Tree]]:
    """Parse consecutive records. ``strict``: a truncated last record is an error, else it is dropped."""
    pos = 0
    while pos < len(segment):
        try:
            path, tree, pos = _record(segment, pos)
        except (struct.error, _Truncated) as exc:
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
        kind, name_len = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        name = _take(data, pos, name_len)
        pos += name_len
        if name <= previous or b"/" in name or b"\0" in name or name in _DOTS:
            raise ValueError(f"illegal or out-of-order name {name!r}")
        previous = name
        item: Item
        if kind == _F:
            item, pos = _file(name, data, pos)
        elif kind == _D:
            item = DirItem(name)
        elif kind == _L:
            item, pos = _symlink(name, data, pos)
        else:
            raise ValueError(f"unknown entry kind {kind}")
        items.append(item)
    return path, Tree(_mode(mode), mtime_ns, tuple(items)), pos


_DOTS = (b".", b"..")


def _symlink(name: bytes, data: bytes, pos: int) -> tuple[SymlinkItem, int]:
    mode, mtime_ns, target_len = _SYMLINK.unpack_from(data, pos)
    pos += _SYMLINK.size
    target = _take(data, pos, target_len)
    if not target or b"\0" in target:
        raise ValueError(f"symlink {name!r}: bad target")
    return SymlinkItem(name, _mode(mode), mtime_ns, target), pos + target_len


def _file(name: bytes, data: bytes, pos: int) -> tuple[FileItem, int]:
    mode, mtime_ns, size, nrefs, link_len = _FILE.unpack_from(data, pos)
    pos += _FILE.size
    link = b""
    if link_len:
        link = _take(data, pos, link_len)
        check_relpath(link)
        pos += link_len
    if nrefs == 1:
        raw, offset, length = _REF.unpack_from(data, pos)
        refs: tuple[Ref, ...] = ((raw.hex(), offset, length),)
        end = pos + _REF.size
    else:
        end = pos + nrefs * _REF.size
        if end > len(data):
            raise _Truncated("record cut short")
        refs = tuple((raw.hex(), offset, length) for raw, offset, length in _REF.iter_unpack(data[pos:end]))
    if sum(r[2] for r in refs) != size:
        raise ValueError(f"file {name!r}: refs do not add up to its size")
    if mode > 0o7777:
        raise ValueError(f"mode {mode:o} has bits beyond 0o7777")
    return FileItem(name, mode, mtime_ns, size, refs, link), end


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
