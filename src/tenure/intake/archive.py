"""Opening an untrusted zip archive safely, under the hard limits.

:func:`open_archive` judges an archive from its own bytes, with its own
parser, before a single entry is decompressed; nothing here trusts
:mod:`zipfile`'s reading of hostile input. The rule is that **a package is
canonical** (ADR 0108):

* the file is ``[entry]* [central directory] [zip64 end + locator]? [end record] [comment]``:
  every byte from offset 0 to the end of the central directory belongs to
  exactly one listed entry — local header, data, optional data descriptor —
  in central-directory order, with no prefix, no gap, no overlap and no
  record the directory does not list; the comment runs exactly to the end of
  the file and holds no second end record;
* each entry's local header agrees with its central header (name bytes,
  flags, method, time, CRC and sizes — or its data descriptor does); the
  version needed to extract may differ, as long as tenure reads both;
* the entry count is read from the end record and checked against the
  limits *before* the directory is read (``max_entries`` counts the
  producer's files and folder entries, not ``manifest.json``, the
  checkpoints nor the generation record), and the directory is read one
  record at a time, each judged and counted as it comes, so any archive
  under the size limit is judged in bounded time and memory.

On top of the layout: entry names (no traversal, absolute paths, drive
letters, backslashes, control characters, depth and length limits),
duplicates and file/folder conflicts, symlink and special entries judged by
their mode bits whatever host the archive claims to come from, encryption,
the zip version and feature flags, the compression method (stored or deflate
only), the declared sizes and per-entry ratio. Each refusal is a
:class:`~tenure.intake.errors.PackageRejectedError` with its own code.

What the scan keeps of an entry is an :class:`Entry`: its name, the fields
the reader and the writer need, and where its local record and its central
header are — not its extra field nor its comment, which stay in the file
(the writer copies central headers from there), so memory grows by a few
hundred bytes an entry whatever the headers carry. The file is read through
a window of :data:`WINDOW` bytes, not one read per record.

Entries are then read with :class:`SafeArchive` (or :func:`entry_chunks`),
which inflates each one itself, stops at the declared size and checks the
CRC.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .canonical import GENERATION_RECORD, MANIFEST
from .config import Limits
from .errors import PackageRejectedError

__all__ = ["SafeArchive", "Entry", "open_archive", "check_entry_name", "entry_chunks", "CHECKPOINT_PREFIX"]

#: where checkpoint artifacts live in a package (they have limits of their own)
CHECKPOINT_PREFIX = "history/checkpoints/"

_LOCAL = b"PK\x03\x04"
_CENTRAL = b"PK\x01\x02"
_END = b"PK\x05\x06"
_END64 = b"PK\x06\x06"
_LOCATOR64 = b"PK\x06\x07"
_DESCRIPTOR = b"PK\x07\x08"
_LOCAL_FMT = struct.Struct("<4s5H3L2H")  # 30 bytes
_CENTRAL_FMT = struct.Struct("<4s6H3L5H2L")  # 46 bytes
_END_FMT = struct.Struct("<4s4H2LH")  # 22 bytes
_END64_FMT = struct.Struct("<4sQ2H2L4Q")  # 56 bytes
_LOCATOR64_FMT = struct.Struct("<4sLQL")  # 20 bytes
_MAX_COMMENT = 0xFFFF
_U16, _U32 = 0xFFFF, 0xFFFFFFFF
_STORED, _DEFLATED = 0, 8

#: the highest "version needed to extract" understood (6.3, as zipfile)
MAX_VERSION = 63
_ENCRYPTED_FLAGS = 0x0001 | 0x0040 | 0x2000  # traditional, strong, masked directory
_KNOWN_FLAGS = 0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0040 | 0x0800 | 0x2000
#: a central header's extra field and comment are read while it is judged; bound them
MAX_ENTRY_EXTRA = 1024
MAX_ENTRY_COMMENT = 1024
#: the file is read in windows of this many bytes (more when one record is larger)
WINDOW = 256 * 1024

_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ASCII_CONTROL = bytes(range(0x20)) + b"\x7f"
#: the path parts no entry name may have (each shorter than three characters)
_BAD_PARTS = frozenset(("", ".", ".."))
#: flag bits that need a closer look (encryption, unknown features); 0x2, 0x4 (deflate options), 0x8
#: (data descriptor) and 0x800 (UTF-8 name) are ordinary
_UNUSUAL_FLAGS = 0xFFFF & ~(0x0002 | 0x0004 | 0x0008 | 0x0800)
_IS_REGULAR = stat.S_IFREG
_ALLOWED_METHODS = (_STORED, _DEFLATED)
_CHUNK = 1024 * 1024


def _reject(message: str, code: str, **context: Any) -> PackageRejectedError:
    return PackageRejectedError(message, code=code, **context)


def check_entry_name(name: str, limits: Limits) -> None:
    """Raise unless ``name`` is a safe relative forward-slash path within limits."""
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) > limits.max_path_bytes:
        raise _reject(f"entry name longer than {limits.max_path_bytes} bytes", "path-too-long", entry=name[:200])
    bad = not name or "\\" in name or name.startswith("/") or _DRIVE.match(name) is not None
    if encoded.isascii():  # the common case, at C speed: no byte below 0x20 nor 0x7f
        control = len(encoded.translate(None, _ASCII_CONTROL)) != len(encoded)
    else:
        control = _CONTROL.search(name) is not None
    parts = name.rstrip("/").split("/")
    if bad or control or min(map(len, parts)) < 3 and not _BAD_PARTS.isdisjoint(parts):
        raise _reject(f"unsafe entry name {name!r}", "unsafe-path", entry=name[:200])
    if len(parts) > limits.max_path_depth:
        raise _reject(
            f"entry {name!r} is {len(parts)} levels deep (limit {limits.max_path_depth})",
            "path-too-deep",
            entry=name[:200],
        )


@dataclass(slots=True, eq=False, repr=False)
class Entry:
    """One listed entry of a scanned archive: what its central header says, and where its bytes are.

    ``header_offset`` to ``record_end`` is its local record (header, data and
    data descriptor, in whichever form the scan found); ``data_offset`` is
    where its data starts; its central header is the ``central_size`` bytes
    at ``central_offset``. ``dos_time`` is the header's date and time
    (``date << 16 | time``).
    """

    filename: str
    flag_bits: int
    compress_type: int
    CRC: int
    compress_size: int
    file_size: int
    extract_version: int
    dos_time: int
    header_offset: int
    central_offset: int
    central_size: int
    #: found by the scan of its local record (-1 until then)
    data_offset: int = -1
    record_end: int = -1

    def is_dir(self) -> bool:
        return self.filename.endswith("/")

    def __repr__(self) -> str:
        return f"Entry({self.filename!r}, size={self.file_size}, at={self.header_offset})"


def entry_chunks(fh: BinaryIO, entry: Entry) -> Iterator[bytes]:
    """The content of a scanned ``entry`` of the open file ``fh``, in pieces.

    Raises ``corrupt-entry`` unless it inflates to exactly its declared size
    and CRC, using exactly its declared compressed bytes.
    """
    produced = 0
    crc = 0
    for piece in _inflate(fh, entry):
        produced += len(piece)
        if produced > entry.file_size:
            raise _corrupt(entry, "it inflates past its declared size")
        crc = zlib.crc32(piece, crc)
        yield piece
    if produced != entry.file_size or crc != entry.CRC:
        raise _corrupt(entry, "its size or CRC-32 does not match the directory")


def _stored(fh: BinaryIO, entry: Entry) -> Iterator[bytes]:
    """The ``compress_size`` bytes of ``entry`` as stored, in pieces read at their offset."""
    left = entry.compress_size
    position = entry.data_offset
    while left:
        fh.seek(position)
        piece = fh.read(min(left, _CHUNK))
        if not piece:
            raise _corrupt(entry, "its data ends early")
        position += len(piece)
        left -= len(piece)
        yield piece


def _inflate(fh: BinaryIO, entry: Entry) -> Iterator[bytes]:
    if entry.compress_type == _STORED:
        yield from _stored(fh, entry)
        return
    stored = _stored(fh, entry)
    left = entry.compress_size
    inflater = zlib.decompressobj(-15)
    pending = b""
    try:
        while not inflater.eof:
            if not pending and left:
                pending = next(stored)
                left -= len(pending)
            piece = inflater.decompress(pending, _CHUNK)
            pending = inflater.unconsumed_tail
            if piece:
                yield piece
            elif not pending and not left and not inflater.eof:
                raise _corrupt(entry, "its deflate stream is incomplete")
    except zlib.error as error:
        raise _corrupt(entry, f"its deflate stream is damaged ({error})") from None
    if left or pending or inflater.unused_data:
        raise _corrupt(entry, "its deflate stream ends before its declared compressed size")


def _corrupt(entry: Entry, why: str) -> PackageRejectedError:
    return _reject(f"entry {entry.filename!r} is corrupt: {why}", "corrupt-entry", entry=entry.filename)


class SafeArchive:
    """A canonical, checked zip; entries are inflated with bounded sizes and checked CRCs."""

    def __init__(self, path: Path, fh: BinaryIO, entries: list[Entry], limits: Limits, end_of_entries: int) -> None:
        self.path = path
        self.limits = limits
        self._fh = fh
        self._end = end_of_entries
        #: the file entries (not folders), in directory order, which is the order of their records
        self.infos: dict[str, Entry] = {e.filename: e for e in entries if not e.is_dir()}

    @property
    def names(self) -> list[str]:
        return sorted(self.infos)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> SafeArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def size(self, name: str) -> int:
        return self.infos[name].file_size

    def read(self, name: str) -> bytes:
        """The whole entry; its size is bounded by the declared size."""
        return b"".join(self.chunks(name))

    def chunks(self, name: str) -> Iterator[bytes]:
        """The entry's content in pieces (see :func:`entry_chunks`)."""
        return entry_chunks(self._fh, self.infos[name])

    def sha256(self, name: str) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks(name):
            digest.update(chunk)
        return digest.hexdigest()

    def entries(self) -> list[Entry]:
        """The file entries in the order their records appear in the archive."""
        return list(self.infos.values())

    def end_of_entries(self) -> int:
        """Offset where the central directory begins."""
        return self._end


