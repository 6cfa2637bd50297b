"""Acknowledged means saved (ADR 0042): a project's lineage, ``Tenure-If-Lineage``, durable writes with group
commit, and a pod that binds its object store at start.

Pods run in this process on SQLite and PostgreSQL, with sub-second lease TTLs; a "dead" pod is one that
stops beating (its lease runs out by the store clock), as after kill -9.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.faults import at
from tenure.objects.local import LocalObjectStore
from tenure.pod.durable import GroupCommit
from tenure.pod.ops import DURABLE_WRITTEN
from tenure.pod.runtime import POLICY_BEATS, PodRuntime
from tenure.projects import ProjectStore
from tenure.projects.ownership import Ownership
from tenure.states import SnapshotState
from tenure.store import Store
from tenure.workspaces import ObjectStoreMismatchError, WorkspaceService
from tests.support.pods import wait_for
from tests.support.runtime import pod_maker, stop_all

T = "acme"
P = f"/api/v1/projects/{T}/web"
TTL = 0.6


@pytest.fixture
def make(store: Store, tmp_path: Path) -> Iterator[Callable[..., PodRuntime]]:
    made: list[PodRuntime] = []
    yield pod_maker(store, tmp_path, made, ttl=TTL)
    stop_all(made)


def started(pod: PodRuntime) -> PodRuntime:
    pod.start()
    return pod


def lease_ran_out(store: Store, project_id: str) -> bool:
    return not Ownership(store).owner(project_id, TTL).live


def test_a_takeover_from_a_dead_owner_starts_a_new_lineage_and_a_checkpoint_under_the_old_one_is_refused(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a, b = started(make("a")), started(make("b"))
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a), follow_redirects=False) as ca, TestClient(create_app(b)) as cb:
        brought = ca.post(P + "/bring")
        assert brought.status_code == 200 and brought.json()["lineage"] == 1
        assert brought.headers["Tenure-Lineage"] == "1"
        put = ca.put(P + "/files/notes.txt", content=b"unsaved")  # a plain write: acknowledged, not saved
        assert put.status_code == 201 and put.headers["Tenure-Lineage"] == "1"
        project_id = ProjectStore(store).get(T, "web").id
        wait_for(lambda: lease_ran_out(store, project_id), what="a's lease to run out")  # a beats no more
        refused = cb.post(P + "/checkpoint", headers={"Tenure-If-Lineage": "1"})
        assert refused.status_code == 412, refused.text
        body = refused.json()
        assert body["code"] == "lineage-changed"
        assert body["context"]["lineage"] == 2 and body["context"]["expected"] == 1
        # the new owner answers under the new lineage, and a checkpoint under it is acknowledged
        shown = cb.get(P)
        assert shown.json()["lineage"] == 2 and shown.json()["running_here"] is True
        assert cb.post(P + "/checkpoint", headers={"Tenure-If-Lineage": "2"}).status_code == 200


def test_a_drains_hand_over_and_a_suspend_keep_the_lineage(store: Store, make: Callable[..., PodRuntime]) -> None:
    a, b = started(make("a")), started(make("b"))
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a), follow_redirects=False) as ca, TestClient(create_app(b)) as cb:
        assert ca.post(P + "/bring").status_code == 200
        assert ca.put(P + "/files/notes.txt", content=b"handed over").status_code == 201
        assert a.drain() == [f"{T}/web"]  # checkpoint, then the lease released: every write is in the head
        done = cb.post(P + "/checkpoint", headers={"Tenure-If-Lineage": "1"})
        assert done.status_code == 200, done.text
        assert done.json()["lineage"] == 1
        assert cb.get(P + "/files/notes.txt").content == b"handed over"
        assert cb.post(P + "/suspend", headers={"Tenure-If-Lineage": "1"}).status_code == 200
        again = cb.post(P + "/bring")
        assert again.json()["lineage"] == 1 and again.json()["generation"] > 1


def test_a_pod_that_lets_go_without_a_final_checkpoint_leaves_a_new_lineage(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    """A stop without a drain releases the leases with the folder unsaved: the next holder cannot vouch."""
    a, b = started(make("a")), started(make("b"))
    ProjectStore(store).create(T, "web")
    a.bring(T, "web")
    a.stop()
    assert b.bring(T, "web").lineage == 2


def test_a_bring_from_a_snapshot_other_than_the_head_starts_a_new_lineage(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = started(make("a"))
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a)) as c:
        assert c.post(P + "/bring").status_code == 200
        first = c.post(P + "/checkpoint").json()["snapshot"]["id"]
        c.put(P + "/files/later.txt", content=b"later")
        c.post(P + "/checkpoint")
        assert c.post(P + "/suspend").json()["lineage"] == 1
        back = c.post(P + "/bring", json={"from_snapshot": first})
        assert back.status_code == 200 and back.json()["lineage"] == 2
        stale = c.put(P + "/files/x.txt", content=b"x", headers={"Tenure-If-Lineage": "1"})
        assert stale.status_code == 412 and stale.json()["code"] == "lineage-changed"
        assert c.get(P + "/files/x.txt").status_code == 404  # refused before anything was written


def test_a_durable_write_is_answered_with_the_snapshot_that_holds_its_bytes(
    store: Store, make: Callable[..., PodRuntime], tmp_path: Path
) -> None:
    a = started(make("a"))
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a)) as c:
        assert c.post(P + "/bring").status_code == 200
        put = c.put(P + "/files/deep/notes.txt?durable=true", content=b"saved for good")
        assert put.status_code == 201, put.text
        doc = put.json()
        assert doc["durable"] is True and doc["lineage"] == 1 and doc["snapshot"]
        gone = c.request("DELETE", P + "/files/deep/notes.txt", params={"durable": "true"})
        assert gone.status_code == 200 and gone.json()["snapshot"] not in (None, doc["snapshot"])
    # the snapshot the write was answered with holds it, byte for byte (restored elsewhere)
    workspaces = WorkspaceService(store, LocalObjectStore(str(tmp_path / "objects")), str(tmp_path / "reader"))
    snap = store.snapshots.get(doc["snapshot"])
    assert snap.state is SnapshotState.READY
    workspaces.restore(snap.workspace_id, str(tmp_path / "copy"), snapshot=snap.id)
    assert (tmp_path / "copy" / "deep" / "notes.txt").read_bytes() == b"saved for good"


def test_concurrent_durable_writers_share_checkpoints(store: Store, make: Callable[..., PodRuntime]) -> None:
    a = started(make("a"))
    ProjectStore(store).create(T, "web")
    writers = 16
    with TestClient(create_app(a)) as c:
        assert c.post(P + "/bring").status_code == 200
        answers: list[dict[str, object]] = []
        start = threading.Barrier(writers)

        def write(i: int) -> None:
            start.wait()
            r = c.put(f"{P}/files/w{i}.txt?durable=true", content=f"writer {i}".encode())
            assert r.status_code == 201, r.text
            answers.append(r.json())

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    commit = a.commits.of(T, "web")
    assert len(answers) == writers and commit.writers == writers
    assert commit.checkpoints < writers  # group commit: one checkpoint covered several writes
    # a checkpoint that found nothing new names the head it left (the writes before it are all in it)
    assert 1 <= len({str(x["snapshot"]) for x in answers}) <= commit.checkpoints


def test_a_checkpoint_that_fails_fails_every_writer_of_its_batch() -> None:
    release = threading.Event()
    calls: list[int] = []

    def checkpoint() -> object:
        calls.append(1)
        if len(calls) == 1:
            release.wait(5)
            raise OSError("disk full")
        return "snapshot"

    commit = GroupCommit(checkpoint)
    results: list[object] = []

    def wait() -> None:
        try:
            results.append(commit.wait()[0])
        except OSError as exc:
            results.append(exc)

    first = threading.Thread(target=wait)
    first.start()
    wait_for(lambda: calls, what="the first checkpoint to start")
    joined = [threading.Thread(target=wait) for _ in range(3)]
    for t in joined:
        t.start()
    wait_for(lambda: commit._pending is not None and commit._pending.writers == 3, what="the next batch")
    release.set()
    for t in (first, *joined):
        t.join()
    assert isinstance(results[0], OSError)  # the failed checkpoint's one writer: never acknowledged
    assert results[1:] == ["snapshot"] * 3 and len(calls) == 2  # the next batch: one checkpoint for three


def test_a_pod_with_another_object_folder_is_refused_at_start_and_damages_nothing(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    """The first pod binds the cluster's object store at start; one given its own, empty object folder is
    refused before it restores (or marks DEGRADED) anything."""
    a = started(make("a"))
    ProjectStore(store).create(T, "web")
    a.bring(T, "web")
    head = a.checkpoint(T, "web").snapshot.id
    a.suspend(T, "web")
    with pytest.raises(ObjectStoreMismatchError):
        started(make("b", objects="elsewhere"))
    assert store.snapshots.get(head).state is SnapshotState.READY


def test_pods_started_with_their_own_object_folders_before_the_first_write_are_refused_but_the_first(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    started(make("a", objects="objects-a"))
    with pytest.raises(ObjectStoreMismatchError):
        started(make("b", objects="objects-b"))


def test_autosave_checkpoints_a_changed_folder_and_leaves_an_unchanged_one(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = started(make("a", autosave=0.05))
    ProjectStore(store).create(T, "web")
    project = a.bring(T, "web")
    head = a.checkpoint(T, "web").snapshot.id  # the journal starts with the first checkpoint
    folder = Path(a.workspaces.folder_for(project.id))
    a._saved_at[project.id] -= 1.0  # due (the clock of autosave is the pod's monotonic one)
    a._autosave()
    assert store.workspaces.workspace(project.workspace_id).head_snapshot_id == head  # nothing changed
    (folder / "notes.txt").write_bytes(b"autosaved")
    a._saved_at[project.id] -= 1.0
    a._autosave()
    after = store.workspaces.workspace(project.workspace_id).head_snapshot_id
    assert after != head
    b = WorkspaceService(store, a.objects, str(folder.parent.parent / "reader"))
    b.restore(project.workspace_id, str(folder.parent.parent / "copy"))
    assert (folder.parent.parent / "copy" / "notes.txt").read_bytes() == b"autosaved"


def test_a_projects_own_autosave_policy_overrides_the_pods_default_both_ways(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    """Pod default off, project 0.05 s: autosaved. Pod default on, project 0: never autosaved. ``null`` goes
    back to the pod's default. A policy set through another pod reaches the owner within POLICY_BEATS beats."""
    a, other = started(make("a", autosave=0.0)), started(make("other"))
    assert make("default").config.autosave == 30.0, "ADR 0047: the pods' default"
    projects = ProjectStore(store)
    for name in ("web", "off"):
        projects.create(T, name)
    with TestClient(create_app(a)) as c:
        bad = c.put(P + "/autosave", json={"seconds": -1})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid-autosave"
        set_ = c.put(P + "/autosave", json={"seconds": 0.05})
        assert set_.status_code == 200 and set_.json()["autosave"] == 0.05
    web, off = a.bring(T, "web"), a.bring(T, "off")
    assert a.autosave_every(web.id) == 0.05 and a.autosave_every(off.id) == 0.0
    heads = {}
    for project in (web, off):
        heads[project.id] = a.checkpoint(T, project.name).snapshot.id
        (Path(a.workspaces.folder_for(project.id)) / "notes.txt").write_bytes(b"changed")
        a._saved_at[project.id] -= 1.0
    a._autosave()

    def head(project_id: str) -> str | None:
        return store.workspaces.workspace(projects.by_id(project_id).workspace_id).head_snapshot_id

    assert head(web.id) != heads[web.id], "its own policy autosaves it though the pod's default is off"
    assert head(off.id) == heads[off.id]
    a.config = replace(a.config, autosave=0.05)  # the pod's default on; "off" asks for 0
    with TestClient(create_app(other)) as c:  # set through another pod: the owner reads it within a few beats
        assert c.put(f"/api/v1/projects/{T}/off/autosave", json={"seconds": 0}).json()["autosave"] == 0.0
    a._beats = POLICY_BEATS - 1
    a.beat()  # the beat's refresh reads the policies of every project held here
    assert a.autosave_every(off.id) == 0.0
    a._saved_at[off.id] -= 1.0
    a._autosave()
    assert head(off.id) == heads[off.id], "0 turns it off whatever the pod's default"
    with TestClient(create_app(a)) as c:
        assert c.put(f"/api/v1/projects/{T}/off/autosave", json={"seconds": None}).json()["autosave"] is None
    assert a.autosave_every(off.id) == 0.05, "null follows the pod's default again"
    a._saved_at[off.id] -= 1.0
    a._autosave()
    assert head(off.id) != heads[off.id]


