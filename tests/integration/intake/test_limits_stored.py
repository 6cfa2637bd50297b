"""Limits hold for what is stored, and an input at a limit is admitted (ADR 0108).

The producer's files count toward ``max_entries`` and ``uncompressed_bytes``;
``manifest.json`` and the checkpoint artifacts the intake adds have limits of
their own. So a package admitted at a limit is stored, reads back and can be
advanced; an advance that would pass a limit is refused with a code and
writes nothing.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from pathlib import Path

import pytest

from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig, Limits, ResultKind, Workspace
from tenure.intake.canonical import canonical_json
from tenure.intake.config import MAX_GENERATION
from tenure.intake.errors import LifecycleError
from tenure.intake.pack import new_manifest
from tenure.intake.storage import CaseStorage
from tenure.intake.writer import PackageWriter
from tests.support.intake import put, to_building


def _poll_one(ws: Workspace) -> tuple[ResultKind, str | None]:
    [result] = [r for r in InboxProcessor(ws).poll() if r.input_path is not None]
    return result.kind, result.code


def _files_in(ws: Workspace) -> list[str]:
    folder = ws.case_dir("case-A", "pkg-1")
    return sorted(os.listdir(folder)) if folder.exists() else []


@pytest.mark.parametrize("extra", [0, 1])
def test_package_with_exactly_max_entries_is_admitted_stored_and_advanced(tmp_path: Path, extra: int) -> None:
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(max_entries=20)))
    files = {f"data/{i:02d}.txt": b"x" for i in range(20 + extra)}  # manifest.json counts apart
    put(ws, "a.zip", files=files)
    if extra:
        assert _poll_one(ws) == (ResultKind.QUARANTINED, "too-many-entries")
        return
    assert _poll_one(ws) == (ResultKind.ACCEPTED, None)
    stored = CaseStorage(ws).load_current("case-A", "pkg-1")
    assert stored is not None and len(stored.files) == 22, "20 files, the manifest and the admission checkpoint"
    advanced = CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    assert advanced.generation == 2 and len(advanced.chain) == 2


@pytest.mark.parametrize("extra", [0, 1])
def test_folder_entries_count_toward_max_entries(tmp_path: Path, extra: int) -> None:
    """A folder entry is one of the producer's entries; stored generations hold none, so they never grow."""
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(max_entries=20)))
    manifest = canonical_json(new_manifest("case-A", "pkg-1"))
    with zipfile.ZipFile(ws.inbox / "a.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", manifest)
        for folder in ("data/", "data/more/"):
            zf.mkdir(folder)
        for i in range(18 + extra):
            zf.writestr(f"data/more/{i:02d}.txt", b"x")
    if extra:
        assert _poll_one(ws) == (ResultKind.QUARANTINED, "too-many-entries")
        return
    assert _poll_one(ws) == (ResultKind.ACCEPTED, None)
    stored = CaseStorage(ws).load_current("case-A", "pkg-1")
    assert stored is not None and len(stored.files) == 20, "18 files, the manifest and the admission checkpoint"


def test_package_declaring_exactly_the_uncompressed_limit_is_admitted(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(uncompressed_bytes=5000)))
    put(ws, "a.zip", files={"a.bin": b"a" * 3000, "b.bin": b"b" * 2000})
    assert _poll_one(ws) == (ResultKind.ACCEPTED, None)
    CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    put(ws, "b.zip", package="pkg-2", files={"a.bin": b"a" * 3000, "b.bin": b"b" * 2001})
    assert _poll_one(ws) == (ResultKind.QUARANTINED, "uncompressed-too-large")


def _manifest_of_size(size: int) -> dict[str, object]:
    manifest = new_manifest("case-A", "pkg-1", metadata={"pad": ""})
    manifest["metadata"] = {"pad": "p" * (size - len(canonical_json(manifest)))}
    assert len(canonical_json(manifest)) == size
    return manifest


@pytest.mark.parametrize("over", [0, 1])
def test_manifest_of_exactly_the_limit_is_admitted_and_its_generations_stay_readable(tmp_path: Path, over: int) -> None:
    limit = 4096
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(manifest_bytes=limit)))
    raw = canonical_json(_manifest_of_size(limit + over))
    with zipfile.ZipFile(ws.inbox / "a.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", raw)  # compact: raw size == canonical size
        zf.writestr("input/report.txt", b"r")
    if over:
        assert _poll_one(ws) == (ResultKind.QUARANTINED, "manifest-too-large")
        return
    assert _poll_one(ws) == (ResultKind.ACCEPTED, None)
    store = CheckpointStore(ws)
    for i, state in enumerate(["BUILDING_CASE", "INTERPRETING", "HYPOTHESIZING"]):
        store.advance("case-A", "pkg-1", state, step_id=f"s{i}")
    CaseStorage(ws).load_current("case-A", "pkg-1")  # every generation reads back under the stored limits
    assert [int(n[1:9]) for n in _files_in(ws) if n.startswith("g")] == [1, 2, 3, 4]


