"""The expiry policy's guards, each term alone (ADR 0019).

As in tests/contract/test_guard_terms.py, the row is put (by a direct write
into the table where the normal path cannot get there) in a state where
every other term of the guard holds, so no other term can mask the one under
test. The guarded write must change nothing and name the term.

Expiry (IDLE → EXPIRING): the workspace is IDLE, unchanged since the TTL's
start, has no live writer lease, and its project, if any, is SUSPENDED.
Deletion (EXPIRING → DELETED): the workspace is EXPIRING, its expiry began
before the grace's start, it has no live writer lease, and its project, if
any, is SUSPENDED.

On SQLite and PostgreSQL (the ``store`` fixture). Times are store-clock
times; a test that needs the clock past a recorded time waits for the store
clock, nothing else.
"""

from __future__ import annotations

import time

import pytest

from tenure.projects import ProjectStore
from tenure.states import ProjectStatus, SnapshotState, WorkspaceState
from tenure.store import Store, Workspace
from tests.support.store import raw

TTL = 60.0
ROOT = "3" * 64
NOT_SUSPENDED = [s for s in ProjectStatus if s not in (ProjectStatus.SUSPENDED, ProjectStatus.CLOSED)]


def past(store: Store, moment: float) -> float:
    """Wait until the store clock is past ``moment``; return the store time then."""
    deadline = time.monotonic() + 5
    while (now := store.workspaces.now()) <= moment:
        assert time.monotonic() < deadline, "the store clock did not move"
        time.sleep(0.001)
    return now


def with_head(store: Store, name: str = "w") -> Workspace:
    """An IDLE workspace with one published snapshot (records only)."""
    ws = store.workspaces
    ws.create(name)
    lease = ws.acquire(name, "writer", TTL)
    ticket = ws.begin_checkpoint(lease, "k1")
    ws.mark_uploaded(ticket, ROOT, 0, 0, 0, [])
    ws.publish(lease, ticket)
    ws.release(lease)
    return ws.workspace(name)


def of_project(store: Store, status: ProjectStatus) -> Workspace:
    """The IDLE workspace of a project with ``status`` (written directly: only the status matters here)."""
    project = ProjectStore(store).create("acme", "p")
    raw(store, "UPDATE projects SET status = ? WHERE id = ?", (status.value, project.id))
    return store.workspaces.workspace(project.workspace_id)


def unchanged(store: Store, before: Workspace) -> None:
    after = store.workspaces.workspace(before.id)
    assert (after.state, after.head_snapshot_id, after.expiring_since) == (
        before.state,
        before.head_snapshot_id,
        before.expiring_since,
    )
    if before.head_snapshot_id is not None:
        assert store.snapshots.get(before.head_snapshot_id).state is SnapshotState.READY


# --------------------------------------------------------------------------- IDLE → EXPIRING


def test_expiry_with_every_term_true_expires(store: Store) -> None:
    ws = with_head(store)
    step = store.workspaces.expire_idle("w", past(store, ws.updated_at))
    assert step.done and step.workspace.state is WorkspaceState.EXPIRING
    assert step.workspace.head_snapshot_id == ws.head_snapshot_id and step.workspace.expiring_since is not None


def test_expiry_of_a_suspended_projects_workspace_with_every_term_true_expires(store: Store) -> None:
    ws = of_project(store, ProjectStatus.SUSPENDED)
    assert store.workspaces.expire_idle(ws.id, past(store, ws.updated_at)).done


def test_expiry_refuses_when_only_the_state_is_not_idle(store: Store) -> None:
    ws = with_head(store)
    raw(store, "UPDATE workspaces SET state = 'FAILED' WHERE id = ?", (ws.id,))  # FAILED → EXPIRING is an edge
    ws = store.workspaces.workspace("w")
    step = store.workspaces.expire_idle("w", past(store, ws.updated_at))
    assert (step.done, step.reason) == (False, "not-idle")
    unchanged(store, ws)


def test_expiry_refuses_when_only_the_idle_time_is_short(store: Store) -> None:
    ws = with_head(store)
    past(store, ws.updated_at)
    step = store.workspaces.expire_idle("w", ws.updated_at - 0.001)
    assert (step.done, step.reason) == (False, "recently-used")
    unchanged(store, ws)


