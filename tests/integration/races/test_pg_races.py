"""PostgreSQL races, each reproduced with two connections interleaved at a named point.

READ COMMITTED lets a decision read go stale before the write. Each test
runs the first transaction up to a named fault point, commits a competing
transaction on a second connection there (or finds it blocked on a row lock
the first one holds), and asserts that the pair leaves one consistent
winner. See tests/integration/races/harness.py and ADR 0012.
"""

from __future__ import annotations

import pytest

from tenure import faults
from tenure.errors import ConflictError, StaleGenerationError
from tenure.projects import Ownership, OwnershipFacade, PodIdentity, ProjectStore
from tenure.states import LeaseState, SnapshotState, WorkspaceState
from tenure.store import Store, WriterLease, open_store
from tests.integration.races.harness import interleave

pytestmark = pytest.mark.postgres

TTL = 60.0
ROOT = "0" * 64


def publish(store: Store, lease: WriterLease, key: str) -> str:
    """A published checkpoint (the records only: these tests are about the store)."""
    ws = store.workspaces
    ticket = ws.begin_checkpoint(lease, key)
    ws.mark_uploaded(ticket, ROOT, 0, 0, 0, [])
    return ws.publish(lease, ticket).id


def test_dispose_and_a_takeover_in_between_leave_one_consistent_winner(store: Store, url: str) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "closer", TTL)
    head = publish(store, lease, "k1")
    mine, theirs, how = interleave(
        url,
        "dispose.after_read",
        lambda: store.workspaces.dispose("w", lease.generation),
        lambda other: other.workspaces.acquire("w", "new-owner", TTL, takeover=True),
    )
    assert how == "blocked", "the takeover was not held back by the row dispose decided on"
    mine.get()
    assert isinstance(theirs.error, ConflictError) and theirs.error.code == "workspace-not-mountable"
    ws = store.workspaces.workspace("w")
    assert ws.state is WorkspaceState.DELETED
    assert store.snapshots.get(head).state is SnapshotState.DELETING
    assert all(le.state is not LeaseState.ACTIVE for le in store.workspaces.leases(ws.id))


def test_a_fork_committed_while_its_base_is_deleted_is_never_left_on_a_deleting_head(store: Store, url: str) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", TTL)
    base = publish(store, lease, "k1")
    publish(store, lease, "k2")  # base is no longer the head
    mine, theirs, how = interleave(
        url,
        "workspace_create.after_insert",
        lambda: store.workspaces.create("fork", base),
        lambda other: other.snapshots.delete(base),
    )
    assert how == "blocked"
    fork = mine.get()
    assert isinstance(theirs.error, ConflictError) and theirs.error.code == "snapshot-is-head"
    assert fork.head_snapshot_id == base and store.snapshots.get(base).state is SnapshotState.READY


def test_a_base_deleted_while_a_fork_of_it_is_created_refuses_the_fork(store: Store, url: str) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", TTL)
    base = publish(store, lease, "k1")
    publish(store, lease, "k2")
    mine, theirs, how = interleave(
        url,
        "snapshot_delete.after_update",
        lambda: store.snapshots.delete(base),
        lambda other: other.workspaces.create("fork", base),
    )
    assert how == "blocked"
    assert mine.get().state is SnapshotState.DELETING
    assert isinstance(theirs.error, ConflictError) and theirs.error.code == "snapshot-not-ready"
    assert [w.name for w in store.workspaces.workspaces()] == ["w"]


def test_a_fork_committed_while_its_base_workspace_is_disposed_keeps_its_head(store: Store, url: str) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "closer", TTL)
    base = publish(store, lease, "k1")
    mine, theirs, how = interleave(
        url,
        "workspace_create.after_insert",
        lambda: store.workspaces.create("fork", base),
        lambda other: other.workspaces.dispose("w", lease.generation),
    )
    assert how == "blocked", "the dispose did not wait for the fork holding its base"
    fork = mine.get()
    assert theirs.get().state is WorkspaceState.DELETED
    assert fork.head_snapshot_id == base and store.snapshots.get(base).state is SnapshotState.READY


def test_a_fork_begun_while_its_base_workspace_is_disposed_is_refused(store: Store, url: str) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "closer", TTL)
    base = publish(store, lease, "k1")
    mine, theirs, how = interleave(
        url,
        "dispose.after_lock",
        lambda: store.workspaces.dispose("w", lease.generation),
        lambda other: other.workspaces.create("fork", base),
    )
    assert how == "blocked", "the fork did not wait for the dispose holding its base"
    assert mine.get().state is WorkspaceState.DELETED
    assert isinstance(theirs.error, ConflictError) and theirs.error.code == "snapshot-not-ready"
    assert store.snapshots.get(base).state is SnapshotState.DELETING
    assert [w.name for w in store.workspaces.workspaces()] == ["w"]


def test_a_checkpoint_begun_while_a_new_writer_takes_over_leaves_no_orphan_upload(store: Store, url: str) -> None:
    store.workspaces.create("w")
    old = store.workspaces.acquire("w", "old", TTL)
    mine, theirs, how = interleave(
        url,
        "acquire.after_read",
        lambda: store.workspaces.acquire("w", "new", TTL, takeover=True),
        lambda other: other.workspaces.begin_checkpoint(old, "k1"),
    )
    assert how == "blocked"
    new = mine.get()
    assert isinstance(theirs.error, StaleGenerationError)
    ws = store.workspaces.workspace("w")
    unfinished = [
        s for s in store.snapshots.list(ws.id) if s.state in (SnapshotState.UPLOADING, SnapshotState.VALIDATING)
    ]
    assert unfinished == [] and ws.writer_generation == new.generation


def test_a_paused_former_owner_resuming_inside_bring_cannot_unbind_the_new_owners_clients(
    store: Store, url: str
) -> None:
    projects, ownership = ProjectStore(store), Ownership(store)
    projects.create("acme", "p")
    a = PodIdentity.fresh("a")
    stale = OwnershipFacade(store, a, lease_ttl=0.001).claim_for_local_pod("acme", "p")

    def new_owner_binds() -> None:
        with open_store(url, auto_migrate=False) as other:
            b = PodIdentity.fresh("b")
            fresh = OwnershipFacade(other, b, lease_ttl=0.001).claim_for_local_pod("acme", "p")
            session = ProjectStore(other).create_session(fresh)
            ProjectStore(other).bind_session(session.id, "client-of-b", b.pod_id, fresh.generation)

    store.workspaces.now()  # let a's lease age past the tiny TTL policy before b claims
    with faults.at("bring.after_claim", new_owner_binds):
        faults.crash_point("bring.after_claim")
    with pytest.raises(StaleGenerationError):
        projects.unbind_sessions(stale)
    (session,) = projects.sessions(projects.get("acme", "p"))
    assert session.bound_connection_id == "client-of-b"
    assert ownership.owner(stale.id, TTL).pod_id != a.pod_id
