"""Lost work is never silent (ADR 0044): a host that finds unsaved files of a project it no longer owns records
them in the store as a preserved delta with its own snapshot; every pod lists it on the project, counts it in
``/metrics`` and recovers it (into a folder, or merged into the running project); a resumed pod never leaves
a lost project MOUNTED.

Pods run in this process on SQLite and PostgreSQL with sub-second lease TTLs; a "paused" pod is one that stops
beating (its lease runs out by the store clock) and is then given one beat again, as after SIGCONT.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.pod.preserved import delta_workspace_name
from tenure.pod.runtime import PodRuntime
from tenure.pod.tokens import TokenStore
from tenure.projects import ProjectStore
from tenure.projects.ownership import Ownership
from tenure.projects.preserved import PreservedDeltas
from tenure.projects.timeline import Timeline
from tenure.states import MountState, SnapshotState, WorkspaceState
from tenure.store import Store
from tests.support.pods import wait_for
from tests.support.runtime import pod_maker, stop_all

T = "acme"
P = f"/api/v1/projects/{T}/web"
TTL = 0.6


@pytest.fixture
def make(store: Store, tmp_path: Path) -> Iterator[Callable[..., PodRuntime]]:
    made: list[PodRuntime] = []
    yield pod_maker(store, tmp_path, made, ttl=TTL, start=True)
    stop_all(made)


def _taken_over_while_paused(store: Store, a: PodRuntime, b: PodRuntime) -> str:
    """``a`` runs acme/web with one checkpointed file and one unsaved write, stops beating past the TTL, ``b``
    takes the project over, and ``a`` beats once again (resumed). Returns the project id."""
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a)) as ca:
        assert ca.post(P + "/bring").status_code == 200
        assert ca.put(P + "/files/base.txt", content=b"checkpointed").status_code == 201
        assert ca.post(P + "/checkpoint").status_code == 200
        assert ca.put(P + "/files/notes/unsaved.txt", content=b"only on a").status_code == 201
    project_id = ProjectStore(store).get(T, "web").id
    wait_for(lambda: not Ownership(store).owner(project_id, TTL).live, what="a's lease to run out")
    assert b.bring(T, "web").lineage == 2
    a.beat()  # resumed: the takeover moved a's lost counter, so this beat finds the project lost
    return project_id


def test_lost_work_is_recorded_in_the_store_with_its_files_lineage_and_host(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a, b = make("a"), make("b")
    project_id = _taken_over_while_paused(store, a, b)
    (delta,) = PreservedDeltas(store).of_project(project_id)
    mount = a.lifecycle.mounts.store.get(delta.id)
    assert mount.state is MountState.CLOSED and mount.preserved_folder and os.path.isdir(mount.preserved_folder)
    assert delta.paths == ("notes/unsaved.txt",), "only what no checkpoint holds, not the checkpointed file"
    assert (delta.files, delta.bytes) == (1, len(b"only on a"))
    assert (delta.lineage, delta.generation, delta.pod_id) == (1, mount.generation, a.pod_id)
    assert delta.kept_until - delta.created_at == pytest.approx(a.config.recovery_window, abs=5.0)
    snapshot = store.snapshots.get(delta.snapshot_id)
    assert snapshot.state is SnapshotState.READY and snapshot.reason == "preserved"
    assert store.workspaces.workspace(delta_workspace_name(delta.id)).head_snapshot_id == snapshot.id
    head = store.workspaces.workspace(ProjectStore(store).get(T, "web").workspace_id).head_snapshot_id
    assert head != snapshot.id, "the delta lives outside the project's head line"
    kinds = [e.kind for e in Timeline(store).history(project_id)]
    assert "preserved" in kinds
    a.beat()
    assert len(PreservedDeltas(store).of_project(project_id)) == 1, "recorded once"


def test_every_pod_lists_the_delta_counts_it_and_names_it_in_a_412(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a, b = make("a"), make("b")
    _taken_over_while_paused(store, a, b)
    c = make("c")  # a pod that had nothing to do with it
    with TestClient(create_app(c)) as cc:
        (listed,) = cc.get(P).json()["preserved"]
        assert listed["lineage"] == 1 and listed["paths"] == ["notes/unsaved.txt"] and listed["pod_id"] == a.pod_id
        (row,) = [p for p in cc.get("/api/v1/projects").json()["projects"] if p["name"] == "web"]
        assert [d["id"] for d in row["preserved"]] == [listed["id"]]
        c.keeper.refresh_gauge()
        assert "tenure_preserved_deltas 1.0" in cc.get("/metrics").text
    with TestClient(create_app(b)) as cb:
        refused = cb.post(P + "/checkpoint", headers={"Tenure-If-Lineage": "1"})
        assert refused.status_code == 412
        assert [d["id"] for d in refused.json()["context"]["preserved"]] == [listed["id"]]


def test_a_delta_is_merged_into_the_running_project_from_any_pod_without_undoing_newer_writes(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a, b = make("a"), make("b")
    project_id = _taken_over_while_paused(store, a, b)
    (delta,) = PreservedDeltas(store).of_project(project_id)
    with TestClient(create_app(b)) as cb:
        assert cb.get(P + "/files/notes/unsaved.txt").status_code == 404, "lost on the new owner"
        assert cb.put(P + "/files/base.txt", content=b"newer on b").status_code == 200
        stale = cb.post(
            f"/api/v1/mounts/{delta.id}/recover", json={"into_project": True}, headers={"Tenure-If-Lineage": "1"}
        )
        assert stale.status_code == 412
        merged = cb.post(f"/api/v1/mounts/{delta.id}/recover", json={"into_project": True})
        assert merged.status_code == 200, merged.text
        assert merged.json()["merged"] == ["notes/unsaved.txt"] and merged.headers["Tenure-Lineage"] == "2"
        assert cb.get(P + "/files/notes/unsaved.txt").content == b"only on a"
        assert cb.get(P + "/files/base.txt").content == b"newer on b", "a file the delta did not change is kept"
    assert PreservedDeltas(store).get(delta.id).recovered_at is not None
    assert "recovered" in [e.kind for e in Timeline(store).history(project_id)]


def test_a_delta_is_restored_into_a_folder_from_the_object_store_after_its_host_lost_its_copy(
    store: Store, make: Callable[..., PodRuntime], tmp_path: Path
) -> None:
    a, b = make("a"), make("b")
    project_id = _taken_over_while_paused(store, a, b)
    (delta,) = PreservedDeltas(store).of_project(project_id)
    shutil.rmtree(a.lifecycle.mounts.store.get(delta.id).preserved_folder or "")  # the host is gone
    with TestClient(create_app(b)) as cb:
        dest = tmp_path / "recovered"
        inside = cb.post(f"/api/v1/mounts/{delta.id}/recover", json={"to": str(tmp_path / "b" / "x")})
        assert inside.status_code == 400 and inside.json()["code"] == "destination-in-data-folder"
        assert cb.post(f"/api/v1/mounts/{delta.id}/recover", json={"to": "rel"}).status_code == 400
        both = cb.post(f"/api/v1/mounts/{delta.id}/recover", json={"to": str(dest), "into_project": True})
        assert both.status_code == 400
        done = cb.post(f"/api/v1/mounts/{delta.id}/recover", json={"to": str(dest)})
        assert done.status_code == 200, done.text
        assert (dest / "notes" / "unsaved.txt").read_bytes() == b"only on a"
        assert (dest / "base.txt").read_bytes() == b"checkpointed"
        again = cb.post(f"/api/v1/mounts/{delta.id}/recover", json={"to": str(dest)})
        assert again.status_code == 400 and again.json()["code"] == "destination-not-empty"
        assert cb.post("/api/v1/mounts/m-nothing/recover", json={"to": str(tmp_path / "y")}).status_code == 404


def test_a_tenant_token_merges_its_own_delta_but_restores_into_no_folder_and_sees_no_other_tenants(
    store: Store, make: Callable[..., PodRuntime], tmp_path: Path
) -> None:
    a, b = make("a"), make("b")
    project_id = _taken_over_while_paused(store, a, b)
    (delta,) = PreservedDeltas(store).of_project(project_id)
    _, mine = TokenStore(store).create(T, admin=False, cluster=False)
    _, other = TokenStore(store).create("other", admin=False, cluster=False)
    url = f"/api/v1/mounts/{delta.id}/recover"
    with TestClient(create_app(b)) as cb:
        as_other = cb.post(url, json={"into_project": True}, headers={"Authorization": f"Bearer {other}"})
        assert as_other.status_code == 404 and as_other.json()["code"] == "mount-not-found"
        folder = cb.post(url, json={"to": str(tmp_path / "d")}, headers={"Authorization": f"Bearer {mine}"})
        assert folder.status_code == 403 and not (tmp_path / "d").exists()
        merged = cb.post(url, json={"into_project": True}, headers={"Authorization": f"Bearer {mine}"})
        assert merged.status_code == 200, merged.text


def test_a_folder_with_nothing_unsaved_is_not_recorded(store: Store, make: Callable[..., PodRuntime]) -> None:
    a, b = make("a"), make("b")
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a)) as ca:
        assert ca.post(P + "/bring").status_code == 200
        assert ca.put(P + "/files/base.txt", content=b"checkpointed").status_code == 201
        assert ca.post(P + "/checkpoint").status_code == 200
    project_id = ProjectStore(store).get(T, "web").id
    wait_for(lambda: not Ownership(store).owner(project_id, TTL).live, what="a's lease to run out")
    b.bring(T, "web")
    a.beat()
    assert PreservedDeltas(store).of_project(project_id) == []
    assert all(not m.live for m in a.lifecycle.mounts.store.list())


def test_a_resumed_pod_settles_a_lost_mount_its_drift_check_missed(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    """A mount left MOUNTED for a project no longer in the registry (a drift check that failed half-way, a
    settle the store could not answer) is settled by the next beat once another pod holds the project."""
    a, b = make("a"), make("b")
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a)) as ca:
        assert ca.post(P + "/bring").status_code == 200
        assert ca.put(P + "/files/unsaved.txt", content=b"ghost").status_code == 201
    project = ProjectStore(store).get(T, "web")
    a.registry.remove(project.id)  # deactivated, its mount not settled: what a half-done drift check leaves
    a.beat()
    (live,) = [m for m in a.lifecycle.mounts.store.list() if m.live]
    assert live.state is MountState.MOUNTED, "still its own, at its generation: left alone"
    wait_for(lambda: not Ownership(store).owner(project.id, TTL).live, what="a's lease to run out")
    b.bring(T, "web")
    a._lost_seen = Ownership(store).renew_leases(a.pod_id).lost  # type: ignore[union-attr]  # drift already "seen"
    a.beat()
    assert [m for m in a.lifecycle.mounts.store.list() if m.live] == [], "no lost project stays MOUNTED"
    (delta,) = PreservedDeltas(store).of_project(project.id)
    assert delta.paths == ("unsaved.txt",)


def test_a_delta_past_its_window_is_ended_in_the_store(store: Store, make: Callable[..., PodRuntime]) -> None:
    a, b = make("a", recovery_window=3.0), make("b")  # long enough to record it before the window ends
    project_id = _taken_over_while_paused(store, a, b)
    (delta,) = PreservedDeltas(store).of_project(project_id)
    wait_for(lambda: b.keeper.expire() == 1, what="the recovery window to end")
    assert PreservedDeltas(store).find(delta.id) is None
    assert store.workspaces.workspace(delta.delta_workspace_id).state is WorkspaceState.DELETED
