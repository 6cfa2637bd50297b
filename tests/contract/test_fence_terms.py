"""Each fenced statement refuses a stale generation on its own.

For every write that carries the fencing generation, the row is put in a
state where *every other term of the guard is true* and only the generation
has moved (written directly into the table, as a newer writer's claim would
leave it), so no other term can mask a missing generation term. The write
must change nothing and say why (``StaleGenerationError``). On SQLite and
PostgreSQL (the ``store`` fixture).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tenure.errors import StaleGenerationError
from tenure.projects import PodIdentity, Project, ProjectStore
from tenure.projects.facade import OwnershipFacade
from tenure.states import LeaseState, ProjectStatus, SnapshotState, WorkspaceState
from tenure.store import CheckpointTicket, Store, WriterLease
from tests.support.store import raw

TTL = 60.0
ROOT = "1" * 64


def bump_workspace(store: Store, workspace_id: str) -> None:
    raw(store, "UPDATE workspaces SET writer_generation = writer_generation + 1 WHERE id = ?", (workspace_id,))


def bump_project(store: Store, project_id: str) -> None:
    raw(store, "UPDATE projects SET generation = generation + 1 WHERE id = ?", (project_id,))


def mounted(store: Store) -> WriterLease:
    store.workspaces.create("w")
    return store.workspaces.acquire("w", "writer", TTL)


def begun(store: Store) -> tuple[WriterLease, CheckpointTicket]:
    lease = mounted(store)
    return lease, store.workspaces.begin_checkpoint(lease, "k1")


def unchanged_workspace(store: Store, state: WorkspaceState) -> None:
    ws = store.workspaces.workspace("w")
    assert ws.state is state and ws.head_snapshot_id is None


def test_begin_checkpoint_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    lease = mounted(store)
    bump_workspace(store, lease.workspace_id)
    with pytest.raises(StaleGenerationError):
        store.workspaces.begin_checkpoint(lease, "k1")
    unchanged_workspace(store, WorkspaceState.MOUNTED)


def test_mark_uploaded_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    _, ticket = begun(store)
    bump_workspace(store, ticket.workspace_id)
    with pytest.raises(StaleGenerationError):
        store.workspaces.mark_uploaded(ticket, ROOT, 1, 1, 1, [])
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.UPLOADING


def adopted_by_a_newer_writer(store: Store, ticket: CheckpointTicket) -> None:
    """The snapshot and its workspace at the next generation, as a newer writer's claim and its adoption
    of the checkpoint under the same key leave them (S-33): everything but the ticket's generation holds."""
    bump_workspace(store, ticket.workspace_id)
    raw(store, "UPDATE snapshots SET generation = generation + 1 WHERE id = ?", (ticket.snapshot_id,))


def test_mark_uploaded_refuses_when_only_the_tickets_generation_is_stale(store: Store) -> None:
    _, ticket = begun(store)
    adopted_by_a_newer_writer(store, ticket)
    with pytest.raises(StaleGenerationError):
        store.workspaces.mark_uploaded(ticket, ROOT, 1, 1, 1, [])
    snap = store.snapshots.get(ticket.snapshot_id)
    assert snap.state is SnapshotState.UPLOADING and snap.root_oid is None


def test_fail_snapshot_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    _, ticket = begun(store)
    store.workspaces.mark_uploaded(ticket, ROOT, 1, 1, 1, [])
    bump_workspace(store, ticket.workspace_id)
    with pytest.raises(StaleGenerationError):
        store.workspaces.fail_snapshot(ticket.snapshot_id, "missing", generation=ticket.generation)
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.VALIDATING


def test_fail_snapshot_refuses_when_only_the_tickets_generation_is_stale(store: Store) -> None:
    _, ticket = begun(store)
    store.workspaces.mark_uploaded(ticket, ROOT, 1, 1, 1, [])
    adopted_by_a_newer_writer(store, ticket)
    with pytest.raises(StaleGenerationError):
        store.workspaces.fail_snapshot(ticket.snapshot_id, "missing", generation=ticket.generation)
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.VALIDATING


