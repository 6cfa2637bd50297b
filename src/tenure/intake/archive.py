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
  record at a time, so any archive under the size limit is judged in bounded
  time and memory.

On top of the layout: entry names (no traversal, absolute paths, drive
letters, backslashes, control characters, depth and length limits),
duplicates and file/folder conflicts, symlink and special entries judged by
their mode bits whatever host the archive claims to come from, encryption,
the zip version and feature flags, the compression method (stored or deflate
only), the declared sizes and per-entry ratio. Each refusal is a
:class:`~tenure.intake.errors.PackageRejectedError` with its own code.

Entries are then read with :class:`SafeArchive`, which inflates each one
itself, stops at the declared size and checks the CRC.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .canonical import GENERATION_RECORD, MANIFEST
from .config import Limits
from .errors import PackageRejectedError

__all__ = ["SafeArchive", "open_archive", "check_entry_name", "CHECKPOINT_PREFIX"]

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

#: the highest "version needed to extract" understood (6.3, as zipfile)
MAX_VERSION = 63
_ENCRYPTED_FLAGS = 0x0001 | 0x0040 | 0x2000  # traditional, strong, masked directory
_KNOWN_FLAGS = 0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0040 | 0x0800 | 0x2000
#: a central header's extra field and comment are kept in memory; bound them
MAX_ENTRY_EXTRA = 1024
MAX_ENTRY_COMMENT = 1024

_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ALLOWED_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_CHUNK = 1024 * 1024


def _reject(message: str, code: str, **context: Any) -> PackageRejectedError:
    return PackageRejectedError(message, code=code, **context)


def check_entry_name(name: str, limits: Limits) -> None:
    """Raise unless ``name`` is a safe relative forward-slash path within limits."""
    if len(name.encode("utf-8", "surrogatepass")) > limits.max_path_bytes:
        raise _reject(f"entry name longer than {limits.max_path_bytes} bytes", "path-too-long", entry=name[:200])
    bad = not name or "\\" in name or name.startswith("/") or _DRIVE.match(name) is not None
    parts = name.rstrip("/").split("/")
    if bad or _CONTROL.search(name) or any(part in ("", ".", "..") for part in parts):
        raise _reject(f"unsafe entry name {name!r}", "unsafe-path", entry=name[:200])
    if len(parts) > limits.max_path_depth:
        raise _reject(
            f"entry {name!r} is {len(parts)} levels deep (limit {limits.max_path_depth})",
            "path-too-deep",
            entry=name[:200],
        )


class Entry(zipfile.ZipInfo):
    """One listed entry, with where its bytes are and the name bytes it was stored under.

    ``record_end`` is where its local record (header, data and data
    descriptor, in whichever form the scan found) ends: a copy of the record
    takes the bytes from ``header_offset`` to there.
    """

    __slots__ = ("raw_name", "data_offset", "record_end")

    raw_name: bytes
    data_offset: int
    record_end: int

    def _encodeFilenameFlags(self) -> tuple[bytes, int]:  # noqa: N802 - zipfile's name
        # a copied entry keeps the exact name bytes of its copied local header
        return self.raw_name, self.flag_bits


