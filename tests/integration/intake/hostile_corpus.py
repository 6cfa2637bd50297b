"""A corpus of hostile inbox inputs, one generator per class, and the codes each may be quarantined with.

Every generator returns the bytes of one inbox file. Archives are written by
hand with :mod:`struct` (:func:`assemble` with :class:`Member`, every header
field overridable), so each class breaks exactly one rule of a canonical
package and is otherwise a valid package: with the violation removed it would
be admitted (:data:`BENIGN` holds such twins, which must be ACCEPTED).

The classes follow the intake rules:

1. canonical layout: every byte from offset 0 to the end of the central
   directory belongs to exactly one listed entry, in central-directory order;
   after it only [zip64 end record + locator] + end record + a comment running
   exactly to the end of the file; local and central headers agree;
2. mode bits are judged whatever the "made by" host says;
3. version needed above 63, encryption and unsupported flag bits, methods
   other than stored/deflate;
4. the entry count is read from the end record first;
5. entry names;
6. strict manifest and checkpoint JSON, generation numbers up to 99,999,999.

:data:`CORPUS_CONFIG` holds the small limits the corpus is judged under.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig, Limits, Workspace
from tenure.intake.pack import new_manifest, write_package

__all__ = [
    "CORPUS",
    "BENIGN",
    "CORPUS_CONFIG",
    "CORPUS_LIMITS",
    "Hostile",
    "Member",
    "assemble",
    "local_header",
    "central_header",
    "end_record",
    "zip64_end_record",
    "zip64_locator",
    "package_members",
    "write_many_entries",
    "FOUR_MILLION",
]

# --------------------------------------------------------------------------- limits

CORPUS_LIMITS = Limits(
    max_entries=50,
    manifest_bytes=8192,
    uncompressed_bytes=4 * 1024 * 1024,
    max_path_depth=8,
    max_path_bytes=128,
)
CORPUS_CONFIG = IntakeConfig(limits=CORPUS_LIMITS)

FOUR_MILLION = 4_000_000

# --------------------------------------------------------------------------- codes

STRUCTURE = frozenset({"non-canonical-zip", "header-mismatch"})
BROKEN = STRUCTURE | {"truncated-zip"}
CORRUPT = frozenset({"corrupt-entry"})

# --------------------------------------------------------------------------- records

LOCAL_SIG = b"PK\x03\x04"
CENTRAL_SIG = b"PK\x01\x02"
END_SIG = b"PK\x05\x06"
ZIP64_END_SIG = b"PK\x06\x06"
ZIP64_LOCATOR_SIG = b"PK\x06\x07"
DESCRIPTOR_SIG = b"PK\x07\x08"

UNIX = 3
#: 1980-01-01 00:00:00 in MS-DOS form
DOS_DATE = (0 << 9) | (1 << 5) | 1
DOS_TIME = 0
FILE_MODE = 0o100644
DIR_MODE = 0o040755


def local_header(
    name: bytes,
    *,
    version: int = 20,
    flags: int = 0,
    method: int = 8,
    time: int = DOS_TIME,
    date: int = DOS_DATE,
    crc: int = 0,
    csize: int = 0,
    usize: int = 0,
    extra: bytes = b"",
    name_len: int | None = None,
    extra_len: int | None = None,
    signature: bytes = LOCAL_SIG,
) -> bytes:
    """A local file header (30 bytes + name + extra)."""
    return (
        struct.pack(
            "<4s5H3L2H",
            signature,
            version,
            flags,
            method,
            time,
            date,
            crc,
            csize,
            usize,
            len(name) if name_len is None else name_len,
            len(extra) if extra_len is None else extra_len,
        )
        + name
        + extra
    )


def central_header(
    name: bytes,
    *,
    made_by: int = (UNIX << 8) | 20,
    version: int = 20,
    flags: int = 0,
    method: int = 8,
    time: int = DOS_TIME,
    date: int = DOS_DATE,
    crc: int = 0,
    csize: int = 0,
    usize: int = 0,
    extra: bytes = b"",
    comment: bytes = b"",
    disk: int = 0,
    internal: int = 0,
    external: int = FILE_MODE << 16,
    offset: int = 0,
    name_len: int | None = None,
    extra_len: int | None = None,
    comment_len: int | None = None,
    signature: bytes = CENTRAL_SIG,
) -> bytes:
    """A central directory header (46 bytes + name + extra + comment)."""
    return (
        struct.pack(
            "<4s6H3L5H2L",
            signature,
            made_by,
            version,
            flags,
            method,
            time,
            date,
            crc,
            csize,
            usize,
            len(name) if name_len is None else name_len,
            len(extra) if extra_len is None else extra_len,
            len(comment) if comment_len is None else comment_len,
            disk,
            internal,
            external,
            offset,
        )
        + name
        + extra
        + comment
    )


def end_record(
    count: int,
    size: int,
    offset: int,
    *,
    disk: int = 0,
    cd_disk: int = 0,
    disk_count: int | None = None,
    comment: bytes = b"",
    comment_len: int | None = None,
) -> bytes:
    """The end of central directory record (22 bytes + comment)."""
    return (
        struct.pack(
            "<4s4H2LH",
            END_SIG,
            disk,
            cd_disk,
            count if disk_count is None else disk_count,
            count,
            size,
            offset,
            len(comment) if comment_len is None else comment_len,
        )
        + comment
    )


def zip64_end_record(
    count: int,
    size: int,
    offset: int,
    *,
    record_size: int = 44,
    made_by: int = (UNIX << 8) | 45,
    version: int = 45,
    disk: int = 0,
    cd_disk: int = 0,
    disk_count: int | None = None,
) -> bytes:
    """The zip64 end of central directory record (56 bytes)."""
    return struct.pack(
        "<4sQ2H2L4Q",
        ZIP64_END_SIG,
        record_size,
        made_by,
        version,
        disk,
        cd_disk,
        count if disk_count is None else disk_count,
        count,
        size,
        offset,
    )


def zip64_locator(offset: int, *, disk: int = 0, disks: int = 1) -> bytes:
    """The zip64 end of central directory locator (20 bytes)."""
    return struct.pack("<4sLQL", ZIP64_LOCATOR_SIG, disk, offset, disks)


def zip64_extra(*values: int) -> bytes:
    """A zip64 extended information extra field holding 8-byte values."""
    body = b"".join(struct.pack("<Q", v) for v in values)
    return struct.pack("<HH", 0x0001, len(body)) + body


def deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


@dataclass
class Member:
    """One archive entry; ``local``/``central``/``descriptor_fields`` override single header fields."""

    name: bytes
    plain: bytes = b""
    method: int = 8
    flags: int = 0
    version: int = 20
    made_by: int = (UNIX << 8) | 20
    mode: int = FILE_MODE
    external: int | None = None
    #: write a data descriptor (sets flag bit 3; local CRC and sizes are 0)
    descriptor: bool = False
    #: the data descriptor holds 8-byte sizes (zip64)
    descriptor_wide: bool = False
    #: the local header's sizes are 0xFFFFFFFF and a zip64 extra field holds them
    zip64_local: bool = False
    #: raw bytes stored for the entry; default: ``plain`` compressed with ``method``
    data: bytes | None = None
    local: dict[str, Any] = field(default_factory=dict)
    central: dict[str, Any] = field(default_factory=dict)
    descriptor_fields: dict[str, int] = field(default_factory=dict)

    @property
    def stored(self) -> bytes:
        if self.data is not None:
            return self.data
        return deflate(self.plain) if self.method == 8 else self.plain

    @property
    def crc(self) -> int:
        return zlib.crc32(self.plain)

    @property
    def all_flags(self) -> int:
        return self.flags | (0x08 if self.descriptor else 0)

    def local_record(self) -> bytes:
        data = self.stored
        fields: dict[str, Any] = {
            "version": self.version,
            "flags": self.all_flags,
            "method": self.method,
            "crc": 0 if self.descriptor else self.crc,
            "csize": 0 if self.descriptor else len(data),
            "usize": 0 if self.descriptor else len(self.plain),
        }
        if self.zip64_local:
            fields["extra"] = zip64_extra(fields["usize"], fields["csize"])
            fields["usize"] = fields["csize"] = 0xFFFFFFFF
        fields.update(self.local)
        name = fields.pop("name", self.name)
        record = local_header(name, **fields) + data
        if self.descriptor:
            desc = {"crc": self.crc, "csize": len(data), "usize": len(self.plain), **self.descriptor_fields}
            layout = "<LQQ" if self.descriptor_wide else "<3L"
            record += DESCRIPTOR_SIG + struct.pack(layout, desc["crc"], desc["csize"], desc["usize"])
        return record

    def central_record(self, offset: int) -> bytes:
        data = self.stored
        fields: dict[str, Any] = {
            "made_by": self.made_by,
            "version": self.version,
            "flags": self.all_flags,
            "method": self.method,
            "crc": self.crc,
            "csize": len(data),
            "usize": len(self.plain),
            "external": (self.mode << 16) if self.external is None else self.external,
            "offset": offset,
        }
        fields.update(self.central)
        name = fields.pop("name", self.name)
        return central_header(name, **fields)


@dataclass(frozen=True)
class Layout:
    """Where things landed in an assembled archive."""

    offsets: tuple[int, ...]
    cd_offset: int
    cd_size: int


def assemble(
    members: Sequence[Member],
    *,
    prefix: bytes = b"",
    before: Mapping[int, bytes] | None = None,
    before_cd: bytes = b"",
    after_cd: bytes = b"",
    no_record: frozenset[int] = frozenset(),
    order: Sequence[int] | None = None,
    relative_offsets: bool = False,
    zip64: bool = False,
    zip64_fields: Mapping[str, int] | None = None,
    locator_fields: Mapping[str, int] | None = None,
    between_zip64_and_end: bytes = b"",
    end_fields: Mapping[str, Any] | None = None,
    comment: bytes = b"",
    trailer: bytes = b"",
    offset_override: Mapping[int, int] | None = None,
    with_layout: Callable[[Layout], None] | None = None,
) -> bytes:
    """Write ``members`` as a zip: local records, central directory, [zip64 records], end record.

    ``before[i]`` is inserted (unlisted) before member ``i``'s local record;
    ``order`` is the central-directory order (member indexes);
    ``relative_offsets`` counts offsets from the end of ``prefix`` (as a
    self-extractor would); ``offset_override[i]`` replaces member ``i``'s
    recorded offset; members in ``no_record`` get no local record of their
    own (give them an offset); ``after_cd`` follows the central directory.
    """
    before = before or {}
    out = bytearray(prefix)
    base = len(prefix) if relative_offsets else 0
    offsets: list[int] = []
    for index, member in enumerate(members):
        out += before.get(index, b"")
        offsets.append(len(out) - base)
        if index not in no_record:
            out += member.local_record()
    out += before_cd
    cd_offset = len(out) - base
    central = b"".join(
        members[i].central_record((offset_override or {}).get(i, offsets[i]))
        for i in (range(len(members)) if order is None else order)
    )
    out += central
    out += after_cd
    count = len(members)
    if zip64:
        z64_at = len(out) - base
        out += zip64_end_record(
            **{"count": count, "size": len(central), "offset": cd_offset, **dict(zip64_fields or {})}
        )
        out += zip64_locator(**{"offset": z64_at, **dict(locator_fields or {})})
        out += between_zip64_and_end
    end: dict[str, Any] = {"count": count, "size": len(central), "offset": cd_offset, "comment": comment}
    end.update(end_fields or {})
    out += end_record(**end)
    out += trailer
    if with_layout is not None:
        with_layout(Layout(tuple(offsets), cd_offset, len(central)))
    return bytes(out)


# --------------------------------------------------------------------------- packages


def manifest_text(case: str, **fields: Any) -> bytes:
    """A NEW manifest for ``case`` as JSON bytes; ``fields`` replace top-level keys."""
    manifest = new_manifest(case, "pkg")
    manifest.update(fields)
    return json.dumps(manifest, indent=1).encode()


def package_members(
    case: str,
    *,
    manifest: bytes | None = None,
    files: Mapping[str, bytes] | None = None,
    method: int = 8,
    **member_fields: Any,
) -> list[Member]:
    """manifest.json and the package's files as members (a valid NEW package)."""
    files = {"input/report.txt": f"report of {case}\n".encode() * 4} if files is None else files
    entries = {"manifest.json": manifest_text(case) if manifest is None else manifest, **files}
    return [Member(name.encode(), data, method=method, **member_fields) for name, data in entries.items()]


