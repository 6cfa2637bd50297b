"""An expiry pass racing a checkpoint on PostgreSQL (READ COMMITTED), interleaved at named points (ADR 0019).

Whatever the interleaving, a workspace whose checkpoint committed is never
deleted: the expiry's guarded statement sees the use (the row changed after
the TTL's start) or the expiry commits first and the checkpoint is refused
before it writes anything. See tests/integration/races/harness.py.
"""

from __future__ import annotations

import time

import pytest

from tenure.errors import ConflictError
from tenure.states import SnapshotState, WorkspaceState
from tenure.store import Store
from tenure.workspaces.expiry import expire_idle
from tests.integration.races.harness import interleave

pytestmark = pytest.mark.postgres

TTL = 60.0
ROOT = "4" * 64


def checkpoint(store: Store, key: str) -> str:
    """A short-lived writer's whole checkpoint (records only): acquire, publish, release."""
    ws = store.workspaces
    lease = ws.acquire("w", f"writer-{key}", TTL)
    ticket = ws.begin_checkpoint(lease, key)
    ws.mark_uploaded(ticket, ROOT, 0, 0, 0, [])
    snap = ws.publish(lease, ticket)
    ws.release(lease)
    return snap.id


def past(store: Store, moment: float) -> float:
    while (now := store.workspaces.now()) <= moment:
        time.sleep(0.001)
    return now


def idle(store: Store) -> float:
    """Workspace ``w`` with a head, idle: the store time at which it was last used."""
    store.workspaces.create("w")
    checkpoint(store, "k0")
    used = store.workspaces.workspace("w").updated_at
    past(store, used)
    return used


def test_a_checkpoint_committed_after_the_candidates_were_read_keeps_the_workspace(store: Store, url: str) -> None:
    used = idle(store)
    ttl = store.workspaces.now() - used  # "w" is exactly idle enough when the pass starts
    mine, theirs, how = interleave(
        url,
        "expiry.idle_selected",
        lambda: expire_idle(store, ttl, 0.0),
        lambda other: checkpoint(other, "k1"),
    )
    assert how == "done"
    result = mine.get()
    assert result.expired == () and [(s.workspace, s.reason) for s in result.skipped] == [("w", "recently-used")]
    ws = store.workspaces.workspace("w")
    assert (ws.state, ws.head_snapshot_id) == (WorkspaceState.IDLE, theirs.get())


def test_a_checkpoint_waiting_on_an_expiry_is_refused_before_it_writes(store: Store, url: str) -> None:
    used = idle(store)
    head = store.workspaces.workspace("w").head_snapshot_id
    ttl = store.workspaces.now() - used
    mine, theirs, how = interleave(
        url,
        "expiry.expire_after_lock",
        lambda: expire_idle(store, ttl, 0.0),
        lambda other: checkpoint(other, "k1"),
    )
    assert how == "blocked", "the checkpoint's writer was not held back by the row the expiry decided on"
    assert mine.get().expired == ("w",)
    assert isinstance(theirs.error, ConflictError) and theirs.error.code == "workspace-not-mountable"
    ws = store.workspaces.workspace("w")
    assert (ws.state, ws.head_snapshot_id) == (WorkspaceState.EXPIRING, head)
    assert [s.idempotency_key for s in store.snapshots.list(ws.id)] == ["k0"], "nothing of the checkpoint committed"


def test_an_undo_and_checkpoint_committed_before_the_deletion_keep_the_workspace(store: Store, url: str) -> None:
    idle(store)
    since = store.workspaces.expire("w").expiring_since
    assert since is not None
    past(store, since)

    def undo_and_checkpoint(other: Store) -> str:
        other.workspaces.undo_expiry("w", TTL)  # an operator's grace longer than the pass's
        return checkpoint(other, "k1")

    mine, theirs, how = interleave(
        url, "expiry.expiring_selected", lambda: expire_idle(store, TTL * 60, 0.0), undo_and_checkpoint
    )
    assert how == "done"
    result = mine.get()
    assert result.deleted == () and [(s.workspace, s.reason) for s in result.skipped] == [("w", "not-expiring")]
    ws = store.workspaces.workspace("w")
    assert (ws.state, ws.head_snapshot_id) == (WorkspaceState.IDLE, theirs.get())
    assert all(s.state is SnapshotState.READY for s in store.snapshots.list(ws.id))


def test_an_undo_waiting_on_a_deletion_is_refused_and_no_checkpoint_commits(store: Store, url: str) -> None:
    idle(store)
    since = store.workspaces.expire("w").expiring_since
    assert since is not None
    past(store, since)

    def undo_and_checkpoint(other: Store) -> str:
        other.workspaces.undo_expiry("w", TTL)
        return checkpoint(other, "k1")

    mine, theirs, how = interleave(
        url, "expiry.delete_after_lock", lambda: expire_idle(store, TTL * 60, 0.0), undo_and_checkpoint
    )
    assert how == "blocked"
    assert mine.get().deleted == ("w",)
    assert isinstance(theirs.error, ConflictError) and theirs.error.code == "workspace-not-expiring"
    ws = store.workspaces.workspace("w")
    assert ws.state is WorkspaceState.DELETED
    assert [(s.idempotency_key, s.state) for s in store.snapshots.list(ws.id)] == [("k0", SnapshotState.DELETING)]