class SafeArchive:
    """A canonical, checked zip; entries are inflated with bounded sizes and checked CRCs."""

    def __init__(self, path: Path, fh: BinaryIO, entries: list[Entry], limits: Limits, end_of_entries: int) -> None:
        self.path = path
        self.limits = limits
        self._fh = fh
        self._entries = entries
        self._end = end_of_entries
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
        """The entry's content in pieces; raises ``corrupt-entry`` unless it inflates to exactly
        its declared size and CRC, using exactly its declared compressed bytes."""
        entry = self.infos[name]
        produced = 0
        crc = 0
        for piece in self._inflate(entry):
            produced += len(piece)
            if produced > entry.file_size:
                raise self._corrupt(entry, "it inflates past its declared size")
            crc = zlib.crc32(piece, crc)
            yield piece
        if produced != entry.file_size or crc != entry.CRC:
            raise self._corrupt(entry, "its size or CRC-32 does not match the directory")

    def _inflate(self, entry: Entry) -> Iterator[bytes]:
        left = entry.compress_size
        position = entry.data_offset
        if entry.compress_type == zipfile.ZIP_STORED:
            while left:
                self._fh.seek(position)
                piece = self._fh.read(min(left, _CHUNK))
                if not piece:
                    raise self._corrupt(entry, "its data ends early")
                position += len(piece)
                left -= len(piece)
                yield piece
            return
        inflater = zlib.decompressobj(-15)
        pending = b""
        try:
            while not inflater.eof:
                if not pending and left:
                    self._fh.seek(position)
                    pending = self._fh.read(min(left, _CHUNK))
                    if not pending:
                        raise self._corrupt(entry, "its data ends early")
                    position += len(pending)
                    left -= len(pending)
                piece = inflater.decompress(pending, _CHUNK)
                pending = inflater.unconsumed_tail
                if piece:
                    yield piece
                elif not pending and not left and not inflater.eof:
                    raise self._corrupt(entry, "its deflate stream is incomplete")
        except zlib.error as error:
            raise self._corrupt(entry, f"its deflate stream is damaged ({error})") from None
        if left or pending or inflater.unused_data:
            raise self._corrupt(entry, "its deflate stream ends before its declared compressed size")

    @staticmethod
    def _corrupt(entry: Entry, why: str) -> PackageRejectedError:
        return _reject(f"entry {entry.filename!r} is corrupt: {why}", "corrupt-entry", entry=entry.filename)

    def sha256(self, name: str) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks(name):
            digest.update(chunk)
        return digest.hexdigest()

    def local_order(self) -> list[str]:
        """File entry names in the order their bytes appear in the archive."""
        return [e.filename for e in self._entries if not e.is_dir()]

    def has_folders(self) -> bool:
        return len(self.infos) != len(self._entries)

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


