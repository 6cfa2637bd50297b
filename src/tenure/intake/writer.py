"""PackageWriter: create and validate one new package generation.

The writer copies every file of a base package byte for byte (the raw
compressed records, so a generation costs a file copy rather than a
recompression), appends the new files, and writes the new ``manifest.json``
as the last entry.

A stored generation (``stored=True``) is written in stored generation format
v2 (ADR 0110): its files are, in this order, the base's files that are not
checkpoints, the new files, the new checkpoints, the generation record and
the manifest. With ``linked`` it holds only its own checkpoints and its
record links to ``linked`` (the history continues there); without it, it
holds every checkpoint (a self-contained generation: the base's are copied).

It fsyncs the result under a temporary name in the target folder and
validates it with :func:`~tenure.intake.package.read_package` before
returning it. Publication — giving it its final name — is the caller's
step.
"""

from __future__ import annotations

import copy
import os
import struct
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from .canonical import MANIFEST, canonical_json
from .config import IntakeConfig
from .errors import StorageCorruptError
from .fsio import fsync_dir, fsync_file, tmp_name
from .package import (
    CHECKPOINT_DIR,
    GENERATION_RECORD,
    RECORD_FORMAT,
    STORED_FORMAT,
    Package,
    chain_files,
    generation_name,
    read_package,
)

__all__ = ["PackageWriter", "manifest_bytes", "FIXED_TIME", "generation_record", "export_package", "history_bytes"]

