"""The lifecycle records every mount on this host: bring, checkpoint, suspend, drift and close leave the
records reconciliation reads at the next start (ADR 0021)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.errors import ConflictError
from tenure.mounts.store import MountStore
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import ProjectStore
from tenure.states import MountState as M
from tenure.store import Store

T = "acme"


def records(node: PodRuntime) -> MountStore:
    return MountStore(node.config.data_dir)


def test_bring_checkpoint_and_suspend_leave_the_records_reconciliation_reads(store: Store, node: PodRuntime) -> None:
    ProjectStore(store).create(T, "p")
    project = node.bring(T, "p")
    [mount] = records(node).list()
    assert (mount.state, mount.generation, mount.project_ref) == (M.MOUNTED, project.generation, "acme/p")
    assert mount.folder == node.lifecycle.folder(project)
    Path(mount.folder, "f.txt").write_text("x")
    result = node.checkpoint(T, "p")
    after = records(node).get(mount.id)
    assert (after.state, after.base_snapshot, after.checkpoint_key) == (M.MOUNTED, result.snapshot.id, None)
    node.suspend(T, "p")
    assert records(node).get(mount.id).state is M.CLOSED
    node.bring(T, "p")
    live = records(node).live_for(project.workspace_id)
    assert live is not None and live.id != mount.id and live.state is M.MOUNTED


def test_a_lost_lease_forces_the_mount_closed_and_names_the_preserved_folder(
    store: Store, node: PodRuntime, tmp_path: Path
) -> None:
    ProjectStore(store).create(T, "p")
    project = node.bring(T, "p")
    other = PodRuntime(
        ServeConfig(data_dir=str(tmp_path / "b"), self_pull=False), store, LocalObjectStore(str(tmp_path / "objects"))
    )
    other.start()
    try:
        other.close(T, "p")
        node.beat()
    finally:
        other.stop()
    [mount] = records(node).list()
    assert mount.state is M.CLOSED and mount.forced_reason
    assert records(node).live_for(project.workspace_id) is None


@pytest.mark.parametrize("verdict", ["stale-generation", "control-plane-unknown"])
def test_s59_a_mount_reconciliation_did_not_find_valid_may_not_publish(
    store: Store, node: PodRuntime, verdict: str
) -> None:
    """The publish gate: only a mount whose lease reconciliation found valid (or that it never had to judge)
    checkpoints; the refusal comes before anything is uploaded, and the head stays where it was."""
    ProjectStore(store).create(T, "p")
    project = node.bring(T, "p")
    [mount] = records(node).list()
    Path(mount.folder, "f.txt").write_text("published")
    first = node.checkpoint(T, "p").snapshot
    records(node).set_verdict(mount.id, verdict)
    Path(mount.folder, "f.txt").write_text("not published")
    with pytest.raises(ConflictError) as refused:
        node.checkpoint(T, "p")
    assert refused.value.code == "publish-gated" and refused.value.context["verdict"] == verdict
    workspace = store.workspaces.workspace(project.workspace_id)
    assert workspace.head_snapshot_id == first.id
    after = records(node).get(mount.id)
    assert (after.state, after.checkpoint_key) == (M.MOUNTED, None), "nothing recorded as in flight"


def test_s60_a_bring_under_the_same_generation_settles_a_mount_whose_lease_was_unknown(
    store: Store, node: PodRuntime
) -> None:
    """Reconciliation marks a live mount control-plane-unknown when the store could not say; the next bring's
    claim under the same generation is the store's answer, so the mount publishes again."""
    ProjectStore(store).create(T, "p")
    project = node.bring(T, "p")
    [mount] = records(node).list()
    records(node).set_verdict(mount.id, "control-plane-unknown")
    again = node.lifecycle.mounts.mounting(project, mount.folder)
    assert (again.id, again.verdict) == (mount.id, "active-lease-valid")
    Path(mount.folder, "f.txt").write_text("published")
    assert node.checkpoint(T, "p").snapshot.state.value == "READY"


def test_s59_a_stale_mount_stays_gated_when_the_same_generation_is_brought(store: Store, node: PodRuntime) -> None:
    ProjectStore(store).create(T, "p")
    project = node.bring(T, "p")
    [mount] = records(node).list()
    records(node).set_verdict(mount.id, "stale-generation")
    assert node.lifecycle.mounts.mounting(project, mount.folder).verdict == "stale-generation"
    with pytest.raises(ConflictError):
        node.checkpoint(T, "p")
