"""Transitions, revisions, BLOCKED/retry and routing (I-38..I-60, I-116, I-117)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from tenure.errors import IllegalTransitionError
from tenure.intake import CheckpointStore, IntakeConfig, LifecycleError, State, Workspace
from tenure.intake.machine import documented_machines, intake_machine
from tenure.states import machine_doc
from tests.support.intake import admit, future, past, to_building

LINEAR = ["BUILDING_CASE", "INTERPRETING", "HYPOTHESIZING", "DIAGNOSING", "REPORTING", "OUTPUT_READY", "HANDED_OFF"]


def walk(store: CheckpointStore, upto: str, case: str = "case-A") -> None:
    for i, state in enumerate(LINEAR[: LINEAR.index(upto) + 1]):
        store.advance(case, "pkg-1", state, step_id=f"walk-{i}")


def refused(store: CheckpointStore, state: str, code: str, case: str = "case-A", **kwargs: object) -> LifecycleError:
    generations = store.generations(case, "pkg-1")
    with pytest.raises(LifecycleError) as caught:
        store.advance(case, "pkg-1", state, step_id=f"refused-{state}", **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == code, caught.value
    assert store.generations(case, "pkg-1") == generations
    return caught.value


def test_i38_linear_sequence_one_step_at_a_time(ws: Workspace) -> None:
    admit(ws)
    store = CheckpointStore(ws)
    walk(store, "HANDED_OFF")
    states = [c.state for c in store.checkpoints("case-A", "pkg-1")]
    assert states == ["VALIDATED", *LINEAR]
    assert store.current("case-A", "pkg-1").generation == 1 + len(LINEAR)


def test_i39_reopened_goes_only_to_building_case(ws: Workspace) -> None:
    admit(ws)
    store = CheckpointStore(ws)
    walk(store, "HANDED_OFF")
    store.reopen("case-A", "pkg-1", step_id="reopen")
    for target in ("INTERPRETING", "HANDED_OFF", "VALIDATED", "REOPENED"):
        refused(store, target, "transition-not-allowed")
    assert store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="rebuild").state is State.BUILDING_CASE


def test_i40_checkpoint_in_place(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    package = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="progress-1", details={"files_seen": 3})
    assert package.state is State.BUILDING_CASE and package.generation == 3
    refused_state = admit(ws, "case-V")
    assert refused_state.state is State.VALIDATED
    refused(store, "VALIDATED", "transition-not-allowed", case="case-V")


def test_i41_active_phase_may_block(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    package = store.block("case-A", "pkg-1", step_id="b", reason="tool down", retry_at=future())
    assert package.state is State.BLOCKED
    admit(ws, "case-V")
    refused(store, "BLOCKED", "transition-not-allowed", case="case-V", reason="x", retry_at=future())


def test_i42_active_phase_may_fail(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    package = store.fail("case-A", "pkg-1", step_id="f", details={"why": "no inputs"})
    assert package.state is State.FAILED_TO_ANALYZE
    admit(ws, "case-V")
    refused(store, "FAILED_TO_ANALYZE", "transition-not-allowed", case="case-V")


def test_i43_only_handed_off_and_failed_reopen(ws: Workspace) -> None:
    admit(ws)
    store = CheckpointStore(ws)
    refused(store, "REOPENED", "transition-not-allowed")
    walk(store, "OUTPUT_READY")
    refused(store, "REOPENED", "transition-not-allowed")
    store.advance("case-A", "pkg-1", "HANDED_OFF", step_id="handoff")
    assert store.reopen("case-A", "pkg-1", step_id="r").state is State.REOPENED
    to_building(ws, "case-F")
    store.fail("case-F", "pkg-1", step_id="f")
    assert store.reopen("case-F", "pkg-1", step_id="r").state is State.REOPENED


def test_i44_skips_rejected(ws: Workspace) -> None:
    admit(ws)
    store = CheckpointStore(ws)
    error = refused(store, "INTERPRETING", "transition-skip")
    assert error.context["state"] == "VALIDATED" and error.context["target"] == "INTERPRETING"
    store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    refused(store, "OUTPUT_READY", "transition-skip")


def test_i44_new_to_building_case_is_a_skip() -> None:
    machine = intake_machine()
    with pytest.raises(LifecycleError) as caught:
        machine.check(State.NEW, State.BUILDING_CASE, {"now": past()})
    assert caught.value.code == "transition-skip"


def test_i45_regressions_rejected(ws: Workspace) -> None:
    admit(ws)
    store = CheckpointStore(ws)
    walk(store, "DIAGNOSING")
    refused(store, "BUILDING_CASE", "transition-regression")
    store.advance("case-A", "pkg-1", "REPORTING", step_id="r")
    store.advance("case-A", "pkg-1", "OUTPUT_READY", step_id="o")
    store.advance("case-A", "pkg-1", "HANDED_OFF", step_id="h")
    refused(store, "OUTPUT_READY", "transition-regression")


def test_i46_unrelated_blocked_resume_rejected(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    store.block("case-A", "pkg-1", step_id="b", reason="wait", retry_at=past())
    for target in ("BUILDING_CASE", "HYPOTHESIZING", "DIAGNOSING"):
        refused(store, target, "resume-state-mismatch")
    assert store.advance("case-A", "pkg-1", "INTERPRETING", step_id="back").state is State.INTERPRETING


def test_i47_first_building_case_starts_revision_1(ws: Workspace) -> None:
    package = admit(ws)
    assert package.analysis_revision == 0
    package = CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    assert package.analysis_revision == 1
    assert package.manifest["history"]["revisions"] == 1


def test_i48_reopen_increments_revision_once(ws: Workspace) -> None:
    admit(ws)
    store = CheckpointStore(ws)
    walk(store, "HANDED_OFF")
    assert store.current("case-A", "pkg-1").analysis_revision == 1
    assert store.reopen("case-A", "pkg-1", step_id="reopen").analysis_revision == 2
    rebuilt = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="rebuild")
    assert rebuilt.analysis_revision == 2


def test_i49_revision_counter_leaves_other_counters(ws: Workspace) -> None:
    admit(ws, history={"interpretations": 4, "reports": 2})
    store = CheckpointStore(ws)
    walk(store, "HANDED_OFF")
    package = store.reopen("case-A", "pkg-1", step_id="reopen")
    assert package.manifest["history"] == {"revisions": 2, "interpretations": 4, "reports": 2}


def test_i50_generation_independent_of_revision(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    before = store.current("case-A", "pkg-1")
    after = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="p")
    assert after.generation == before.generation + 1
    assert after.analysis_revision == before.analysis_revision


def test_i51_revision_not_inferred_from_file_names(ws: Workspace) -> None:
    to_building(ws)
    folder = ws.case_dir("case-A", "pkg-1")
    (folder / "g00000001.zip").rename(folder / "revision-9.zip")
    (folder / "g00000002.zip").rename(folder / "g00000002-r7.zip.bak")
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).current("case-A", "pkg-1")
    assert caught.value.code == "case-not-found"


def test_i52_blocked_needs_reason(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    for reason in ("", "   \t"):
        refused(store, "BLOCKED", "block-reason-required", reason=reason, retry_at=future())


def test_i53_blocked_needs_aware_retry_time(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    refused(store, "BLOCKED", "retry-time-naive", reason="x", retry_at=datetime(2030, 1, 1))
    refused(store, "BLOCKED", "retry-time-required", reason="x")


def test_i54_blocked_records_resume_state_routing_and_retry(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    package = store.block("case-A", "pkg-1", step_id="b", reason="tool down", retry_at=future())
    assert package.latest is not None and package.latest.resume_state == "BUILDING_CASE"
    assert package.routing == "inbox" and package.retry_count == 1
    assert package.blocked is not None and package.blocked["reason"] == "tool down"


def test_i55_resume_returns_to_recorded_state(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    store.block("case-A", "pkg-1", step_id="b", reason="x", retry_at=past())
    assert store.resume("case-A", "pkg-1", step_id="r").state is State.INTERPRETING


def test_i56_resume_refused_before_retry_time(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    store.block("case-A", "pkg-1", step_id="b", reason="x", retry_at=future())
    with pytest.raises(LifecycleError) as caught:
        store.resume("case-A", "pkg-1", step_id="r")
    assert caught.value.code == "resume-too-early"
    assert store.current("case-A", "pkg-1").state is State.BLOCKED


def test_i57_resume_clears_reason_keeps_retry_count(ws: Workspace) -> None:
    to_building(ws)
    store = CheckpointStore(ws)
    store.block("case-A", "pkg-1", step_id="b1", reason="x", retry_at=past())
    store.resume("case-A", "pkg-1", step_id="r1")
    store.block("case-A", "pkg-1", step_id="b2", reason="y", retry_at=past())
    package = store.resume("case-A", "pkg-1", step_id="r2")
    assert package.blocked is None and package.retry_count == 2
    assert package.routing == "cases"
    assert package.latest is not None and package.latest.data["routing"]["retry_at"] is None


def test_i58_retry_clock_is_utc_aware(ws: Workspace, tmp_path: Path) -> None:
    moment = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    clock = {"now": moment}
    store = CheckpointStore(ws, clock=lambda: clock["now"])
    to_building(ws)
    plus_five = timezone(timedelta(hours=5))
    # 16:30 at +05:00 is 11:30 UTC: already due at 12:00 UTC
    store.block("case-A", "pkg-1", step_id="b", reason="x", retry_at=datetime(2030, 1, 1, 16, 30, tzinfo=plus_five))
    assert store.resume("case-A", "pkg-1", step_id="r").state is State.BUILDING_CASE
    minus_five = timezone(timedelta(hours=-5))
    # 08:00 at -05:00 is 13:00 UTC: not yet due at 12:00 UTC
    store.block("case-A", "pkg-1", step_id="b2", reason="x", retry_at=datetime(2030, 1, 1, 8, 0, tzinfo=minus_five))
    with pytest.raises(LifecycleError) as caught:
        store.resume("case-A", "pkg-1", step_id="r2")
    assert caught.value.code == "resume-too-early"
    clock["now"] = moment + timedelta(hours=1)
    assert store.resume("case-A", "pkg-1", step_id="r2").state is State.BUILDING_CASE
    blocked = store.checkpoints("case-A", "pkg-1")[-2]
    assert blocked.data["routing"]["retry_at"].endswith("+00:00")


def test_i59_routing_follows_state(ws: Workspace) -> None:
    machine = intake_machine()
    expected = {
        "NEW": "inbox",
        "VALIDATED": "cases",
        "BUILDING_CASE": "cases",
        "INTERPRETING": "cases",
        "REPORTING": "cases",
        "REOPENED": "cases",
        "BLOCKED": "inbox",
        "FAILED_TO_ANALYZE": "review",
        "OUTPUT_READY": "outbox",
        "HANDED_OFF": "outbox",
    }
    assert {s: machine.routing(s) for s in expected} == expected
    to_building(ws)
    assert CheckpointStore(ws).fail("case-A", "pkg-1", step_id="f").routing == "review"


def test_i60_state_and_routing_are_separate_fields(ws: Workspace) -> None:
    package = to_building(ws)
    manifest = json.loads(package.read("manifest.json"))
    assert manifest["state"] == "BUILDING_CASE" and manifest["routing"] == "cases"
    blocked = CheckpointStore(ws).block("case-A", "pkg-1", step_id="b", reason="x", retry_at=future())
    manifest = json.loads(blocked.read("manifest.json"))
    assert manifest["state"] == "BLOCKED" and manifest["routing"] == "inbox"


def test_i116_phase_list_is_configurable(tmp_path: Path) -> None:
    config = IntakeConfig(phases=("TRIAGING", "FIXING"))
    ws = Workspace(tmp_path / "ws", config)
    admit(ws)
    store = CheckpointStore(ws)
    for i, state in enumerate(["BUILDING_CASE", "TRIAGING", "FIXING", "OUTPUT_READY"]):
        store.advance("case-A", "pkg-1", state, step_id=f"s{i}")
    assert store.current("case-A", "pkg-1").state.value == "OUTPUT_READY"
    with pytest.raises(LifecycleError) as caught:
        store.advance("case-A", "pkg-1", "INTERPRETING", step_id="x")
    assert caught.value.code == "unknown-state"


def test_i117_active_states_are_building_and_phases() -> None:
    machine = intake_machine()
    assert machine.active == {"BUILDING_CASE", "INTERPRETING", "HYPOTHESIZING", "DIAGNOSING", "REPORTING"}
    for state in State:
        has_loop = (state, state) in machine.machine.edges
        assert has_loop == (state.value in machine.active), state


def test_machine_is_the_kit_with_guarded_resume_edges() -> None:
    machine = intake_machine().machine
    assert machine.is_guarded(State.BLOCKED, State.INTERPRETING)
    assert not machine.is_guarded(State.INTERPRETING, State.BLOCKED)
    with pytest.raises(IllegalTransitionError):
        machine.check(State.BLOCKED, State.INTERPRETING)  # guarded edge without a record
    record = {"now": past(), "resume_state": "INTERPRETING", "retry_at": past(10)}
    assert machine.check(State.BLOCKED, State.INTERPRETING, record) is State.INTERPRETING


def test_machine_page_is_generated_and_current() -> None:
    machines = documented_machines()
    machine, description = machines["intake"]
    page = Path(__file__).resolve().parents[3] / "docs" / "machines" / "intake.md"
    assert page.read_text("utf-8") == machine_doc(machine, description)
