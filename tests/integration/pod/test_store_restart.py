"""A PostgreSQL restart in the middle of a checkpoint leaves nothing stuck (issue item "recovery after faults").

A real pod on PostgreSQL through a proxy (``tests/support/pgproxy.py``) that resets every connection and
refuses new ones, as clients see a server restart. The store goes down right after a checkpoint began
(workspace CHECKPOINTING, snapshot UPLOADING): the checkpoint fails, and so does its abandonment, which
needs the store too. Once the store is back the workspace must not stay CHECKPOINTING under the pod's
lease, which the pod renews for as long as it runs: every later checkpoint would be refused with
``checkpoint-in-progress``. The kept abandonment is retried before the next checkpoint and by the beat.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure import faults
from tenure.errors import TenureError
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import LifecycleType, ProjectStore
from tenure.states import SnapshotState, WorkspaceState
from tenure.store import Store, open_store
from tenure.store.postgres import PostgresConnector
from tests.support.pgproxy import FAST, StallingProxy
from tests.support.pods import wait_for
from tests.support.runtime import stop_all

pytestmark = pytest.mark.postgres

T = "acme"


@pytest.fixture
def setup(pg_url: str, tmp_path: Path) -> Iterator[tuple[PodRuntime, StallingProxy, Store]]:
    direct = open_store(pg_url)
    proxy = StallingProxy.before(pg_url)
    store = Store(PostgresConnector(proxy.url(pg_url), settings=FAST), auto_migrate=False)
    node = PodRuntime(
        ServeConfig(data_dir=str(tmp_path / "pod"), self_pull=False, lease_ttl=30.0, beat_interval=0.2, tick=3600.0),
        store,
        LocalObjectStore(str(tmp_path / "objects")),
    )
    try:
        yield node, proxy, direct
    finally:
        stop_all([node])
        store.close()
        proxy.close()
        direct.close()


def _interrupted_checkpoint(node: PodRuntime, proxy: StallingProxy, direct: Store) -> str:
    """A RUNNING project whose checkpoint the store's restart cut short; returns its workspace id."""
    ProjectStore(direct).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    workspace_id = node.bring(T, "p").workspace_id
    with open(Path(node.lifecycle.folder(node.projects.get(T, "p"))) / "f.txt", "w") as out:
        out.write("saved later")
    with faults.at("checkpoint.after_begin", proxy.down), pytest.raises(TenureError) as failed:
        node.checkpoint(T, "p")
    assert failed.value.retryable, failed.value
    assert direct.workspaces.workspace(workspace_id).state is WorkspaceState.CHECKPOINTING  # the fault as staged
    proxy.up()
    return workspace_id


def _checkpoints(node: PodRuntime) -> Any:
    """The checkpoint's result, or None while it is refused (``checkpoint-in-progress`` while stuck)."""
    try:
        return node.checkpoint(T, "p")
    except TenureError:
        return None


def test_after_a_store_restart_the_next_checkpoint_publishes(setup: tuple[PodRuntime, StallingProxy, Store]) -> None:
    node, proxy, direct = setup
    node.start()  # no beat thread: the checkpoint itself must clear what the restart left
    workspace_id = _interrupted_checkpoint(node, proxy, direct)
    result = wait_for(lambda: _checkpoints(node), timeout=10.0)
    assert result.snapshot.state is SnapshotState.READY
    ws = direct.workspaces.workspace(workspace_id)
    assert ws.state is WorkspaceState.MOUNTED and ws.head_snapshot_id == result.snapshot.id
    failed = [s for s in direct.snapshots.list(workspace_id) if s.state is SnapshotState.FAILED]
    assert len(failed) == 1  # the interrupted one, recorded as failed once the store took it


def test_the_beat_clears_an_interrupted_checkpoint_once_the_store_is_back(
    setup: tuple[PodRuntime, StallingProxy, Store],
) -> None:
    node, proxy, direct = setup
    node.start()
    node.run_beats()
    workspace_id = _interrupted_checkpoint(node, proxy, direct)
    wait_for(lambda: direct.workspaces.workspace(workspace_id).state is WorkspaceState.MOUNTED, timeout=10.0)
    assert node.workspaces.retry_abandons() == 0


def test_a_kept_abandonment_the_store_then_refuses_as_settled_blocks_no_later_checkpoint(
    setup: tuple[PodRuntime, StallingProxy, Store],
) -> None:
    """The store answers the retried abandonment with a conflict (the workspace was settled another way
    meanwhile): that is not "still unreachable", so it is dropped at once instead of failing every later
    checkpoint of the workspace with that conflict."""
    node, proxy, direct = setup
    node.start()
    workspace_id = _interrupted_checkpoint(node, proxy, direct)
    lease, ticket, _ = node.workspaces._unabandoned[workspace_id]
    direct.workspaces.abandon_checkpoint(lease, ticket, error=None)  # settled by another path
    # once the pool has reconnected (a moment after the restart), the checkpoint publishes: with the settled
    # abandonment kept and retried, every attempt would fail with version-conflict until the wait ran out
    result = wait_for(lambda: _checkpoints(node), timeout=10.0)
    assert result.snapshot.state is SnapshotState.READY
    assert node.workspaces.retry_abandons() == 0 and workspace_id not in node.workspaces._unabandoned
