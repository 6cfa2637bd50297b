"""A corpus of hostile archives, built here, each quarantined with its own
code while valid packages in the same poll are admitted (I-106, I-112, I-120,
I-127, hard limits)."""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tenure.intake import InboxProcessor, IntakeConfig, Limits, ResultKind, Workspace, read_package
from tenure.intake.errors import PackageRejectedError
from tenure.intake.pack import new_manifest
from tests.support.intake import put

MANIFEST = json.dumps(new_manifest("hostile", "pkg")).encode()


def zip_with(entries: list[tuple[zipfile.ZipInfo | str, bytes]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buffer.getvalue()


def with_manifest(*entries: tuple[zipfile.ZipInfo | str, bytes]) -> bytes:
    return zip_with([("manifest.json", MANIFEST), *entries])


def unix_entry(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    return info


def overlapping_bomb() -> bytes:
    """One compressed blob that many central-directory entries all point at."""
    plain = b"\0" * 200_000
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = compressor.compress(plain) + compressor.flush()
    crc = zlib.crc32(plain)
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(data), len(plain), 1, 0) + b"a" + data
    central = b""
    names = [b"a", b"b", b"c", b"d"]
    for name in names:
        central += (
            struct.pack(
                "<4s6H3L5H2L",
                b"PK\x01\x02",
                20,
                20,
                0,
                8,
                0,
                0,
                crc,
                len(data),
                len(plain),
                len(name),
                0,
                0,
                0,
                0,
                0,
                0,
            )
            + name
        )
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(names), len(names), len(central), len(local), 0)
    return local + central + end


def huge_declared() -> bytes:
    """A small archive whose directory claims nearly 4 GB of content."""
    raw = bytearray(with_manifest(("blob.bin", b"x" * 100)))
    at = raw.rfind(b"PK\x01\x02")
    struct.pack_into("<L", raw, at + 24, 0xF0000000)  # uncompressed size field
    return bytes(raw)


def encrypted() -> bytes:
    raw = bytearray(with_manifest(("secret.txt", b"hidden")))
    at = raw.rfind(b"PK\x01\x02")
    flags = struct.unpack_from("<H", raw, at + 8)[0]
    struct.pack_into("<H", raw, at + 8, flags | 0x1)
    return bytes(raw)


def corrupt_crc() -> bytes:
    raw = bytearray(zip_with([("manifest.json", MANIFEST), ("data.txt", b"A" * 64)], zipfile.ZIP_STORED))
    at = raw.find(b"A" * 64)
    raw[at] = ord("B")
    return bytes(raw)


def duplicate_names() -> bytes:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return with_manifest(("a.txt", b"1"), ("a.txt", b"2"))


def oversized_manifest() -> bytes:
    manifest = new_manifest("hostile", "pkg", metadata={"pad": "x" * (1024 * 1024 + 10)})
    return zip_with([("manifest.json", json.dumps(manifest).encode())], zipfile.ZIP_STORED)


def ratio_bomb() -> bytes:
    return with_manifest(("zeros.bin", b"\0" * (3 * 1024 * 1024)))


def many_entries() -> bytes:
    return zip_with([("manifest.json", MANIFEST)] + [(f"f/{i}", b"") for i in range(10_001)], zipfile.ZIP_STORED)


def bzip2_entry() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("manifest.json", MANIFEST)
        zf.writestr("b.txt", b"bz", compress_type=zipfile.ZIP_BZIP2)
    return buffer.getvalue()


def truncated() -> bytes:
    raw = with_manifest(("a.txt", b"a" * 1000))
    return raw[: len(raw) - 40]


CORPUS: dict[str, tuple[Callable[[], bytes], str]] = {
    "traversal.zip": (lambda: with_manifest(("../../evil.txt", b"x")), "unsafe-path"),
    "absolute.zip": (lambda: with_manifest(("/etc/cron.d/x", b"x")), "unsafe-path"),
    "drive.zip": (lambda: with_manifest(("C:/Windows/x", b"x")), "unsafe-path"),
    "backslash.zip": (lambda: with_manifest(("a\\..\\..\\b", b"x")), "unsafe-path"),
    "symlink.zip": (lambda: with_manifest((unix_entry("link", 0o120777), b"/etc/passwd")), "symlink-entry"),
    "fifo.zip": (lambda: with_manifest((unix_entry("pipe", 0o010644), b"")), "special-entry"),
    "overlap-bomb.zip": (overlapping_bomb, "overlapping-entries"),
    "deep.zip": (lambda: with_manifest(("/".join(["d"] * 40) + "/f", b"x")), "path-too-deep"),
    "long.zip": (lambda: with_manifest(("n" * 1100, b"x")), "path-too-long"),
    "huge-declared.zip": (huge_declared, "uncompressed-too-large"),
    "ratio-bomb.zip": (ratio_bomb, "compression-ratio"),
    "truncated.zip": (truncated, "truncated-zip"),
    "not-a-zip.pdf": (lambda: b"%PDF-1.7 definitely not a zip", "not-a-zip"),
    "empty-file": (lambda: b"", "not-a-zip"),
    "encrypted.zip": (encrypted, "encrypted-entry"),
    "duplicates.zip": (duplicate_names, "duplicate-entry"),
    "big-manifest.zip": (oversized_manifest, "manifest-too-large"),
    "many-entries.zip": (many_entries, "too-many-entries"),
    "bzip2.zip": (bzip2_entry, "unsupported-compression"),
    "bad-crc.zip": (corrupt_crc, "corrupt-entry"),
    "no-manifest.zip": (lambda: zip_with([("readme.txt", b"hi")]), "missing-manifest"),
    "bad-manifest.zip": (lambda: zip_with([("manifest.json", b"[1, 2")]), "invalid-manifest"),
}


def test_hostile_corpus_quarantined_valid_admitted(ws: Workspace) -> None:
    built = {name: build() for name, (build, _code) in CORPUS.items()}
    for name, raw in built.items():
        (ws.inbox / name).write_bytes(raw)
    put(ws, "valid-1.zip", "good-1")
    put(ws, "valid-2.zip", "good-2")
    results = InboxProcessor(ws).poll(max_jobs=1000)
    by_name = {r.input_path.name: r for r in results if r.input_path is not None}
    assert {n: (r.kind.value, r.code) for n, r in by_name.items() if n in CORPUS} == {
        n: ("QUARANTINED", code) for n, (_b, code) in CORPUS.items()
    }
    assert by_name["valid-1.zip"].kind is ResultKind.ACCEPTED
    assert by_name["valid-2.zip"].kind is ResultKind.ACCEPTED
    assert list(ws.inbox.iterdir()) == []
    quarantined = list(ws.quarantine.iterdir())
    assert len(quarantined) == len(CORPUS)
    for folder in quarantined:
        report = json.loads((folder / "validation_error.json").read_text())
        assert (folder / "package.zip").read_bytes() == built[report["input_name"]]
    assert not any(p.name == "evil.txt" for p in ws.root.parent.rglob("*"))


def test_limits_are_configuration(tmp_path: Path) -> None:
    small = IntakeConfig(
        limits=Limits(
            max_entries=3, max_path_depth=2, max_path_bytes=20, uncompressed_bytes=1000, manifest_bytes=10_000
        )
    )
    cases = {
        "too-many-entries": with_manifest(("a", b""), ("b", b""), ("c", b""), ("d", b"")),
        "path-too-deep": with_manifest(("a/b/c", b"")),
        "path-too-long": with_manifest(("x" * 21, b"")),
        "uncompressed-too-large": with_manifest(("a", b"y" * 2000)),
    }
    for code, raw in cases.items():
        path = tmp_path / f"{code}.zip"
        path.write_bytes(raw)
        with pytest.raises(PackageRejectedError) as caught:
            read_package(path, small)
        assert caught.value.code == code
    defaults = Limits()
    assert (
        defaults.archive_bytes,
        defaults.uncompressed_bytes,
        defaults.max_entries,
        defaults.max_ratio,
        defaults.ratio_min_bytes,
        defaults.manifest_bytes,
        defaults.max_path_depth,
        defaults.max_path_bytes,
    ) == (256 * 2**20, 2**30, 10_000, 200.0, 2**20, 2**20, 32, 1024)


def test_ratio_limit_applies_only_above_one_mebibyte(tmp_path: Path) -> None:
    path = tmp_path / "small-zeros.zip"
    path.write_bytes(zip_with([("manifest.json", MANIFEST), ("z.bin", b"\0" * 900_000)]))
    assert read_package(path).files == ["manifest.json", "z.bin"]
