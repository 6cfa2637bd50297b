"""PackageWriter: create and validate one new package generation.

The writer copies every file of a base package byte for byte — its local
records (header, compressed data, data descriptor) and its central headers,
with only the record's offset changed — so a generation costs a file copy
rather than a recompression, and keeps each entry exactly as it was
admitted. It appends the new files and writes the new ``manifest.json`` as
the last entry. It writes the zip itself (:class:`_ZipOut`): new entries are
deflated with ``IntakeConfig.compresslevel``, or stored when deflating
would pass the limits' compression ratio, and zip64 fields appear where an
offset, a size or the count needs them, as :mod:`zipfile` would put them.

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

import os
import struct
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from .archive import Entry
from .canonical import MANIFEST, canonical_json
from .config import IntakeConfig
from .errors import StorageCorruptError
from .fsio import fsync_dir, fsync_file, tmp_name
from .package import (
    CHECKPOINT_DIR,
    GENERATION_RECORD,
    RECORD_FORMAT,
    STORED_FORMAT,
    EncodedManifest,
    Package,
    chain_files,
    generation_name,
    read_package,
)

__all__ = ["PackageWriter", "manifest_bytes", "FIXED_TIME", "generation_record", "export_package", "history_bytes"]

#: every entry the writer creates carries this time, so generations are reproducible
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_DOS_DATE, _DOS_TIME = (FIXED_TIME[0] - 1980) << 9 | FIXED_TIME[1] << 5 | FIXED_TIME[2], 0
_FILE_MODE = 0o100644 << 16
#: "made by": version 2.0 on Unix, as zipfile writes it
_MADE_BY = 3 << 8 | 20
_VERSION, _ZIP64_VERSION = 20, 45
#: above this an offset, a size or the directory goes to zip64 fields (zipfile's limit: readers that take the
#: 32-bit fields as signed are safe)
_ZIP64_LIMIT = (1 << 31) - 1
_U16, _U32 = 0xFFFF, 0xFFFFFFFF
_LOCAL_FMT = struct.Struct("<4s5H3L2H")
_CENTRAL_FMT = struct.Struct("<4s6H3L5H2L")
_CHUNK = 1024 * 1024


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
        encoded: EncodedManifest | None = None,
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
        unless ``linked`` carries it. ``encoded``: ``manifest`` in canonical
        form, when the caller has it (:func:`~tenure.intake.plan.plan_advance`
        does, from a package the intake read), so it is not encoded again;
        the manifest read back is compared with it instead of parsed again.

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
        # the manifest read back is taken as written only when it came encoded from a package the intake read
        # (a plan, an export); any other is parsed back, as JSON reads it
        known = encoded if encoded is not None and (encoded.value is manifest or encoded.value == manifest) else None
        encoded = known or EncodedManifest.of(manifest)
        tmp = folder / tmp_name(".zip")
        try:
            with open(tmp, "xb") as fh:
                out = _ZipOut(fh, self.config)
                try:
                    if base is not None:
                        out.copy(base, payload_only)
                    # files first, checkpoints after: the next generation copies the files as one range
                    for name in sorted(additions, key=lambda n: (n.startswith(CHECKPOINT_DIR), n)):
                        out.add(name, additions[name])
                    if entry is not None:
                        out.add(GENERATION_RECORD, canonical_json(entry) + b"\n")
                    out.add(MANIFEST, encoded.stored)
                    out.finish()
                finally:
                    out.close()
                fh.flush()
                if sync:
                    fsync_file(fh.fileno())
            return read_package(tmp, self.config, base=base, stored=stored, linked=linked, known=known)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


class _Copied:
    """Entries copied as one contiguous run of local records; their central headers follow the same run."""

    __slots__ = ("source", "entries", "shift")

    def __init__(self, source: IO[bytes], entries: list[Entry], shift: int) -> None:
        self.source, self.entries, self.shift = source, entries, shift


class _ZipOut:
    """A zip written front to back: copied runs of records, new entries, then the directory and end records."""

    def __init__(self, fh: IO[bytes], config: IntakeConfig) -> None:
        self.fh = fh
        self.level = config.compresslevel
        self.limits = config.limits
        self.position = 0
        self.count = 0
        #: the central directory in order: central headers of new entries, and runs whose headers are copied
        self.central: list[bytes | _Copied] = []
        self.sources: list[IO[bytes]] = []

    def close(self) -> None:
        for source in self.sources:
            source.close()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self.fh.write(data)
        self.position += len(data)

    # -------------------------------------------------------------- copied entries

    def copy(self, base: Package, payload_only: bool) -> None:
        """Copy ``base``'s file entries (all but the manifest and record, or its files only), in runs.

        The entry list recorded when ``base`` was validated is reused (generations
        and cached inputs are immutable); the result is validated in full anyway.
        """
        source = open(base.path, "rb")
        self.sources.append(source)
        run: list[Entry] = []
        for entry in base.zip_entries:
            if _skipped(entry.filename, payload_only):
                self._copy_run(source, run)
                run = []
                continue
            if run and not (
                entry.header_offset == run[-1].record_end
                and entry.central_offset == run[-1].central_offset + run[-1].central_size
            ):
                self._copy_run(source, run)
                run = []
            run.append(entry)
        self._copy_run(source, run)

    def _copy_run(self, source: IO[bytes], run: list[Entry]) -> None:
        if not run:
            return
        start, end = run[0].header_offset, run[-1].record_end
        self.central.append(_Copied(source, run, self.position - start))
        self.count += len(run)
        source.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = source.read(min(remaining, _CHUNK))
            if not chunk:
                raise OSError("source package ended early")
            self._write(chunk)
            remaining -= len(chunk)

    def _copy_central(self, run: _Copied) -> None:
        """The run's central headers as the base holds them, each with its record's new offset."""
        entries, shift = run.entries, run.shift
        first = 0
        while first < len(entries):
            last, size = first, 0
            while last < len(entries) and (size == 0 or size + entries[last].central_size <= _CHUNK):
                size += entries[last].central_size
                last += 1
            run.source.seek(entries[first].central_offset)
            block = bytearray(run.source.read(size))
            if len(block) != size:
                raise OSError("source package ended early")
            done = at = 0
            for entry in entries[first:last]:
                offset = entry.header_offset + shift
                if offset <= _ZIP64_LIMIT and block[at + 42 : at + 46] != b"\xff\xff\xff\xff":
                    struct.pack_into("<L", block, at + 42, offset)
                else:  # the offset is, or was, in a zip64 field
                    self._write(memoryview(block)[done:at])
                    self._write(_central_with_offset(bytes(block[at : at + entry.central_size]), entry, offset))
                    done = at + entry.central_size
                at += entry.central_size
            self._write(memoryview(block)[done:])
            first = last

    # -------------------------------------------------------------- new entries

    def add(self, name: str, data: bytes) -> None:
        """A new entry, deflated unless that would pass the limits' compression ratio: then stored.

        What the intake writes is judged by the same limits as an input (a
        stored generation, an export delivered to another intake), so an
        entry over ``ratio_min_bytes`` that deflates better than ``max_ratio``
        — a manifest of a million zeros, an artifact of repeated bytes — is
        written uncompressed rather than refused as ``compression-ratio``.
        """
        try:
            raw_name, flags = name.encode("ascii"), 0
        except UnicodeEncodeError:
            raw_name, flags = name.encode("utf-8"), 0x800
        packer = zlib.compressobj(self.level, zlib.DEFLATED, -15)
        packed, method = packer.compress(data) + packer.flush(), 8
        if len(data) > self.limits.ratio_min_bytes and len(data) / max(len(packed), 1) > self.limits.max_ratio:
            packed, method = data, 0
        crc = zlib.crc32(data)
        usize, csize, offset = len(data), len(packed), self.position
        large = usize > _ZIP64_LIMIT or csize > _ZIP64_LIMIT
        version = _ZIP64_VERSION if large else _VERSION
        local_extra = struct.pack("<HHQQ", 1, 16, usize, csize) if large else b""
        self._write(
            _LOCAL_FMT.pack(
                b"PK\x03\x04",
                version,
                flags,
                method,
                _DOS_TIME,
                _DOS_DATE,
                crc,
                _U32 if large else csize,
                _U32 if large else usize,
                len(raw_name),
                len(local_extra),
            )
            + raw_name
            + local_extra
        )
        self._write(packed)
        wide = [v for v in (usize, csize, offset) if v > _ZIP64_LIMIT]
        extra = struct.pack(f"<HH{len(wide)}Q", 1, 8 * len(wide), *wide) if wide else b""
        self.central.append(
            _CENTRAL_FMT.pack(
                b"PK\x01\x02",
                _MADE_BY if not wide else 3 << 8 | _ZIP64_VERSION,
                _ZIP64_VERSION if wide else version,
                flags,
                method,
                _DOS_TIME,
                _DOS_DATE,
                crc,
                _U32 if csize > _ZIP64_LIMIT else csize,
                _U32 if usize > _ZIP64_LIMIT else usize,
                len(raw_name),
                len(extra),
                0,
                0,
                0,
                _FILE_MODE,
                _U32 if offset > _ZIP64_LIMIT else offset,
            )
            + raw_name
            + extra
        )
        self.count += 1

    # -------------------------------------------------------------- directory

    def finish(self) -> None:
        """The central directory (copied runs' headers re-read from their sources), then the end records."""
        cd_offset = self.position
        for piece in self.central:
            if isinstance(piece, _Copied):
                self._copy_central(piece)
            else:
                self._write(piece)
        cd_size = self.position - cd_offset
        count = self.count
        if count > _U16 or cd_size > _ZIP64_LIMIT or cd_offset > _ZIP64_LIMIT:
            end64 = self.position
            version = _ZIP64_VERSION
            self._write(
                struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, version, version, 0, 0, count, count, cd_size, cd_offset)
            )
            self._write(struct.pack("<4sLQL", b"PK\x06\x07", 0, end64, 1))
            count, cd_size, cd_offset = min(count, _U16), min(cd_size, _U32), min(cd_offset, _U32)
        self._write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, cd_size, cd_offset, 0))


