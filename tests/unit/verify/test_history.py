"""The history checker: clean histories report nothing; each planted violation is reported under its rule."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tenure.verify.history import (
    CHECKPOINT_RESTORABLE,
    GENERATION_ORDER,
    OWNERLESS,
    RULES,
    SINGLE_HOLDER,
    STALE_WRITE,
    History,
    Kind,
    Observation,
    Operation,
    Outcome,
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
    assert set(RULES) == {SINGLE_HOLDER, GENERATION_ORDER, STALE_WRITE, CHECKPOINT_RESTORABLE, OWNERLESS}


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
