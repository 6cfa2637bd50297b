"""advance: idempotence, artifacts, reserved names, generations (I-16, I-18, I-19,
I-64, I-75..I-78, I-123)."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from tenure.intake import CheckpointStore, LifecycleError, State, Workspace
from tenure.intake.package import GENERATION_RECORD
from tests.support.intake import admit, future, to_building


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in folder.iterdir()}


def test_i75_step_id_required(ws: Workspace) -> None:
    admit(ws)
    store = CheckpointStore(ws)
    for step in ("", "   ", None):
        with pytest.raises(LifecycleError) as caught:
            store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id=step)  # type: ignore[arg-type]
        assert caught.value.code == "step-id-required"
    assert store.generations("case-A", "pkg-1") == [1]


def test_i76_same_step_same_request_writes_nothing(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    first = store.advance(
        "case-A", "pkg-1", "BUILDING_CASE", step_id="collect", details={"n": 1}, artifacts={"notes/a.txt": b"A"}
    )
    store.advance("case-A", "pkg-1", "INTERPRETING", step_id="interpret")
    folder = ws.case_dir("case-A", "pkg-1")
    before = snapshot(folder)
    again = store.advance(
        "case-A", "pkg-1", "BUILDING_CASE", step_id="collect", details={"n": 1}, artifacts={"notes/a.txt": b"A"}
    )
    assert snapshot(folder) == before
    assert again.generation == first.generation + 1  # the latest confirmed package
    assert again.state is State.INTERPRETING


@pytest.mark.parametrize(
    "change",
    [
        {"state": "INTERPRETING"},
        {"details": {"n": 2}},
        {"artifacts": {"notes/a.txt": b"B"}},
        {"artifacts": {"notes/b.txt": b"A"}},
    ],
)
def test_i77_same_step_different_request_rejected(ws: Workspace, change: dict[str, object]) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    request = {"state": "BUILDING_CASE", "details": {"n": 1}, "artifacts": {"notes/a.txt": b"A"}}
    store.advance("case-A", "pkg-1", step_id="collect", **request)  # type: ignore[arg-type]
    folder = ws.case_dir("case-A", "pkg-1")
    before = snapshot(folder)
    with pytest.raises(LifecycleError) as caught:
        store.advance("case-A", "pkg-1", step_id="collect", **{**request, **change})  # type: ignore[arg-type]
    assert caught.value.code == "step-id-reused"
    assert snapshot(folder) == before


def test_i77_different_retry_request_rejected(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    when = future()
    store.block("case-A", "pkg-1", step_id="b", reason="x", retry_at=when)
    assert store.block("case-A", "pkg-1", step_id="b", reason="x", retry_at=when.astimezone()).generation == 3
    with pytest.raises(LifecycleError) as caught:
        store.block("case-A", "pkg-1", step_id="b", reason="y", retry_at=when)
    assert caught.value.code == "step-id-reused"


def test_i78_artifacts_and_checkpoint_in_one_generation(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    package = store.advance(
        "case-A",
        "pkg-1",
        "INTERPRETING",
        step_id="i",
        artifacts={"analysis/interpretation.json": b'{"ok": true}'},
        artifact_pointers={"interpretation": "analysis/interpretation.json"},
    )
    assert package.read("analysis/interpretation.json") == b'{"ok": true}'
    assert package.manifest["artifacts"]["interpretation"] == "analysis/interpretation.json"
    assert package.latest is not None and package.latest.step_id == "i"
    previous = store.storage.load_generation(ws.case_dir("case-A", "pkg-1"), 2)
    assert "analysis/interpretation.json" not in previous.entry_hashes
    with pytest.raises(LifecycleError):
        store.advance("case-A", "pkg-1", "HYPOTHESIZING", step_id="h", artifacts={"../escape.txt": b"x"})
    assert store.generations("case-A", "pkg-1") == [1, 2, 3]


def test_i78_failed_validation_publishes_nothing(tmp_path: Path) -> None:
    from tenure.intake import IntakeConfig, Limits

    # input/report.txt + three artifacts = 4 entries; manifest.json and the checkpoints count apart
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(max_entries=3)))
    to_building(ws)
    store = CheckpointStore(ws)
    artifacts = {"a.txt": b"1", "b.txt": b"2", "c.txt": b"3"}
    with pytest.raises(LifecycleError) as caught:
        store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i", artifacts=artifacts)
    assert caught.value.code == "too-many-entries"
    folder = ws.case_dir("case-A", "pkg-1")
    assert sorted(os.listdir(folder)) == ["current.json", "g00000001.zip", "g00000002.zip"]
    assert ws.read_runtime() is None
    assert store.current("case-A", "pkg-1").state is State.BUILDING_CASE


@pytest.mark.parametrize(
    "kwargs,code",
    [
        ({"artifacts": {"history/checkpoints/" + "0" * 64 + ".json": b"{}"}}, "artifact-reserved"),
        ({"artifacts": {"manifest.json": b"{}"}}, "artifact-reserved"),
        ({"artifact_pointers": {"lifecycle_checkpoint": "input/report.txt"}}, "artifact-reserved"),
        ({"artifact_pointers": {"x": "history/checkpoints/a.json"}}, "artifact-reserved"),
        ({"artifact_pointers": {"x": "missing.txt"}}, "artifact-invalid"),
        ({"artifacts": {"/abs.txt": b"x"}}, "artifact-invalid"),
        ({"artifacts": {"input/report.txt": b"replaced"}}, "artifact-exists"),
    ],
)
def test_i16_reserved_namespace_and_pointer(ws: Workspace, kwargs: dict[str, object], code: str) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    with pytest.raises(LifecycleError) as caught:
        store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="x", **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == code
    assert store.generations("case-A", "pkg-1") == [1, 2]


def test_i18_one_new_validated_generation_per_advance(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    for i in range(3):
        package = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id=f"s{i}")
        assert store.generations("case-A", "pkg-1") == list(range(1, package.generation + 1))
    folder = ws.case_dir("case-A", "pkg-1")
    assert not [n for n in os.listdir(folder) if n.startswith(".tmp-")]


def test_i19_old_artifacts_remain_and_old_files_unchanged(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    folder = ws.case_dir("case-A", "pkg-1")
    old = {n: (folder / n).read_bytes() for n in ("g00000001.zip", "g00000002.zip")}
    store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="a", artifacts={"a.txt": b"a"})
    latest = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="b")
    with zipfile.ZipFile(folder / "g00000002.zip") as zf:
        previous_files = set(zf.namelist()) - {"manifest.json", GENERATION_RECORD}
    assert previous_files | {"a.txt"} <= set(latest.files)
    assert len(latest.chain) == 4
    assert {n: (folder / n).read_bytes() for n in old} == old


def test_i64_details_get_structural_validation_only(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    odd = {"diagnosis": "not interpreted", "nested": [1, {"x": None}], "unicode": "é"}
    package = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="d", details=odd)
    assert package.latest is not None and package.latest.details == odd
    for bad in (["not", "an", "object"], {"nan": float("nan")}, {"obj": object()}):
        with pytest.raises(LifecycleError) as caught:
            store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="bad", details=bad)
        assert caught.value.code == "details-invalid"


def test_i123_block_fields_only_for_blocked(ws: Workspace) -> None:
    to_building(ws)
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i", reason="x")
    assert caught.value.code == "unexpected-block-fields"


def test_advance_unknown_case(ws: Workspace) -> None:
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).advance("nope", "nope", "BUILDING_CASE", step_id="s")
    assert caught.value.code == "case-not-found"


def test_i06_checkpoint_fields(ws: Workspace) -> None:
    """I-06: every field of a checkpoint is present and consistent."""
    package = to_building(ws)
    assert package.latest is not None
    data = json.loads(package.read(package.latest.path))
    assert data["previous_state"] == "VALIDATED" and data["state"] == "BUILDING_CASE"
    assert data["source"] == {"generation": 1, "fingerprint": admit_fingerprint(ws)}
    assert data["generation"] == 2 and data["analysis_revision"] == 1
    assert data["request_hash"].startswith("sha256:") and data["step_id"] == "start"


def admit_fingerprint(ws: Workspace) -> str:
    return CheckpointStore(ws).storage.load_generation(ws.case_dir("case-A", "pkg-1"), 1).fingerprint
