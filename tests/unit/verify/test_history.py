"""The history checker: clean histories report nothing; each planted violation is reported under its rule.

The two rules about what a client was told is saved (``durable-write-lost``, ``lineage-checkpoint-misses-write``)
are also held against a model of a sound pod under crashes (random runs report nothing) and against hand-built
histories with one broken answer each (reported with its precise detail), and the cases that must not be
reported: a later plain overwrite that may or may not have landed, a 412 outcome."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tenure.verify.history import (
    CHECKPOINT_RESTORABLE,
    DURABLE_WRITE_LOST,
    GENERATION_ORDER,
    LINEAGE_CHECKPOINT_MISSES_WRITE,
    OWNERLESS,
    RULES,
    SINGLE_HOLDER,
    STALE_WRITE,
    History,
    Kind,
    Observation,
    Operation,
    Outcome,
    Violation,
    check,
)
from tests.support.histories import STEP, TICK, TTL, Tenure, history_of, two_holders


def rules_of(history: History) -> set[str]:
    return {v.rule for v in check(history)}


def test_a_clean_history_reports_nothing() -> None:
    assert check(history_of(two_holders())) == []


def test_an_empty_history_reports_nothing() -> None:
    assert check(History()) == []


def test_a_pod_acknowledging_a_write_inside_another_pods_live_tenure_breaks_single_holder() -> None:
    clean = history_of(two_holders())
    intruder = Operation(len(clean.operations), Kind.WRITE, "acme/p", "c", 14.1, 14.3, Outcome.OK)
    found = check(replace(clean, operations=[*clean.operations, intruder]))
    assert [v.rule for v in found] == [SINGLE_HOLDER]
    assert found[0].records == (intruder.id,) and "pod c" in found[0].detail


def test_two_live_holders_sampled_at_one_time_break_single_holder() -> None:
    clean = history_of(two_holders())
    twin = Observation(5.0, "acme/p", "c", True, 1)
    found = check(replace(clean, observations=[*clean.observations, twin]))
    assert SINGLE_HOLDER in {v.rule for v in found}


def test_a_refused_or_unknown_operation_of_another_pod_is_not_a_second_holder() -> None:
    clean = history_of(two_holders())
    refused = Operation(90, Kind.WRITE, "acme/p", "c", 14.1, 14.3, Outcome.REFUSED, code="project-unavailable")
    unknown = Operation(91, Kind.CHECKPOINT, "acme/p", "c", 14.1, None, Outcome.UNKNOWN)
    assert check(replace(clean, operations=[*clean.operations, refused, unknown])) == []


def test_a_new_holder_with_the_same_generation_breaks_generation_order() -> None:
    tenures = {"acme/p": [Tenure("a", 1, 0.0, 10.0), Tenure("b", 1, 11.0, 20.0)]}
    found = check(history_of(tenures))
    assert {v.rule for v in found} == {GENERATION_ORDER}
    assert any("followed pod a" in v.detail for v in found)


def test_a_generation_going_back_breaks_generation_order() -> None:
    tenures = {"acme/p": [Tenure("a", 3, 0.0, 10.0), Tenure("a", 2, 11.0, 20.0)]}
    found = check(history_of(tenures, ops_per_tenure=0))  # no writes: only the samples go back
    assert {v.rule for v in found} == {GENERATION_ORDER}
    assert "went back" in found[0].detail


def test_one_generation_acknowledged_by_two_pods_breaks_generation_order() -> None:
    clean = history_of(two_holders())
    bring = Operation(len(clean.operations), Kind.BRING, "acme/p", "b", 11.0, 11.2, Outcome.OK, generation=1)
    found = check(replace(clean, operations=[*clean.operations, bring]))
    assert [v.rule for v in found] == [GENERATION_ORDER]
    assert bring.id in found[0].records


def test_a_checkpoint_under_a_generation_older_than_one_issued_before_it_breaks_stale_write() -> None:
    # a held it at 1; b claimed generation 2 and released it (not live afterwards); then a publishes under 1
    observations = [Observation(t, "acme/p", "a", True, 1, wants_owner=False) for t in (0.0, 1.0, 2.0)]
    observations += [Observation(3.0, "acme/p", "b", True, 2, wants_owner=False)]
    observations += [Observation(t, "acme/p", "b", False, 2, wants_owner=False) for t in (4.0, 5.0, 6.0)]
    stale = Operation(0, Kind.CHECKPOINT, "acme/p", "a", 4.5, 4.8, Outcome.OK, 1, payload={"snapshot": "s"})
    found = check(History([stale], observations, restored={"s": "x"}, ttl=TTL, tick=TICK))
    assert [v.rule for v in found] == [STALE_WRITE]
    assert "generation 2" in found[0].detail


def test_a_write_without_a_known_generation_is_not_judged_stale() -> None:
    observations = [Observation(0.0, "acme/p", "a", True, 1), Observation(3.0, "acme/p", "b", False, 2)]
    write = Operation(0, Kind.WRITE, "acme/p", "a", 4.5, 4.8, Outcome.OK)
    assert STALE_WRITE not in rules_of(History([write], observations, ttl=TTL, tick=TICK))


def test_a_checkpoint_restoring_other_content_breaks_checkpoint_restorable() -> None:
    clean = history_of(two_holders())
    checkpoint = next(op for op in clean.operations if op.kind is Kind.CHECKPOINT)
    snapshot = checkpoint.payload["snapshot"]
    found = check(replace(clean, restored={**clean.restored, snapshot: "something else"}))
    assert [v.rule for v in found] == [CHECKPOINT_RESTORABLE]
    assert found[0].records == (checkpoint.id,)


def test_a_checkpoint_that_does_not_restore_breaks_checkpoint_restorable() -> None:
    clean = history_of(two_holders())
    checkpoint = next(op for op in clean.operations if op.kind is Kind.CHECKPOINT)
    restored = {k: v for k, v in clean.restored.items() if k != checkpoint.payload["snapshot"]}
    assert rules_of(replace(clean, restored=restored)) == {CHECKPOINT_RESTORABLE}
    assert rules_of(replace(clean, restored={**restored, checkpoint.payload["snapshot"]: None})) == {
        CHECKPOINT_RESTORABLE
    }


def test_checkpoints_of_a_closed_project_are_not_judged() -> None:
    clean = history_of(two_holders())
    close = Operation(len(clean.operations), Kind.CLOSE, "acme/p", "b", 21.0, 21.5, Outcome.OK)
    assert check(replace(clean, operations=[*clean.operations, close], restored={})) == []


def test_a_project_without_a_live_owner_past_ttl_and_a_tick_while_pods_have_room_breaks_ownerless() -> None:
    gap = TTL + TICK + 1.0
    tenures = {"acme/p": [Tenure("a", 1, 0.0, 10.0), Tenure("b", 2, 10.0 + gap, 20.0 + gap)]}
    found = check(history_of(tenures))
    assert [v.rule for v in found] == [OWNERLESS]


def test_a_project_without_an_owner_while_no_pod_has_room_is_not_ownerless() -> None:
    gap = TTL + TICK + 1.0
    tenures = {"acme/p": [Tenure("a", 1, 0.0, 10.0), Tenure("b", 2, 10.0 + gap, 20.0 + gap)]}
    clean = history_of(tenures)
    busy = [replace(s, room=False) if 10.0 < s.time < 10.0 + gap else s for s in clean.pods]
    assert check(replace(clean, pods=busy)) == []


def test_a_project_that_wants_no_owner_is_not_ownerless() -> None:
    gap = TTL + TICK + 1.0
    tenures = {"acme/p": [Tenure("a", 1, 0.0, 10.0), Tenure("b", 2, 10.0 + gap, 20.0 + gap)]}
    clean = history_of(tenures)
    idle = [replace(o, wants_owner=False) if not o.live else o for o in clean.observations]
    assert check(replace(clean, observations=idle)) == []


def test_every_rule_has_a_description() -> None:
    assert set(RULES) == {
        SINGLE_HOLDER,
        GENERATION_ORDER,
        STALE_WRITE,
        CHECKPOINT_RESTORABLE,
        OWNERLESS,
        DURABLE_WRITE_LOST,
        LINEAGE_CHECKPOINT_MISSES_WRITE,
    }


# ------------------------------------------------------------------------------ what a client was told is saved

P = "acme/p"


def write(
    ident: int,
    invoked: float,
    path: str,
    sha: str,
    *,
    durable: bool = False,
    lineage: int | None = 1,
    snapshot: str | None = None,
    outcome: Outcome = Outcome.OK,
    code: str | None = None,
    project: str = P,
) -> Operation:
    """A file write of ``path`` with bytes ``sha`` (answered 0.1 s later, unless unknown)."""
    payload: dict[str, object] = {"path": path, "sha256": sha, "durable": durable}
    if lineage is not None and outcome is Outcome.OK:
        payload["lineage"] = lineage
    if snapshot is not None:
        payload["snapshot"] = snapshot
    completed = None if outcome is Outcome.UNKNOWN else invoked + 0.1
    return Operation(ident, Kind.WRITE, project, "a", invoked, completed, outcome, code=code, payload=payload)


def checkpoint(
    ident: int,
    invoked: float,
    snapshot: str,
    *,
    if_lineage: int | None = None,
    outcome: Outcome = Outcome.OK,
    code: str | None = None,
    project: str = P,
) -> Operation:
    payload: dict[str, object] = {"snapshot": snapshot} if outcome is Outcome.OK else {}
    if if_lineage is not None:
        payload["if_lineage"] = if_lineage
    completed = None if outcome is Outcome.UNKNOWN else invoked + 0.1
    return Operation(ident, Kind.CHECKPOINT, project, "a", invoked, completed, outcome, code=code, payload=payload)


def saved_history(
    operations: list[Operation], files: dict[str, dict[str, str] | None], final: str | None = None
) -> History:
    """``operations`` with every snapshot an acknowledged checkpoint named restorable, and ``final`` as P's final
    state."""
    restored: dict[str, str | None] = {s: "d" for s in files if files[s] is not None}
    return History(operations, restored=restored, files=files, final={P: final} if final else {}, ttl=TTL, tick=TICK)


def test_a_durable_write_in_its_snapshot_and_the_final_state_reports_nothing() -> None:
    ops = [write(0, 1.0, "a.txt", "b0"), write(1, 2.0, "a.txt", "b1", durable=True, snapshot="s1")]
    assert check(saved_history(ops, {"s1": {"a.txt": "b1"}}, final="s1")) == []


def test_a_durable_write_whose_named_snapshot_lacks_it_breaks_durable_write_lost() -> None:
    ops = [
        write(0, 1.0, "a.txt", "b0"),
        checkpoint(1, 1.5, "s0"),
        write(2, 2.0, "a.txt", "b1", durable=True, snapshot="s0"),  # answered naming the snapshot before it
        write(3, 3.0, "a.txt", "b3"),
        checkpoint(4, 4.0, "s4"),
    ]
    found = check(saved_history(ops, {"s0": {"a.txt": "b0"}, "s4": {"a.txt": "b3"}}, final="s4"))
    assert found == [
        Violation(
            DURABLE_WRITE_LOST,
            P,
            "durable write #2 of a.txt was acknowledged in snapshot s0, which holds the bytes of write #0 there",
            (2,),
        )
    ]


def test_a_durable_write_missing_from_the_final_state_breaks_durable_write_lost() -> None:
    # acknowledged in s1, which holds it; the final head (an older snapshot restored after a fault) does not
    ops = [
        write(0, 1.0, "a.txt", "b0"),
        checkpoint(1, 1.5, "s0"),
        write(2, 2.0, "a.txt", "b1", durable=True, snapshot="s1"),
    ]
    found = check(saved_history(ops, {"s0": {"a.txt": "b0"}, "s1": {"a.txt": "b1"}}, final="s0"))
    assert found == [
        Violation(
            DURABLE_WRITE_LOST,
            P,
            "a.txt lost after acknowledged: the final state (snapshot s0) holds the bytes of write #0, not the "
            "bytes of write #2 (durable) or of a write that may have landed after it",
            (2,),
        )
    ]
    missing = check(saved_history(ops, {"s0": {}, "s1": {"a.txt": "b1"}}, final="s0"))
    assert [v.rule for v in missing] == [DURABLE_WRITE_LOST] and "holds no such file" in missing[0].detail


def test_a_later_plain_overwrite_that_may_or_may_not_have_landed_is_not_durable_write_lost() -> None:
    ops = [
        write(0, 1.0, "a.txt", "b0"),
        write(1, 2.0, "a.txt", "b1", durable=True, snapshot="s1"),
        write(2, 3.0, "a.txt", "b2"),  # acknowledged, never checkpointed: lost or not after a fault
        write(3, 4.0, "a.txt", "b3", outcome=Outcome.UNKNOWN),  # no answer: it may have landed
        write(4, 5.0, "a.txt", "b4", durable=True, outcome=Outcome.REFUSED, code="stale-generation"),  # written first
    ]
    for held in ("b1", "b2", "b3", "b4"):
        files: dict[str, dict[str, str] | None] = {"s1": {"a.txt": "b1"}, "end": {"a.txt": held}}
        assert check(saved_history(ops, files, final="end")) == [], held
    found = check(saved_history(ops, {"s1": {"a.txt": "b1"}, "end": {"a.txt": "b0"}}, final="end"))
    assert [(v.rule, v.records) for v in found] == [(DURABLE_WRITE_LOST, (1,))]


def test_a_write_refused_before_writing_does_not_replace_a_durable_one() -> None:
    ops = [
        write(0, 1.0, "a.txt", "b1", durable=True, snapshot="s1"),
        write(1, 2.0, "a.txt", "b2", outcome=Outcome.REFUSED, code="lineage-changed"),
        write(2, 3.0, "a.txt", "b3", outcome=Outcome.REFUSED, code="redirected"),
    ]
    for held in ("b2", "b3"):
        found = check(saved_history(ops, {"s1": {"a.txt": "b1"}, "end": {"a.txt": held}}, final="end"))
        assert [(v.rule, v.records) for v in found] == [(DURABLE_WRITE_LOST, (0,))], held


def test_a_later_plain_write_a_checkpoint_showed_saved_replaces_the_durable_one() -> None:
    # b2 was checkpointed after it was acknowledged (s2 holds it): the final state must hold b2 (or later), not b1
    ops = [
        write(0, 1.0, "a.txt", "b1", durable=True, snapshot="s1"),
        write(1, 2.0, "a.txt", "b2"),
        checkpoint(2, 3.0, "s2"),
    ]
    files: dict[str, dict[str, str] | None] = {"s1": {"a.txt": "b1"}, "s2": {"a.txt": "b2"}}
    assert check(saved_history(ops, files, final="s2")) == []
    found = check(saved_history(ops, files, final="s1"))
    assert found == [
        Violation(
            DURABLE_WRITE_LOST,
            P,
            "a.txt lost after acknowledged: the final state (snapshot s1) holds the bytes of write #0, not the "
            "bytes of write #1 (saved by checkpoint #2) or of a write that may have landed after it",
            (1, 2),
        )
    ]
    # a checkpoint that does not hold the plain write (taken after it was lost) saves nothing: b1 stays expected
    lost = {"s1": {"a.txt": "b1"}, "s2": {"a.txt": "b1"}}
    assert check(saved_history(ops, lost, final="s2")) == []


def test_a_durable_write_naming_no_snapshot_or_one_that_does_not_restore_breaks_durable_write_lost() -> None:
    ops = [write(0, 1.0, "a.txt", "b1", durable=True), write(1, 2.0, "b.txt", "b2", durable=True, snapshot="s2")]
    found = check(saved_history(ops, {"s2": None}))
    assert [(v.rule, v.detail) for v in found] == [
        (DURABLE_WRITE_LOST, "durable write #0 of a.txt acknowledged naming no snapshot"),
        (DURABLE_WRITE_LOST, "snapshot s2, named by durable write #1 of b.txt, does not restore"),
    ]


def test_a_final_state_that_does_not_restore_breaks_durable_write_lost() -> None:
    ops = [write(0, 1.0, "a.txt", "b1", durable=True, snapshot="s1")]
    found = check(saved_history(ops, {"s1": {"a.txt": "b1"}, "end": None}, final="end"))
    assert [(v.rule, v.records) for v in found] == [(DURABLE_WRITE_LOST, (0,))]
    assert "does not restore" in found[0].detail


def test_what_is_not_known_is_not_judged_durable_write_lost() -> None:
    durable = write(0, 1.0, "a.txt", "b1", durable=True, snapshot="s1")
    # the named snapshot not read back, no final state known
    assert check(saved_history([durable], {})) == []
    # a write that may have landed after it records no path: it may have written a.txt
    untracked = Operation(1, Kind.WRITE, P, "a", 2.0, 2.1, Outcome.OK)
    assert check(saved_history([durable, untracked], {"s1": {"a.txt": "b1"}, "end": {}}, final="end")) == []
    # a closed project's snapshots are disposed by design
    close = Operation(2, Kind.CLOSE, P, "a", 3.0, 3.1, Outcome.OK)
    assert check(saved_history([durable, close], {"s1": {}, "end": {}}, final="end")) == []
    # an unacknowledged durable write promised nothing
    unknown = write(0, 1.0, "a.txt", "b1", durable=True, outcome=Outcome.UNKNOWN)
    assert check(saved_history([unknown], {"end": {}}, final="end")) == []


def test_a_checkpoint_under_a_lineage_holding_its_writes_reports_nothing() -> None:
    ops = [
        write(0, 1.0, "a.txt", "b0", lineage=1),
        write(1, 2.0, "b.txt", "b1", lineage=1),
        checkpoint(2, 3.0, "s2", if_lineage=1),
        write(3, 4.0, "a.txt", "b3", lineage=1),
        checkpoint(4, 5.0, "s4", if_lineage=1),
    ]
    files: dict[str, dict[str, str] | None] = {
        "s2": {"a.txt": "b0", "b.txt": "b1"},
        "s4": {"a.txt": "b3", "b.txt": "b1"},
    }
    assert check(saved_history(ops, files)) == []


def test_a_checkpoint_under_a_lineage_missing_a_write_made_under_it_breaks_lineage_checkpoint_misses_write() -> None:
    ops = [
        write(0, 1.0, "a.txt", "b0", lineage=1),
        checkpoint(1, 1.5, "s1"),
        write(2, 2.0, "a.txt", "b2", lineage=1),
        write(3, 2.5, "b.txt", "b3", lineage=1),  # then the owner died; the new one did not start a new lineage
        checkpoint(4, 3.0, "s4", if_lineage=1),
    ]
    found = check(saved_history(ops, {"s1": {"a.txt": "b0"}, "s4": {"a.txt": "b0"}}))
    assert found == [
        Violation(
            LINEAGE_CHECKPOINT_MISSES_WRITE,
            P,
            "checkpoint #4 acknowledged under lineage 1 (snapshot s4) misses 2 write(s) acknowledged under that "
            "lineage: a.txt (write #2; it holds the bytes of write #0); b.txt (write #3; it holds no such file)",
            (4, 2, 3),
        )
    ]


def test_a_412_is_an_outcome_not_a_missed_write() -> None:
    # writes under lineage 1, a takeover started lineage 2 without them: the checkpoint under 1 is refused (412),
    # the client takes lineage 2, and its checkpoint under 2 judges only writes acknowledged under 2
    ops = [
        write(0, 1.0, "a.txt", "b0", lineage=1),
        checkpoint(1, 2.0, "-", if_lineage=1, outcome=Outcome.REFUSED, code="lineage-changed"),
        write(2, 3.0, "b.txt", "b2", lineage=2),
        checkpoint(3, 4.0, "s3", if_lineage=2),
    ]
    assert check(saved_history(ops, {"s3": {"b.txt": "b2"}})) == []


def test_what_is_not_judged_lineage_checkpoint_misses_write() -> None:
    w = write(0, 1.0, "a.txt", "b0", lineage=1)
    # a checkpoint sent without Tenure-If-Lineage promises nothing about the lineage's writes
    assert check(saved_history([w, checkpoint(1, 2.0, "s1")], {"s1": {}})) == []
    # a write answered after the checkpoint was invoked
    late = write(1, 2.0, "a.txt", "b1", lineage=1)
    assert check(saved_history([late, checkpoint(2, 2.05, "s2", if_lineage=1)], {"s2": {}})) == []
    # a later write of the path with no answer landed instead
    unknown = write(1, 1.5, "a.txt", "b1", outcome=Outcome.UNKNOWN)
    assert check(saved_history([w, unknown, checkpoint(2, 2.0, "s2", if_lineage=1)], {"s2": {"a.txt": "b1"}})) == []
    # a snapshot that does not restore is checkpoint-restorable's to report
    dead = check(saved_history([w, checkpoint(1, 2.0, "s1", if_lineage=1)], {"s1": None}))
    assert [v.rule for v in dead] == [CHECKPOINT_RESTORABLE]


def test_only_the_latest_write_of_a_path_under_the_lineage_counts() -> None:
    ops = [
        write(0, 1.0, "a.txt", "b0", lineage=1),
        write(1, 2.0, "a.txt", "b1", lineage=1),
        checkpoint(2, 3.0, "s2", if_lineage=1),
    ]
    assert check(saved_history(ops, {"s2": {"a.txt": "b1"}})) == []
    found = check(saved_history(ops, {"s2": {"a.txt": "b0"}}))
    assert [(v.rule, v.records) for v in found] == [(LINEAGE_CHECKPOINT_MISSES_WRITE, (2, 1))]


@st.composite
def sound_runs(draw: st.DrawFn) -> History:
    """One project on a sound pod, step by step: writes (plain or durable, some with no answer, some refused
    before writing), checkpoints (some under the lineage the client last saw), suspends (a final checkpoint:
    the lineage is kept) and crashes (the folder falls back to the head and a new lineage starts)."""
    folder: dict[str, str] = {}
    snapshots: dict[str, dict[str, str] | None] = {"s0": {}}
    head, lineage, seen = "s0", 1, 1
    ops: list[Operation] = []
    t = 0.0

    def publish() -> str:
        nonlocal head
        head = f"s{len(snapshots)}"
        snapshots[head] = dict(folder)
        return head

    for _ in range(draw(st.integers(1, 40))):
        t += 1.0
        step = draw(st.sampled_from(["write", "write", "write", "checkpoint", "suspend", "crash"]))
        ident = len(ops)
        if step == "write":
            path, sha = draw(st.sampled_from(["a", "b", "c"])), f"w{ident}"
            durable = draw(st.booleans())
            fate = draw(st.sampled_from(["ok", "ok", "unknown-landed", "unknown-lost", "refused"]))
            if fate == "refused":
                ops.append(
                    write(ident, t, path, sha, durable=durable, outcome=Outcome.REFUSED, code="project-quiescing")
                )
                continue
            if fate != "unknown-lost":
                folder[path] = sha
            if fate == "ok":
                snapshot = publish() if durable else None
                ops.append(write(ident, t, path, sha, durable=durable, lineage=lineage, snapshot=snapshot))
                seen = lineage
            else:
                if fate == "unknown-landed" and durable and draw(st.booleans()):
                    publish()
                ops.append(write(ident, t, path, sha, durable=durable, outcome=Outcome.UNKNOWN))
        elif step == "checkpoint":
            conditional = draw(st.booleans())
            if conditional and seen != lineage:
                ops.append(checkpoint(ident, t, "-", if_lineage=seen, outcome=Outcome.REFUSED, code="lineage-changed"))
            else:
                ops.append(checkpoint(ident, t, publish(), if_lineage=seen if conditional else None))
            seen = lineage
        elif step == "suspend":
            publish()
        else:
            current = snapshots[head]
            assert current is not None
            folder, lineage = dict(current), lineage + 1
    return saved_history(ops, snapshots, final=publish())


@settings(max_examples=200)
@given(sound_runs())
def test_runs_of_a_sound_pod_under_crashes_report_nothing(history: History) -> None:
    assert check(history) == []


@settings(max_examples=100)
@given(sound_runs(), st.randoms(use_true_random=False))
def test_a_durable_write_answered_naming_an_older_snapshot_is_found(history: History, rng: random.Random) -> None:
    """The pod answers one durable write naming the snapshot before its own (as ``durable-ack-early`` does):
    found, unless that snapshot holds bytes the path may hold anyway (a write with no answer may land late)."""
    acked = [op for op in history.operations if op.payload.get("durable") and op.outcome is Outcome.OK]
    if not acked:
        return
    victim = rng.choice(acked)
    own = int(victim.payload["snapshot"][1:])
    early = replace(victim, payload={**victim.payload, "snapshot": f"s{own - 1}"})
    planted = replace(history, operations=[early if op is victim else op for op in history.operations])
    path = victim.payload["path"]
    named = history.files[f"s{own - 1}"]
    assert named is not None
    late = {
        op.payload["sha256"]
        for op in history.operations
        if op.outcome is Outcome.UNKNOWN and op.payload.get("path") == path and op.invoked < victim.invoked
    }
    if named.get(path) in {victim.payload["sha256"], *late}:
        return
    assert any(v.rule == DURABLE_WRITE_LOST and victim.id in v.records for v in check(planted))


# ------------------------------------------------------------------------------------------ properties


@st.composite
def models(draw: st.DrawFn) -> dict[str, list[Tenure]]:
    """Per project, successive holders with strictly increasing generations and short gaps."""
    tenures: dict[str, list[Tenure]] = {}
    for p in range(draw(st.integers(1, 3))):
        time = draw(st.floats(0.0, 2.0))
        generation = draw(st.integers(1, 5))
        seq = []
        for _ in range(draw(st.integers(2, 5))):
            length = draw(st.floats(3.0, 8.0))
            seq.append(Tenure(draw(st.sampled_from("abc")), generation, time, time + length))
            generation += draw(st.integers(1, 3))
            time += length + draw(st.floats(STEP, TTL))  # within TTL + tick
        tenures[f"t/p{p}"] = seq
    return tenures


def plant(history: History, rule: str, rng: random.Random) -> History:
    """``history`` with one violation of ``rule`` planted at a random place."""
    projects = sorted({o.project for o in history.observations})
    project = rng.choice(projects)
    seq = sorted((o for o in history.observations if o.project == project), key=lambda o: o.time)
    live = [o for o in seq if o.live]
    next_id = len(history.operations)
    if rule == SINGLE_HOLDER:
        i = rng.randrange(len(live) - 1)
        while live[i + 1].holder != live[i].holder or live[i + 1].generation != live[i].generation:
            i = (i + 1) % (len(live) - 1)
        intruder = next(p for p in "xyz" if p != live[i].holder)
        op = Operation(next_id, Kind.WRITE, project, intruder, live[i].time + 0.01, live[i + 1].time - 0.01, Outcome.OK)
        return replace(history, operations=[*history.operations, op])
    if rule == GENERATION_ORDER:
        o = rng.choice(live)
        op = Operation(next_id, Kind.BRING, project, "intruder", o.time, o.time + 0.01, Outcome.OK, o.generation)
        return replace(history, operations=[*history.operations, op])
    if rule == STALE_WRITE:
        generations = sorted({o.generation for o in seq})
        newer = next(o for o in seq if o.generation == generations[-1])
        op = Operation(
            next_id,
            Kind.CHECKPOINT,
            project,
            "late",
            newer.time + 0.01,
            newer.time + 0.02,
            Outcome.OK,
            generations[0],
            payload={"snapshot": "late", "digest": "late"},
        )
        return replace(history, operations=[*history.operations, op], restored={**history.restored, "late": "late"})
    if rule == CHECKPOINT_RESTORABLE:
        snapshot = rng.choice(sorted(history.restored))
        damaged = {**history.restored, snapshot: rng.choice([None, "damaged"])}
        return replace(history, restored=damaged)
    if rule in (DURABLE_WRITE_LOST, LINEAGE_CHECKPOINT_MISSES_WRITE):
        # a write acknowledged durable (or under lineage 1) and the snapshot that should hold it, without it
        t = rng.choice(seq).time
        durable = rule == DURABLE_WRITE_LOST
        saved = f"{project}/saved"  # a project of its own: the model's writes record no path
        ops = [write(next_id, t, "x.txt", "bx", durable=durable, snapshot="lost" if durable else None, project=saved)]
        if not durable:
            ops.append(checkpoint(next_id + 1, t + 0.2, "lost", if_lineage=1, project=saved))
        return replace(
            history,
            operations=[*history.operations, *ops],
            restored={**history.restored, "lost": "lost"},
            files={**history.files, "lost": {}},
        )
    assert rule == OWNERLESS
    last = seq[-1]
    gap = [
        Observation(last.time + STEP * k, project, last.holder, False, last.generation)
        for k in range(1, int((history.ttl + history.tick) / STEP) + 4)
    ]
    return replace(history, observations=[*history.observations, *gap])


@settings(max_examples=150)
@given(models())
def test_random_clean_histories_report_nothing(tenures: dict[str, list[Tenure]]) -> None:
    history = history_of(tenures)
    assert check(history) == []


@settings(max_examples=150)
@given(models(), st.sampled_from(sorted(RULES)), st.randoms(use_true_random=False))
def test_a_violation_planted_in_a_random_clean_history_is_found_under_its_rule(
    tenures: dict[str, list[Tenure]], rule: str, rng: random.Random
) -> None:
    end = max(t.end for seq in tenures.values() for t in seq)
    history = history_of(tenures, horizon=end + 3 * (TTL + TICK))
    assert check(history) == []
    planted = plant(history, rule, rng)
    assert rule in {v.rule for v in check(planted)}
