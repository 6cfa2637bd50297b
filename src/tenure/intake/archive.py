"""Opening an untrusted zip archive safely, under the hard limits.

:func:`open_archive` checks the whole central directory before a single
entry is decompressed: archive size, entry count, every entry name (no
traversal, absolute paths, drive letters, backslashes, NUL, depth and length
limits), duplicate names, symlink and special entries, encryption, the
compression method (stored or deflate only: both stop decompressing at the
declared size), the declared total and per-entry ratio, and that no two
entries share bytes (the overlapping-entry zip bomb). Each refusal is a
:class:`~tenure.intake.errors.PackageRejectedError` with its own code.
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
from typing import BinaryIO

from .config import Limits
from .errors import PackageRejectedError

__all__ = ["SafeArchive", "open_archive", "check_entry_name"]

_LOCAL_MAGIC = b"PK\x03\x04"
_EMPTY_MAGIC = b"PK\x05\x06"
_DRIVE = re.compile(r"^[A-Za-z]:")
_ALLOWED_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_CHUNK = 1024 * 1024


def check_entry_name(name: str, limits: Limits) -> None:
    """Raise unless ``name`` is a safe relative forward-slash path within limits."""
    if len(name.encode("utf-8", "surrogatepass")) > limits.max_path_bytes:
        raise PackageRejectedError(
            f"entry name longer than {limits.max_path_bytes} bytes", code="path-too-long", entry=name[:200]
        )
    bad = not name or "\x00" in name or "\\" in name or name.startswith("/") or _DRIVE.match(name) is not None
    parts = name.rstrip("/").split("/")
    if bad or any(part in ("", ".", "..") for part in parts):
        raise PackageRejectedError(f"unsafe entry name {name!r}", code="unsafe-path", entry=name[:200])
    if len(parts) > limits.max_path_depth:
        raise PackageRejectedError(
            f"entry {name!r} is {len(parts)} levels deep (limit {limits.max_path_depth})",
            code="path-too-deep",
            entry=name[:200],
        )


class SafeArchive:
    """A structurally checked zip; entries are read with bounded sizes."""

    def __init__(self, path: Path, zf: zipfile.ZipFile, limits: Limits, fh: BinaryIO | None = None) -> None:
        self.path = path
        self.limits = limits
        self._zf = zf
        self._fh = fh
        self.infos: dict[str, zipfile.ZipInfo] = {i.filename: i for i in zf.infolist() if not i.is_dir()}

    @property
    def names(self) -> list[str]:
        return sorted(self.infos)

    def close(self) -> None:
        try:
            self._zf.close()
        finally:
            if self._fh is not None:
                self._fh.close()

    def __enter__(self) -> SafeArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def size(self, name: str) -> int:
        return self.infos[name].file_size

    def read(self, name: str) -> bytes:
        """The whole entry; its size is bounded by the declared size."""
        try:
            return self._zf.read(self.infos[name])
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as error:
            raise PackageRejectedError(
                f"entry {name!r} is corrupt: {error}", code="corrupt-entry", entry=name
            ) from None

    def chunks(self, name: str) -> Iterator[bytes]:
        try:
            with self._zf.open(self.infos[name]) as fh:
                while chunk := fh.read(_CHUNK):
                    yield chunk
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as error:
            raise PackageRejectedError(
                f"entry {name!r} is corrupt: {error}", code="corrupt-entry", entry=name
            ) from None

    def sha256(self, name: str) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks(name):
            digest.update(chunk)
        return digest.hexdigest()

    def local_order(self) -> list[str]:
        """File entry names in the order their bytes appear in the archive."""
        return [i.filename for i in sorted(self.infos.values(), key=lambda i: i.header_offset)]

    def has_folders(self) -> bool:
        return len(self.infos) != len(self._zf.infolist())

    def end_of_entries(self) -> int:
        """Offset where the central directory begins."""
        return int(self._zf.start_dir)


def open_archive(path: Path, limits: Limits) -> SafeArchive:
    """Open ``path`` as an untrusted archive, or raise PackageRejectedError."""
    size = os.stat(path).st_size
    if size > limits.archive_bytes:
        raise PackageRejectedError(
            f"archive is {size} bytes (limit {limits.archive_bytes})", code="archive-too-large", size=size
        )
    # one handle serves the magic check, the zip directory and the overlap check
    fh = open(path, "rb")
    try:
        magic = fh.read(4)
        if magic not in (_LOCAL_MAGIC, _EMPTY_MAGIC):
            raise PackageRejectedError("input is not a zip archive", code="not-a-zip")
        fh.seek(0)
        try:
            zf = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, struct.error, EOFError, OSError) as error:
            raise PackageRejectedError(f"archive is truncated or damaged: {error}", code="truncated-zip") from None
        try:
            _check_directory(zf, limits)
            _check_overlaps(fh, zf)
        except BaseException:
            zf.close()
            raise
    except BaseException:
        fh.close()
        raise
    return SafeArchive(path, zf, limits, fh)


def _check_directory(zf: zipfile.ZipFile, limits: Limits) -> None:
    infos = zf.infolist()
    if len(infos) > limits.max_entries:
        raise PackageRejectedError(
            f"archive has {len(infos)} entries (limit {limits.max_entries})",
            code="too-many-entries",
            entries=len(infos),
        )
    total = sum(info.file_size for info in infos)
    if total > limits.uncompressed_bytes:
        raise PackageRejectedError(
            f"archive declares {total} uncompressed bytes (limit {limits.uncompressed_bytes})",
            code="uncompressed-too-large",
        )
    seen: set[str] = set()
    for info in infos:
        _check_info(info, limits)
        key = info.orig_filename.rstrip("/")
        if key in seen:
            raise PackageRejectedError(
                f"entry {info.orig_filename!r} appears twice", code="duplicate-entry", entry=info.orig_filename
            )
        seen.add(key)


def _check_info(info: zipfile.ZipInfo, limits: Limits) -> None:
    check_entry_name(info.orig_filename, limits)
    if info.flag_bits & 0x1:
        raise PackageRejectedError(f"entry {info.filename!r} is encrypted", code="encrypted-entry", entry=info.filename)
    mode = info.external_attr >> 16
    if info.create_system == 3 and mode:
        if stat.S_ISLNK(mode):
            raise PackageRejectedError(
                f"entry {info.filename!r} is a symbolic link", code="symlink-entry", entry=info.filename
            )
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) and stat.S_IFMT(mode):
            raise PackageRejectedError(
                f"entry {info.filename!r} is not a regular file", code="special-entry", entry=info.filename
            )
    if info.compress_type not in _ALLOWED_METHODS:
        raise PackageRejectedError(
            f"entry {info.filename!r} uses compression method {info.compress_type}",
            code="unsupported-compression",
            entry=info.filename,
        )
    if info.file_size > limits.ratio_min_bytes:
        ratio = info.file_size / max(info.compress_size, 1)
        if ratio > limits.max_ratio:
            raise PackageRejectedError(
                f"entry {info.filename!r} expands {ratio:.0f}:1 (limit {limits.max_ratio:.0f}:1)",
                code="compression-ratio",
                entry=info.filename,
            )


def _check_overlaps(fh: BinaryIO, zf: zipfile.ZipFile) -> None:
    """Every entry's local header and data occupy their own byte range."""
    ranges: list[tuple[int, int, str]] = []
    for info in zf.infolist():
        fh.seek(info.header_offset)
        header = fh.read(30)
        if len(header) < 30 or header[:4] != _LOCAL_MAGIC:
            raise PackageRejectedError(
                f"entry {info.filename!r} has no local header", code="corrupt-entry", entry=info.filename
            )
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        end = info.header_offset + 30 + name_len + extra_len + info.compress_size
        ranges.append((info.header_offset, end, info.filename))
    ranges.sort()
    for (_, end, name), (start, _, other) in zip(ranges, ranges[1:]):
        if end > start:
            raise PackageRejectedError(
                f"entries {name!r} and {other!r} share bytes", code="overlapping-entries", entry=other
            )
    if ranges and ranges[-1][1] > zf.start_dir:
        raise PackageRejectedError(
            f"entry {ranges[-1][2]!r} overlaps the central directory", code="overlapping-entries", entry=ranges[-1][2]
        )