def open_archive(path: Path, limits: Limits) -> SafeArchive:
    """Open ``path`` as an untrusted archive, or raise PackageRejectedError."""
    fh = open(path, "rb")
    try:
        size = os.fstat(fh.fileno()).st_size
        if size > limits.archive_bytes:
            raise _reject(f"archive is {size} bytes (limit {limits.archive_bytes})", "archive-too-large", size=size)
        magic = fh.read(4)
        if magic not in (_LOCAL, _END):
            raise _reject("input is not a zip archive", "not-a-zip")
        entries, cd_offset = _Scanner(fh, size, limits).scan()
        return SafeArchive(path, fh, entries, limits, cd_offset)
    except BaseException:
        fh.close()
        raise


# ------------------------------------------------------------------------------------------ the scanner


def _layout(message: str) -> PackageRejectedError:
    return _reject(message, "non-canonical-zip")


def _truncated(message: str) -> PackageRejectedError:
    return _reject(f"archive is truncated or damaged: {message}", "truncated-zip")


class _Window:
    """Reads a file through one buffer: a record inside the buffered span is a slice of it; otherwise the
    buffer moves there (:data:`WINDOW` bytes, or the record if it is larger)."""

    __slots__ = ("fh", "size", "start", "data")

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh = fh
        self.size = size
        self.start = 0
        self.data = b""

    def get(self, offset: int, length: int) -> tuple[bytes, int]:
        """The buffer and where ``offset`` is in it; at least ``length`` bytes follow."""
        at = offset - self.start
        if 0 <= at and at + length <= len(self.data):
            return self.data, at
        if offset < 0 or offset + length > self.size:
            raise _truncated(f"a record at offset {offset} runs past the end of the file")
        self.fh.seek(offset)
        self.data = self.fh.read(min(max(length, WINDOW), self.size - offset))
        self.start = offset
        if len(self.data) < length:
            raise _truncated(f"a record at offset {offset} runs past the end of the file")
        return self.data, 0

    def bytes_at(self, offset: int, length: int) -> bytes:
        data, at = self.get(offset, length)
        return data[at : at + length]