def package(case: str, **kwargs: Any) -> bytes:
    return assemble(package_members(case, **kwargs))


def with_file(case: str, name: bytes, data: bytes = b"x", **member_fields: Any) -> bytes:
    """A valid package plus one extra member built from the given fields."""
    return assemble([*package_members(case), Member(name, data, **member_fields)])


def _mutate(case: str, index: int, **changes: Any) -> bytes:
    """A valid package whose member ``index`` (0 manifest, 1 report) has ``changes``."""
    members = package_members(case)
    members[index] = replace(members[index], **changes)
    return assemble(members)


# --------------------------------------------------------------------------- advanced packages


@functools.cache
def _advanced_entries(kind: str) -> tuple[tuple[str, bytes], ...]:
    """The entries of a stored generation: BUILDING_CASE (``"building"``) or BLOCKED (``"blocked"``)."""
    with tempfile.TemporaryDirectory(prefix="hostile-corpus-") as folder:
        ws = Workspace(Path(folder) / "ws")
        write_package(ws.inbox / "in.zip", new_manifest("hostile-advanced", "pkg"), {"input/report.txt": b"report"})
        results = [r for r in InboxProcessor(ws).poll() if r.input_path is not None]
        assert [r.kind.value for r in results] == ["ACCEPTED"], results
        store = CheckpointStore(ws)
        store.advance("hostile-advanced", "pkg", "BUILDING_CASE", step_id="start")
        if kind == "blocked":
            store.advance(
                "hostile-advanced",
                "pkg",
                "BLOCKED",
                step_id="wait",
                reason="waiting for a colleague",
                retry_at=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
            )
        complete = store.export("hostile-advanced", "pkg", Path(folder) / "complete.zip")  # a package, not a generation
        with zipfile.ZipFile(complete.path) as zf:
            return tuple((info.filename, zf.read(info)) for info in zf.infolist() if not info.is_dir())


