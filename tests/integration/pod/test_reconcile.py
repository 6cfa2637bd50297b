"""Restart reconciliation at pod start, on a real store (SQLite and PostgreSQL): each verdict from the
records a dead pod left, its action, and a second run that changes nothing (S-53…S-68, ADR 0018, 0021)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.mounts.store import MountStore
from tenure.objects.local import LocalObjectStore
from tenure.pod.reconcile import Reconciler
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import LifecycleType, Project, ProjectStore
from tenure.projects.ownership import Ownership
from tenure.states import MountState as M
from tenure.store import Store
from tests.support.store import wait_past

T = "acme"


@pytest.fixture
def made(store: Store, tmp_path: Path) -> Iterator[list[PodRuntime]]:
    nodes: list[PodRuntime] = []
    yield nodes
    for node in nodes:
        node._stop.set()
        node._unlock_data_folder()


def node_on(store: Store, tmp_path: Path, made: list[PodRuntime], name: str, **options: object) -> PodRuntime:
    settings: dict[str, object] = {"self_pull": False, "lease_ttl": 60.0}
    settings.update(options)
    node = PodRuntime(
        ServeConfig(data_dir=str(tmp_path / name), **settings),  # type: ignore[arg-type]
        store,
        LocalObjectStore(str(tmp_path / "objects")),
    )
    made.append(node)
    node.start()
    return node


def a_running_p(store: Store, tmp_path: Path, made: list[PodRuntime], **options: object) -> tuple[PodRuntime, Project]:
    """Pod a started, with the permanent project p brought on it."""
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    a = node_on(store, tmp_path, made, "a", **options)
    return a, a.bring(T, "p")


def crash(node: PodRuntime) -> None:
    """What kill -9 leaves: the lock released by the kernel, the leases and the records as they were."""
    node._stop.set()
    node._unlock_data_folder()


def verdicts(node: PodRuntime) -> list[str]:
    return sorted(node.reconcile_report.verdicts.values())


def test_s58_a_restart_with_a_valid_lease_resumes_the_mount_and_keeps_its_folder(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    a, project = a_running_p(store, tmp_path, made)
    Path(a.lifecycle.folder(project), "work.txt").write_text("uncommitted")
    crash(a)
    again = node_on(store, tmp_path, made, "a")
    assert verdicts(again) == ["active-lease-valid"]
    assert Path(again.lifecycle.folder(project), "work.txt").read_text() == "uncommitted"
    [mount] = [m for m in MountStore(again.config.data_dir).list() if m.state is not M.CLOSED]
    assert mount.generation == ProjectStore(store).get(T, "p").generation


def test_s57_s80_an_interrupted_checkpoint_is_finished_under_its_key_after_the_adoption(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    a, project = a_running_p(store, tmp_path, made)
    Path(a.lifecycle.folder(project), "result.txt").write_text("to publish")
    a.lifecycle.mounts.checkpointing(project, "now:1:interrupted")  # recorded before any upload, then kill -9
    crash(a)
    again = node_on(store, tmp_path, made, "a")
    assert verdicts(again) == ["checkpoint-interrupted"]
    ws = store.workspaces.workspace(project.workspace_id)
    head = store.snapshots.get(ws.head_snapshot_id)
    assert head.state.value == "READY"
    restored = tmp_path / "restored"
    again.workspaces.restore(project.workspace_id, str(restored))
    assert (restored / "result.txt").read_text() == "to publish"


def test_s62_s81_a_stale_mount_is_fenced_and_its_uncommitted_data_preserved_and_recoverable(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    a, project = a_running_p(store, tmp_path, made, lease_ttl=0.4)
    folder = a.lifecycle.folder(project)
    Path(folder, "delta.txt").write_text("only on host a")
    crash(a)
    wait_past(store, 0.45)
    b = node_on(store, tmp_path, made, "b", lease_ttl=0.4)
    b.bring(T, "p")  # the other host takes over after the TTL
    Path(b.lifecycle.folder(project), "b.txt").write_text("b")
    b.checkpoint(T, "p")
    again = node_on(store, tmp_path, made, "a", lease_ttl=0.4)
    assert verdicts(again) == ["stale-generation"]
    assert not os.path.exists(folder), "fenced: the folder left its working place"
    [mount] = MountStore(again.config.data_dir).list()
    assert mount.state is M.CLOSED and mount.verdict == "preserved-delta"
    assert Path(mount.preserved_folder, "delta.txt").read_text() == "only on host a"
    assert Ownership(store).owner(project.id, 0.4).pod_id == b.pod.pod_id, "nothing taken back, nothing published"


def test_s60_s61_an_unanswerable_mount_is_kept_untouched(store: Store, tmp_path: Path, made: list[PodRuntime]) -> None:
    a = node_on(store, tmp_path, made, "a")
    folder = tmp_path / "a" / "workspaces" / "orphan"
    folder.mkdir(parents=True)
    (folder / "f.txt").write_text("keep")
    records = MountStore(a.config.data_dir)
    mount = records.open("w-unknown", str(folder), 7, project_id="p-unknown")
    records.transition(mount.id, M.MOUNTING, M.MOUNTED)
    report = Reconciler(a).run()
    assert report.verdicts[mount.id] == "control-plane-unknown"
    assert (folder / "f.txt").read_text() == "keep"
    assert records.get(mount.id).state is M.MOUNTED and records.get(mount.id).verdict == "control-plane-unknown"


def test_s63_a_mount_whose_lease_merely_ran_out_is_fenced_and_publishes_nothing(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    """Stale generation, case 2: nobody took the project over, but its lease ran out (its pod died on
    another host): the mount is fenced to CLOSED, its folder kept as a preserved delta, nothing published
    and the lease not taken."""
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    b = node_on(store, tmp_path, made, "b", lease_ttl=0.4)
    project = b.bring(T, "p")
    crash(b)
    wait_past(store, 0.45)
    a = node_on(store, tmp_path, made, "a", lease_ttl=0.4)
    folder = tmp_path / "a" / "workspaces" / "p-copy"
    folder.mkdir(parents=True)
    (folder / "delta.txt").write_text("written under the lease that ran out")
    records = MountStore(a.config.data_dir)
    mount = records.open(project.workspace_id, str(folder), project.generation, project_id=project.id)
    records.transition(mount.id, M.MOUNTING, M.MOUNTED)
    head_before = store.workspaces.workspace(project.workspace_id).head_snapshot_id
    report = Reconciler(a).run()
    assert report.verdicts[mount.id] == "stale-generation"
    after = records.get(mount.id)
    assert after.state is M.CLOSED and after.verdict == "preserved-delta"
    assert after.preserved_folder is not None
    assert Path(after.preserved_folder, "delta.txt").read_text() == "written under the lease that ran out"
    assert not folder.exists(), "fenced: the folder left its working place"
    assert store.workspaces.workspace(project.workspace_id).head_snapshot_id == head_before, "nothing published"
    owner = Ownership(store).owner(project.id, 0.4)
    assert owner.pod_id == b.pod.pod_id and not owner.live, "the lease is not taken by reconciliation"
    assert ProjectStore(store).get(T, "p").generation == project.generation


def test_s66_s67_a_torn_down_mount_is_deleted_only_when_its_folder_is_clean(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p")
    a = node_on(store, tmp_path, made, "a")
    project = a.bring(T, "p")
    folder = a.lifecycle.folder(project)
    records = a.lifecycle.mounts.store
    [mount] = records.list()
    records.force(mount.id, M.CLOSED, "test: torn down, folder left behind")
    a.registry.remove(project.id)
    Path(folder, "late.txt").write_text("written after")
    report = Reconciler(a).run()
    assert report.verdicts[mount.id] == "preserved-delta", "the guard: uncommitted data is never deleted"
    assert Path(records.get(mount.id).preserved_folder or "", "late.txt").read_text() == "written after"


def test_a_preserved_delta_past_its_window_is_deleted_and_a_second_run_changes_nothing(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    a = node_on(store, tmp_path, made, "a")
    kept = tmp_path / "a" / "preserved" / "old"
    kept.mkdir(parents=True)
    records = MountStore(a.config.data_dir)
    mount = records.open("w-1", str(tmp_path / "gone"), 1)
    records.force(mount.id, M.CLOSED, "test")
    records.set_verdict(mount.id, "preserved-delta", preserved_folder=str(kept), preserved_at=time.time() - 100)
    assert Reconciler(a, window_s=1000).run().expired_deltas == 0 and kept.exists()
    assert Reconciler(a, window_s=10).run().expired_deltas == 1
    assert not kept.exists() and records.list() == []
    second = Reconciler(a, window_s=10).run()
    assert second.verdicts == {} and second.expired_deltas == 0


def test_a_preserved_delta_is_listed_and_recovered_through_the_cli(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    import json
    import subprocess
    import sys

    a = node_on(store, tmp_path, made, "a")
    kept = tmp_path / "a" / "preserved" / "delta"
    (kept / "sub").mkdir(parents=True)
    (kept / "sub" / "f.txt").write_text("recover me")
    records = MountStore(a.config.data_dir)
    mount = records.open("w-1", str(tmp_path / "gone"), 1, project_ref="acme/p")
    records.force(mount.id, M.CLOSED, "test")
    records.set_verdict(mount.id, "preserved-delta", preserved_folder=str(kept), preserved_at=time.time())
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3] / "src"), PYTHONDONTWRITEBYTECODE="1")
    base = [sys.executable, "-m", "tenure.cli.main", "--data", str(tmp_path / "a"), "--db", store.url]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, env=env, timeout=60)

    listed = json.loads(run("--json", "mounts", "list").stdout)
    assert [(m["id"], m["verdict"]) for m in listed] == [(mount.id, "preserved-delta")]
    out = tmp_path / "recovered"
    assert run("mounts", "recover", mount.id, "--to", str(out)).returncode == 0
    assert (out / "sub" / "f.txt").read_text() == "recover me" and kept.exists()
    assert run("mounts", "recover", mount.id, "--to", str(out)).returncode == 2, "not into a non-empty folder"
    assert run("mounts", "discard", mount.id).returncode == 0
    assert not kept.exists() and MountStore(a.config.data_dir).list() == []


def test_a_suspend_the_dead_pod_did_not_finish_is_finished_at_restart(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    from tenure.states import ProjectStatus

    ProjectStore(store).create(T, "p")
    a = node_on(store, tmp_path, made, "a")
    project = a.bring(T, "p")
    Path(a.lifecycle.folder(project), "kept.txt").write_text("suspended state")
    running = ProjectStore(store).get(T, "p")
    ProjectStore(store).transition_status(T, "p", ProjectStatus.RUNNING, ProjectStatus.SUSPENDING, running.generation)
    a.lifecycle.mounts.unmounting(running)  # the final checkpoint recorded as started, then kill -9
    crash(a)
    again = node_on(store, tmp_path, made, "a")
    assert verdicts(again) == ["checkpoint-interrupted"]
    after = ProjectStore(store).get(T, "p")
    assert after.status is ProjectStatus.SUSPENDED and Ownership(store).owner(after.id, 60.0).pod_id is None
    restored = tmp_path / "restored"
    again.workspaces.restore(project.workspace_id, str(restored))
    assert (restored / "kept.txt").read_text() == "suspended state"


def test_a_close_killed_between_recording_and_moving_its_folder_has_the_move_finished_at_restart(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    """Close records where the folder goes before moving it; a crash in between leaves the record, and the next
    start moves the folder there (never deleting it) so the closed project's files stay recoverable."""
    a, project = a_running_p(store, tmp_path, made)
    folder = a.lifecycle.folder(project)
    Path(folder, "draft.txt").write_text("only copy")
    # what close.after_delta_recorded leaves, on a closed project
    b = node_on(store, tmp_path, made, "b")
    b.close(T, "p")
    record = a.lifecycle.mounts.preserving(project, folder, a.workspaces.folders.preserve_target(folder), "closed")
    crash(a)
    again = node_on(store, tmp_path, made, "a", recovery_window=3600.0)
    assert record.preserved_folder is not None
    assert not os.path.exists(folder)
    assert Path(record.preserved_folder, "draft.txt").read_text() == "only copy"
    [kept] = MountStore(again.config.data_dir).list()
    assert (kept.id, kept.verdict, kept.preserved_folder) == (record.id, "preserved-delta", record.preserved_folder)


