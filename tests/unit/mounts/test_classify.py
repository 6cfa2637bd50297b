"""The restart-reconciliation classifier against the storage spec (S-54…S-66, S-70; ADR 0018).

The expected verdicts come from ``SPEC_TABLE`` below: an ordered decision
table written by hand from storage-lifecycle-states.md "Restart
reconciliation" and ADR 0018, first matching row wins. It never calls the
code under test; every combination of the facts is checked against it, once
exhaustively and once by Hypothesis, and a test shows that the table tells
apart classifiers whose precedence is broken.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenure.mounts.classify as classify_module
from tenure.mounts.classify import (
    PUBLISHING_VERDICTS,
    UNKNOWN,
    Authority,
    FolderFacts,
    Lookup,
    MountFacts,
    ProjectLease,
    Verdict,
    classify,
    lease_verdict,
)
from tenure.states import LeaseState, MountState

M = MountState
L = LeaseState
P = ProjectLease
V = Verdict
GEN = 7

CLEAN = FolderFacts(exists=True, dirty=False)
DIRTY = FolderFacts(exists=True, dirty=True)
GONE = FolderFacts(exists=False)


def mount(state: MountState = M.MOUNTED, *, cleanup: bool = False, key: bool = False) -> MountFacts:
    return MountFacts(state=state, generation=GEN, cleanup_pending=cleanup, checkpoint_in_flight=key)


def lease(project: ProjectLease = P.HELD, generation: int = GEN, writer: LeaseState = L.ACTIVE) -> Authority:
    return Authority(project_lease=project, generation=generation, writer_lease=writer)


VALID = lease()
EXPIRED = lease(P.EXPIRED, writer=L.EXPIRED)
REVOKED = lease(P.REVOKED, GEN + 1, L.REVOKED)
OTHER_GENERATION = lease(P.OTHER_POD, GEN + 1)


# --------------------------------------------------------------------------- one test per verdict


def test_s56_cleanup_incomplete_when_a_cleanup_is_pending() -> None:
    assert classify(mount(cleanup=True), CLEAN, VALID) is V.CLEANUP_INCOMPLETE


def test_s56_an_unmounting_mount_is_cleanup_incomplete() -> None:
    assert classify(mount(M.UNMOUNTING), GONE, VALID) is V.CLEANUP_INCOMPLETE


def test_s57_checkpoint_interrupted_when_its_key_is_recorded() -> None:
    assert classify(mount(key=True), DIRTY, VALID) is V.CHECKPOINT_INTERRUPTED


def test_s57_a_checkpointing_mount_is_checkpoint_interrupted() -> None:
    assert classify(mount(M.CHECKPOINTING), DIRTY, VALID) is V.CHECKPOINT_INTERRUPTED


@pytest.mark.parametrize("writer", [L.ACTIVE, L.RELEASING])
@pytest.mark.parametrize("state", [M.MOUNTING, M.MOUNTED])
def test_s58_active_lease_valid_when_held_live_and_of_the_mounts_generation(
    state: MountState, writer: LeaseState
) -> None:
    assert classify(mount(state), DIRTY, lease(writer=writer)) is V.ACTIVE_LEASE_VALID


@pytest.mark.parametrize("folder", [CLEAN, DIRTY, GONE])
@pytest.mark.parametrize("state", [M.MOUNTING, M.MOUNTED])
def test_s60_s61_a_live_mount_without_an_answer_is_control_plane_unknown(
    state: MountState, folder: FolderFacts
) -> None:
    assert classify(mount(state), folder, UNKNOWN) is V.CONTROL_PLANE_UNKNOWN


@pytest.mark.parametrize("generation", [GEN - 1, GEN + 1])
def test_s62_another_generation_is_stale(generation: int) -> None:
    assert classify(mount(), DIRTY, lease(generation=generation)) is V.STALE_GENERATION


def test_s62_a_project_held_by_another_pod_is_stale_even_at_the_same_generation() -> None:
    assert classify(mount(), DIRTY, lease(P.OTHER_POD)) is V.STALE_GENERATION


@pytest.mark.parametrize(
    "authority", [lease(P.EXPIRED), lease(writer=L.EXPIRED), lease(writer=L.RELEASED), EXPIRED], ids=str
)
def test_s63_an_expired_lease_is_stale(authority: Authority) -> None:
    assert classify(mount(), DIRTY, authority) is V.STALE_GENERATION


@pytest.mark.parametrize("authority", [lease(P.REVOKED), lease(writer=L.REVOKED), REVOKED], ids=str)
def test_s64_a_revoked_lease_is_stale(authority: Authority) -> None:
    assert classify(mount(), CLEAN, authority) is V.STALE_GENERATION


@pytest.mark.parametrize("authority", [VALID, EXPIRED, REVOKED, OTHER_GENERATION, UNKNOWN], ids=str)
def test_s65_a_torn_down_mount_with_uncommitted_data_is_a_preserved_delta(authority: Lookup) -> None:
    assert classify(mount(M.CLOSED), DIRTY, authority) is V.PRESERVED_DELTA


@pytest.mark.parametrize("folder", [CLEAN, GONE])
@pytest.mark.parametrize("authority", [VALID, EXPIRED, REVOKED, OTHER_GENERATION, UNKNOWN], ids=str)
def test_s66_a_torn_down_mount_with_nothing_uncommitted_is_safe_to_delete(
    authority: Lookup, folder: FolderFacts
) -> None:
    assert classify(mount(M.CLOSED), folder, authority) is V.SAFE_TO_DELETE


def test_a_writer_lease_never_activated_is_control_plane_unknown() -> None:
    assert classify(mount(), DIRTY, lease(writer=L.ISSUED)) is V.CONTROL_PLANE_UNKNOWN


# --------------------------------------------------------------------------- precedence


@pytest.mark.parametrize("authority", [EXPIRED, REVOKED, OTHER_GENERATION, UNKNOWN, VALID], ids=str)
def test_s55_s56_a_pending_cleanup_comes_before_any_lease_verdict(authority: Lookup) -> None:
    assert classify(mount(cleanup=True), DIRTY, authority) is V.CLEANUP_INCOMPLETE
    assert classify(mount(M.UNMOUNTING), DIRTY, authority) is V.CLEANUP_INCOMPLETE


@pytest.mark.parametrize("authority", [EXPIRED, REVOKED, OTHER_GENERATION, UNKNOWN, VALID], ids=str)
def test_s55_s57_an_in_flight_checkpoint_comes_before_any_lease_verdict(authority: Lookup) -> None:
    assert classify(mount(key=True), DIRTY, authority) is V.CHECKPOINT_INTERRUPTED
    assert classify(mount(M.CHECKPOINTING), CLEAN, authority) is V.CHECKPOINT_INTERRUPTED


def test_s55_a_pending_cleanup_comes_before_an_in_flight_checkpoint() -> None:
    assert classify(mount(M.CHECKPOINTING, cleanup=True, key=True), DIRTY, EXPIRED) is V.CLEANUP_INCOMPLETE
    assert classify(mount(M.UNMOUNTING, key=True), DIRTY, EXPIRED) is V.CLEANUP_INCOMPLETE


@pytest.mark.parametrize("folder", [CLEAN, GONE])
def test_s55_interrupted_operations_of_a_closed_mount_come_before_deletion(folder: FolderFacts) -> None:
    assert classify(mount(M.CLOSED, key=True), folder, VALID) is V.CHECKPOINT_INTERRUPTED
    assert classify(mount(M.CLOSED, cleanup=True), folder, UNKNOWN) is V.CLEANUP_INCOMPLETE


def test_s55_the_lease_verdicts_come_before_the_folder_of_a_live_mount() -> None:
    assert classify(mount(), DIRTY, REVOKED) is V.STALE_GENERATION
    assert classify(mount(), CLEAN, UNKNOWN) is V.CONTROL_PLANE_UNKNOWN
    assert classify(mount(), GONE, VALID) is V.ACTIVE_LEASE_VALID


def test_s61_an_unknown_answer_never_deletes_a_live_mount() -> None:
    for state, folder in itertools.product([M.MOUNTING, M.MOUNTED, M.CHECKPOINTING], [CLEAN, DIRTY, GONE]):
        assert classify(mount(state), folder, UNKNOWN) not in (V.SAFE_TO_DELETE, V.STALE_GENERATION)


def test_s59_only_active_lease_valid_permits_publishing() -> None:
    assert PUBLISHING_VERDICTS == {V.ACTIVE_LEASE_VALID}


def test_s80_an_interrupted_checkpoint_publishes_only_under_the_lease_verdict_alone() -> None:
    assert lease_verdict(mount(key=True), VALID) is V.ACTIVE_LEASE_VALID
    assert lease_verdict(mount(key=True), EXPIRED) is V.STALE_GENERATION
    assert lease_verdict(mount(key=True), UNKNOWN) is V.CONTROL_PLANE_UNKNOWN


# --------------------------------------------------------------------------- S-54: pure, seven verdicts


def test_s54_exactly_seven_verdicts_with_their_stored_values() -> None:
    assert {v.value for v in Verdict} == {
        "cleanup-incomplete",
        "checkpoint-interrupted",
        "active-lease-valid",
        "control-plane-unknown",
        "stale-generation",
        "preserved-delta",
        "safe-to-delete",
    }


def test_s54_the_facts_are_frozen_and_consistent() -> None:
    with pytest.raises(FrozenInstanceError):
        mount().state = M.CLOSED  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        VALID.generation = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="does not exist"):
        FolderFacts(exists=False, dirty=True)
    assert [m.live for m in map(mount, M)] == [s in (M.MOUNTING, M.MOUNTED, M.CHECKPOINTING) for s in M]


def test_s54_the_classifier_imports_nothing_that_does_io() -> None:
    tree = ast.parse(Path(classify_module.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= {"__future__", "enum", "dataclasses", "typing", "tenure.states"}


# --------------------------------------------------------------------------- the spec, as a table

LIVE = frozenset({"MOUNTING", "MOUNTED"})
GENERATIONS = {"same": GEN, "older": GEN - 1, "newer": GEN + 1}


@dataclass(frozen=True)
class Row:
    """One row of the spec table: each named fact must be one of the listed values; unnamed facts are any."""

    why: str
    verdict: str
    facts: Mapping[str, frozenset[object]] = field(default_factory=dict)

    def matches(self, case: Mapping[str, object]) -> bool:
        return all(case[name] in allowed for name, allowed in self.facts.items())


def row(why: str, verdict: str, **facts: object) -> Row:
    """A row; a fact given as a set allows any of its values, a single value only itself."""
    allowed = {k: frozenset(v) if isinstance(v, (set, frozenset)) else frozenset({v}) for k, v in facts.items()}
    return Row(why, verdict, allowed)


# Facts: state (mount status), cleanup, key (checkpoint key recorded), folder ("gone" | "clean" | "dirty"),
# project ("unknown" | "held" | "expired" | "other-pod" | "revoked"), gen ("same" | "older" | "newer",
# None when unknown), writer (the writer lease's state, None when unknown). First matching row wins.
SPEC_TABLE: tuple[Row, ...] = (
    row("S-56 a cleanup is recorded as pending", "cleanup-incomplete", cleanup=True),
    row("S-56 UNMOUNTING: final checkpoint committed, cleanup remains", "cleanup-incomplete", state="UNMOUNTING"),
    row("S-57 a checkpoint key is recorded", "checkpoint-interrupted", key=True),
    row("S-57 CHECKPOINTING", "checkpoint-interrupted", state="CHECKPOINTING"),
    row("S-60 S-61 live, no matching lease known", "control-plane-unknown", state=LIVE, project="unknown"),
    row("S-62 live, another generation", "stale-generation", state=LIVE, gen={"older", "newer"}),
    row("S-62 live, another pod holds the project", "stale-generation", state=LIVE, project="other-pod"),
    row("S-64 live, the project fenced", "stale-generation", state=LIVE, project="revoked"),
    row("S-64 live, the writer lease revoked", "stale-generation", state=LIVE, writer="REVOKED"),
    row("S-63 live, the project lease expired", "stale-generation", state=LIVE, project="expired"),
    row("S-63 live, the writer lease ended", "stale-generation", state=LIVE, writer={"EXPIRED", "RELEASED"}),
    row("ADR 0018 live, the writer lease never activated", "control-plane-unknown", state=LIVE, writer="ISSUED"),
    row(
        "S-58 live, held here, same generation, may publish",
        "active-lease-valid",
        state=LIVE,
        project="held",
        gen="same",
        writer={"ACTIVE", "RELEASING"},
    ),
    row("S-65 torn down, uncommitted data", "preserved-delta", state="CLOSED", folder="dirty"),
    row("S-66 torn down, nothing uncommitted", "safe-to-delete", state="CLOSED"),
)


def expected(case: Mapping[str, object]) -> str:
    for candidate in SPEC_TABLE:
        if candidate.matches(case):
            return candidate.verdict
    raise AssertionError(f"the spec table has no row for {dict(case)}")  # the table itself is incomplete


AUTHORITIES: tuple[tuple[str, str | None, str | None], ...] = (("unknown", None, None),) + tuple(
    itertools.product(
        ("held", "expired", "other-pod", "revoked"), tuple(GENERATIONS), tuple(s.value for s in LeaseState)
    )
)
CASES: tuple[dict[str, object], ...] = tuple(
    {"state": s, "cleanup": c, "key": k, "folder": f, "project": p, "gen": g, "writer": w}
    for s, c, k, f, (p, g, w) in itertools.product(
        tuple(s.value for s in MountState), (False, True), (False, True), ("gone", "clean", "dirty"), AUTHORITIES
    )
)


def facts(case: Mapping[str, object]) -> tuple[MountFacts, FolderFacts, Lookup]:
    the_mount = MountFacts(
        state=MountState(case["state"]),
        generation=GEN,
        cleanup_pending=bool(case["cleanup"]),
        checkpoint_in_flight=bool(case["key"]),
    )
    the_folder = FolderFacts(exists=case["folder"] != "gone", dirty=case["folder"] == "dirty")
    if case["project"] == "unknown":
        return the_mount, the_folder, UNKNOWN
    authority = Authority(
        project_lease=ProjectLease(case["project"]),
        generation=GENERATIONS[str(case["gen"])],
        writer_lease=LeaseState(case["writer"]),
    )
    return the_mount, the_folder, authority


Classifier = Callable[[MountFacts, FolderFacts, Lookup], Verdict]


def disagreements(classifier: Classifier) -> Iterator[dict[str, object]]:
    for case in CASES:
        if classifier(*facts(case)).value != expected(case):
            yield case


def test_s55_s70_every_combination_agrees_with_the_spec_table() -> None:
    assert len(CASES) == 5 * 2 * 2 * 3 * (1 + 4 * 3 * 6)
    assert {expected(c) for c in CASES} == {v.value for v in Verdict}
    assert next(disagreements(classify), None) is None


@given(
    state=st.sampled_from(MountState),
    cleanup=st.booleans(),
    key=st.booleans(),
    folder=st.sampled_from(("gone", "clean", "dirty")),
    authority=st.sampled_from(AUTHORITIES),
)
def test_s55_s70_classify_agrees_with_the_spec_table(
    state: MountState, cleanup: bool, key: bool, folder: str, authority: tuple[str, str | None, str | None]
) -> None:
    project, gen, writer = authority
    case: dict[str, object] = {"state": state.value, "cleanup": cleanup, "key": key, "folder": folder}
    case |= {"project": project, "gen": gen, "writer": writer}
    verdict = classify(*facts(case))
    assert verdict.value == expected(case)
    assert verdict is classify(*facts(case))  # deterministic


def _lease_first(m: MountFacts, f: FolderFacts, a: Lookup) -> Verdict:
    if m.live and lease_verdict(m, a) is not V.ACTIVE_LEASE_VALID:
        return lease_verdict(m, a)
    return classify(m, f, a)


def _checkpoint_before_cleanup(m: MountFacts, f: FolderFacts, a: Lookup) -> Verdict:
    if m.checkpoint_in_flight or m.state is M.CHECKPOINTING:
        return V.CHECKPOINT_INTERRUPTED
    return classify(m, f, a)


def _closed_before_interrupted(m: MountFacts, f: FolderFacts, a: Lookup) -> Verdict:
    if m.state is M.CLOSED:
        return V.PRESERVED_DELTA if f.dirty else V.SAFE_TO_DELETE
    return classify(m, f, a)


def _folder_before_lease(m: MountFacts, f: FolderFacts, a: Lookup) -> Verdict:
    verdict = classify(m, f, a)
    if f.dirty and verdict in (V.STALE_GENERATION, V.CONTROL_PLANE_UNKNOWN, V.ACTIVE_LEASE_VALID):
        return V.PRESERVED_DELTA
    return verdict


def _valid_before_stale(m: MountFacts, f: FolderFacts, a: Lookup) -> Verdict:
    verdict = classify(m, f, a)
    if verdict is V.STALE_GENERATION and a is not UNKNOWN and a.generation == m.generation:
        return V.ACTIVE_LEASE_VALID
    return verdict


def _unknown_deletes_clean(m: MountFacts, f: FolderFacts, a: Lookup) -> Verdict:
    verdict = classify(m, f, a)
    return V.SAFE_TO_DELETE if verdict is V.CONTROL_PLANE_UNKNOWN and not f.dirty else verdict


@pytest.mark.parametrize(
    "broken",
    [
        _lease_first,
        _checkpoint_before_cleanup,
        _closed_before_interrupted,
        _folder_before_lease,
        _valid_before_stale,
        _unknown_deletes_clean,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_s70_the_table_tells_a_broken_precedence(broken: Classifier) -> None:
    assert next(disagreements(broken), None) is not None