def test_publish_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    lease, ticket = begun(store)
    store.workspaces.mark_uploaded(ticket, ROOT, 1, 1, 1, [])
    bump_workspace(store, ticket.workspace_id)
    with pytest.raises(StaleGenerationError):
        store.workspaces.publish(lease, ticket)
    unchanged_workspace(store, WorkspaceState.CHECKPOINTING)
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.VALIDATING


def test_abandon_checkpoint_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    lease, ticket = begun(store)
    bump_workspace(store, ticket.workspace_id)
    with pytest.raises(StaleGenerationError):
        store.workspaces.abandon_checkpoint(lease, ticket, error="x")
    unchanged_workspace(store, WorkspaceState.CHECKPOINTING)
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.UPLOADING


def test_renew_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    lease = mounted(store)
    before = store.workspaces.lease(lease.workspace_id, lease.generation)
    bump_workspace(store, lease.workspace_id)
    assert store.workspaces.renew(lease, TTL * 10) is False
    after = store.workspaces.lease(lease.workspace_id, lease.generation)
    assert before is not None and after is not None and after.expires_at == before.expires_at


def test_release_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    lease = mounted(store)
    bump_workspace(store, lease.workspace_id)
    with pytest.raises(StaleGenerationError):
        store.workspaces.begin_release(lease)
    current = store.workspaces.lease(lease.workspace_id, lease.generation)
    assert current is not None and current.state is LeaseState.ACTIVE


def test_dispose_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    lease = mounted(store)
    bump_workspace(store, lease.workspace_id)
    with pytest.raises(StaleGenerationError):
        store.workspaces.dispose("w", lease.generation)
    unchanged_workspace(store, WorkspaceState.MOUNTED)


# --------------------------------------------------------------------------- project writes


def owned(store: Store) -> tuple[ProjectStore, Project]:
    projects = ProjectStore(store)
    projects.create("acme", "p")
    project = OwnershipFacade(store, PodIdentity.fresh("a"), lease_ttl=TTL).claim_for_local_pod("acme", "p")
    return projects, project


PROJECT_WRITES: dict[str, Callable[[ProjectStore, Project], object]] = {
    "transition_status": lambda ps, p: ps.transition_status(
        "acme", "p", p.status, ProjectStatus.RECOVERING, p.generation
    ),
    "record_error": lambda ps, p: ps.record_error(p, "boom"),
    "close": lambda ps, p: ps.close("acme", "p", "archive", p.generation),
    "unbind_sessions": lambda ps, p: ps.unbind_sessions(p),
    "bind_session": lambda ps, p: ps.bind_session(ps.create_session(p).id, "client", "pod", p.generation),
}


@pytest.mark.parametrize("write", sorted(PROJECT_WRITES))
def test_project_write_refuses_when_only_the_generation_is_stale(store: Store, write: str) -> None:
    projects, project = owned(store)
    before = projects.get("acme", "p")
    bump_project(store, project.id)
    with pytest.raises(StaleGenerationError):
        PROJECT_WRITES[write](projects, project)
    after = projects.get("acme", "p")
    assert (after.status, after.error, after.project_group) == (before.status, before.error, before.project_group)
    assert all(s.bound_connection_id is None for s in projects.sessions(after))


def test_close_fences_a_live_owner_out_instead_of_handing_it_the_new_generation(store: Store) -> None:
    from tenure.projects import Ownership

    projects, project = owned(store)
    owner = PodIdentity.fresh("a")
    projects.create("acme", "q")
    mine = OwnershipFacade(store, owner, lease_ttl=TTL).claim_for_local_pod("acme", "q")
    fenced = Ownership(store).fence(mine, "closer-pod", "closer")
    assert fenced.generation == mine.generation + 1
    again = Ownership(store).claim("acme", "q", owner.pod_id, "a", None, TTL)
    assert again is None, "the former owner's claim adopted the closer's generation as a renewal"
    with pytest.raises(StaleGenerationError):
        projects.transition_status("acme", "q", mine.status, ProjectStatus.RECOVERING, mine.generation)
