"""Public API and the service layout (I-21..I-36, I-97..I-103, I-111)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from tenure.errors import IntakeError
from tenure.intake import CheckpointStore, InboxProcessor, LifecycleError, ResultKind, State, Workspace
from tenure.intake.canonical import id_hash
from tests.support.intake import PHASES, admit, put, to_building


def test_i97_public_names_import() -> None:
    import tenure.intake as intake

    for name in ("Workspace", "InboxProcessor", "CheckpointStore", "State", "LifecycleError"):
        assert name in intake.__all__
    assert issubclass(LifecycleError, IntakeError)


def test_i98_workspace_accepts_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ws = Workspace("service-data")
    assert ws.root == tmp_path / "service-data"
    assert (tmp_path / "service-data" / "inbox").is_dir()


def test_i21_workspace_creates_layout(ws: Workspace) -> None:
    for name in ("inbox", "quarantine", "cache", "cases", "outbox", "review", "runtime", "runtime/locks"):
        assert (ws.root / name).is_dir(), name


def test_i22_inbox_accepts_any_name(ws: Workspace) -> None:
    put(ws, "x.bin", "c1")
    put(ws, "no_extension", "c2")
    results = InboxProcessor(ws).poll()
    assert sorted(r.kind for r in results) == [ResultKind.ACCEPTED, ResultKind.ACCEPTED]
    assert {r.case_id for r in results} == {"c1", "c2"}


def test_i23_each_quarantine_gets_its_own_folder(ws: Workspace) -> None:
    (ws.inbox / "bad.zip").write_bytes(b"not a zip at all")
    InboxProcessor(ws).poll()
    (ws.inbox / "bad.zip").write_bytes(b"still not a zip")
    InboxProcessor(ws).poll()
    folders = sorted(ws.quarantine.iterdir())
    assert len(folders) == 2
    for folder in folders:
        assert sorted(p.name for p in folder.iterdir()) == ["package.zip", "validation_error.json"]
        report = json.loads((folder / "validation_error.json").read_text())
        assert report["code"] == "not-a-zip" and report["input_name"] == "bad.zip"
    assert {(f / "package.zip").read_bytes() for f in folders} == {b"not a zip at all", b"still not a zip"}


def test_i24_cache_holds_exact_input(ws: Workspace) -> None:
    path = put(ws, "a.zip")
    raw = path.read_bytes()
    [result] = InboxProcessor(ws).poll()
    import hashlib

    cached = ws.cache / f"{hashlib.sha256(raw).hexdigest()}.zip"
    assert result.paths["cache"] == str(cached)
    assert cached.read_bytes() == raw


def test_i25_generation_file_names(ws: Workspace) -> None:
    to_building(ws)
    folder = ws.case_dir("case-A", "pkg-1")
    first = (folder / "g00000001.zip").read_bytes()
    CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["current.json", "g00000001.zip", "g00000002.zip", "g00000003.zip"]
    assert (folder / "g00000001.zip").read_bytes() == first
    assert folder.parent.name == id_hash("case-A") and folder.name == id_hash("pkg-1")


def test_i26_index_is_rebuilt_from_generations(ws: Workspace) -> None:
    to_building(ws)
    index_path = ws.case_dir("case-A", "pkg-1") / "current.json"
    before = json.loads(index_path.read_text())
    index_path.unlink()
    with pytest.raises(LifecycleError):
        CheckpointStore(ws).advance("case-A", "pkg-1", "REPORTING", step_id="bad")
    after = json.loads(index_path.read_text())
    assert after["generation"] == before["generation"] == 2
    assert after["fingerprint"] == before["fingerprint"]


def test_i27_outbox_and_review_stay_empty(ws: Workspace) -> None:
    store = CheckpointStore(ws)
    to_building(ws)
    store.fail("case-A", "pkg-1", step_id="f")
    to_building(ws, "case-B")
    for i, state in enumerate(
        ["INTERPRETING", "HYPOTHESIZING", "DIAGNOSING", "REPORTING", "OUTPUT_READY", "HANDED_OFF"]
    ):
        store.advance("case-B", "pkg-1", state, step_id=f"s{i}")
    assert list(ws.outbox.iterdir()) == [] and list(ws.review.iterdir()) == []


def test_i28_runtime_is_null_when_idle(ws: Workspace) -> None:
    assert json.loads(ws.runtime_file.read_text()) is None
    seen: list[object] = []
    admit(ws)
    assert json.loads(ws.runtime_file.read_text()) is None
    processor = InboxProcessor(ws, observer=lambda event, _p: seen.append(ws.read_runtime()))
    put(ws, "b.zip", "case-B")
    processor.poll()
    # the observer runs after publication, once runtime has been cleared
    assert seen[-1] is None


def test_i29_lock_file_names(ws: Workspace) -> None:
    admit(ws)
    locks = sorted(p.name for p in ws.locks.iterdir())
    assert locks == sorted(["worker.lock", f"case-{id_hash('case-A')}.lock"])


@pytest.mark.parametrize("hostile", ["../../x", "/etc/passwd", "C:\\evil", "a" * 10_000, "..", "c/../../d"])
def test_i30_ids_never_become_raw_paths(ws: Workspace, tmp_path: Path, hostile: str) -> None:
    before = {p for p in tmp_path.rglob("*")}
    admit(ws, hostile, hostile)
    store = CheckpointStore(ws)
    store.advance(hostile, hostile, "BUILDING_CASE", step_id=hostile)
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(p.is_relative_to(ws.root) for p in created)
    assert ws.case_dir(hostile, hostile).is_dir()
    assert all(len(p.name) <= 80 for p in created)
    assert store.current(hostile, hostile).case_id == hostile


def test_i32_filenames_never_supply_identity_or_state(ws: Workspace) -> None:
    first = put(ws, "HANDED_OFF-case-Z.zip")
    (ws.inbox / "REOPENED.bin").write_bytes(first.read_bytes())
    results = InboxProcessor(ws).poll()
    assert [r.kind for r in results] == [ResultKind.ACCEPTED, ResultKind.DUPLICATE]
    assert all(r.case_id == "case-A" for r in results)
    assert CheckpointStore(ws).current("case-A", "pkg-1").state is State.VALIDATED


def test_i33_runtime_summary_fields(ws: Workspace) -> None:
    to_building(ws)
    summary = ws.job_summary(
        "case-A",
        "pkg-1",
        input_generation=2,
        analysis_revision=1,
        target="INTERPRETING",
        started_at=__import__("tests.support.intake", fromlist=["past"]).past(),
        last_checkpoint_at=None,
    )
    assert set(summary) == {
        "case_id",
        "package_id",
        "input_generation",
        "analysis_revision",
        "target_state",
        "started_at",
        "last_checkpoint_at",
        "pid",
    }
    assert "details" not in json.dumps(summary)


def test_i34_runtime_and_index_written_atomically(ws: Workspace) -> None:
    """Writers never expose a partial file: a reader thread always parses."""
    to_building(ws)
    store = CheckpointStore(ws)
    index = ws.case_dir("case-A", "pkg-1") / "current.json"
    stop = threading.Event()
    bad: list[str] = []

    def read() -> None:
        while not stop.is_set():
            for path in (index, ws.runtime_file):
                try:
                    json.loads(path.read_text())
                except FileNotFoundError:
                    bad.append(f"{path} missing")
                except ValueError:
                    bad.append(f"{path} partial")

    reader = threading.Thread(target=read)
    reader.start()
    advanced = []
    try:
        for i in range(15):
            advanced.append(store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id=f"p{i}"))
    finally:
        stop.set()
        reader.join()
    assert bad == []
    # each advance wrote one generation on top of the one before: BUILDING_CASE checkpointed in place
    assert [p.generation for p in advanced] == list(range(3, 18))
    assert [(p.state, p.latest.step_id if p.latest else None) for p in advanced] == [
        (State.BUILDING_CASE, f"p{i}") for i in range(15)
    ]
    assert [len(p.chain) for p in advanced] == list(range(3, 18))
    last = advanced[-1]
    assert store.current("case-A", "pkg-1").fingerprint == last.fingerprint
    written = json.loads(index.read_text())
    assert (written["file"], written["generation"], written["fingerprint"]) == (
        "g00000017.zip",
        17,
        last.fingerprint,
    )
    assert json.loads(ws.runtime_file.read_text()) is None
    assert not [p for p in index.parent.iterdir() if p.name.startswith(".tmp-")]


def test_i35_stale_index_and_runtime_do_not_change_answers(ws: Workspace) -> None:
    to_building(ws)
    folder = ws.case_dir("case-A", "pkg-1")
    index = json.loads((folder / "current.json").read_text())
    (folder / "current.json").write_text(
        json.dumps({**index, "generation": 1, "state": "NEW", "file": "g00000001.zip"})
    )
    ws.write_runtime({"case_id": "case-A", "stale": True})
    store = CheckpointStore(ws)
    assert store.current("case-A", "pkg-1").state is State.BUILDING_CASE
    assert store.generation("case-A", "pkg-1") == 2
    package = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    # the confirmed package after generation 2 (I-100), not one built on the stale index's generation 1
    assert package.state is State.INTERPRETING and package.generation == 3
    assert package.latest is not None and package.latest.step_id == "i"
    assert json.loads((folder / "current.json").read_text())["generation"] == 3
    assert ws.read_runtime() is None


def test_i36_current_generation_recovered_without_index(ws: Workspace) -> None:
    to_building(ws)
    folder = ws.case_dir("case-A", "pkg-1")
    (folder / "current.json").unlink()
    assert CheckpointStore(ws).current("case-A", "pkg-1").generation == 2


def test_i99_poll_returns_list(ws: Workspace) -> None:
    results = InboxProcessor(ws).poll(max_jobs=5)
    assert results == []


def test_i100_advance_returns_latest_package(ws: Workspace) -> None:
    admit(ws)
    package = CheckpointStore(ws).advance(
        "case-A",
        "pkg-1",
        State.BUILDING_CASE,
        step_id="revision-1:start-case-building",
        details={"inputs_collected": []},
    )
    assert package.state is State.BUILDING_CASE and package.generation == 2
    assert package.latest is not None and package.latest.details == {"inputs_collected": []}


def test_i101_error_code_and_message(ws: Workspace) -> None:
    admit(ws)
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).advance("case-A", "pkg-1", State.INTERPRETING, step_id="skip")
    assert caught.value.code == "transition-skip"
    assert "VALIDATED" in str(caught.value) and "INTERPRETING" in str(caught.value)


def test_i102_state_members() -> None:
    names = {s.value for s in State}
    assert names == {*PHASES, "BLOCKED", "FAILED_TO_ANALYZE", "REOPENED"}


def test_i103_poll_is_a_single_pass(ws: Workspace) -> None:
    threads = threading.active_count()
    put(ws, "a.zip")
    InboxProcessor(ws).poll()
    assert threading.active_count() == threads
    assert not list(ws.inbox.iterdir())


def test_i111_result_kinds_and_fields(ws: Workspace) -> None:
    assert {k.value for k in ResultKind} == {
        "ACCEPTED",
        "DUPLICATE",
        "QUARANTINED",
        "DEFERRED",
        "BUSY",
        "RESUMED",
        "ERROR",
    }
    (ws.inbox / "junk").write_bytes(b"junk")
    [result] = InboxProcessor(ws).poll()
    document = result.to_dict()
    assert document["kind"] == "QUARANTINED" and document["code"] == "not-a-zip"
    assert os.path.isdir(document["paths"]["quarantine"])
    assert document["message"]


def test_i01_i63_intake_runs_no_analysis_and_delivers_nothing(ws: Workspace) -> None:
    admit(ws, files={"input/report.txt": b"r"})
    store = CheckpointStore(ws)
    for i, state in enumerate(
        ["BUILDING_CASE", "INTERPRETING", "HYPOTHESIZING", "DIAGNOSING", "REPORTING", "OUTPUT_READY", "HANDED_OFF"]
    ):
        package = store.advance("case-A", "pkg-1", state, step_id=f"s{i}")
    produced = {f for f in package.files if not f.startswith("history/checkpoints/")}
    assert produced == {"input/report.txt", "manifest.json"}
    assert list(ws.outbox.iterdir()) == [] and list(ws.review.iterdir()) == []
    assert set(package.manifest["artifacts"]) == {"lifecycle_checkpoint"}


def test_i130_publication_never_replaces_a_generation(ws: Workspace) -> None:
    from tenure.intake.storage import CaseStorage
    from tenure.intake.writer import PackageWriter

    package = to_building(ws)
    folder = package.path.parent
    original = package.path.read_bytes()
    forged = dict(package.manifest)
    written = PackageWriter().write(folder, forged, base=package)
    with pytest.raises(FileExistsError):
        CaseStorage(ws).publish(written, folder)
    assert package.path.read_bytes() == original
    assert not [p for p in folder.iterdir() if p.name.startswith(".tmp-")]
