"""PackageWriter: create and validate one new package generation.

The writer copies every file of a base package byte for byte (the raw
compressed records, so a generation costs a file copy rather than a
recompression), appends the new files, and writes the new ``manifest.json``
as the last entry. It fsyncs the result under a temporary name in the target
folder and validates it with :func:`~tenure.intake.package.read_package`
before returning it. Publication — giving it its final name — is the
caller's step.
"""

from __future__ import annotations

import copy
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from .canonical import MANIFEST, canonical_json
from .config import IntakeConfig
from .fsio import fsync_file, tmp_name
from .package import Package, read_package

__all__ = ["PackageWriter", "manifest_bytes", "FIXED_TIME"]

#: every entry the writer creates carries this time, so generations are reproducible
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o100644 << 16


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The stored form of a manifest: its canonical JSON and a newline.

    Compact, so a stored manifest is never larger than the canonical form
    the limits are measured on (indentation would grow with the nesting).
    """
    return canonical_json(manifest) + b"\n"


def _new_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.create_system = 3
    info.external_attr = _FILE_MODE
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


class PackageWriter:
    """Writes one new, validated package into a folder under a temporary name."""

    def __init__(self, config: IntakeConfig | None = None) -> None:
        self.config = config or IntakeConfig()

    def write(
        self,
        folder: Path,
        manifest: Mapping[str, Any],
        *,
        base: Package | None = None,
        additions: Mapping[str, bytes] | None = None,
        stored: bool = False,
        sync: bool = True,
    ) -> Package:
        """Write ``base``'s files + ``additions`` + ``manifest``; validate; return it.

        ``stored``: the result is a generation for managed storage, validated
        under :meth:`Limits.stored`; otherwise it is a package for an inbox,
        validated under the limits themselves. The result lives at
        ``folder/.tmp-<random>.zip``; on any failure the temporary file is
        removed and the error propagates. ``sync=False`` leaves the fsync to
        the caller (a group commit syncs a whole batch at once).
        """
        tmp = folder / tmp_name(".zip")
        try:
            with open(tmp, "xb") as fh:
                self._write_zip(fh, manifest, base, additions or {})
                fh.flush()
                if sync:
                    fsync_file(fh.fileno())
            return read_package(tmp, self.config, base=base, stored=stored)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _write_zip(
        self, fh: IO[bytes], manifest: Mapping[str, Any], base: Package | None, additions: Mapping[str, bytes]
    ) -> None:
        copied = _copy_base(fh, base) if base is not None else []
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=self.config.compresslevel) as zf:
            for info in copied:
                zf.filelist.append(info)
                zf.NameToInfo[info.filename] = info
            for name in sorted(additions):
                zf.writestr(_new_info(name), additions[name])
            zf.writestr(_new_info(MANIFEST), manifest_bytes(manifest))


def _copy_base(fh: IO[bytes], base: Package) -> list[zipfile.ZipInfo]:
    """Copy every entry of ``base`` except the manifest; return their new infos.

    The entry list recorded when ``base`` was validated is reused (generations
    and cached inputs are immutable); the result is validated in full anyway.
    """
    if base.zip_entries:
        return _copy_entries(fh, base, list(base.zip_entries))
    with zipfile.ZipFile(base.path) as src_zip:
        infos = [i for i in src_zip.infolist() if not i.is_dir()]
    return _copy_entries(fh, base, infos)


def _copy_entries(fh: IO[bytes], base: Package, infos: list[zipfile.ZipInfo]) -> list[zipfile.ZipInfo]:
    with open(base.path, "rb") as src:
        if base.appendable:
            last = max(infos, key=lambda i: i.header_offset)
            _copy_range(src, fh, 0, last.header_offset)
            return [_clone(i) for i in infos if i.filename != MANIFEST]
        result = []
        for info in sorted(infos, key=lambda i: i.header_offset):
            if info.filename == MANIFEST:
                continue
            clone = _clone(info)
            clone.header_offset = fh.tell()
            _copy_range(src, fh, info.header_offset, _record_length(src, info))
            result.append(clone)
        return result


_INFO_SLOTS = tuple(zipfile.ZipInfo.__slots__)


def _clone(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """A shallow copy of a ZipInfo (what ``copy.copy`` makes, without its overhead)."""
    if type(info) is not zipfile.ZipInfo:
        return copy.copy(info)
    clone = zipfile.ZipInfo.__new__(zipfile.ZipInfo)
    for name in _INFO_SLOTS:
        try:
            setattr(clone, name, getattr(info, name))
        except AttributeError:
            pass
    return clone


def _record_length(src: IO[bytes], info: zipfile.ZipInfo) -> int:
    """Bytes of one local record: header, name, extra, data, data descriptor."""
    src.seek(info.header_offset + 26)
    name_len, extra_len = struct.unpack("<HH", src.read(4))
    length: int = 30 + name_len + extra_len + info.compress_size
    if info.flag_bits & 0x08:
        src.seek(info.header_offset + length)
        signature = src.read(4) == b"PK\x07\x08"
        zip64 = info.compress_size >= 0xFFFFFFFF or info.file_size >= 0xFFFFFFFF
        length += (4 if signature else 0) + (20 if zip64 else 12)
    return length


def _copy_range(src: IO[bytes], dst: IO[bytes], start: int, length: int) -> None:
    src.seek(start)
    remaining = length
    while remaining > 0:
        chunk = src.read(min(remaining, 1024 * 1024))
        if not chunk:
            raise OSError("source package ended early")
        dst.write(chunk)
        remaining -= len(chunk)