def advanced(
    kind: str,
    manifest: Callable[[dict[str, Any]], None] | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    *,
    raw: Callable[[bytes, bool], bytes] | None = None,
) -> bytes:
    """A stored generation rebuilt by hand; ``manifest``/``checkpoint`` edit the manifest and the latest
    checkpoint as dicts, ``raw(text, is_manifest)`` edits their JSON text afterwards."""
    entries = dict(_advanced_entries(kind))
    document = json.loads(entries["manifest.json"])
    latest = document["artifacts"]["lifecycle_checkpoint"]
    edits: dict[str, Callable[[dict[str, Any]], None] | None] = {"manifest.json": manifest, latest: checkpoint}
    for name, edit in edits.items():
        if edit is None and raw is None:
            continue
        value = json.loads(entries[name])
        if edit is not None:
            edit(value)
        text = json.dumps(value, indent=1).encode()
        entries[name] = raw(text, name == "manifest.json") if raw is not None else text
    return assemble([Member(name.encode(), data) for name, data in entries.items()])


def _set_retry_at(value: str) -> tuple[Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], None]]:
    def on_manifest(m: dict[str, Any]) -> None:
        m["blocked"]["retry_at"] = value

    def on_checkpoint(c: dict[str, Any]) -> None:
        c["routing"]["retry_at"] = value

    return on_manifest, on_checkpoint


def _retry_at(value: str) -> bytes:
    on_manifest, on_checkpoint = _set_retry_at(value)
    return advanced("blocked", on_manifest, on_checkpoint)


def _generation(value: int) -> bytes:
    def edit(m: dict[str, Any]) -> None:
        m["generation"] = value

    return advanced("building", edit)


def _checkpoint_edit(edit: Callable[[dict[str, Any]], None]) -> bytes:
    return advanced("building", checkpoint=edit)


def _checkpoint_raw(placeholder_value: str) -> bytes:
    """The latest checkpoint's details hold ``placeholder_value`` as raw JSON text."""

    def edit(c: dict[str, Any]) -> None:
        c["details"] = {"x": "@@RAW@@"}

    def raw(text: bytes, is_manifest: bool) -> bytes:
        return text if is_manifest else text.replace(b'"@@RAW@@"', placeholder_value.encode())

    return advanced("building", checkpoint=edit, raw=raw)


# --------------------------------------------------------------------------- JSON


def _manifest_raw(case: str, raw: str, *, key: str = "metadata") -> bytes:
    """A NEW package whose manifest holds ``raw`` JSON text verbatim: as ``metadata.x`` or as ``key``."""
    value: Any = {"x": "@@RAW@@"} if key == "metadata" else "@@RAW@@"
    text = manifest_text(case, **{key: value}).replace(b'"@@RAW@@"', raw.encode())
    return package(case, manifest=text)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --------------------------------------------------------------------------- rule 1: canonical layout


def hidden_local_record(case: str) -> bytes:
    """A complete local record for ``../../x`` between two entries, listed nowhere."""
    hidden = Member(b"../../x", b"owned\n").local_record()
    return assemble(package_members(case), before={1: hidden})