def _central_with_offset(raw: bytes, entry: Entry, offset: int) -> bytes:
    """A copied central header rebuilt with its record's new offset, zip64 fields where the values need them.

    The base's other extra fields and its comment are kept (its other extra
    fields are dropped only if the zip64 field would push the extra field
    past what a reader accepts).
    """
    fields = list(_CENTRAL_FMT.unpack_from(raw, 0))
    name_len, extra_len, comment_len = fields[10], fields[11], fields[12]
    name = raw[46 : 46 + name_len]
    extra = raw[46 + name_len : 46 + name_len + extra_len]
    comment = raw[46 + name_len + extra_len : 46 + name_len + extra_len + comment_len]
    others = _without_zip64(extra)
    wide = [v for v in (entry.file_size, entry.compress_size, offset) if v > _ZIP64_LIMIT]
    zip64 = struct.pack(f"<HH{len(wide)}Q", 1, 8 * len(wide), *wide) if wide else b""
    if len(zip64) + len(others) > 1024:
        others = b""
    extra = zip64 + others
    fields[2] = max(fields[2], _ZIP64_VERSION) if wide else fields[2]
    fields[8] = _U32 if entry.compress_size > _ZIP64_LIMIT else entry.compress_size
    fields[9] = _U32 if entry.file_size > _ZIP64_LIMIT else entry.file_size
    fields[11] = len(extra)
    fields[16] = _U32 if offset > _ZIP64_LIMIT else offset
    return _CENTRAL_FMT.pack(*fields) + name + extra + comment


def _without_zip64(extra: bytes) -> bytes:
    """An extra field without its zip64 block."""
    kept = []
    position = 0
    while position + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, position)
        if tag != 1:
            kept.append(extra[position : position + 4 + length])
        position += 4 + length
    return b"".join(kept)


def export_package(package: Package, target: Path, config: IntakeConfig | None = None) -> Package:
    """Write ``package`` as one complete package (format v1, every checkpoint in it) at ``target``.

    What a producer or another intake receives: no generation record, the
    same files and the same content fingerprint as ``package``, whatever
    stored generation format it was read from. Written under a temporary
    name beside ``target``, validated, fsynced and renamed into place.
    """
    config = config or IntakeConfig()
    target = Path(target).absolute()
    written = PackageWriter(config).write(
        target.parent,
        package.manifest,
        base=package,
        stored=True,
        record=False,
        encoded=EncodedManifest.of_package(package),
    )
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