class _Scanner:
    """One pass over the end records and the central directory, then one over every local record."""

    def __init__(self, fh: BinaryIO, size: int, limits: Limits) -> None:
        self.fh = fh
        self.size = size
        self.limits = limits

    def _read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or offset + length > self.size:
            raise _truncated(f"a record at offset {offset} runs past the end of the file")
        self.fh.seek(offset)
        data = self.fh.read(length)
        if len(data) != length:
            raise _truncated(f"a record at offset {offset} runs past the end of the file")
        return data

    # -------------------------------------------------------------- end records

    def scan(self) -> tuple[list[Entry], int]:
        count, cd_offset, cd_size, cd_end = self._end_records()
        # the producer's entries, the checkpoints, and manifest.json and the generation record, which count for none
        cap = self.limits.max_entries + self.limits.max_checkpoints + 2
        if count > cap:
            raise _reject(f"archive has {count} entries (limit {cap})", "too-many-entries", entries=count)
        if cd_offset + cd_size != cd_end:
            raise _layout("the central directory does not end where the end record begins")
        entries = self._directory(count, cd_offset, cd_size)
        self._locals(entries, cd_offset)
        return entries, cd_offset

    def _end_records(self) -> tuple[int, int, int, int]:
        """(entry count, directory offset, directory size, where the directory must end)."""
        if self.size < _END_FMT.size:
            raise _truncated("no end of central directory record")
        tail_start = max(0, self.size - _END_FMT.size - _MAX_COMMENT)
        tail = self._read_at(tail_start, self.size - tail_start)
        at = len(tail) - _END_FMT.size
        while at >= 0:
            at = tail.rfind(_END, 0, at + 4)
            if at < 0:
                break
            (_, disk, cd_disk, on_disk, total, cd_size, cd_offset, comment_len) = _END_FMT.unpack_from(tail, at)
            if at + _END_FMT.size + comment_len == len(tail):
                break
            at -= 1
        if at < 0:
            raise _truncated("no end of central directory record")
        comment = tail[at + _END_FMT.size :]
        if _END in comment:
            raise _layout("the archive comment holds a second end record")
        end = tail_start + at
        zip64 = end >= _LOCATOR64_FMT.size and self._read_at(end - _LOCATOR64_FMT.size, 4) == _LOCATOR64
        if not zip64:
            if _U16 in (disk, cd_disk) or _U32 in (cd_size, cd_offset):
                raise _layout("the end record asks for zip64 records that are not there")
            if disk or cd_disk or on_disk != total:
                raise _layout("multi-disk archives are not packages")
            return total, cd_offset, cd_size, end
        return self._zip64(end, (disk, cd_disk, on_disk, total, cd_size, cd_offset))

    def _zip64(self, end: int, plain: tuple[int, int, int, int, int, int]) -> tuple[int, int, int, int]:
        locator = end - _LOCATOR64_FMT.size
        _, disk_of_end64, end64, disks = _LOCATOR64_FMT.unpack(self._read_at(locator, _LOCATOR64_FMT.size))
        if disk_of_end64 != 0 or disks != 1:
            raise _layout("multi-disk archives are not packages")
        if end64 + _END64_FMT.size != locator:
            raise _layout("the zip64 end record is not right before its locator")
        record = self._read_at(end64, _END64_FMT.size)
        sig, record_size, _, _, disk, cd_disk, on_disk, total, cd_size, cd_offset = _END64_FMT.unpack(record)
        if sig != _END64 or record_size != _END64_FMT.size - 12:
            raise _layout("the zip64 end record is damaged or carries extensible data")
        if disk or cd_disk or on_disk != total:
            raise _layout("multi-disk archives are not packages")
        for value, wide, marker in zip(
            plain, (disk, cd_disk, on_disk, total, cd_size, cd_offset), (_U16, _U16, _U16, _U16, _U32, _U32)
        ):
            if value != marker and value != wide:
                raise _layout("the end record and the zip64 end record disagree")
        return total, cd_offset, cd_size, end64

    # -------------------------------------------------------------- central directory

    def _directory(self, count: int, cd_offset: int, cd_size: int) -> list[Entry]:
        """Read and judge the central headers one at a time: each entry's rules, and the counts as they grow."""
        if cd_offset > self.size or cd_size > self.size - cd_offset:
            raise _truncated("the central directory lies outside the file")
        limits = self.limits
        window = _Window(self.fh, self.size)
        unpack = _CENTRAL_FMT.unpack_from
        entries: list[Entry] = []
        files: set[str] = set()
        seen: set[str] = set()
        plain = checkpoints = total = 0
        position = cd_offset
        stop = cd_offset + cd_size
        for _ in range(count):
            if position + 46 > stop:
                raise _layout("the central directory is shorter than its entry count")
            data, at = window.get(position, 46)
            (
                sig,
                _made_by,
                needed,
                flags,
                method,
                mtime,
                mdate,
                crc,
                csize,
                usize,
                name_len,
                extra_len,
                comment_len,
                disk,
                _internal,
                external,
                offset,
            ) = unpack(data, at)
            if sig != _CENTRAL:
                raise _layout(f"no central header at offset {position}")
            size = 46 + name_len + extra_len + comment_len
            if position + size > stop:
                raise _layout("a central header runs past the central directory")
            if extra_len > MAX_ENTRY_EXTRA or comment_len > MAX_ENTRY_COMMENT:
                raise _reject(
                    f"a central header carries {extra_len} bytes of extra fields and a {comment_len}-byte comment "
                    f"(limit {MAX_ENTRY_EXTRA} each)",
                    "unsupported-zip-feature",
                )
            data, at = window.get(position + 46, name_len + extra_len)
            name = _decode_name(data[at : at + name_len], flags)
            if extra_len or usize == _U32 or csize == _U32 or offset == _U32 or disk == _U16:
                extra = data[at + name_len : at + name_len + extra_len]
                usize, csize, offset, disk = _apply_zip64(extra, usize, csize, offset, disk, name)
            if disk != 0:
                raise _layout(f"entry {name!r} lives on another disk")
            folder = name.endswith("/")
            check_entry_name(name, limits)
            if folder or stat.S_IFMT(external >> 16) not in (0, _IS_REGULAR):
                _check_kind(name, external, folder)
            if flags & _UNUSUAL_FLAGS or needed > MAX_VERSION or method != _DEFLATED and (method, csize) != (0, usize):
                _check_format(name, flags, needed, method, csize, usize)
            key = name.rstrip("/")
            if key in seen:
                raise _reject(f"entry {name!r} appears twice", "duplicate-entry", entry=name)
            seen.add(key)
            if folder:
                if usize:
                    raise _reject(f"folder entry {name!r} holds data", "corrupt-entry", entry=name)
                plain += 1  # a folder entry is one of the producer's entries
            else:
                files.add(name)
                if name == MANIFEST or name == GENERATION_RECORD:
                    pass  # limits of their own; the intake's bookkeeping, not the producer's files
                elif name.startswith(CHECKPOINT_PREFIX):
                    checkpoints += 1
                    if checkpoints > limits.max_checkpoints:
                        raise _reject(
                            f"archive has more than {limits.max_checkpoints} checkpoints "
                            f"(limit {limits.max_checkpoints})",
                            "too-many-checkpoints",
                            entries=checkpoints,
                        )
                    if usize > limits.manifest_bytes:
                        raise _reject(
                            f"checkpoint {name} is {usize} bytes (limit {limits.manifest_bytes})",
                            "checkpoint-too-large",
                            entry=name,
                        )
                else:
                    plain += 1
                    total += usize
                    if total > limits.uncompressed_bytes:
                        raise _reject(
                            f"archive declares over {limits.uncompressed_bytes} uncompressed bytes "
                            f"(limit {limits.uncompressed_bytes})",
                            "uncompressed-too-large",
                        )
                if usize > limits.ratio_min_bytes and usize / max(csize, 1) > limits.max_ratio:
                    raise _reject(
                        f"entry {name!r} expands {usize / max(csize, 1):.0f}:1 (limit {limits.max_ratio:.0f}:1)",
                        "compression-ratio",
                        entry=name,
                    )
            if plain > limits.max_entries:
                raise _reject(
                    f"archive has more than {limits.max_entries} entries besides manifest.json and its checkpoints "
                    f"(limit {limits.max_entries})",
                    "too-many-entries",
                    entries=plain,
                )
            entries.append(
                Entry(name, flags, method, crc, csize, usize, needed, mdate << 16 | mtime, offset, position, size)
            )
            position += size
        if position != stop:
            raise _layout("the central directory holds bytes its end record does not count")
        for name in files:
            parent = name.rpartition("/")[0]
            while parent:
                if parent in files:
                    raise _reject(f"{parent!r} is both a file and the folder of {name!r}", "path-conflict", entry=name)
                parent = parent.rpartition("/")[0]
        return entries

    # -------------------------------------------------------------- local records

    def _locals(self, entries: list[Entry], cd_offset: int) -> None:
        window = _Window(self.fh, self.size)
        expected = 0
        last = len(entries) - 1
        for index, entry in enumerate(entries):
            following = entries[index + 1].header_offset if index < last else cd_offset
            if entry.header_offset < expected:
                raise _reject(
                    f"entry {entry.filename!r} starts at offset {entry.header_offset}, inside the record before it",
                    "overlapping-entries",
                    entry=entry.filename,
                )
            if entry.header_offset > expected:
                raise _layout(
                    f"entry {entry.filename!r} starts at offset {entry.header_offset}, not {expected}: "
                    "the bytes between belong to no listed entry"
                )
            expected = self._local(window, entry, cd_offset, following)
        if expected != cd_offset:
            raise _layout(f"bytes {expected}..{cd_offset} before the central directory belong to no listed entry")

    def _local(self, window: _Window, entry: Entry, cd_offset: int, following: int) -> int:
        """Check one local record against its central header; returns where the record ends.

        ``following`` is where the next listed record starts: a data
        descriptor is read in the one form (with or without its signature,
        32- or 64-bit sizes) that ends exactly there.
        """
        start = entry.header_offset
        if start + _LOCAL_FMT.size > cd_offset:
            raise _layout(f"entry {entry.filename!r} has no room for its local header")
        data, at = window.get(start, _LOCAL_FMT.size)
        sig, needed, flags, method, mtime, mdate, crc, csize, usize, name_len, extra_len = _LOCAL_FMT.unpack_from(
            data, at
        )
        if sig != _LOCAL:
            raise _layout(f"entry {entry.filename!r} has no local header")
        body = start + _LOCAL_FMT.size + name_len + extra_len
        if body > cd_offset:
            raise _layout(f"entry {entry.filename!r}'s local header runs into the central directory")
        data, at = window.get(start + _LOCAL_FMT.size, name_len + extra_len)
        wrong = []
        if not _same_name(data[at : at + name_len], entry):
            wrong.append("name")
        if flags != entry.flag_bits:
            wrong.append("flags")
        # version needed is advisory (ADR 0108): writers disagree with themselves (Info-ZIP's zip -fz writes 4.5
        # in a folder's local header and 1.0 in its central one), so each only has to be one tenure reads
        if needed > MAX_VERSION:
            raise _reject(
                f"entry {entry.filename!r}'s local header needs zip version {needed / 10:.1f} (tenure reads up to 6.3)",
                "unsupported-zip-version",
                entry=entry.filename,
            )
        if method != entry.compress_type:
            wrong.append("method")
        if mdate << 16 | mtime != entry.dos_time:
            wrong.append("time")
        if extra_len or usize == _U32 or csize == _U32:
            extra = data[at + name_len : at + name_len + extra_len]
            usize, csize, _, _ = _apply_zip64(extra, usize, csize, 0, 0, entry.filename, local=True)
        if flags & 0x08:
            # values follow in a data descriptor; a streaming writer leaves each field zero or already right
            described = ((crc, entry.CRC), (csize, entry.compress_size), (usize, entry.file_size))
            if any(value not in (0, right) for value, right in described):
                wrong.append("CRC and sizes")
        elif (crc, csize, usize) != (entry.CRC, entry.compress_size, entry.file_size):
            wrong.append("CRC and sizes")
        if wrong:
            raise _reject(
                f"entry {entry.filename!r}: local and central headers disagree on {', '.join(wrong)}",
                "header-mismatch",
                entry=entry.filename,
            )
        end: int = body + entry.compress_size
        if end > cd_offset:
            raise _layout(f"entry {entry.filename!r}'s data runs into the central directory")
        if flags & 0x08:
            end = self._descriptor(window, entry, end, min(following, cd_offset))
        entry.data_offset, entry.record_end = body, end
        return end

    def _descriptor(self, window: _Window, entry: Entry, at: int, following: int) -> int:
        """The data descriptor after an entry's data, ending exactly where the next record starts."""
        expected = (entry.CRC, entry.compress_size, entry.file_size)
        for signed in (True, False):
            for wide in (False, True):
                length = (4 if signed else 0) + (20 if wide else 12)
                if at + length != following:
                    continue
                raw = window.bytes_at(at, length)
                if signed and raw[:4] != _DESCRIPTOR:
                    continue
                body = raw[4:] if signed else raw
                values = struct.unpack("<LQQ" if wide else "<LLL", body)
                if values == expected:
                    return at + length
        raise _reject(
            f"entry {entry.filename!r}: its data descriptor is missing or disagrees with the central header",
            "header-mismatch",
            entry=entry.filename,
        )