def test_a_closed_projects_clean_folder_is_kept_too_since_its_snapshots_are_gone(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    """A stale mount's clean folder is removed (its data is in a READY snapshot); a closed project's is not: close
    disposed the snapshots, so the folder is kept as a preserved delta for the window."""
    a, project = a_running_p(store, tmp_path, made)
    Path(a.lifecycle.folder(project), "kept.txt").write_text("checkpointed")
    a.checkpoint(T, "p")
    crash(a)
    b = node_on(store, tmp_path, made, "b")
    b.close(T, "p")
    again = node_on(store, tmp_path, made, "a")
    [kept] = MountStore(again.config.data_dir).list()
    assert kept.verdict == "preserved-delta"
    assert Path(kept.preserved_folder or "", "kept.txt").read_text() == "checkpointed"


@pytest.mark.parametrize("how", ["unmounting", "cleanup-pending"])
def test_s56_a_cleanup_incomplete_mount_has_its_clean_folder_removed_and_its_record_closed_at_restart(
    store: Store, tmp_path: Path, made: list[PodRuntime], how: str
) -> None:
    """S-56: the final checkpoint committed, the local cleanup did not finish (the mount left UNMOUNTING, or a
    cleanup recorded as pending), then kill -9. The restart classifies cleanup incomplete and finishes the
    cleanup: the folder, whose content is all in the READY head, is removed and the record closed."""
    a, project = a_running_p(store, tmp_path, made)
    folder = a.lifecycle.folder(project)
    Path(folder, "done.txt").write_text("in the head")
    a.checkpoint(T, "p")
    mounts = MountStore(a.config.data_dir)
    [mount] = [m for m in mounts.list() if m.state is M.MOUNTED]
    if how == "unmounting":
        mounts.transition(mount.id, M.MOUNTED, M.UNMOUNTING)
    else:
        mounts.set_cleanup(mount.id, "remove-folder")
    crash(a)
    again = node_on(store, tmp_path, made, "a")
    assert again.reconcile_report.verdicts[mount.id] == "cleanup-incomplete"
    assert mount.id not in [m.id for m in MountStore(again.config.data_dir).list()], "the cleanup finished"
    restored = tmp_path / "restored"
    again.workspaces.restore(project.workspace_id, str(restored))
    assert (restored / "done.txt").read_text() == "in the head"


def test_s56_a_cleanup_incomplete_mount_written_to_after_its_checkpoint_is_preserved_not_removed(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    """S-56 with uncommitted data: a folder written to after the committed checkpoint is never thrown away by
    the cleanup; it becomes a preserved delta holding the unsaved file."""
    a, project = a_running_p(store, tmp_path, made)
    folder = a.lifecycle.folder(project)
    Path(folder, "done.txt").write_text("in the head")
    a.checkpoint(T, "p")
    Path(folder, "late.txt").write_text("written after the checkpoint")
    mounts = MountStore(a.config.data_dir)
    [mount] = [m for m in mounts.list() if m.state is M.MOUNTED]
    mounts.transition(mount.id, M.MOUNTED, M.UNMOUNTING)
    crash(a)
    again = node_on(store, tmp_path, made, "a")
    assert again.reconcile_report.verdicts[mount.id] == "cleanup-incomplete"
    kept = MountStore(again.config.data_dir).get(mount.id)
    assert kept.state is M.CLOSED and kept.verdict == "preserved-delta"
    assert Path(kept.preserved_folder or "", "late.txt").read_text() == "written after the checkpoint"


def test_a_folder_matching_the_index_of_a_checkpoint_that_never_published_is_preserved_not_deleted(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    """A build saves its local index before it publishes. If the publish never happens (kill -9 after the
    upload, or a takeover fencing it), the folder matches that index, but the data it describes is in no
    snapshot: judged against it the folder would look clean and a stale mount's clean folder is removed. It
    must count as uncommitted and be preserved (S-67, S-81; ADR 0033)."""
    from tenure.snapshots import build_tree

    a, project = a_running_p(store, tmp_path, made, lease_ttl=0.4)
    folder = a.lifecycle.folder(project)
    Path(folder, "old.txt").write_text("in the head")
    a.checkpoint(T, "p")
    Path(folder, "delta.txt").write_text("never published")
    build_tree(folder, a.objects, index_path=a.workspaces.index_path(project.workspace_id, folder))  # no publish
    crash(a)
    wait_past(store, 0.45)
    b = node_on(store, tmp_path, made, "b", lease_ttl=0.4)
    b.bring(T, "p")
    again = node_on(store, tmp_path, made, "a", lease_ttl=0.4)
    assert verdicts(again) == ["stale-generation"]
    [mount] = MountStore(again.config.data_dir).list()
    assert mount.verdict == "preserved-delta", "not judged clean by the unpublished build's index"
    assert Path(mount.preserved_folder or "", "delta.txt").read_text() == "never published"


def test_a_folder_just_checkpointed_is_clean_and_one_changed_after_is_not(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    """The other side of the rule above: the index a published checkpoint saved vouches for the folder."""
    a, project = a_running_p(store, tmp_path, made)
    folder = a.lifecycle.folder(project)
    Path(folder, "old.txt").write_text("in the head")
    a.checkpoint(T, "p")
    assert a.workspaces.folder_is_clean(project.workspace_id, folder)
    Path(folder, "new.txt").write_text("not yet")
    assert not a.workspaces.folder_is_clean(project.workspace_id, folder)


@pytest.mark.parametrize("left", ["folder-gone", "key-failed"])
def test_an_interrupted_checkpoint_that_cannot_be_finished_never_stops_the_pod_from_starting(
    store: Store, tmp_path: Path, made: list[PodRuntime], left: str
) -> None:
    """An interrupted checkpoint whose folder is gone (or whose key's snapshot an earlier attempt FAILED) is
    given up, not retried at every start: the pod starts, twice, and keeps the project's generation."""
    import shutil

    a, project = a_running_p(store, tmp_path, made)
    folder = a.lifecycle.folder(project)
    Path(folder, "x.txt").write_text("x")
    a.lifecycle.mounts.checkpointing(project, "now:1:interrupted")
    if left == "folder-gone":
        shutil.rmtree(folder)
    else:
        held = ProjectStore(store).get(T, "p")
        lease = a.workspaces.lease(project.workspace_id, held.generation)
        assert lease is not None
        ticket = store.workspaces.begin_checkpoint(lease, "now:1:interrupted")
        store.workspaces.abandon_checkpoint(lease, ticket, error="an earlier attempt failed")
    crash(a)
    again = node_on(store, tmp_path, made, "a")
    assert verdicts(again) == ["checkpoint-interrupted"]
    assert again.ready
    generation = ProjectStore(store).get(T, "p").generation
    crash(again)
    third = node_on(store, tmp_path, made, "a")
    assert third.ready and [m.checkpoint_key for m in MountStore(third.config.data_dir).list()] == [None]
    assert ProjectStore(store).get(T, "p").generation == generation + 1, "adopted once per restart, no more"


def _degraded_head_with_a_clean_folder(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> tuple[PodRuntime, str, str]:
    """A pod brings a project, checkpoints it, then objects of the head are deleted from the object folder and a
    verify marks the head DEGRADED; the pod is killed. Returns the killed pod, the head and the folder."""
    import random

    from tenure.objects import decode

    a, project = a_running_p(store, tmp_path, made)
    folder = a.lifecycle.folder(project)
    Path(folder, "small.txt").write_text("small " * 200)
    Path(folder, "sub").mkdir()
    big = random.Random(11).randbytes(3 << 20)
    Path(folder, "sub", "big.bin").write_bytes(big)
    head = a.checkpoint(T, "p").snapshot.id
    objects = a.objects
    victims = [
        oid
        for oid, _ in objects.list_ids()
        if (plain := decode(oid, objects.get(oid)))
        and (b"small small" in plain or (len(plain) > 1024 and plain in big))
    ]
    assert len(victims) >= 2, "the pack of the small file and chunks of the big one"
    assert objects.delete_many(victims) == len(victims)
    assert a.workspaces.verify(head).snapshot.state.value == "DEGRADED"
    assert a.workspaces.folder_is_clean(project.workspace_id, folder)
    crash(a)
    return a, head, folder


def test_s23_a_degraded_base_is_repaired_at_restart_from_the_clean_folder_of_a_mount_with_a_valid_lease(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    """Reconciliation keeps a mount whose lease is valid and whose folder is clean; its base snapshot is DEGRADED,
    so the lost objects are put back from the folder and the snapshot is READY again, same id, same tree."""
    a, head, folder = _degraded_head_with_a_clean_folder(store, tmp_path, made)
    expected = {p.relative_to(folder): p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}
    again = node_on(store, tmp_path, made, "a")
    assert verdicts(again) == ["active-lease-valid"]
    assert again.ready
    snap = store.snapshots.get(head)
    assert snap.state.value == "READY", snap
    project = ProjectStore(store).get(T, "p")
    assert store.workspaces.workspace(project.workspace_id).head_snapshot_id == head, "nothing new was published"
    restored = tmp_path / "restored"
    again.workspaces.restore(project.workspace_id, str(restored))
    got = {p.relative_to(restored): p.read_bytes() for p in restored.rglob("*") if p.is_file()}
    assert got == expected, "byte for byte"
    assert again.workspaces.verify(head).ok


@pytest.mark.parametrize("why", ["dirty-folder", "repair-fails"])
def test_a_degraded_base_is_left_degraded_when_the_folder_is_dirty_or_the_repair_fails_and_the_pod_starts(
    store: Store, tmp_path: Path, made: list[PodRuntime], monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """Only a clean folder repairs its base; a repair that fails is logged and the start goes on."""
    from tenure.errors import ObjectStoreError
    from tenure.workspaces import WorkspaceService

    a, head, folder = _degraded_head_with_a_clean_folder(store, tmp_path, made)
    if why == "dirty-folder":
        Path(folder, "late.txt").write_text("written after the checkpoint")
    else:

        def refused(self: WorkspaceService, ref: str, folder: str, **_: object) -> None:
            raise ObjectStoreError("the object store refused the write", code="object-store-unavailable")

        monkeypatch.setattr(WorkspaceService, "repair", refused)
    again = node_on(store, tmp_path, made, "a")
    assert verdicts(again) == ["active-lease-valid"]
    assert again.ready
    assert store.snapshots.get(head).state.value == "DEGRADED"
    assert Path(folder, "small.txt").exists(), "the folder is kept"