def test_expiry_refuses_when_only_a_writer_lease_is_live(store: Store) -> None:
    ws = with_head(store)
    lease = store.workspaces.acquire("w", "writer", TTL)
    # IDLE with a live lease, as an older row layout or a forced path could leave it: only the lease term holds
    raw(store, "UPDATE workspaces SET state = 'IDLE' WHERE id = ?", (ws.id,))
    ws = store.workspaces.workspace("w")
    step = store.workspaces.expire_idle("w", past(store, ws.updated_at))
    assert (step.done, step.reason) == (False, "writer-lease-live")
    assert lease.holder in step.detail
    unchanged(store, ws)


@pytest.mark.parametrize("status", NOT_SUSPENDED, ids=lambda s: s.value)
def test_expiry_refuses_when_only_the_project_is_not_suspended(store: Store, status: ProjectStatus) -> None:
    ws = of_project(store, status)
    step = store.workspaces.expire_idle(ws.id, past(store, ws.updated_at))
    assert (step.done, step.reason) == (False, "project-not-suspended")
    assert status.value in step.detail
    unchanged(store, ws)


# --------------------------------------------------------------------------- EXPIRING → DELETED


def expiring(store: Store, ws: Workspace) -> Workspace:
    """``ws`` EXPIRING (the operator's move: IDLE or MOUNTED → EXPIRING, no policy term involved)."""
    return store.workspaces.expire(ws.id)


def test_deletion_with_every_term_true_deletes_and_retires_the_snapshots(store: Store) -> None:
    ws = expiring(store, with_head(store))
    assert ws.expiring_since is not None
    step = store.workspaces.delete_after_grace("w", past(store, ws.expiring_since))
    assert step.done and step.workspace.state is WorkspaceState.DELETED
    assert step.snapshots == (ws.head_snapshot_id,)
    assert store.snapshots.get(str(ws.head_snapshot_id)).state is SnapshotState.DELETING


def test_deletion_refuses_when_only_the_state_is_not_expiring(store: Store) -> None:
    ws = expiring(store, with_head(store))
    assert ws.expiring_since is not None
    raw(store, "UPDATE workspaces SET state = 'IDLE' WHERE id = ?", (ws.id,))  # expiring_since kept
    ws = store.workspaces.workspace("w")
    assert ws.expiring_since is not None
    step = store.workspaces.delete_after_grace("w", past(store, ws.expiring_since))
    assert (step.done, step.reason) == (False, "not-expiring")
    unchanged(store, ws)


def test_deletion_refuses_when_only_the_grace_has_not_run_out(store: Store) -> None:
    ws = expiring(store, with_head(store))
    assert ws.expiring_since is not None
    past(store, ws.expiring_since)
    step = store.workspaces.delete_after_grace("w", ws.expiring_since)  # began exactly at the grace's start
    assert (step.done, step.reason) == (False, "in-grace")
    unchanged(store, ws)


def test_deletion_refuses_when_only_a_writer_lease_is_live(store: Store) -> None:
    ws = with_head(store)
    store.workspaces.acquire("w", "writer", TTL)
    ws = expiring(store, store.workspaces.workspace("w"))  # MOUNTED → EXPIRING: waits for the writer (S-36)
    assert ws.expiring_since is not None
    step = store.workspaces.delete_after_grace("w", past(store, ws.expiring_since))
    assert (step.done, step.reason) == (False, "writer-lease-live")
    unchanged(store, ws)


@pytest.mark.parametrize("status", NOT_SUSPENDED, ids=lambda s: s.value)
def test_deletion_refuses_when_only_the_project_is_not_suspended(store: Store, status: ProjectStatus) -> None:
    ws = expiring(store, of_project(store, status))
    assert ws.expiring_since is not None
    step = store.workspaces.delete_after_grace(ws.id, past(store, ws.expiring_since))
    assert (step.done, step.reason) == (False, "project-not-suspended")
    unchanged(store, ws)


# --------------------------------------------------------------------------- the selectors


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("workspaces_idle_before", "workspaces_by_state_updated"),
        ("workspaces_expiring_before", "workspaces_by_state_expiring"),
    ],
)
def test_candidates_are_read_by_index(store: Store, query: str, index: str) -> None:
    sql = store.db.queries.sql(store.db.dialect, query)
    params = {"idle": "IDLE", "expiring": "EXPIRING", "before": 1.0, "kt": -1.0, "ki": "", "limit": 500}
    with store.db.sql_transaction() as tx:
        if store.db.dialect == "postgres":
            tx.execute_sql("SET LOCAL enable_seqscan = off")
            plan = " ".join(r["QUERY PLAN"] for r in tx.execute_sql("EXPLAIN " + sql, params))
        else:
            plan = " ".join(r["detail"] for r in tx.execute_sql("EXPLAIN QUERY PLAN " + sql, params))
    assert index in plan, plan
