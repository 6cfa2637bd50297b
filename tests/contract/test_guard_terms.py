"""Guard terms no other test isolates: each one alone must refuse the write and change nothing.

As in tests/contract/test_fence_terms.py, the row is put (by a direct write
into the table) in a state where every other term of the guard holds, so no
other term can mask the one under test:

* publication is guarded by the expected workspace version (SPEC §4
  "Checkpoint publication"), not only by key, snapshot and generation;
* a snapshot leaves VALIDATING for READY only from VALIDATING: one that
  became FAILED meanwhile is never published (S-17: FAILED never becomes
  READY);
* step 1a's unbind is fenced by the generation also when there is a bound
  session to unbind (P-34, P-42).

On SQLite and PostgreSQL (the ``store`` fixture).
"""

from __future__ import annotations

import pytest

from tenure.errors import StaleGenerationError, VersionConflictError
from tenure.states import SnapshotState, WorkspaceState
from tenure.store import CheckpointTicket, Store, WriterLease
from tests.support.projects import bound_session
from tests.support.store import raw

TTL = 60.0
ROOT = "2" * 64


def validating(store: Store) -> tuple[WriterLease, CheckpointTicket]:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "writer", TTL)
    ticket = store.workspaces.begin_checkpoint(lease, "k1")
    store.workspaces.mark_uploaded(ticket, ROOT, 1, 1, 1, [])
    return lease, ticket


def test_publish_refuses_when_only_the_expected_version_is_stale(store: Store) -> None:
    lease, ticket = validating(store)
    raw(store, "UPDATE workspaces SET version = version + 1 WHERE id = ?", (ticket.workspace_id,))
    with pytest.raises(VersionConflictError):
        store.workspaces.publish(lease, ticket)
    ws = store.workspaces.workspace("w")
    assert (ws.state, ws.head_snapshot_id) == (WorkspaceState.CHECKPOINTING, None)
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.VALIDATING


def test_s17_publish_never_makes_a_failed_snapshot_ready(store: Store) -> None:
    lease, ticket = validating(store)
    raw(
        store, "UPDATE snapshots SET state = 'FAILED', error = 'closure incomplete' WHERE id = ?", (ticket.snapshot_id,)
    )
    with pytest.raises(VersionConflictError):
        store.workspaces.publish(lease, ticket)
    ws = store.workspaces.workspace("w")
    assert (ws.state, ws.head_snapshot_id) == (WorkspaceState.CHECKPOINTING, None), "the head did not move"
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.FAILED


def test_p34_unbind_with_a_bound_session_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    projects, project, session = bound_session(store, TTL)
    raw(store, "UPDATE projects SET generation = generation + 1 WHERE id = ?", (project.id,))
    with pytest.raises(StaleGenerationError):
        projects.unbind_sessions(project)
    assert projects.session(session.id).bound_connection_id == "client-1", "a fenced unbind changes nothing"