def prefix_fake_local(case: str) -> bytes:
    """A local record for ``../../x`` before the first entry; offsets count from the file start."""
    return assemble(package_members(case), prefix=Member(b"../../x", b"owned\n").local_record())


def prefix_relative(case: str) -> bytes:
    """A self-extractor style stub before the archive; offsets count from the end of the stub."""
    return assemble(package_members(case), prefix=b"MZ" + b"\0" * 62, relative_offsets=True)


def concatenated(case: str) -> bytes:
    """Two complete zips back to back; the second's offsets are its own."""
    return package(case + "-first") + package(case)


def concatenated_adjusted(case: str) -> bytes:
    """Two zips back to back; the second's offsets are rebased onto the whole file."""
    first = package(case + "-first")
    return assemble(package_members(case), prefix=first)


def zip64_count_lie(case: str) -> bytes:
    return assemble(package_members(case), zip64=True, zip64_fields={"count": 3}, end_fields={"count": 0xFFFF})


def zip64_disagrees(case: str) -> bytes:
    """The zip64 end record and the end record give different entry counts."""
    return assemble(package_members(case), zip64=True, zip64_fields={"count": 3})


def zip64_offset_lie(case: str) -> bytes:
    """The zip64 end record puts the central directory at the second entry."""
    offsets: list[int] = []
    assemble(package_members(case), with_layout=lambda layout: offsets.extend(layout.offsets))
    return assemble(
        package_members(case),
        zip64=True,
        zip64_fields={"offset": offsets[1]},
        end_fields={"offset": 0xFFFFFFFF},
    )


def zip64_locator_lie(case: str) -> bytes:
    """The locator points at the first local header instead of the zip64 end record."""
    return assemble(package_members(case), zip64=True, locator_fields={"offset": 0}, end_fields={"count": 0xFFFF})


def zip64_locator_past_end(case: str) -> bytes:
    return assemble(package_members(case), zip64=True, locator_fields={"offset": 2**62}, end_fields={"count": 0xFFFF})


def zip64_record_without_locator(case: str) -> bytes:
    """A zip64 end record after the directory but no locator before the end record."""
    members = package_members(case)
    layout: list[Layout] = []
    assemble(members, with_layout=layout.append)
    return assemble(members, after_cd=zip64_end_record(len(members), layout[0].cd_size, layout[0].cd_offset))


def zip64_record_size_lie(case: str) -> bytes:
    """The zip64 end record claims a huge extensible data sector."""
    return assemble(
        package_members(case), zip64=True, zip64_fields={"record_size": 2**40}, end_fields={"count": 0xFFFF}
    )


def zip64_extra_size_lie(case: str) -> bytes:
    """The central header defers its sizes to a zip64 extra field that lies about the uncompressed size."""
    members = package_members(case)
    report = members[1]
    csize, usize = len(report.stored), len(report.plain)
    members[1] = replace(
        report, central={"csize": 0xFFFFFFFF, "usize": 0xFFFFFFFF, "extra": zip64_extra(usize + 1000, csize)}
    )
    return assemble(members)


def zip64_extra_huge(case: str) -> bytes:
    """Both headers claim a 1 TiB uncompressed size through zip64 extra fields."""
    members = package_members(case)
    report = members[1]
    csize = len(report.stored)
    huge = 2**40
    members[1] = replace(
        report,
        version=45,
        local={"csize": 0xFFFFFFFF, "usize": 0xFFFFFFFF, "extra": zip64_extra(huge, csize)},
        central={"csize": 0xFFFFFFFF, "usize": 0xFFFFFFFF, "extra": zip64_extra(huge, csize)},
    )
    return assemble(members)


def zip64_extra_offset_lie(case: str) -> bytes:
    """The second entry's zip64 extra points its local header at the first entry."""
    members = package_members(case)
    members[1] = replace(members[1], central={"extra": zip64_extra(0)})
    return assemble(members, offset_override={1: 0xFFFFFFFF})


def gap_between_entries(case: str) -> bytes:
    return assemble(package_members(case), before={1: b"\0" * 16})


def gap_before_directory(case: str) -> bytes:
    return assemble(package_members(case), before_cd=b"junk" * 4)


def shared_local_record(case: str) -> bytes:
    """Two directory entries (manifest.json and copy.txt) point at one local record."""
    members = package_members(case)
    copy = replace(members[0], name=b"copy.txt")
    return assemble([*members, copy], no_record=frozenset({2}), offset_override={2: 0})


def embedded_record(case: str) -> bytes:
    """A stored entry whose data holds the complete local record of the next listed entry."""
    inner = Member(b"input/inner.txt", b"inner data\n", method=0)
    outer = Member(b"input/outer.bin", b"head" + inner.local_record() + b"tail", method=0)
    members = [*package_members(case), outer, inner]
    layout: list[Layout] = []
    assemble(members[:3], with_layout=layout.append)
    inner_at = layout[0].offsets[2] + 30 + len(outer.name) + len(b"head")
    return assemble(members, no_record=frozenset({3}), offset_override={3: inner_at})


def directory_out_of_order(case: str) -> bytes:
    return assemble(package_members(case), order=[1, 0])


def comment_with_fake_end(case: str) -> bytes:
    """The archive comment holds a second end record describing an empty archive."""
    members = package_members(case)
    layout: list[Layout] = []
    assemble(members, with_layout=layout.append)
    cd_end = layout[0].cd_offset + layout[0].cd_size
    fake_at = cd_end + 22
    fake = end_record(0, 0, fake_at)
    return assemble(members, comment=fake)


def trailing_junk(case: str) -> bytes:
    return assemble(package_members(case), trailer=b"\0junk after the end record")


def comment_length_short(case: str) -> bytes:
    return assemble(package_members(case), comment=b"0123456789", end_fields={"comment_len": 4})


def comment_length_long(case: str) -> bytes:
    return assemble(package_members(case), comment=b"0123456789", end_fields={"comment_len": 400})


