"""A network partition between a pod and PostgreSQL, with real ``tenure serve`` processes (S-59, S-62, S-65, S-81).

Pod ``a`` reaches PostgreSQL only through a TCP proxy the test controls; pod ``b`` directly. ``a`` runs a
project with a checkpointed file and an uncommitted one; the proxy is cut past the lease TTL, ``b`` takes the
project over and checkpoints its own work. Then the partition heals — with ``a`` still running, or with ``a``
killed during the cut and started again on its data folder. Either way ``a`` classifies its mount as a stale
generation, publishes nothing, and keeps its uncommitted file as a preserved delta that ``tenure mounts recover``
gives back; the project stays ``b``'s, with ``b``'s content.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tenure.projects.store import ProjectStore
from tenure.store import Store, open_store
from tenure.verify.cluster import Proxy
from tests.acceptance.pod.test_reconcile_processes import head_files, mounts, reconciled, snapshots_of
from tests.support.pods import SRC, Cluster, create, owner_of, wait_for

pytestmark = pytest.mark.postgres

T = "acme"


@pytest.fixture
def partition(tmp_path: Path, pg_url: str) -> Iterator[tuple[Cluster, Store, Proxy]]:
    target = urlsplit(pg_url)
    proxy = Proxy((target.hostname or "127.0.0.1", target.port or 5432))
    cluster = Cluster(tmp_path, pg_url, f"file://{tmp_path}/objects")
    store = open_store(pg_url)
    try:
        yield cluster, store, proxy
    finally:
        cluster.stop_all()
        proxy.close()
        store.close()


def mounts_cli(data: str, db: str, *args: str) -> object:
    """``tenure mounts ...`` on a pod's data folder (the pod may still run: the mount store is shared safely)."""
    result = subprocess.run(
        [sys.executable, "-m", "tenure.cli.main", "--data", data, "--db", db, "--json", "mounts", *args],
        env=dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("heal", ["while-running", "then-restart"])
def test_a_pod_cut_from_postgresql_past_its_ttl_classifies_stale_publishes_nothing_and_keeps_its_delta(
    partition: tuple[Cluster, Store, Proxy], heal: str, tmp_path: Path
) -> None:
    cluster, store, proxy = partition
    direct = cluster.db
    cluster.db = proxy.url(direct)
    a = cluster.start("a", pull=False)
    cluster.db = direct
    create(a, "p")
    with a.client() as c:
        assert c.post(f"/api/v1/projects/{T}/p/bring").status_code == 200
        assert c.put(f"/api/v1/projects/{T}/p/files/base.txt", content=b"checkpointed by a").status_code == 201
        assert c.post(f"/api/v1/projects/{T}/p/checkpoint").status_code == 200
        assert c.put(f"/api/v1/projects/{T}/p/files/draft.txt", content=b"only on a").status_code == 201
    a_id = a.pod_id()
    before = ProjectStore(store).get(T, "p")
    [published_by_a] = snapshots_of(store, "p")

    proxy.cut()
    b = cluster.start("b")  # pulls every 0.2 s
    wait_for(lambda: owner_of(store, T, "p")[0] not in (a_id, None), 30, "b takes p over once a's lease ran out")
    with b.client() as c:
        wait_for(lambda: c.get(f"/api/v1/projects/{T}/p").json().get("running_here"), 20, "p running on b")
        assert c.get(f"/api/v1/projects/{T}/p/files/base.txt").content == b"checkpointed by a"
        assert c.get(f"/api/v1/projects/{T}/p/files/draft.txt").status_code == 404, "never published"
        assert c.put(f"/api/v1/projects/{T}/p/files/b.txt", content=b"b's work").status_code == 201
        assert c.post(f"/api/v1/projects/{T}/p/checkpoint").status_code == 200
    taken = ProjectStore(store).get(T, "p")
    assert taken.generation > before.generation
    with a.client() as c:  # cut off, a cannot publish: its checkpoint fails and leaves nothing behind
        assert c.post(f"/api/v1/projects/{T}/p/checkpoint").status_code >= 500

    if heal == "then-restart":
        a.proc.kill()
        assert a.proc.wait(30) == -signal.SIGKILL
        proxy.heal()
        cluster.db = proxy.url(direct)
        a = cluster.start("a", pull=False)
        cluster.db = direct
    else:
        proxy.heal()
    wait_for(lambda: reconciled(a).get("stale-generation") == 1.0, 30, "a classifies its mount stale")

    [record] = [m for m in mounts(a) if m.workspace_id == before.workspace_id]
    assert (record.state.value, record.verdict) == ("CLOSED", "preserved-delta")
    assert record.generation == before.generation < taken.generation
    assert record.forced_reason is not None and "stale generation" in record.forced_reason
    recovered = tmp_path / "recovered"
    mounts_cli(a.data, direct, "recover", record.id, "--to", str(recovered))
    assert (recovered / "draft.txt").read_bytes() == b"only on a", "the uncommitted delta is recoverable"

    final = ProjectStore(store).get(T, "p")
    assert final.generation == taken.generation, "a raised nothing"
    assert owner_of(store, T, "p")[0] != a_id
    ours = [s for s in snapshots_of(store, "p") if s.generation == before.generation]
    assert [s.id for s in ours] == [published_by_a.id], "nothing published by a after the cut"
    assert head_files(cluster, store, "p") == {"base.txt": b"checkpointed by a", "b.txt": b"b's work"}
    with a.client() as c:  # a sends clients to the owner, or asks them to wait; it serves nothing of p itself
        assert c.get(f"/api/v1/projects/{T}/p/files/b.txt").status_code in (307, 503)