class _Scanner:
    """One pass over the end records, the central directory and every local header."""

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
        self._check_entries(entries)
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
        if cd_offset > self.size or cd_size > self.size - cd_offset:
            raise _truncated("the central directory lies outside the file")
        entries: list[Entry] = []
        position = cd_offset
        stop = cd_offset + cd_size
        for _ in range(count):
            entry, position = self._central(position, stop)
            entries.append(entry)
        if position != stop:
            raise _layout("the central directory holds bytes its end record does not count")
        return entries

    def _central(self, position: int, stop: int) -> tuple[Entry, int]:
        if position + _CENTRAL_FMT.size > stop:
            raise _layout("the central directory is shorter than its entry count")
        fields = _CENTRAL_FMT.unpack(self._read_at(position, _CENTRAL_FMT.size))
        (sig, made_by, needed, flags, method, mtime, mdate, crc, csize, usize) = fields[:10]
        (name_len, extra_len, comment_len, disk, internal, external, offset) = fields[10:]
        if sig != _CENTRAL:
            raise _layout(f"no central header at offset {position}")
        end = position + _CENTRAL_FMT.size + name_len + extra_len + comment_len
        if end > stop:
            raise _layout("a central header runs past the central directory")
        if extra_len > MAX_ENTRY_EXTRA or comment_len > MAX_ENTRY_COMMENT:
            raise _reject(
                f"a central header carries {extra_len} bytes of extra fields and a {comment_len}-byte comment "
                f"(limit {MAX_ENTRY_EXTRA} each)",
                "unsupported-zip-feature",
            )
        raw = self._read_at(position + _CENTRAL_FMT.size, name_len + extra_len + comment_len)
        raw_name, extra, comment = raw[:name_len], raw[name_len : name_len + extra_len], raw[name_len + extra_len :]
        name = _decode_name(raw_name, flags)
        usize, csize, offset, disk = _apply_zip64(extra, usize, csize, offset, disk, name)
        if disk != 0:
            raise _layout(f"entry {name!r} lives on another disk")
        entry = Entry(name)  # the name was checked by _decode_name: no NUL, so zipfile keeps it whole
        entry.raw_name = raw_name
        entry.orig_filename = name
        entry.extra, entry.comment = extra, comment
        entry.create_version, entry.create_system = made_by & 0xFF, made_by >> 8
        entry.extract_version, entry.reserved = needed, 0
        entry.flag_bits, entry.compress_type = flags, method
        entry.date_time = (
            (mdate >> 9) + 1980,
            (mdate >> 5) & 0xF,
            mdate & 0x1F,
            mtime >> 11,
            (mtime >> 5) & 0x3F,
            (mtime & 0x1F) * 2,
        )
        entry.CRC, entry.compress_size, entry.file_size = crc, csize, usize
        entry.volume, entry.internal_attr, entry.external_attr = 0, internal, external
        entry.header_offset = offset
        entry.data_offset = entry.record_end = -1
        return entry, end

    # -------------------------------------------------------------- entry rules

    def _check_entries(self, entries: list[Entry]) -> None:
        limits = self.limits
        files: set[str] = set()
        seen: set[str] = set()
        checkpoints = plain = 0
        total = 0
        for entry in entries:
            name = entry.filename
            check_entry_name(name, limits)
            _check_kind(entry)
            _check_format(entry)
            key = name.rstrip("/")
            if key in seen:
                raise _reject(f"entry {name!r} appears twice", "duplicate-entry", entry=name)
            seen.add(key)
            if entry.is_dir():
                if entry.file_size:
                    raise _reject(f"folder entry {name!r} holds data", "corrupt-entry", entry=name)
                plain += 1  # a folder entry is one of the producer's entries
                continue
            files.add(name)
            if name == MANIFEST or name == GENERATION_RECORD:
                pass  # limits of their own; the intake's bookkeeping, not the producer's files
            elif name.startswith(CHECKPOINT_PREFIX):
                checkpoints += 1
                if entry.file_size > limits.manifest_bytes:
                    raise _reject(
                        f"checkpoint {name} is {entry.file_size} bytes (limit {limits.manifest_bytes})",
                        "checkpoint-too-large",
                        entry=name,
                    )
            else:
                plain += 1
                total += entry.file_size
        if plain > limits.max_entries:
            raise _reject(
                f"archive has {plain} entries besides manifest.json and its checkpoints (limit {limits.max_entries})",
                "too-many-entries",
                entries=plain,
            )
        if checkpoints > limits.max_checkpoints:
            raise _reject(
                f"archive has {checkpoints} checkpoints (limit {limits.max_checkpoints})",
                "too-many-checkpoints",
                entries=checkpoints,
            )
        if total > limits.uncompressed_bytes:
            raise _reject(
                f"archive declares {total} uncompressed bytes (limit {limits.uncompressed_bytes})",
                "uncompressed-too-large",
            )
        for entry in entries:
            if entry.file_size > limits.ratio_min_bytes:
                ratio = entry.file_size / max(entry.compress_size, 1)
                if ratio > limits.max_ratio:
                    raise _reject(
                        f"entry {entry.filename!r} expands {ratio:.0f}:1 (limit {limits.max_ratio:.0f}:1)",
                        "compression-ratio",
                        entry=entry.filename,
                    )
        for name in files:
            parent = name.rpartition("/")[0]
            while parent:
                if parent in files:
                    raise _reject(f"{parent!r} is both a file and the folder of {name!r}", "path-conflict", entry=name)
                parent = parent.rpartition("/")[0]

    # -------------------------------------------------------------- local records

    def _locals(self, entries: list[Entry], cd_offset: int) -> None:
        expected = 0
        starts = [e.header_offset for e in entries[1:]] + [cd_offset]
        for entry, following in zip(entries, starts):
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
            expected = self._local(entry, cd_offset, following)
        if expected != cd_offset:
            raise _layout(f"bytes {expected}..{cd_offset} before the central directory belong to no listed entry")

    def _local(self, entry: Entry, cd_offset: int, following: int) -> int:
        """Check one local record against its central header; returns where the record ends.

        ``following`` is where the next listed record starts: a data
        descriptor is read in the one form (with or without its signature,
        32- or 64-bit sizes) that ends exactly there.
        """
        start = entry.header_offset
        if start + _LOCAL_FMT.size > cd_offset:
            raise _layout(f"entry {entry.filename!r} has no room for its local header")
        sig, needed, flags, method, mtime, mdate, crc, csize, usize, name_len, extra_len = _LOCAL_FMT.unpack(
            self._read_at(start, _LOCAL_FMT.size)
        )
        if sig != _LOCAL:
            raise _layout(f"entry {entry.filename!r} has no local header")
        data = start + _LOCAL_FMT.size + name_len + extra_len
        if data > cd_offset:
            raise _layout(f"entry {entry.filename!r}'s local header runs into the central directory")
        raw = self._read_at(start + _LOCAL_FMT.size, name_len + extra_len)
        name, extra = raw[:name_len], raw[name_len:]
        dos_time = (mdate, mtime)
        central_time = _dos(entry.date_time)
        wrong = []
        if name != entry.raw_name:
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
        if dos_time != central_time:
            wrong.append("time")
        usize, csize, _, _ = _apply_zip64(extra, usize, csize, 0, 0, entry.filename, local=True)
        described = (crc, csize, usize)
        central = (entry.CRC, entry.compress_size, entry.file_size)
        if flags & 0x08:
            # values follow in a data descriptor; a streaming writer leaves each field zero or already right
            if any(value not in (0, right) for value, right in zip(described, central)):
                wrong.append("CRC and sizes")
        elif described != central:
            wrong.append("CRC and sizes")
        if wrong:
            raise _reject(
                f"entry {entry.filename!r}: local and central headers disagree on {', '.join(wrong)}",
                "header-mismatch",
                entry=entry.filename,
            )
        end: int = data + int(entry.compress_size)
        if end > cd_offset:
            raise _layout(f"entry {entry.filename!r}'s data runs into the central directory")
        if flags & 0x08:
            end = self._descriptor(entry, end, min(following, cd_offset))
        entry.data_offset, entry.record_end = data, end
        return end

    def _descriptor(self, entry: Entry, at: int, following: int) -> int:
        """The data descriptor after an entry's data, ending exactly where the next record starts."""
        expected = (entry.CRC, entry.compress_size, entry.file_size)
        for signed in (True, False):
            for wide in (False, True):
                length = (4 if signed else 0) + (20 if wide else 12)
                if at + length != following:
                    continue
                raw = self._read_at(at, length)
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