def descriptor_crc_differs(case: str) -> bytes:
    return _mutate(case, 1, descriptor=True, descriptor_fields={"crc": 0xDEADBEEF})


def descriptor_size_differs(case: str) -> bytes:
    members = package_members(case)
    members[1] = replace(members[1], descriptor=True)
    members[1].descriptor_fields["usize"] = len(members[1].plain) + 1
    return assemble(members)


def descriptor_without_flag(case: str) -> bytes:
    """Data descriptor bytes follow an entry whose flag bit 3 is clear."""
    members = package_members(case)
    report = members[1]
    desc = DESCRIPTOR_SIG + struct.pack("<3L", report.crc, len(report.stored), len(report.plain))
    return assemble([*members, Member(b"input/z.txt", b"z")], before={2: desc})


def entry_offset_past_end(case: str) -> bytes:
    return assemble(package_members(case), offset_override={1: 0x7FFFFFF0})


def entry_offset_into_directory(case: str) -> bytes:
    layout: list[Layout] = []
    members = package_members(case)
    assemble(members, with_layout=layout.append)
    return assemble(members, offset_override={1: layout[0].cd_offset})


def directory_offset_past_end(case: str) -> bytes:
    return assemble(package_members(case), end_fields={"offset": 0xFFFFFFF0})


def directory_offset_negative(case: str) -> bytes:
    """The end record puts the directory after where it is: rebasing would make offsets negative."""
    layout: list[Layout] = []
    members = package_members(case)
    assemble(members, with_layout=layout.append)
    return assemble(members, end_fields={"offset": layout[0].cd_offset + 64})


def directory_size_lie(case: str) -> bytes:
    layout: list[Layout] = []
    members = package_members(case)
    assemble(members, with_layout=layout.append)
    return assemble(members, end_fields={"size": layout[0].cd_size + 10})


def end_count_short(case: str) -> bytes:
    return assemble(package_members(case), end_fields={"count": 1})


def multi_disk(case: str) -> bytes:
    return assemble(package_members(case), end_fields={"disk": 1, "cd_disk": 1})


def local_field(case: str, **local: Any) -> bytes:
    return _mutate(case, 1, local=local)


def local_size_differs(case: str) -> bytes:
    members = package_members(case)
    report = members[1]
    members[1] = replace(report, local={"usize": len(report.plain) + 1})
    return assemble(members)


def stored_size_mismatch(case: str) -> bytes:
    """A stored entry whose headers (both) say compressed 8 bytes, uncompressed 16, with 8 bytes of data."""
    plain = b"A" * 16
    member = Member(b"input/a.bin", plain, method=0, data=plain[:8])
    return assemble([*package_members(case), member])


def stored_larger_than_declared(case: str) -> bytes:
    """A stored entry with 16 bytes of data whose headers declare 8 compressed and 8 uncompressed."""
    plain = b"B" * 16
    sizes = {"csize": 8, "usize": 8}
    member = Member(b"input/b.bin", plain, method=0, local=dict(sizes), central=dict(sizes))
    return assemble([*package_members(case), member])


def crc_wrong(case: str) -> bytes:
    return _mutate(case, 1, local={"crc": 0x12345678}, central={"crc": 0x12345678})


def deflate_garbage(case: str) -> bytes:
    members = package_members(case)
    report = members[1]
    garbage = bytes([0xFF]) * len(report.stored)
    members[1] = replace(report, data=garbage)
    return assemble(members)


def deflate_longer_than_declared(case: str) -> bytes:
    """A deflate stream of 1 MiB of zeros whose headers declare 100 bytes (CRC of the first 100)."""
    plain = b"\0" * (1 << 20)
    declared = plain[:100]
    member = Member(b"input/zeros.bin", declared, data=deflate(plain))
    return assemble([*package_members(case), member])


# --------------------------------------------------------------------------- rule 2: modes


HOSTS = {"dos": 0, "os2": 6, "atari": 5, "vms": 2, "mac": 7, "beos": 16, "atheos": 18, "osx": 19, "ntfs": 11}
SPECIAL_MODES = {"fifo": 0o010644, "char": 0o020644, "block": 0o060644, "socket": 0o140644}
SYMLINK_MODE = 0o120777


def mode_entry(case: str, host: int, mode: int) -> bytes:
    return with_file(case, b"input/odd", b"/etc/passwd", made_by=(host << 8) | 20, external=(mode << 16) | 0x20)


# --------------------------------------------------------------------------- rule 4: counts


def end_count_claim(case: str) -> bytes:
    """The end record claims 60,000 entries (the limit is 50); the directory holds two."""
    return assemble(package_members(case), end_fields={"count": 60_000})


def zip64_four_million_claim(case: str) -> bytes:
    """The zip64 end record claims 4,000,000 entries; the directory holds two."""
    return assemble(
        package_members(case),
        zip64=True,
        zip64_fields={"count": FOUR_MILLION},
        end_fields={"count": 0xFFFF},
    )


def real_too_many(case: str) -> bytes:
    """One producer file more than max_entries (manifest.json counts apart)."""
    files = {f"input/{i:03d}.txt": b"" for i in range(CORPUS_LIMITS.max_entries + 1)}
    return package(case, files=files)


def write_many_entries(path: Path, count: int = FOUR_MILLION) -> int:
    """Write an archive whose directory really lists ``count`` entries (all naming one local record).

    Streams the directory in chunks, so ``count`` entries cost little memory
    here; returns the file size (about 47 bytes per entry).
    """
    first = Member(b"m", b"")
    record = first.local_record()
    one = first.central_record(0)
    with open(path, "wb") as fh:
        fh.write(record)
        chunk = one * 100_000
        written = 0
        while written < count:
            step = min(100_000, count - written)
            fh.write(chunk if step == 100_000 else one * step)
            written += step
        cd_size = count * len(one)
        z64_at = len(record) + cd_size
        fh.write(zip64_end_record(count, cd_size, len(record)))
        fh.write(zip64_locator(z64_at))
        fh.write(end_record(0xFFFF, cd_size, len(record)))
    return os.stat(path).st_size


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Hostile:
    """One hostile class: how to build it, the codes it may be quarantined with, its inbox name."""

    name: str
    rule: str
    build: Callable[[], bytes]
    codes: frozenset[str]
    filename: bytes

    def __repr__(self) -> str:
        return f"Hostile({self.name!r})"