def _same_name(raw: bytes, entry: Entry) -> bool:
    """Whether a local header's name bytes are the central header's (decoded alike: decoding is one-to-one)."""
    try:
        if raw.isascii():
            return raw.decode("ascii") == entry.filename
        return raw.decode("utf-8" if entry.flag_bits & 0x0800 else "cp437") == entry.filename
    except UnicodeDecodeError:
        return False


def _decode_name(raw: bytes, flags: int) -> str:
    if raw.isascii():
        name = raw.decode("ascii")
    elif flags & 0x0800:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _reject(
                f"entry name {raw[:200]!r} is flagged UTF-8 but is not valid UTF-8", "bad-entry-name"
            ) from None
    else:
        name = raw.decode("cp437")
    if "\x00" in name:
        raise _reject(f"unsafe entry name {name[:200]!r}", "unsafe-path", entry=name[:200])
    return name


def _apply_zip64(
    extra: bytes, usize: int, csize: int, offset: int, disk: int, name: str, *, local: bool = False
) -> tuple[int, int, int, int]:
    """Resolve the 0xFFFFFFFF markers from the zip64 extra field (a local header always holds both sizes)."""
    position = 0
    while position + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, position)
        body = extra[position + 4 : position + 4 + length]
        if len(body) != length:
            raise _reject(f"entry {name!r} has a damaged extra field", "header-mismatch", entry=name)
        if tag == 1:
            # a local header's zip64 field holds both sizes, and counts only when a size field is the marker
            either = local and (usize == _U32 or csize == _U32)
            wanted = [usize == _U32 or either, csize == _U32 or either, offset == _U32, disk == _U16]
            values = [usize, csize, offset, disk]
            cursor = 0
            for index, needed in enumerate(wanted):
                if not needed:
                    continue
                width = 4 if index == 3 else 8
                if cursor + width > len(body):
                    if local:
                        break  # a local zip64 field may carry the sizes only when they are needed
                    raise _reject(f"entry {name!r} has a short zip64 extra field", "header-mismatch", entry=name)
                values[index] = int.from_bytes(body[cursor : cursor + width], "little")
                cursor += width
            return values[0], values[1], values[2], values[3]
        position += 4 + length
    if position != len(extra):
        raise _reject(f"entry {name!r} has a damaged extra field", "header-mismatch", entry=name)
    if not local and (usize == _U32 or csize == _U32 or offset == _U32 or disk == _U16):
        raise _reject(f"entry {name!r} asks for a zip64 field it does not carry", "header-mismatch", entry=name)
    return usize, csize, offset, disk