def test_unsaved_since_and_the_oldest_unsaved_gauge_follow_the_folder_and_clear_at_a_checkpoint(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = started(make("a"))
    ProjectStore(store).create(T, "web")
    project = a.bring(T, "web")
    app = TestClient(create_app(a))

    def doc() -> dict[str, object]:
        answer = app.get(P)
        assert answer.status_code == 200
        return answer.json()

    def gauge() -> float:
        return a.metrics.oldest_unsaved._value.get()  # type: ignore[attr-defined, no-any-return]

    a._track_unsaved()
    brought = doc()
    assert brought["last_checkpoint_at"] is None  # never checkpointed here
    assert isinstance(brought["unsaved_since"], float)  # no journal yet: the folder may hold anything
    a.checkpoint(T, "web")
    a._track_unsaved()
    clean = doc()
    assert clean["unsaved_since"] is None and isinstance(clean["last_checkpoint_at"], float)
    assert gauge() == 0.0
    (Path(a.workspaces.folder_for(project.id)) / "notes.txt").write_bytes(b"not saved yet")
    a._track_unsaved()
    dirty = doc()
    assert isinstance(dirty["unsaved_since"], float) and dirty["unsaved_since"] >= clean["last_checkpoint_at"]
    first = dirty["unsaved_since"]
    (Path(a.workspaces.folder_for(project.id)) / "more.txt").write_bytes(b"still not saved")
    a._track_unsaved()
    assert doc()["unsaved_since"] == first  # the oldest change counts, not the newest
    assert gauge() >= 0.0
    a.checkpoint(T, "web")
    a._track_unsaved()
    assert doc()["unsaved_since"] is None and gauge() == 0.0
    listed = app.get("/api/v1/projects").json()
    assert [p["unsaved_since"] for p in listed["projects"] if p["name"] == "web"] == [None]


def test_a_project_not_running_on_the_answering_pod_has_no_saving_times(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = started(make("a"))
    b = started(make("b"))
    ProjectStore(store).create(T, "web")
    a.bring(T, "web")
    a.checkpoint(T, "web")
    answer = TestClient(create_app(b)).get(P, follow_redirects=False)
    if answer.status_code == 200:
        assert answer.json()["last_checkpoint_at"] is None and answer.json()["unsaved_since"] is None
    assert b.saving(a.registry.ids().pop()) == {"last_checkpoint_at": None, "unsaved_since": None}


def test_every_checkpoint_records_why_it_was_taken(store: Store, make: Callable[..., PodRuntime]) -> None:
    """manual, durable, autosave, suspend and drain, each on the snapshot it published (newest first)."""
    a, b = started(make("a", autosave=0.05)), started(make("b"))
    ProjectStore(store).create(T, "web")
    with TestClient(create_app(a), follow_redirects=False) as c:
        assert c.post(P + "/bring").status_code == 200
        assert c.post(P + "/checkpoint").status_code == 200
        assert c.put(P + "/files/d.txt?durable=true", content=b"durable").status_code == 201
        project = ProjectStore(store).get(T, "web")
        (Path(a.workspaces.folder_for(project.id)) / "auto.txt").write_bytes(b"autosaved")
        a._saved_at[project.id] -= 1.0  # due
        a._autosave()
        c.put(P + "/files/s.txt", content=b"suspended")  # an unchanged folder publishes no snapshot
        assert c.post(P + "/suspend").status_code == 200
        assert c.post(P + "/bring").status_code == 200
        c.put(P + "/files/h.txt", content=b"handed over")
        assert a.drain() == [f"{T}/web"]

    def reasons() -> list[str | None]:
        snaps = store.snapshots.list(project.workspace_id)
        return [s.reason for s in sorted(snaps, key=lambda s: s.created_at)]

    assert reasons() == ["manual", "durable", "autosave", "suspend", "drain"]
    with TestClient(create_app(b)) as cb:
        listed = cb.get(P + "/snapshots").json()
        assert {s["reason"] for s in listed["snapshots"]} == {"manual", "durable", "autosave", "suspend", "drain"}


def test_autosaves_never_count_toward_keep_last_and_have_their_own_retention(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = started(make("a"))
    ProjectStore(store).create(T, "web")
    project = a.bring(T, "web")
    folder = Path(a.workspaces.folder_for(project.id))
    made = {}
    for step, reason in enumerate(["manual", "autosave", "autosave", "manual", "autosave"]):
        (folder / f"f{step}.txt").write_bytes(reason.encode())
        made[f"{reason}{step}"] = a.checkpoint(T, "web", reason=reason).snapshot.id
    (folder / "last.txt").write_bytes(b"head")
    head = a.checkpoint(T, "web").snapshot.id
    assert store.snapshots.newest(project.workspace_id, 2, 1) == {
        made["manual3"]: "newest",
        head: "newest",
        made["autosave4"]: "newest-autosave",
    }
    doomed = {s.id for s in store.snapshots.prune(project.workspace_id, keep_last=2, keep_autosaves=1)}
    assert doomed == {made["manual0"], made["autosave1"], made["autosave2"]}
    left = {s.id for s in store.snapshots.list(project.workspace_id) if s.state is SnapshotState.READY}
    assert left == {made["manual3"], made["autosave4"], head}


def test_a_durable_write_whose_checkpoint_is_refused_after_writing_is_answered_write_unsaved(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    """The bytes are in the folder when the checkpoint meets a hand-over that began meanwhile: the answer must
    not be project-quiescing (that code means nothing was written) but write-unsaved."""
    a = started(make("a"))
    ProjectStore(store).create(T, "web")
    project_id = ProjectStore(store).get(T, "web").id
    with TestClient(create_app(a), follow_redirects=False) as c, ExitStack() as closing:
        assert c.post(P + "/bring").status_code == 200
        with at(DURABLE_WRITTEN, lambda: closing.enter_context(a.gate.closing(project_id))):
            answer = c.put(P + "/files/notes.txt?durable=true", content=b"written, not yet saved")
        assert answer.status_code == 409, answer.text
        assert answer.json()["code"] == "write-unsaved" and answer.json()["retryable"] is True
        assert answer.json()["context"]["cause"] == "project-quiescing"
        folder = Path(a.workspaces.folder_for(project_id))
        assert (folder / "notes.txt").read_bytes() == b"written, not yet saved", "the bytes did land"