def _entries() -> Iterable[tuple[str, str, Callable[[str], bytes], Iterable[str]]]:
    s, b = STRUCTURE, BROKEN
    # rule 1: canonical layout and header agreement
    yield "hidden-local-record", "1", hidden_local_record, s | {"unsafe-path"}
    yield "prefix-fake-local", "1", prefix_fake_local, s | {"unsafe-path"}
    yield "prefix-sfx-relative", "1", prefix_relative, s | {"not-a-zip"}
    yield "concatenated-zips", "1", concatenated, b
    yield "concatenated-rebased", "1", concatenated_adjusted, s
    yield "zip64-count-lie", "1", zip64_count_lie, b
    yield "zip64-disagrees-with-end", "1", zip64_disagrees, b
    yield "zip64-offset-lie", "1", zip64_offset_lie, b
    yield "zip64-locator-lie", "1", zip64_locator_lie, b
    yield "zip64-locator-past-end", "1", zip64_locator_past_end, b
    yield "zip64-record-without-locator", "1", zip64_record_without_locator, b
    yield "zip64-record-size-lie", "1", zip64_record_size_lie, b
    yield "zip64-extra-size-lie", "1", zip64_extra_size_lie, s | CORRUPT
    yield (
        "zip64-extra-huge",
        "1",
        zip64_extra_huge,
        s | CORRUPT | {"uncompressed-too-large", "compression-ratio"},
    )
    yield "zip64-extra-offset-lie", "1", zip64_extra_offset_lie, s | {"overlapping-entries"}
    yield "gap-between-entries", "1", gap_between_entries, s
    yield "gap-before-directory", "1", gap_before_directory, s
    yield "overlap-shared-record", "1", shared_local_record, s | {"overlapping-entries"}
    yield "overlap-embedded-record", "1", embedded_record, s | {"overlapping-entries"}
    yield "directory-out-of-order", "1", directory_out_of_order, s
    yield "comment-fake-end-record", "1", comment_with_fake_end, b
    yield "trailing-junk", "1", trailing_junk, b
    yield "comment-length-short", "1", comment_length_short, b
    yield "comment-length-past-end", "1", comment_length_long, b
    yield "descriptor-crc-differs", "1", descriptor_crc_differs, s | CORRUPT
    yield "descriptor-size-differs", "1", descriptor_size_differs, s | CORRUPT
    yield "descriptor-without-flag", "1", descriptor_without_flag, s
    yield "local-name-differs", "1", lambda c: local_field(c, name=b"../../x"), s | {"unsafe-path"}
    yield "local-name-case-differs", "1", lambda c: local_field(c, name=b"input/REPORT.txt"), s
    yield "local-flags-differ", "1", lambda c: local_field(c, flags=0x800), s
    yield "local-method-differs", "1", lambda c: local_field(c, method=0), s | CORRUPT
    yield "local-crc-differs", "1", lambda c: local_field(c, crc=0x12345678), s | CORRUPT
    yield "local-size-differs", "1", local_size_differs, s | CORRUPT
    yield "local-mtime-differs", "1", lambda c: local_field(c, time=0x6000), s
    yield "stored-sizes-disagree", "1", stored_size_mismatch, s | CORRUPT
    yield "stored-data-longer", "1", stored_larger_than_declared, s | CORRUPT
    yield "entry-offset-past-end", "1", entry_offset_past_end, b
    yield "entry-offset-into-directory", "1", entry_offset_into_directory, s | {"overlapping-entries"}
    yield "directory-offset-past-end", "1", directory_offset_past_end, b
    yield "directory-offset-negative", "1", directory_offset_negative, b
    yield "directory-size-lie", "1", directory_size_lie, b
    yield "end-count-short", "1", end_count_short, b
    yield "multi-disk", "1", multi_disk, b | {"unsupported-zip-feature"}
    yield "crc-wrong", "1", crc_wrong, CORRUPT
    yield "deflate-garbage", "1", deflate_garbage, CORRUPT
    yield "deflate-longer-than-declared", "1", deflate_longer_than_declared, CORRUPT | {"compression-ratio"}
    # rule 2: modes whatever the host
    for host_name, host in HOSTS.items():
        yield (
            f"symlink-host-{host_name}",
            "2",
            functools.partial(mode_entry, host=host, mode=SYMLINK_MODE),
            {"symlink-entry"},
        )
        yield (
            f"fifo-host-{host_name}",
            "2",
            functools.partial(mode_entry, host=host, mode=SPECIAL_MODES["fifo"]),
            {"special-entry"},
        )
    for host_name, host in (("unix", UNIX), ("dos", 0)):
        for kind in ("char", "block", "socket"):
            yield (
                f"{kind}-host-{host_name}",
                "2",
                functools.partial(mode_entry, host=host, mode=SPECIAL_MODES[kind]),
                {"special-entry"},
            )
    # rule 3: versions, flags, methods
    yield "version-64", "3", lambda c: _mutate(c, 1, version=64), {"unsupported-zip-version"}
    yield "version-65535", "3", lambda c: _mutate(c, 1, version=0xFFFF), {"unsupported-zip-version"}
    yield "local-version-64", "3", lambda c: local_field(c, version=64), {"unsupported-zip-version"}
    yield "flag-encrypted", "3", lambda c: _mutate(c, 1, flags=0x1), {"encrypted-entry"}
    yield "flag-strong-encryption", "3", lambda c: _mutate(c, 1, flags=0x40), {"encrypted-entry"}
    yield "flag-masked-directory", "3", lambda c: _mutate(c, 1, flags=0x2000), {"encrypted-entry"}
    yield "flag-enhanced-deflate", "3", lambda c: _mutate(c, 1, flags=0x10), {"unsupported-zip-feature"}
    yield "flag-patched-data", "3", lambda c: _mutate(c, 1, flags=0x20), {"unsupported-zip-feature"}
    for method in (1, 9, 12, 14, 93, 95):
        yield f"method-{method}", "3", functools.partial(_method, method=method), {"unsupported-compression"}
    yield "method-99-aes", "3", functools.partial(_method, method=99), {"unsupported-compression", "encrypted-entry"}
    # rule 4: counts
    yield "end-count-claim-60000", "4", end_count_claim, {"too-many-entries"}
    yield "zip64-count-claim-4m", "4", zip64_four_million_claim, {"too-many-entries"}
    yield "entries-over-limit", "4", real_too_many, {"too-many-entries"}
    # rule 5: names
    unsafe = {
        "traversal": b"../../x",
        "traversal-inner": b"input/../../x",
        "absolute": b"/etc/cron.d/x",
        "drive": b"C:/Windows/x",
        "drive-relative": b"C:x",
        "backslash": b"input\\..\\..\\x",
        "nul": b"input/a\x00.txt",
        "control-escape": b"input/\x1b[31mred.txt",
        "control-newline": b"input/a\nb.txt",
        "control-del": b"input/a\x7f.txt",
        "control-c1": "input/a\u0085.txt".encode(),
        "dot-segment": b"input/./a.txt",
        "empty-segment": b"input//a.txt",
    }
    for label, name in unsafe.items():
        flags = 0x800 if any(byte >= 0x80 for byte in name) else 0
        yield f"name-{label}", "5", functools.partial(with_file, name=name, flags=flags), {"unsafe-path"}
    depth = CORPUS_LIMITS.max_path_depth + 1
    yield "name-too-deep", "5", functools.partial(with_file, name=b"/".join([b"d"] * depth)), {"path-too-deep"}
    too_long = b"input/" + b"n" * (CORPUS_LIMITS.max_path_bytes - 5)
    yield "name-too-long", "5", functools.partial(with_file, name=too_long), {"path-too-long"}
    bad_utf8 = {
        "invalid": b"input/\xff\xfe.txt",
        "overlong-slash": b"input/\xc0\xaf.txt",
        "surrogate": b"a\xed\xa0\x80",
    }
    for label, name in bad_utf8.items():
        yield f"name-utf8-{label}", "5", functools.partial(with_file, name=name, flags=0x800), {"bad-entry-name"}
    yield "name-duplicate", "5", functools.partial(with_file, name=b"input/report.txt"), {"duplicate-entry"}
    yield "name-duplicate-manifest", "5", functools.partial(with_file, name=b"manifest.json"), {"duplicate-entry"}
    yield (
        "path-conflict-file-under-file",
        "5",
        functools.partial(with_file, name=b"input/report.txt/x"),
        {"path-conflict"},
    )
    yield "path-conflict-file-then-child", "5", _conflict_reversed, {"path-conflict"}
    yield "path-conflict-folder-entry", "5", _conflict_folder, {"path-conflict", "duplicate-entry"}
    # rule 6: strict JSON
    invalid = {"invalid-manifest"}
    raw_values = {
        "depth-70": _nested(70),
        "depth-1500": _nested(1500),
        "lone-surrogate": '"\\ud800"',
        "lone-low-surrogate": '"a\\udc80b"',
        "1e400": "1e400",
        "neg-1e400": "-1e400",
        "nan": "NaN",
        "infinity": "Infinity",
        "neg-infinity": "-Infinity",
        "int-2-53": str(2**53),
        "int-neg-2-53": str(-(2**53)),
        "int-4000-digits": "9" * 4000,
        "duplicate-key": '{"a": 1, "a": 2}',
    }
    for label, raw in raw_values.items():
        yield f"json-{label}", "6", functools.partial(_manifest_raw, raw=raw), invalid
    yield "json-lone-surrogate-case-id", "6", functools.partial(_manifest_raw, key="case_id", raw='"\\udc80x"'), invalid
    yield "json-duplicate-top-key", "6", _duplicate_top_key, invalid
    yield "json-bom", "6", lambda c: package(c, manifest=b"\xef\xbb\xbf" + manifest_text(c)), invalid
    yield (
        "json-invalid-utf8",
        "6",
        lambda c: package(c, manifest=manifest_text(c, metadata={"x": "@"}).replace(b'"@"', b'"\xff"')),
        invalid,
    )
    both = {"invalid-manifest", "checkpoint-invalid"}
    yield "retry-at-max", "6", lambda c: _retry_at("9999-12-31T23:59:59-05:00"), both
    yield "retry-at-min", "6", lambda c: _retry_at("0001-01-01T00:00:00+05:00"), both
    yield "generation-100000000", "6", lambda c: _generation(100_000_000), invalid
    yield "generation-4000-digits", "6", lambda c: _generation(int("9" * 4000)), invalid
    yield "generation-2-53", "6", lambda c: _generation(2**53), invalid
    checkpoint = {"checkpoint-invalid"}
    yield (
        "checkpoint-created-at-max",
        "6",
        lambda c: _checkpoint_edit(_created_at("9999-12-31T23:59:59-05:00")),
        (checkpoint),
    )
    yield (
        "checkpoint-created-at-min",
        "6",
        lambda c: _checkpoint_edit(_created_at("0001-01-01T00:00:00+05:00")),
        (checkpoint),
    )
    yield "checkpoint-1e400", "6", lambda c: _checkpoint_raw("1e400"), checkpoint
    yield "checkpoint-depth-70", "6", lambda c: _checkpoint_raw(_nested(70)), checkpoint
    yield "checkpoint-lone-surrogate", "6", lambda c: _checkpoint_raw('"\\ud800"'), checkpoint
    yield "checkpoint-int-2-53", "6", lambda c: _checkpoint_raw(str(2**53)), checkpoint
    yield "checkpoint-duplicate-key", "6", lambda c: _checkpoint_raw('{"a": 1, "a": 2}'), checkpoint