def _check_kind(name: str, external: int, folder: bool) -> None:
    """Judge the mode bits whatever host the archive names: only regular files and folders."""
    mode = external >> 16
    kind = stat.S_IFMT(mode)
    if not kind:
        return
    if stat.S_ISLNK(mode):
        raise _reject(f"entry {name!r} is a symbolic link", "symlink-entry", entry=name)
    if stat.S_ISDIR(mode) and folder or stat.S_ISREG(mode) and not folder:
        return
    raise _reject(f"entry {name!r} is not a regular file", "special-entry", entry=name)


def _check_format(name: str, flags: int, needed: int, method: int, csize: int, usize: int) -> None:
    if flags & _ENCRYPTED_FLAGS:
        raise _reject(f"entry {name!r} is encrypted", "encrypted-entry", entry=name)
    if flags & ~_KNOWN_FLAGS:
        raise _reject(
            f"entry {name!r} uses zip features tenure does not read (flags {flags:#06x})",
            "unsupported-zip-feature",
            entry=name,
        )
    if needed > MAX_VERSION:
        raise _reject(
            f"entry {name!r} needs zip version {needed / 10:.1f} (tenure reads up to 6.3)",
            "unsupported-zip-version",
            entry=name,
        )
    if method not in _ALLOWED_METHODS:
        raise _reject(f"entry {name!r} uses compression method {method}", "unsupported-compression", entry=name)
    if method == _STORED and csize != usize:
        raise _reject(
            f"stored entry {name!r} declares {csize} stored bytes for {usize}",
            "header-mismatch",
            entry=name,
        )