#: every entry the writer creates carries this time, so generations are reproducible
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o100644 << 16


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The stored form of a manifest: its canonical JSON and a newline.

    Compact, so a stored manifest is never larger than the canonical form
    the limits are measured on (indentation would grow with the nesting).
    """
    return canonical_json(manifest) + b"\n"


def generation_record(generation: int, linked: Package | None, *, anchor: bool) -> dict[str, Any]:
    """The record of a stored generation (format v2): its link, and whether it starts a span."""
    return {
        "format": RECORD_FORMAT,
        "format_version": STORED_FORMAT,
        "generation": generation,
        "base": None
        if linked is None
        else {
            "file": generation_name(linked.generation),
            "generation": linked.generation,
            "fingerprint": linked.fingerprint,
        },
        "anchor": anchor or linked is None,
    }


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
        linked: Package | None = None,
        anchor: bool = False,
        record: bool = True,
    ) -> Package:
        """Write ``base``'s files + ``additions`` + ``manifest``; validate; return it.

        ``stored`` writes format v2 with a generation record. ``linked``
        (stored only): the generation whose history this one continues;
        then only ``base``'s files that are not checkpoints are copied, and
        ``additions`` hold this generation's checkpoints. ``anchor``: the
        generation starts a span (its link skips the generations whose
        checkpoints it carries; see ADR 0110). ``record=False``: a stored
        generation in format v1, a complete package (what an export is).
        Whatever ``base``'s format, its whole history is in the result
        unless ``linked`` carries it.

        ``stored``: the result is a generation for managed storage, validated
        under :meth:`Limits.stored`; otherwise it is a package for an inbox,
        validated under the limits themselves. The result lives at
        ``folder/.tmp-<random>.zip``; on any failure the temporary file is
        removed and the error propagates. ``sync=False`` leaves the fsync to
        the caller (a group commit syncs a whole batch at once).
        """
        if linked is not None and not (stored and record):
            raise ValueError("only a stored generation links to another")
        entry = generation_record(int(manifest["generation"]), linked, anchor=anchor) if stored and record else None
        additions = dict(additions or {})
        payload_only = linked is not None
        if base is not None and base.link is not None and linked is None:
            # base holds only its own checkpoints: the others are read along its chain
            additions = {**history_bytes(base), **additions}
            payload_only = True
        tmp = folder / tmp_name(".zip")
        try:
            with open(tmp, "xb") as fh:
                self._write_zip(fh, manifest, base, additions, entry, payload_only=payload_only)
                fh.flush()
                if sync:
                    fsync_file(fh.fileno())
            return read_package(tmp, self.config, base=base, stored=stored, linked=linked)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _write_zip(
        self,
        fh: IO[bytes],
        manifest: Mapping[str, Any],
        base: Package | None,
        additions: Mapping[str, bytes],
        record: Mapping[str, Any] | None,
        *,
        payload_only: bool,
    ) -> None:
        copied = _copy_base(fh, base, payload_only) if base is not None else []
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=self.config.compresslevel) as zf:
            for info in copied:
                zf.filelist.append(info)
                zf.NameToInfo[info.filename] = info
            # files first, checkpoints after: the next generation copies the files as one range
            for name in sorted(additions, key=lambda n: (n.startswith(CHECKPOINT_DIR), n)):
                self._add(zf, name, additions[name])
            if record is not None:
                self._add(zf, GENERATION_RECORD, canonical_json(record) + b"\n")
            self._add(zf, MANIFEST, manifest_bytes(manifest))

    def _add(self, zf: zipfile.ZipFile, name: str, data: bytes) -> None:
        """A new entry, deflated unless that would pass the limits' compression ratio: then stored.

        What the intake writes is judged by the same limits as an input (a
        stored generation, an export delivered to another intake), so an
        entry over ``ratio_min_bytes`` that deflates better than ``max_ratio``
        — a manifest of a million zeros, an artifact of repeated bytes — is
        written uncompressed rather than refused as ``compression-ratio``.
        """
        info = _new_info(name)
        limits = self.config.limits
        if len(data) > limits.ratio_min_bytes:
            packer = zlib.compressobj(self.config.compresslevel, zlib.DEFLATED, -15)
            packed = len(packer.compress(data)) + len(packer.flush())
            if len(data) / max(packed, 1) > limits.max_ratio:
                info.compress_type = zipfile.ZIP_STORED
        zf.writestr(info, data, compresslevel=self.config.compresslevel)


def export_package(package: Package, target: Path, config: IntakeConfig | None = None) -> Package:
    """Write ``package`` as one complete package (format v1, every checkpoint in it) at ``target``.

    What a producer or another intake receives: no generation record, the
    same files and the same content fingerprint as ``package``, whatever
    stored generation format it was read from. Written under a temporary
    name beside ``target``, validated, fsynced and renamed into place.
    """
    config = config or IntakeConfig()
    target = Path(target).absolute()
    written = PackageWriter(config).write(target.parent, package.manifest, base=package, stored=True, record=False)
    try:
        if written.fingerprint != package.fingerprint:
            raise StorageCorruptError(
                f"the export of {package.path} does not reproduce its content "
                f"({written.fingerprint}, not {package.fingerprint})",
                path=str(package.path),
            )
        os.replace(written.path, target)
    except BaseException:
        written.path.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return read_package(target, config, stored=True)


def history_bytes(package: Package) -> dict[str, bytes]:
    """Every checkpoint file of ``package``'s history (path -> bytes), read along its chain's files."""
    found: dict[str, bytes] = {}
    for path in chain_files(package):
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if name.startswith(CHECKPOINT_DIR) and name not in found and name in package.history:
                    found[name] = zf.read(name)
    return found


def _skipped(name: str, payload_only: bool) -> bool:
    """Entries never copied: the manifest and the record (rewritten), and the checkpoints of a linked base."""
    return name == MANIFEST or name == GENERATION_RECORD or (payload_only and name.startswith(CHECKPOINT_DIR))


def _copy_base(fh: IO[bytes], base: Package, payload_only: bool) -> list[zipfile.ZipInfo]:
    """Copy the entries of ``base`` (all but the manifest and record, or its files only); return their infos.

    The entry list recorded when ``base`` was validated is reused (generations
    and cached inputs are immutable); the result is validated in full anyway.
    """
    if base.zip_entries:
        return _copy_entries(fh, base, list(base.zip_entries), payload_only)
    with zipfile.ZipFile(base.path) as src_zip:
        infos = [i for i in src_zip.infolist() if not i.is_dir()]
    return _copy_entries(fh, base, infos, payload_only)


def _copy_entries(
    fh: IO[bytes], base: Package, infos: list[zipfile.ZipInfo], payload_only: bool
) -> list[zipfile.ZipInfo]:
    ordered = sorted(infos, key=lambda i: i.header_offset)
    wanted = [i for i in ordered if not _skipped(i.filename, payload_only)]
    with open(base.path, "rb") as src:
        if base.appendable and ordered[: len(wanted)] == wanted:
            # the wanted entries are the file's first records: one contiguous copy
            end = ordered[len(wanted)].header_offset
            _copy_range(src, fh, 0, end)
            return [_clone(i) for i in wanted]
        result = []
        for info in ordered:
            if _skipped(info.filename, payload_only):
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
    """Bytes of one local record: header, name, extra, data, data descriptor.

    An entry the scanner read knows where its record ends: a data descriptor
    may hold 4- or 8-byte sizes whatever the sizes are (a zip64 local extra
    asks for 8, and some writers use 8 without one), and the scanner took the
    form that ends where the next record starts.
    """
    end = getattr(info, "record_end", -1)
    if end >= 0:
        return int(end) - info.header_offset
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
