"""Tests generated from the edge tables: every legal edge accepted, every other pair rejected."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tenure.errors import IllegalTransitionError
from tenure.states import (
    LEASE,
    MACHINES,
    PUBLISHING_LEASE_STATES,
    SESSION,
    SNAPSHOT,
    WORKSPACE,
    ForcePath,
    LeaseState,
    Machine,
    SnapshotState,
    WorkspaceState,
)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
#: A record that satisfies every storage guard (used for legal-edge tests).
PASSING = {"now": NOW, "expiring_since": NOW - timedelta(seconds=1), "grace": timedelta(minutes=5),
           "live_writer": False}


def all_pairs() -> list[tuple[Machine[Any], Any, Any]]:
    return [(m, a, b) for m in MACHINES.values() for a, b in itertools.product(m.states, m.states)]


@pytest.mark.parametrize("machine,src,dst", all_pairs(),
                         ids=lambda v: getattr(v, "name", str(v)))
def test_s69_every_pair_is_accepted_iff_it_is_an_edge(machine: Machine[Any], src: Any, dst: Any) -> None:
    if (src, dst) in machine.edges:
        assert machine.check(src, dst, PASSING) == dst
    else:
        with pytest.raises(IllegalTransitionError) as info:
            machine.check(src, dst, PASSING)
        assert info.value.context["machine"] == machine.name
        assert info.value.context["state"] == src.name
        assert info.value.context["target"] == dst.name
        assert machine.name in str(info.value) and src.name in str(info.value) and dst.name in str(info.value)


@pytest.mark.parametrize("machine", list(MACHINES.values()), ids=lambda m: m.name)
def test_s06_no_self_loops_and_terminal_states_have_no_exit(machine: Machine[Any]) -> None:
    for state in machine.states:
        assert (state, state) not in machine.edges
        with pytest.raises(IllegalTransitionError, match="self-loop|terminal"):
            machine.check(state, state, PASSING)
    for state in machine.terminal:
        assert machine.targets(state) == []


def test_s10_s11_snapshot_states_and_edges() -> None:
    assert {s.value for s in SnapshotState} == {"UPLOADING", "VALIDATING", "READY", "FAILED", "DELETING",
                                                 "DELETED", "DEGRADED"}
    spec_edges = {("UPLOADING", "VALIDATING"), ("VALIDATING", "READY"), ("VALIDATING", "FAILED"),
                  ("READY", "DELETING"), ("DELETING", "DELETED"), ("READY", "DEGRADED"), ("DEGRADED", "READY"),
                  ("DEGRADED", "DELETING")}
    table = {(a.value, b.value) for a, b in SNAPSHOT.edges}
    assert spec_edges <= table
    # the two additions decided in docs/adr/0001-state-machines.md (S-75)
    assert table - spec_edges == {("UPLOADING", "FAILED"), ("FAILED", "DELETING")}
    for bad in [("UPLOADING", "READY"), ("FAILED", "READY"), ("READY", "UPLOADING")]:
        assert not SNAPSHOT.allows(SnapshotState(bad[0]), SnapshotState(bad[1]))


def test_s17_failed_never_becomes_ready_or_validating() -> None:
    assert SNAPSHOT.targets(SnapshotState.FAILED) == [SnapshotState.DELETING]


def test_s26_to_s30_workspace_machine() -> None:
    assert {s.value for s in WorkspaceState} == {"CREATING", "IDLE", "MOUNTED", "CHECKPOINTING", "EXPIRING",
                                                  "DELETED", "FAILED"}
    W = WorkspaceState
    for edge in [(W.CREATING, W.IDLE), (W.IDLE, W.MOUNTED), (W.MOUNTED, W.CHECKPOINTING),
                 (W.CHECKPOINTING, W.MOUNTED), (W.MOUNTED, W.IDLE), (W.IDLE, W.EXPIRING),
                 (W.FAILED, W.CREATING), (W.FAILED, W.IDLE), (W.FAILED, W.EXPIRING), (W.FAILED, W.DELETED)]:
        assert WORKSPACE.allows(*edge, PASSING)
    assert WORKSPACE.terminal == {W.DELETED}


def test_s29_undo_expiry_only_within_grace() -> None:
    W = WorkspaceState
    inside = dict(PASSING, expiring_since=NOW - timedelta(seconds=10), grace=timedelta(seconds=60))
    outside = dict(PASSING, expiring_since=NOW - timedelta(seconds=61), grace=timedelta(seconds=60))
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


def test_s39_s40_s44_s46_lease_machine() -> None:
    L = LeaseState
    assert {s.value for s in L} == {"ISSUED", "ACTIVE", "RELEASING", "RELEASED", "EXPIRED", "REVOKED"}
    for edge in [(L.ISSUED, L.ACTIVE), (L.ACTIVE, L.RELEASING), (L.RELEASING, L.RELEASED),
                 (L.ACTIVE, L.EXPIRED), (L.ACTIVE, L.REVOKED)]:
        assert LEASE.allows(*edge)
    assert PUBLISHING_LEASE_STATES == {L.ACTIVE, L.RELEASING}
    for terminal in (L.RELEASED, L.EXPIRED, L.REVOKED):
        for target in L:
            with pytest.raises(IllegalTransitionError, match="terminal"):
                LEASE.check(terminal, target)


def test_s52_forced_path_needs_a_name_and_never_leaves_terminal() -> None:
    W = WorkspaceState
    assert WORKSPACE.force(W.CHECKPOINTING, W.MOUNTED, ForcePath.TAKEOVER) is W.MOUNTED
    with pytest.raises(TypeError):
        WORKSPACE.force(W.CHECKPOINTING, W.MOUNTED, "takeover")  # type: ignore[arg-type]
    with pytest.raises(IllegalTransitionError, match="terminal"):
        WORKSPACE.force(W.DELETED, W.IDLE, ForcePath.RECONCILIATION)
    assert SESSION.force(SESSION.initial, SESSION.states("CLOSED"), ForcePath.RECONCILIATION).value == "CLOSED"


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
        Machine(name="bad", states=Two, initial=Two.A, edges={(Two.A, Two.B): None, (Two.B, Two.A): None},
                terminal=frozenset({Two.B}))