def _method(case: str, method: int) -> bytes:
    return _mutate(case, 1, method=method, data=b"opaque-compressed-bytes", version=63)


def _conflict_reversed(case: str) -> bytes:
    members = package_members(case, files={"input/a/b.txt": b"child", "input/a": b"parent"})
    return assemble(members)


def _conflict_folder(case: str) -> bytes:
    members = package_members(case)
    folder = Member(b"input/report.txt/", b"", method=0, mode=DIR_MODE, external=(DIR_MODE << 16) | 0x10)
    return assemble([*members, folder])


def _duplicate_top_key(case: str) -> bytes:
    text = manifest_text(case)
    return package(case, manifest=text[:-1] + b', "routing": "inbox"}')


def _created_at(value: str) -> Callable[[dict[str, Any]], None]:
    def edit(c: dict[str, Any]) -> None:
        c["created_at"] = value

    return edit


def _make_corpus() -> dict[str, Hostile]:
    corpus: dict[str, Hostile] = {}
    for name, rule, build, codes in _entries():
        case = f"hostile-{name}"
        corpus[name] = Hostile(name, rule, functools.partial(build, case), frozenset(codes), f"{name}.zip".encode())
    traversal = functools.partial(with_file, "hostile-inbox-name", b"../../x")
    corpus["inbox-name-not-utf8"] = Hostile(
        "inbox-name-not-utf8", "7", traversal, frozenset({"unsafe-path"}), b"\xff\xfe.zip"
    )
    corpus["inbox-name-escape"] = Hostile(
        "inbox-name-escape", "7", traversal, frozenset({"unsafe-path"}), b"\x1b[31mred.zip"
    )
    return corpus


