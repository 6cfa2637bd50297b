"""Every machine's edge table against the edges written out from the reference specs, both ways.

The expected edges below are copied by hand from the specs, never read from
``tenure.states``: snapshots, workspaces and writer leases from
storage-lifecycle-states.md and SPEC §4; project statuses from
project-lifecycle.md §3, §5, §6 and SPEC §5 (P-15); the intake machine from
intake-lifecycle-v1.md "Transitions and retry" and SPEC §7. Where a spec is
silent, the edges decided in an ADR are listed separately with the
requirement id that decided them (docs/adr/0001-state-machines.md S-74 to
S-78, docs/adr/0101-intake-phases-and-active-states.md).

For every machine and every ordered pair of its states: a spec edge is
allowed (its guard satisfied), every other pair is refused with an error
naming the machine, the state and the target, and a terminal state has no
exit at all.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tenure.errors import IllegalTransitionError
from tenure.intake.machine import intake_machine
from tenure.states import (
    LEASE,
    MACHINES,
    MOUNT,
    PUBLISHING_LEASE_STATES,
    WORKSPACE,
    ForcePath,
    LeaseState,
    Machine,
    WorkspaceState,
)
from tests.support.intake import PHASES

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def chain(*states: str) -> set[tuple[str, str]]:
    """The edges of a path: chain("A", "B", "C") == {("A", "B"), ("B", "C")}."""
    return set(zip(states, states[1:]))


@dataclass(frozen=True)
class Spec:
    """One machine as the specs (plus the recorded decisions) draw it."""

    name: str
    states: tuple[str, ...]
    initial: str
    terminal: frozenset[str]
    edges: frozenset[tuple[str, str]]
    decided: frozenset[tuple[str, str]]  # edges a spec leaves open, decided in an ADR
    guarded: frozenset[tuple[str, str]]

    @property
    def all_edges(self) -> frozenset[tuple[str, str]]:
        return self.edges | self.decided


# storage-lifecycle-states.md "Snapshots" and "Limits"; SPEC §4 (S-10, S-11)
SNAPSHOT_SPEC = Spec(
    name="snapshot",
    states=("UPLOADING", "VALIDATING", "READY", "FAILED", "DELETING", "DELETED", "DEGRADED"),
    initial="UPLOADING",
    terminal=frozenset({"DELETED"}),
    edges=frozenset(
        chain("UPLOADING", "VALIDATING", "READY", "DELETING", "DELETED")
        | {("VALIDATING", "FAILED"), ("READY", "DEGRADED"), ("DEGRADED", "READY"), ("DEGRADED", "DELETING")}
    ),
    decided=frozenset({("UPLOADING", "FAILED"), ("FAILED", "DELETING")}),  # S-75
    guarded=frozenset(),
)

# storage-lifecycle-states.md "Workspaces"; SPEC §4 (S-26 to S-30, S-36, S-37)
WORKSPACE_SPEC = Spec(
    name="workspace",
    states=("CREATING", "IDLE", "MOUNTED", "CHECKPOINTING", "EXPIRING", "DELETED", "FAILED"),
    initial="CREATING",
    terminal=frozenset({"DELETED"}),
    edges=frozenset(
        chain("CREATING", "IDLE", "MOUNTED", "CHECKPOINTING", "MOUNTED", "IDLE", "EXPIRING", "DELETED")
        | {
            ("FAILED", "CREATING"),
            ("FAILED", "IDLE"),
            ("FAILED", "EXPIRING"),
            ("FAILED", "DELETED"),
            ("EXPIRING", "IDLE"),
        }
    ),
    decided=frozenset(
        {
            ("CREATING", "FAILED"),  # S-76: only creation fails
            ("MOUNTED", "EXPIRING"),
        }
    ),  # S-77: expired under a live writer, waits in EXPIRING
    guarded=frozenset(
        {
            ("EXPIRING", "IDLE"),  # within the grace period
            ("EXPIRING", "DELETED"),
        }
    ),  # no live writer lease
)

# storage-lifecycle-states.md "Leases"; SPEC §4 (S-39 to S-46)
LEASE_SPEC = Spec(
    name="writer-lease",
    states=("ISSUED", "ACTIVE", "RELEASING", "RELEASED", "EXPIRED", "REVOKED"),
    initial="ISSUED",
    terminal=frozenset({"RELEASED", "EXPIRED", "REVOKED"}),
    edges=frozenset(
        chain("ISSUED", "ACTIVE", "RELEASING", "RELEASED") | {("ACTIVE", "EXPIRED"), ("ACTIVE", "REVOKED")}
    ),
    decided=frozenset(
        {
            ("ISSUED", "EXPIRED"),
            ("ISSUED", "REVOKED"),  # S-78
            ("RELEASING", "EXPIRED"),
            ("RELEASING", "REVOKED"),
        }
    ),
    guarded=frozenset(),
)

# storage-lifecycle-states.md names mount sessions but draws no diagram: all decided (S-74)
SESSION_SPEC = Spec(
    name="mount",
    states=("MOUNTING", "MOUNTED", "CHECKPOINTING", "UNMOUNTING", "CLOSED"),
    initial="MOUNTING",
    terminal=frozenset({"CLOSED"}),
    edges=frozenset(),
    decided=frozenset(
        chain("MOUNTING", "MOUNTED", "CHECKPOINTING", "MOUNTED", "UNMOUNTING", "CLOSED")
        | {("CHECKPOINTING", "UNMOUNTING"), ("MOUNTING", "CLOSED")}
    ),
    guarded=frozenset(),
)

# project-lifecycle.md §3 (diagram), §5.2 (INIT → SUSPENDED), §5.3 (close from any status), §6 (any
# non-CLOSED → RECOVERING, SUSPENDING included); P-15. RECOVERING → RECOVERING is no edge (P-123, SPEC §9).
_NOT_CLOSED = ("INIT", "RECOVERING", "RUNNING", "SUSPENDING", "SUSPENDED")
PROJECT_SPEC = Spec(
    name="project",
    states=(*_NOT_CLOSED, "CLOSED"),
    initial="INIT",
    terminal=frozenset({"CLOSED"}),
    edges=frozenset(
        chain("INIT", "RECOVERING", "RUNNING", "SUSPENDING", "SUSPENDED", "RECOVERING")
        | {("SUSPENDING", "RECOVERING"), ("RUNNING", "RECOVERING"), ("INIT", "SUSPENDED")}
        | {(s, "CLOSED") for s in _NOT_CLOSED}
    ),
    decided=frozenset(),
    guarded=frozenset(),
)

# SPEC §6 (pods): STARTING → RUNNING → DRAINING → STOPPED
POD_SPEC = Spec(
    name="pod",
    states=("STARTING", "RUNNING", "DRAINING", "STOPPED"),
    initial="STARTING",
    terminal=frozenset({"STOPPED"}),
    edges=frozenset(
        {
            ("STARTING", "RUNNING"),
            ("STARTING", "DRAINING"),
            ("STARTING", "STOPPED"),
            ("RUNNING", "DRAINING"),
            ("RUNNING", "STOPPED"),
            ("DRAINING", "STOPPED"),
        }
    ),
    decided=frozenset(),
    guarded=frozenset(),
)

# intake-lifecycle-v1.md "Transitions and retry" with SPEC §7's default phase list (I-39 to I-46)
_LINEAR = PHASES
_ACTIVE = ("BUILDING_CASE", "INTERPRETING", "HYPOTHESIZING", "DIAGNOSING", "REPORTING")
INTAKE_SPEC = Spec(
    name="intake",
    states=(*_LINEAR, "BLOCKED", "FAILED_TO_ANALYZE", "REOPENED"),
    initial="NEW",
    terminal=frozenset(),  # HANDED_OFF and FAILED_TO_ANALYZE can become REOPENED
    edges=frozenset(
        chain(*_LINEAR)
        | {("REOPENED", "BUILDING_CASE"), ("HANDED_OFF", "REOPENED"), ("FAILED_TO_ANALYZE", "REOPENED")}
        | {(a, a) for a in _ACTIVE}  # checkpoint progress in the same state
        | {(a, "BLOCKED") for a in _ACTIVE}
        | {(a, "FAILED_TO_ANALYZE") for a in _ACTIVE}
        | {("BLOCKED", a) for a in _ACTIVE}
    ),  # resume: only the interrupted state
    decided=frozenset({("BLOCKED", "FAILED_TO_ANALYZE")}),  # ADR 0101: give up while blocked
    guarded=frozenset({("BLOCKED", a) for a in _ACTIVE}),
)

SPECS = [SNAPSHOT_SPEC, WORKSPACE_SPEC, LEASE_SPEC, SESSION_SPEC, PROJECT_SPEC, POD_SPEC, INTAKE_SPEC]


def machine_of(spec: Spec) -> Machine[Any]:
    return intake_machine().machine if spec.name == "intake" else MACHINES[spec.name]


def passing(src: str, dst: str) -> dict[str, Any]:
    """A record that satisfies every guard of the move ``src → dst`` (as the specs state the guards)."""
    return {
        "now": NOW,
        "expiring_since": NOW - timedelta(seconds=1),
        "grace": timedelta(minutes=5),
        "live_writer": False,
        "resume_state": dst,
        "retry_at": NOW - timedelta(seconds=1),
    }


def all_pairs() -> list[tuple[Spec, str, str]]:
    return [(spec, a, b) for spec in SPECS for a, b in itertools.product(spec.states, spec.states)]


def test_the_spec_tables_are_consistent() -> None:
    for spec in SPECS:
        states = set(spec.states)
        assert {s for edge in spec.all_edges for s in edge} <= states, spec.name
        assert not spec.edges & spec.decided, spec.name
        assert spec.guarded <= spec.all_edges, spec.name
        assert not {a for a, _ in spec.all_edges} & spec.terminal, spec.name


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_machine_has_exactly_the_spec_states_initial_and_terminal(spec: Spec) -> None:
    machine = machine_of(spec)
    assert machine.name == spec.name
    assert {s.value for s in machine.states} == set(spec.states)
    assert machine.initial.value == spec.initial
    assert {s.value for s in machine.terminal} == spec.terminal


def test_every_machine_is_covered() -> None:
    assert set(MACHINES) | {"intake"} == {spec.name for spec in SPECS}


@pytest.mark.parametrize("spec,src,dst", all_pairs(), ids=lambda v: getattr(v, "name", str(v)))
def test_s69_every_pair_is_accepted_iff_it_is_an_edge(spec: Spec, src: str, dst: str) -> None:
    machine = machine_of(spec)
    a, b = machine.states(src), machine.states(dst)
    if (src, dst) in spec.all_edges:
        assert machine.check(a, b, passing(src, dst)) == b
        assert machine.allows(a, b, passing(src, dst))
        assert machine.is_guarded(a, b) == ((src, dst) in spec.guarded)
        return
    with pytest.raises(IllegalTransitionError) as info:
        machine.check(a, b, passing(src, dst))
    assert info.value.context["machine"] == spec.name
    assert info.value.context["state"] == src and info.value.context["target"] == dst
    assert spec.name in str(info.value) and src in str(info.value) and dst in str(info.value)
    if src in spec.terminal:
        assert info.value.context["reason"] == f"{src} is terminal"
    elif src == dst:
        assert info.value.context["reason"] == "self-loop not allowed"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_s06_no_self_loops_and_terminal_states_have_no_exit(spec: Spec) -> None:
    machine = machine_of(spec)
    for state in spec.terminal:
        assert machine.targets(machine.states(state)) == []
        for target in spec.states:
            assert not machine.allows(machine.states(state), machine.states(target), passing(state, target))
            if target != state:
                with pytest.raises(IllegalTransitionError, match="terminal"):
                    machine.force(machine.states(state), machine.states(target), ForcePath.RECONCILIATION)


def assert_table_is_the_spec(spec: Spec) -> None:
    """The machine's edge table equals the spec's edges both ways, and ``check`` agrees pair by pair."""
    machine = machine_of(spec)
    table = {(a.value, b.value) for a, b in machine.edges}
    assert table - spec.all_edges == set(), f"{spec.name}: edges no spec or decision names"
    assert spec.all_edges - table == set(), f"{spec.name}: spec edges the machine lacks"
    for src, dst in itertools.product(spec.states, spec.states):
        allowed = machine.allows(machine.states(src), machine.states(dst), passing(src, dst))
        assert allowed == ((src, dst) in spec.all_edges), f"{spec.name}: {src} -> {dst}"


def test_s10_s11_snapshot_states_and_edges() -> None:
    assert_table_is_the_spec(SNAPSHOT_SPEC)
    for bad in [("UPLOADING", "READY"), ("FAILED", "READY"), ("READY", "UPLOADING")]:  # S-11's examples
        assert bad not in SNAPSHOT_SPEC.all_edges


def test_s26_to_s30_workspace_machine() -> None:
    assert_table_is_the_spec(WORKSPACE_SPEC)


def test_s39_s40_s44_s46_lease_machine() -> None:
    assert_table_is_the_spec(LEASE_SPEC)


def test_s74_mount_session_machine() -> None:
    assert_table_is_the_spec(SESSION_SPEC)


def test_p15_project_machine() -> None:
    assert_table_is_the_spec(PROJECT_SPEC)


def test_i39_to_i46_intake_machine() -> None:
    assert_table_is_the_spec(INTAKE_SPEC)


def test_s17_failed_never_becomes_ready_or_validating() -> None:
    S = MACHINES["snapshot"].states
    for target in ("READY", "VALIDATING", "UPLOADING", "DEGRADED"):
        assert not MACHINES["snapshot"].allows(S("FAILED"), S(target))


def test_s29_undo_expiry_only_within_grace() -> None:
    W = WorkspaceState
    inside = dict(passing("EXPIRING", "IDLE"), expiring_since=NOW - timedelta(seconds=10), grace=timedelta(seconds=60))
    outside = dict(passing("EXPIRING", "IDLE"), expiring_since=NOW - timedelta(seconds=61), grace=timedelta(seconds=60))
    assert WORKSPACE.check(W.EXPIRING, W.IDLE, inside) == W.IDLE
    with pytest.raises(IllegalTransitionError, match="grace"):
        WORKSPACE.check(W.EXPIRING, W.IDLE, outside)
    with pytest.raises(IllegalTransitionError, match="needs the record"):
        WORKSPACE.check(W.EXPIRING, W.IDLE)


def test_s36_s37_expiring_workspace_is_not_deleted_under_a_live_writer() -> None:
    W = WorkspaceState
    with pytest.raises(IllegalTransitionError, match="writer lease"):
        WORKSPACE.check(W.EXPIRING, W.DELETED, {"now": NOW, "live_writer": True})
    assert WORKSPACE.check(W.EXPIRING, W.DELETED, {"now": NOW, "live_writer": False}) == W.DELETED


def test_i46_i55_i56_a_blocked_package_resumes_only_to_its_state_and_only_when_due() -> None:
    machine = intake_machine().machine
    blocked, diagnosing, reporting = (machine.states(s) for s in ("BLOCKED", "DIAGNOSING", "REPORTING"))
    due = {"now": NOW, "resume_state": "DIAGNOSING", "retry_at": NOW - timedelta(seconds=1)}
    assert machine.check(blocked, diagnosing, due) == diagnosing
    with pytest.raises(IllegalTransitionError, match="interrupted DIAGNOSING"):
        machine.check(blocked, reporting, due)
    with pytest.raises(IllegalTransitionError, match="has not passed"):
        machine.check(blocked, diagnosing, dict(due, retry_at=NOW + timedelta(seconds=1)))
    with pytest.raises(IllegalTransitionError, match="needs the record"):
        machine.check(blocked, diagnosing)


def test_s44_s46_only_active_and_releasing_leases_publish() -> None:
    assert {s.value for s in PUBLISHING_LEASE_STATES} == {"ACTIVE", "RELEASING"}
    for terminal in (LeaseState.RELEASED, LeaseState.EXPIRED, LeaseState.REVOKED):
        for target in LeaseState:
            with pytest.raises(IllegalTransitionError, match="terminal"):
                LEASE.check(terminal, target)


def test_s52_forced_path_needs_a_name_and_never_leaves_terminal() -> None:
    W = WorkspaceState
    assert WORKSPACE.force(W.CHECKPOINTING, W.MOUNTED, ForcePath.TAKEOVER) is W.MOUNTED
    with pytest.raises(TypeError):
        WORKSPACE.force(W.CHECKPOINTING, W.MOUNTED, "takeover")  # type: ignore[arg-type]
    with pytest.raises(IllegalTransitionError, match="terminal"):
        WORKSPACE.force(W.DELETED, W.IDLE, ForcePath.RECONCILIATION)
    assert MOUNT.force(MOUNT.initial, MOUNT.states("CLOSED"), ForcePath.RECONCILIATION).value == "CLOSED"


def test_machines_are_validated_at_definition() -> None:
    import enum

    class Two(enum.Enum):
        A = "A"
        B = "B"

    with pytest.raises(ValueError, match="unreachable"):
        Machine(name="bad", states=Two, initial=Two.A, edges={}, terminal=frozenset({Two.A}))
    with pytest.raises(ValueError, match="without exits"):
        Machine(name="bad", states=Two, initial=Two.A, edges={(Two.A, Two.B): None})
    with pytest.raises(ValueError, match="terminal"):
        Machine(
            name="bad",
            states=Two,
            initial=Two.A,
            edges={(Two.A, Two.B): None, (Two.B, Two.A): None},
            terminal=frozenset({Two.B}),
        )
