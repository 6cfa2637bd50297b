"""Stored generation format v2 (ADR 0110): a generation holds its own checkpoints and a link to the
generation before; the history is read along the links, v1 stays readable, a damaged or missing link is
``storage-corrupt`` with a stable cause (never a shorter history), and the collector (I-132) removes only
what the newest generation no longer references, crash-safely."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, rule

from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig, LifecycleError, ResultKind, Workspace
from tenure.intake.canonical import MANIFEST, canonical_json, fingerprint, sha256_hex
from tenure.intake.collect import CRASH_POINTS
from tenure.intake.errors import BusyError
from tenure.intake.package import GENERATION_RECORD, Package, read_package
from tenure.intake.storage import _validated
from tests.integration.intake.test_stateful import IntakeModel
from tests.support.intake import POLL, admit, complete_package, run_python, to_building

V1_CASE = Path(__file__).parent / "data" / "v1-case"
SPAN = 4


def span_config() -> IntakeConfig:
    return IntakeConfig(chain_span=SPAN)


def cold(ws: Workspace) -> CheckpointStore:
    """A store as a new process sees it: nothing validated yet."""
    _validated.clear()
    return CheckpointStore(Workspace(ws.root, ws.config))


def names(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("g"))


def record_of(path: Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read(GENERATION_RECORD)) if GENERATION_RECORD in zf.NameToInfo else None


def reference_fingerprint(package: Package) -> str:
    """The fingerprint as package format v1 defines it, computed the plain way."""
    hashes = dict(package.entry_hashes.items())
    hashes[MANIFEST] = sha256_hex(canonical_json(package.manifest))
    return fingerprint(hashes)


def long_case(ws: Workspace, steps: int) -> tuple[CheckpointStore, list[str]]:
    admit(ws)
    store = CheckpointStore(ws)
    expected = [store.current("case-A", "pkg-1").chain[0].step_id]
    for i in range(steps):
        state = "BUILDING_CASE" if i < steps - 1 else "INTERPRETING"
        store.advance("case-A", "pkg-1", state, step_id=f"step-{i}", details={"i": i})
        expected.append(f"step-{i}")
    return store, expected


# --------------------------------------------------------------------------- the format


def test_a_generation_holds_its_own_checkpoint_and_a_link(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    first = store.current("case-A", "pkg-1")
    second = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    folder = ws.case_dir("case-A", "pkg-1")
    record = record_of(folder / "g00000003.zip")
    assert record == {
        "format": "tenure-intake-generation",
        "format_version": 2,
        "generation": 3,
        "base": {"file": "g00000002.zip", "generation": 2, "fingerprint": first.fingerprint},
        "anchor": False,
    }
    with zipfile.ZipFile(folder / "g00000003.zip") as zf:
        checkpoints = [n for n in zf.namelist() if n.startswith("history/checkpoints/") and n != GENERATION_RECORD]
    assert checkpoints == [second.latest.path if second.latest else ""]
    # the package seen through the API is the whole one: every checkpoint, not the record
    assert len(second.chain) == 3 and GENERATION_RECORD not in second.files
    assert second.manifest["format_version"] == 1  # the package format is unchanged
    assert second.fingerprint == reference_fingerprint(second)


def test_generation_files_do_not_grow_with_history(ws_span: Workspace) -> None:
    """What an advance writes, validates and syncs is bounded by the span, not by the history."""
    store, _ = long_case(ws_span, 3 * SPAN)
    folder = ws_span.case_dir("case-A", "pkg-1")
    sizes = []
    for _ in range(3 * SPAN):
        package = store.advance("case-A", "pkg-1", "INTERPRETING", step_id=f"more-{len(sizes)}")
        with zipfile.ZipFile(package.path) as zf:
            assert len(zf.namelist()) <= 2 + SPAN + 2  # report + admission's file, checkpoints, record, manifest
        sizes.append(package.path.stat().st_size)
    assert len(package.chain) == 6 * SPAN + 1
    assert max(sizes) < 4 * min(sizes)
    chain_files = {r for r in names(folder)}
    assert len(chain_files) == 6 * SPAN + 1  # nothing is removed by advance (I-96)


@pytest.fixture
def ws_span(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "ws", span_config())


def test_long_history_lists_exactly_the_expected_sequence(ws_span: Workspace, tmp_path: Path) -> None:
    store, expected = long_case(ws_span, 10 * SPAN + 3)
    warm = store.checkpoints("case-A", "pkg-1")
    assert [c.step_id for c in warm] == expected
    assert [c.generation for c in warm] == list(range(1, len(expected) + 1))
    current = store.current("case-A", "pkg-1")
    assert current.fingerprint == reference_fingerprint(current)
    # a new process walks the links and sees the same history, checkpoint for checkpoint
    again = cold(ws_span)
    assert [c.data for c in again.checkpoints("case-A", "pkg-1")] == [c.data for c in warm]
    assert again.current("case-A", "pkg-1").fingerprint == current.fingerprint
    # collected, the same
    removed = again.collect().generations
    assert removed, "closed spans leave generations nobody references"
    assert [c.data for c in cold(ws_span).checkpoints("case-A", "pkg-1")] == [c.data for c in warm]
    # and the exported package, a complete v1 package, holds the same chain and content
    exported = again.export("case-A", "pkg-1", tmp_path / "out.zip")
    assert record_of(exported.path) is None and exported.stored_format == 1
    assert [c.data for c in exported.chain] == [c.data for c in current.chain]
    assert exported.fingerprint == current.fingerprint
    assert read_package(exported.path).fingerprint == current.fingerprint  # a valid input as it is
    assert sorted(exported.files) == sorted(current.files)
    for checkpoint in current.chain[:: SPAN + 1]:
        assert current.read(checkpoint.path) == exported.read(checkpoint.path)


def test_an_exported_package_is_the_same_input(ws_span: Workspace, tmp_path: Path) -> None:
    store, _ = long_case(ws_span, 2 * SPAN + 1)
    exported = store.export("case-A", "pkg-1", tmp_path / "out.zip")
    shutil.copy(exported.path, ws_span.inbox / "again.zip")
    assert [r.kind for r in InboxProcessor(ws_span).poll()] == [ResultKind.DUPLICATE]
    other = Workspace(tmp_path / "other")
    shutil.copy(exported.path, other.inbox / "moved.zip")
    assert [r.kind for r in InboxProcessor(other).poll()] == [ResultKind.ACCEPTED]
    moved = CheckpointStore(other).advance("case-A", "pkg-1", "INTERPRETING", step_id="after-the-move")
    assert moved.link is not None and moved.link.file == f"g{exported.generation:08d}.zip"
    assert [c.step_id for c in moved.chain[1:]] == [c.step_id for c in exported.chain]


def test_commit_on_a_package_from_elsewhere_stores_its_whole_history_in_a_new_folder(ws: Workspace) -> None:
    """A generation links only within its own folder: committed on top of a package read from the inbox (an
    admission one at a time), generation 1 holds its whole history, in the case folder commit() creates."""
    from tenure.intake.canonical import utc_now
    from tenure.intake.commit import commit
    from tenure.intake.machine import intake_machine
    from tenure.intake.plan import make_request, plan_advance
    from tenure.intake.storage import CaseStorage
    from tests.support.intake import put

    incoming = read_package(put(ws, "in.zip"), ws.config)
    machine = intake_machine(ws.config.phases)
    request = make_request(machine, ws.config, "VALIDATED", step_id=f"admission:{incoming.fingerprint}")
    now = utc_now()
    folder = ws.case_dir("case-A", "pkg-1")
    assert not folder.exists()
    package = commit(ws, incoming, plan_advance(incoming, request, machine, now, ws.config.limits), folder, now)
    assert (package.generation, package.state.value, package.link) == (1, "VALIDATED", None)
    assert package.path == folder / "g00000001.zip"
    _validated.clear()
    stored = CaseStorage(ws).load_current("case-A", "pkg-1")
    assert stored is not None and stored.fingerprint == package.fingerprint and len(stored.history) == 1
    advanced = CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    assert advanced.link is not None and advanced.link.file == "g00000001.zip"


def test_a_stored_generation_delivered_as_input_is_quarantined(ws: Workspace) -> None:
    package = to_building(ws)
    shutil.copy(package.path, ws.inbox / "copied-generation.zip")
    [result] = InboxProcessor(ws).poll()
    assert result.kind is ResultKind.QUARANTINED and result.code == "stored-generation"


# --------------------------------------------------------------------------- v1 stays readable


@pytest.fixture
def v1_case(ws: Workspace) -> dict[str, Any]:
    expected: dict[str, Any] = json.loads((V1_CASE / "expected.json").read_text())
    folder = ws.case_dir(expected["case_id"], expected["package_id"])
    folder.mkdir(parents=True)
    for path in sorted(V1_CASE.glob("g*.zip")):
        shutil.copy(path, folder / path.name)
    expected["folder"] = folder
    return expected


def test_v1_case_reads_and_becomes_v2_on_its_next_write(ws: Workspace, v1_case: dict[str, Any]) -> None:
    case, pkg, folder = v1_case["case_id"], v1_case["package_id"], v1_case["folder"]
    before = {n: (folder / n).read_bytes() for n in names(folder)}
    assert all(record_of(folder / n) is None for n in before), "written by the v1 writer"
    store = CheckpointStore(ws)
    current = store.current(case, pkg)
    assert current.stored_format == 1 and current.link is None
    assert current.fingerprint == v1_case["fingerprint"]
    assert [c.step_id for c in store.checkpoints(case, pkg)] == v1_case["steps"]
    advanced = store.advance(case, pkg, "HYPOTHESIZING", step_id="v2-first")
    record = record_of(folder / "g00000005.zip")
    assert record is not None and record["format_version"] == 2
    assert record["base"] == {"file": "g00000004.zip", "generation": 4, "fingerprint": v1_case["fingerprint"]}
    assert advanced.stored_format == 2 and advanced.manifest["artifacts"]["inputs"] == "analysis/inputs.json"
    assert [c.step_id for c in cold(ws).checkpoints(case, pkg)] == [*v1_case["steps"], "v2-first"]
    assert {n: (folder / n).read_bytes() for n in before} == before, "v1 files are never rewritten"
    # repeated step ids of the v1 history are still recognised
    assert (
        store.advance(case, pkg, "INTERPRETING", step_id="v1-interpret", details={"note": "old writer"}).generation == 5
    )
    # the v1 generation 4 holds its whole history: 1-3 are no longer referenced, 4 is
    removed = store.collect().generations
    assert sorted(Path(p).name for p in removed) == ["g00000001.zip", "g00000002.zip", "g00000003.zip"]
    assert names(folder) == ["g00000004.zip", "g00000005.zip"]
    assert [c.step_id for c in cold(ws).checkpoints(case, pkg)] == [*v1_case["steps"], "v2-first"]


# --------------------------------------------------------------------------- damage is never a shorter history


def corrupt_code(ws: Workspace) -> tuple[str, dict[str, Any]]:
    with pytest.raises(LifecycleError) as caught:
        cold(ws).current("case-A", "pkg-1")
    return caught.value.code, caught.value.context


def test_missing_link_is_storage_corrupt(ws_span: Workspace) -> None:
    store, _ = long_case(ws_span, SPAN + 2)
    folder = ws_span.case_dir("case-A", "pkg-1")
    newest = store.current("case-A", "pkg-1")
    assert newest.link is not None
    os.unlink(folder / newest.link.file)
    code, context = corrupt_code(ws_span)
    assert code == "storage-corrupt" and context["cause"] == "generation-link-missing"
    assert context["missing"] == newest.link.file
    before = names(folder)
    with pytest.raises(LifecycleError) as caught:
        cold(ws_span).advance("case-A", "pkg-1", "INTERPRETING", step_id="x")
    assert caught.value.code == "storage-corrupt" and names(folder) == before, "nothing written on a broken chain"
    report = cold(ws_span).collect()
    assert report.generations == [] and report.skipped == {str(folder): "storage-corrupt"}
    assert names(folder) == before, "nothing collected from a broken chain"


def test_link_to_another_generation_is_storage_corrupt(ws_span: Workspace) -> None:
    store, _ = long_case(ws_span, 2)
    folder = ws_span.case_dir("case-A", "pkg-1")
    newest = store.current("case-A", "pkg-1")
    assert newest.link is not None
    # the linked file replaced by another valid generation of the same package: its fingerprint differs
    older = folder / f"g{newest.link.generation - 1:08d}.zip"
    target = folder / newest.link.file
    os.unlink(target)
    complete_package(older, folder / "elsewhere.zip")
    with zipfile.ZipFile(folder / "elsewhere.zip") as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == MANIFEST:
                manifest = json.loads(data)
                manifest["generation"] = newest.link.generation
                data = json.dumps(manifest).encode()
            dst.writestr(info.filename, data)
    os.unlink(folder / "elsewhere.zip")
    code, context = corrupt_code(ws_span)
    assert code == "storage-corrupt" and context["cause"] in {"generation-link-mismatch", "checkpoint-mismatch"}


def test_damaged_record_and_truncated_links_are_storage_corrupt(ws_span: Workspace) -> None:
    store, _ = long_case(ws_span, 3)
    folder = ws_span.case_dir("case-A", "pkg-1")
    newest = store.current("case-A", "pkg-1")
    assert newest.link is not None
    linked = folder / newest.link.file
    original = linked.read_bytes()
    linked.write_bytes(original[: len(original) // 2])
    code, context = corrupt_code(ws_span)
    assert code == "storage-corrupt" and context["path"] == str(linked)
    # a record that is not one
    with zipfile.ZipFile(folder / "rewritten.zip", "w") as dst, zipfile.ZipFile(newest.path) as src:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info.filename, b'{"format": "x"}' if info.filename == GENERATION_RECORD else data)
    linked.write_bytes(original)
    os.replace(folder / "rewritten.zip", newest.path)
    code, context = corrupt_code(ws_span)
    assert code == "storage-corrupt" and context["cause"] == "generation-record-invalid"


def test_blocked_pass_reports_a_broken_chain(ws_span: Workspace) -> None:
    store, _ = long_case(ws_span, 2)
    newest = store.current("case-A", "pkg-1")
    assert newest.link is not None
    os.unlink(ws_span.case_dir("case-A", "pkg-1") / newest.link.file)
    (ws_span.case_dir("case-A", "pkg-1") / "current.json").unlink()  # no hint: the chain is loaded
    _validated.clear()
    [result] = InboxProcessor(Workspace(ws_span.root, ws_span.config)).poll()
    assert result.kind is ResultKind.ERROR and result.code == "storage-corrupt"


# --------------------------------------------------------------------------- collection (I-132)


def test_i132_collect_removes_unreferenced_generations_and_temp_files(ws_span: Workspace) -> None:
    store, expected = long_case(ws_span, 3 * SPAN)
    to_building(ws_span, "case-B")  # a second package, two generations: nothing to collect there
    folder = ws_span.case_dir("case-A", "pkg-1")
    newest = store.current("case-A", "pkg-1")
    referenced = sorted(store.storage.referenced(newest))
    leftovers = [
        folder / ".tmp-deadbeef.zip",
        ws_span.cache / ".tmp-deadbeef.zip",
        ws_span.runtime_file.parent / ".tmp-deadbeef",
    ]
    for path in leftovers:
        path.write_bytes(b"left by a writer that died")
    probe = ws_span.runtime_file.parent / ".tmp-alive.probe"
    probe.write_bytes(b"")
    report = store.collect()
    assert report.temporary == 3 and not any(p.exists() for p in leftovers) and probe.exists()
    assert names(folder) == [f"g{n:08d}.zip" for n in referenced]
    assert len(report.generations) == newest.generation - len(referenced) > 0
    assert names(ws_span.case_dir("case-B", "pkg-1")) == ["g00000001.zip", "g00000002.zip"]
    assert [c.step_id for c in cold(ws_span).checkpoints("case-A", "pkg-1")] == expected
    assert cold(ws_span).collect().generations == [], "a second collection finds nothing"
    # the history goes on; the next closed span is collected in turn
    for i in range(SPAN):
        store.advance("case-A", "pkg-1", "INTERPRETING", step_id=f"after-{i}")
    assert store.collect().generations
    assert len(names(folder)) <= newest.generation // SPAN + SPAN + 1


def test_i132_collect_waits_for_no_one(ws: Workspace) -> None:
    to_building(ws)
    worker = ws.worker_lock()
    assert worker.acquire()
    try:
        with pytest.raises(BusyError):
            CheckpointStore(ws).collect()
    finally:
        worker.release()


COLLECT = (
    "import sys, json\n"
    "from tenure.intake import Workspace, CheckpointStore, IntakeConfig\n"
    "print(json.dumps(CheckpointStore(Workspace(sys.argv[1], IntakeConfig(chain_span=int(sys.argv[2]))))"
    ".collect().to_dict()))\n"
)


@pytest.mark.parametrize(("point", "skip"), [(p, 0) for p in CRASH_POINTS] + [("intake.gc.removed", 2)])
def test_i132_crash_during_collect_loses_nothing(ws_span: Workspace, point: str, skip: int) -> None:
    store, expected = long_case(ws_span, 2 * SPAN + 1)
    folder = ws_span.case_dir("case-A", "pkg-1")
    newest = store.current("case-A", "pkg-1")
    referenced = [f"g{n:08d}.zip" for n in sorted(store.storage.referenced(newest))]
    before = names(folder)
    crashed = run_python(
        COLLECT, str(ws_span.root), str(SPAN), env={"TENURE_CRASH_AT": point, "TENURE_CRASH_SKIP": str(skip)}
    )
    assert crashed.returncode == -9, crashed.stderr
    left = names(folder)
    assert set(referenced) <= set(left) <= set(before)
    if point == "intake.gc.removed":
        assert len(before) - len(left) == skip + 1, "crashed in the middle of the removals"
    # whatever the crash left, the history is whole and the next collection completes
    assert [c.step_id for c in cold(ws_span).checkpoints("case-A", "pkg-1")] == expected
    finished = run_python(COLLECT, str(ws_span.root), str(SPAN))
    assert finished.returncode == 0, finished.stderr
    assert names(folder) == referenced
    assert [c.step_id for c in cold(ws_span).checkpoints("case-A", "pkg-1")] == expected
    polled = run_python(POLL, str(ws_span.root))
    assert polled.returncode == 0 and json.loads(polled.stdout) == []


def test_cli_export_and_gc(ws_span: Workspace, tmp_path: Path) -> None:
    from tests.integration.intake.test_cli import invoke

    long_case(ws_span, 2 * SPAN)
    root = str(ws_span.root)
    code, out, _ = invoke("export", root, "case-A", "pkg-1", str(tmp_path / "out.zip"), "--json")
    document = json.loads(out)
    assert code == 0 and set(document) == {"path", "package"}
    assert read_package(tmp_path / "out.zip").fingerprint == document["package"]["fingerprint"]
    code, out, _ = invoke("gc", root, "--json")
    report = json.loads(out)
    assert code == 0 and set(report) == {"generations", "temporary", "folders", "skipped"}
    assert report["folders"] == 1 and report["generations"] and report["skipped"] == {}
    code, out, _ = invoke("gc", root)
    assert code == 0 and "generations removed" in out


# --------------------------------------------------------------------------- the machine model, in spans of 2


class SpannedIntakeModel(IntakeModel):
    """The intake machine model (tests/integration/intake/test_stateful.py) on stored format v2 with spans of 2 and
    collections in between: the stored package always matches the model, and a new process reads the same
    history and fingerprint as the warm one."""

    def __init__(self) -> None:
        super().__init__()
        self.ws = Workspace(self.ws.root, IntakeConfig(chain_span=2))
        self.store = CheckpointStore(self.ws, clock=lambda: self.now)

    @rule()
    def collect(self) -> None:
        report = self.store.collect()
        assert report.skipped == {}

    @invariant()
    def a_cold_read_sees_the_same_package(self) -> None:
        warm = self.store.current("case-A", "pkg-1")
        _validated.clear()
        again = CheckpointStore(Workspace(self.ws.root, self.ws.config)).current("case-A", "pkg-1")
        assert again.fingerprint == warm.fingerprint == reference_fingerprint(again)
        assert [c.data for c in again.chain] == [c.data for c in warm.chain]


SpannedIntakeModel.TestCase.settings = settings(
    max_examples=15, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_spanned_intake_machine_model = SpannedIntakeModel.TestCase