def test_indented_manifest_is_judged_on_its_canonical_size_and_stored_compact(ws: Workspace) -> None:
    manifest = new_manifest("case-A", "pkg-1", metadata={"deep": [[[[{"a": [1, 2, 3]}]]]]})
    with zipfile.ZipFile(ws.inbox / "a.zip", "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=8))
        zf.writestr("f.txt", b"1")
    assert _poll_one(ws) == (ResultKind.ACCEPTED, None)
    stored = CaseStorage(ws).load_current("case-A", "pkg-1")
    assert stored is not None
    assert stored.read("manifest.json") == canonical_json(stored.manifest) + b"\n"


def test_advance_past_the_manifest_room_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(manifest_bytes=4096)))
    to_building(ws)
    before = _files_in(ws)
    pointers = {f"p{i:05d}": "input/report.txt" for i in range(4000)}  # ~100 KB of pointers > 64 KiB reserve
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i", artifact_pointers=pointers)
    assert caught.value.code == "manifest-limit"
    assert _files_in(ws) == before


def test_checkpoint_past_its_size_limit_is_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(manifest_bytes=4096)))
    to_building(ws)
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="s" * 4000)
    assert caught.value.code == "manifest-limit"


def test_advance_past_max_checkpoints_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(max_checkpoints=3)))
    store = CheckpointStore(ws)
    to_building(ws)  # checkpoints: admission, start
    store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")  # the third
    before = _files_in(ws)
    with pytest.raises(LifecycleError) as caught:
        store.advance("case-A", "pkg-1", "HYPOTHESIZING", step_id="h")
    assert caught.value.code == "too-many-checkpoints"
    assert _files_in(ws) == before


def test_returning_package_at_the_last_generation_is_admitted_and_not_advanced(ws: Workspace) -> None:
    package = to_building(ws)
    manifest = dict(package.manifest, generation=MAX_GENERATION)
    returning = PackageWriter().write(ws.root, manifest, base=package)
    os.replace(returning.path, ws.inbox / "back.zip")
    assert _poll_one(ws) == (ResultKind.ACCEPTED, None)
    assert CheckpointStore(ws).generation("case-A", "pkg-1") == MAX_GENERATION
    before = _files_in(ws)
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    assert caught.value.code == "generation-limit"
    assert _files_in(ws) == before
    assert f"g{MAX_GENERATION}.zip" in before, "the generation file is one storage can see"


def test_generation_past_the_last_one_is_quarantined(ws: Workspace) -> None:
    package = to_building(ws)
    manifest = dict(package.manifest, generation=MAX_GENERATION + 1)
    with zipfile.ZipFile(package.path) as src, zipfile.ZipFile(ws.inbox / "x.zip", "w") as dst:
        for info in src.infolist():
            data = canonical_json(manifest) if info.filename == "manifest.json" else src.read(info)
            dst.writestr(info.filename, data)
    assert _poll_one(ws) == (ResultKind.QUARANTINED, "invalid-manifest")


def test_new_intake_layout_folders_are_made_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each folder the layout creates has its entry synced in its parent (a spy on the real fsync)."""
    import tenure.fsio

    synced: list[str] = []
    real = tenure.fsio.fsync_dir

    def spy(folder: str) -> None:
        synced.append(os.path.abspath(os.fsdecode(folder)))
        real(folder)

    monkeypatch.setattr(tenure.fsio, "fsync_dir", spy)
    root = tmp_path / "ws"
    Workspace(root)
    for name in ("inbox", "quarantine", "cache", "cases", "outbox", "review", "runtime", "runtime/locks"):
        assert str((root / name).parent) in synced, name


def test_what_the_intake_compresses_itself_never_fails_the_ratio_limit(tmp_path: Path) -> None:
    """A manifest at its size limit that deflates better than 200:1 grows past ``ratio_min_bytes`` once the
    intake adds its fields, and an artifact of repeated bytes deflates better still: the intake stores such
    an entry uncompressed, so its generations and its exports keep the ratio limit and read back."""
    limit = 256 * 1024
    config = IntakeConfig(limits=Limits(manifest_bytes=limit, ratio_min_bytes=limit))
    ws = Workspace(tmp_path / "ws", config)
    raw = canonical_json(_manifest_of_size(limit))
    assert len(zlib.compress(raw)) * 400 < limit, "the manifest deflates far better than the ratio limit"
    with zipfile.ZipFile(ws.inbox / "a.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", raw)
        zf.writestr("input/report.txt", b"r")
    assert _poll_one(ws) == (ResultKind.ACCEPTED, None)
    store = CheckpointStore(ws)
    zeros = bytes(4 * limit)
    advanced = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b", artifacts={"out/zeros.bin": zeros})
    assert advanced.read("out/zeros.bin") == zeros
    with zipfile.ZipFile(advanced.path) as zf:
        assert zf.getinfo("manifest.json").compress_type == zipfile.ZIP_STORED
        assert zf.getinfo("out/zeros.bin").compress_type == zipfile.ZIP_STORED
        assert zf.getinfo("input/report.txt").compress_type == zipfile.ZIP_DEFLATED
    exported = store.export("case-A", "pkg-1", tmp_path / "export.zip")
    for written in (*(ws.case_dir("case-A", "pkg-1") / n for n in _files_in(ws) if n.endswith(".zip")), exported.path):
        with zipfile.ZipFile(written) as zf:
            for info in zf.infolist():
                assert info.file_size <= limit or info.file_size <= 200 * info.compress_size, (written, info)