def _dos(date_time: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    year, month, day, hour, minute, second = date_time
    return (year - 1980) << 9 | month << 5 | day, hour << 11 | minute << 5 | second // 2


def _decode_name(raw: bytes, flags: int) -> str:
    if flags & 0x0800:
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


def _check_kind(entry: Entry) -> None:
    """Judge the mode bits whatever host the archive names: only regular files and folders."""
    mode = entry.external_attr >> 16
    kind = stat.S_IFMT(mode)
    name = entry.filename
    if not kind:
        return
    if stat.S_ISLNK(mode):
        raise _reject(f"entry {name!r} is a symbolic link", "symlink-entry", entry=name)
    if stat.S_ISDIR(mode) and entry.is_dir() or stat.S_ISREG(mode) and not entry.is_dir():
        return
    raise _reject(f"entry {name!r} is not a regular file", "special-entry", entry=name)


def _check_format(entry: Entry) -> None:
    name = entry.filename
    if entry.flag_bits & _ENCRYPTED_FLAGS:
        raise _reject(f"entry {name!r} is encrypted", "encrypted-entry", entry=name)
    if entry.flag_bits & ~_KNOWN_FLAGS:
        raise _reject(
            f"entry {name!r} uses zip features tenure does not read (flags {entry.flag_bits:#06x})",
            "unsupported-zip-feature",
            entry=name,
        )
    if entry.extract_version > MAX_VERSION:
        raise _reject(
            f"entry {name!r} needs zip version {entry.extract_version / 10:.1f} (tenure reads up to 6.3)",
            "unsupported-zip-version",
            entry=name,
        )
    if entry.compress_type not in _ALLOWED_METHODS:
        raise _reject(
            f"entry {name!r} uses compression method {entry.compress_type}", "unsupported-compression", entry=name
        )
    if entry.compress_type == zipfile.ZIP_STORED and entry.compress_size != entry.file_size:
        raise _reject(
            f"stored entry {name!r} declares {entry.compress_size} stored bytes for {entry.file_size}",
            "header-mismatch",
            entry=name,
        )