CORPUS: dict[str, Hostile] = _make_corpus()


# --------------------------------------------------------------------------- benign twins


@dataclass(frozen=True)
class Benign:
    """An input built the same way that breaks no rule: it must be ACCEPTED."""

    name: str
    build: Callable[[], bytes]
    filename: bytes

    def __repr__(self) -> str:
        return f"Benign({self.name!r})"


def _benign_entries() -> Iterable[tuple[str, Callable[[str], bytes]]]:
    yield "builder-deflate", package
    yield "builder-stored", functools.partial(package, method=0)
    yield "builder-descriptor", lambda c: assemble([replace(m, descriptor=True) for m in package_members(c)])
    # small entries with 64-bit data descriptors, the manifest first (so the writer copies each record alone):
    # with a zip64 local extra (APPNOTE 4.3.9.2), and without one
    yield (
        "builder-descriptor-zip64-local-extra",
        lambda c: assemble(
            [
                replace(m, descriptor=True, descriptor_wide=True, zip64_local=True, version=45)
                for m in package_members(c)
            ]
        ),
    )
    yield (
        "builder-descriptor-zip64-plain",
        lambda c: assemble([replace(m, descriptor=True, descriptor_wide=True, version=45) for m in package_members(c)]),
    )
    yield "builder-zip64-records", lambda c: assemble(package_members(c), zip64=True)
    yield (
        "builder-zip64-records-marked",
        lambda c: assemble(
            package_members(c), zip64=True, end_fields={"count": 0xFFFF, "size": 0xFFFFFFFF, "offset": 0xFFFFFFFF}
        ),
    )
    yield "builder-comment", lambda c: assemble(package_members(c), comment=b"a comment, nothing more")
    yield (
        "builder-folder-entry",
        lambda c: assemble(
            [Member(b"input/", b"", method=0, mode=DIR_MODE, external=(DIR_MODE << 16) | 0x10), *package_members(c)]
        ),
    )
    yield "builder-dos-host", lambda c: assemble([replace(m, made_by=20, external=0x20) for m in package_members(c)])
    for host_name, host in HOSTS.items():
        yield f"builder-regular-mode-host-{host_name}", functools.partial(mode_entry, host=host, mode=FILE_MODE)
    yield "builder-utf8-name", functools.partial(with_file, name="input/résumé.txt".encode(), flags=0x800)
    yield "builder-version-63", lambda c: assemble([replace(m, version=63) for m in package_members(c)])
    # version needed is advisory: Info-ZIP's zip -fz writes 4.5 in a folder's local header, 1.0 in its central one
    yield (
        "builder-local-version-differs",
        lambda c: assemble(
            [
                Member(b"input/", b"", method=0, version=10, mode=DIR_MODE, local={"version": 45}),
                *(replace(m, local={"version": 45}) for m in package_members(c)),
            ]
        ),
    )
    yield "builder-manifest-last", lambda c: assemble(list(reversed(package_members(c))))
    yield "json-int-2-53-minus-1", functools.partial(_manifest_raw, raw=str(2**53 - 1))
    yield "json-depth-32", functools.partial(_manifest_raw, raw=_nested(32))
    yield "advanced-building", lambda c: advanced("building")
    yield "advanced-blocked", lambda c: advanced("blocked")
    yield "generation-99999999", lambda c: _generation(99_999_999)


def _make_benign() -> dict[str, Benign]:
    benign = {
        name: Benign(name, functools.partial(build, f"benign-{name}"), f"{name}.zip".encode())
        for name, build in _benign_entries()
    }
    valid = functools.partial(package, "benign-inbox-name")
    benign["inbox-name-not-utf8"] = Benign("inbox-name-not-utf8", valid, b"\xff\xfe.zip")
    benign["inbox-name-escape"] = Benign("inbox-name-escape", valid, b"\x1b[31mred.zip")
    return benign


BENIGN: dict[str, Benign] = _make_benign()
