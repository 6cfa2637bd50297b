"""The expiry policy end to end (ADR 0019): ``WorkspaceService.expire_idle``, ``undo_expiry`` and GC.

Real checkpoints into a real object store, on SQLite + a local object folder
and on PostgreSQL (the ``service`` fixture). TTLs and graces are sub-second;
a test waits only for the store clock to pass a recorded time.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from tenure.errors import ConflictError
from tenure.projects import ProjectStore
from tenure.states import LeaseState, ProjectStatus, SnapshotState, WorkspaceState
from tenure.workspaces import WorkspaceService
from tests.integration.test_req_storage import _chunks_of, _stored
from tests.support.store import raw

TTL = 0.3
GRACE = 0.2
LONG = 3600.0


def past(service: WorkspaceService, moment: float) -> float:
    """Wait until the store clock is past ``moment``; return the store time then."""
    deadline = time.monotonic() + 5
    while (now := service.store.workspaces.now()) <= moment:
        assert time.monotonic() < deadline, "the store clock did not move"
        time.sleep(0.005)
    return now


def folder(tmp_path, name: str, files: dict[str, bytes]) -> str:  # type: ignore[no-untyped-def]
    path = str(tmp_path / name)
    os.makedirs(path, exist_ok=True)
    for rel, data in files.items():
        with open(os.path.join(path, rel), "wb") as fh:
            fh.write(data)
    return path


def big(seed: int) -> bytes:
    return random.Random(seed).randbytes(2 << 20)


def test_an_idle_workspace_expires_after_its_ttl_and_not_before(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    service.create("w")
    service.checkpoint("w", folder(tmp_path, "src", {"a.txt": b"a"}))
    used = service.workspace("w").updated_at

    early = service.expire_idle(TTL, LONG)
    assert early.expired == () and service.workspace("w").state is WorkspaceState.IDLE
    late_clock = service.expire_idle(TTL, LONG, now=service.store.workspaces.now() + LONG)
    assert late_clock.expired == (), "a caller's clock ahead of the store's expires nothing early"

    past(service, used + TTL)
    result = service.expire_idle(TTL, LONG)
    assert result.expired == ("w",) and result.deleted == ()
    ws = service.workspace("w")
    assert ws.state is WorkspaceState.EXPIRING and ws.expiring_since is not None
    assert service.expire_idle(TTL, LONG).deleted == (), "not deleted within its grace"


def test_undo_within_the_grace_brings_it_back_idle_with_its_head_intact(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = folder(tmp_path, "src", {"a.txt": b"kept", "big.bin": big(1)})
    service.create("w")
    head = service.checkpoint("w", src).snapshot
    past(service, service.workspace("w").updated_at + TTL)
    assert service.expire_idle(TTL, LONG).expired == ("w",)

    back = service.undo_expiry("w", LONG)
    assert (back.state, back.head_snapshot_id, back.version) == (WorkspaceState.IDLE, head.id, 1)
    assert service.store.snapshots.get(head.id).state is SnapshotState.READY
    assert service.expire_idle(TTL, LONG).expired == (), "the undo is a use: the idle time starts again"
    service.restore("w", str(tmp_path / "out"))
    with open(tmp_path / "out" / "a.txt", "rb") as fh:
        assert fh.read() == b"kept"


def test_undo_after_the_grace_is_refused_with_a_code(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    service.create("w")
    service.checkpoint("w", folder(tmp_path, "src", {"a.txt": b"a"}))
    past(service, service.workspace("w").updated_at + TTL)
    service.expire_idle(TTL, LONG)
    since = service.workspace("w").expiring_since
    assert since is not None
    past(service, since + GRACE)
    with pytest.raises(ConflictError) as refused:
        service.undo_expiry("w", GRACE)
    assert refused.value.code == "expiry-grace-over"
    assert service.workspace("w").state is WorkspaceState.EXPIRING

    assert service.expire_idle(LONG, GRACE).deleted == ("w",)
    with pytest.raises(ConflictError) as gone:
        service.undo_expiry("w", LONG)
    assert gone.value.code == "workspace-not-expiring"


def test_after_the_grace_it_is_deleted_and_gc_reclaims_only_objects_no_other_workspace_shares(  # type: ignore[no-untyped-def]
    service: WorkspaceService, tmp_path
) -> None:
    shared, own = big(7), big(8)
    kept_src = folder(tmp_path, "kept", {"shared.bin": shared, "k.txt": b"kept"})
    old_src = folder(tmp_path, "old", {"shared.bin": shared, "own.bin": own, "o.txt": b"old"})
    service.create("kept")
    service.checkpoint("kept", kept_src)
    kept_objects = _stored(service)
    service.create("old")
    old_head = service.checkpoint("old", old_src).snapshot
    assert _stored(service) - kept_objects, "the old workspace stored objects of its own"

    past(service, service.workspace("old").updated_at + TTL)
    assert service.checkpoint("kept", kept_src).unchanged  # a use: kept's idle time starts again
    first = service.expire_idle(TTL, GRACE)
    assert (first.expired, first.deleted) == (("old",), ())

    since = service.workspace("old").expiring_since
    assert since is not None
    past(service, since + GRACE)
    second = service.expire_idle(LONG, GRACE)
    assert (second.expired, second.deleted, second.snapshots_deleting) == ((), ("old",), (old_head.id,))
    assert service.workspace("old").state is WorkspaceState.DELETED
    assert service.store.snapshots.get(old_head.id).state is SnapshotState.DELETING

    service.gc(grace_s=0)
    assert service.store.snapshots.get(old_head.id).state is SnapshotState.DELETED
    assert _stored(service) == kept_objects, "everything only the deleted workspace used is reclaimed, nothing else"
    assert set(_chunks_of(service, shared)) <= _stored(service)
    kept_head = service.workspace("kept").head_snapshot_id
    assert kept_head is not None and service.verify(kept_head).ok


def test_a_workspace_with_a_live_writer_lease_never_expires(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    service.create("w")
    service.checkpoint("w", folder(tmp_path, "src", {"a.txt": b"a"}))
    lease = service.store.workspaces.acquire("w", "a-pod", LONG)
    past(service, service.workspace("w").updated_at + TTL)
    assert service.expire_idle(TTL, 0).expired == ()
    assert service.workspace("w").state is WorkspaceState.MOUNTED

    # retention ended under the writer (the operator's move): it waits in EXPIRING, never deleted (S-36)
    since = service.store.workspaces.expire("w").expiring_since
    assert since is not None
    past(service, since)
    result = service.expire_idle(TTL, 0)
    assert result.deleted == () and [(s.workspace, s.reason) for s in result.skipped] == [("w", "writer-lease-live")]
    assert service.workspace("w").state is WorkspaceState.EXPIRING
    current = service.lease(lease.workspace_id, lease.generation)
    assert current is not None and current.state is LeaseState.ACTIVE


@pytest.mark.parametrize(
    "status",
    [ProjectStatus.INIT, ProjectStatus.RECOVERING, ProjectStatus.RUNNING, ProjectStatus.SUSPENDING],
    ids=lambda s: s.value,
)
def test_the_workspace_of_a_project_that_is_not_suspended_never_expires(  # type: ignore[no-untyped-def]
    service: WorkspaceService, status: ProjectStatus
) -> None:
    project = ProjectStore(service.store).create("acme", "p")
    raw(service.store, "UPDATE projects SET status = ? WHERE id = ?", (status.value, project.id))
    ws = service.workspace(project.workspace_id)
    past(service, ws.updated_at + TTL)
    result = service.expire_idle(TTL, 0)
    assert result.expired == ()
    assert [(s.workspace, s.reason) for s in result.skipped] == [(ws.name, "project-not-suspended")]
    assert service.workspace(ws.id).state is WorkspaceState.IDLE

    # SUSPENDED: it expires; brought back (status changes) before its grace ended, it is never deleted
    raw(service.store, "UPDATE projects SET status = 'SUSPENDED' WHERE id = ?", (project.id,))
    assert service.expire_idle(TTL, 0).expired == (ws.name,)
    raw(service.store, "UPDATE projects SET status = ? WHERE id = ?", (status.value, project.id))
    since = service.workspace(ws.id).expiring_since
    assert since is not None
    past(service, since)
    later = service.expire_idle(LONG, 0)
    assert later.deleted == () and [s.reason for s in later.skipped] == ["project-not-suspended"]
    assert service.workspace(ws.id).state is WorkspaceState.EXPIRING
