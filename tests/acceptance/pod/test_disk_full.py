"""A pod whose data folder is full: ``disk-full`` answers (HTTP 507), not ready, no new claims (ADR 0051).

Real ``tenure serve`` processes on SQLite and PostgreSQL. Pod A's data folder is a real 8 MiB tmpfs, mounted
in a private mount namespace (``unshare``; skipped where user namespaces are not allowed); its store and the
object folder are outside it. A file write fills the folder; the next write meets a real ENOSPC. Before, that
write answered ``500 internal``, the pod stayed ready and kept claiming projects it could not restore.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tenure.projects.pods import PodRegistry
from tenure.store import Store, open_store
from tests.support.cli import private_mount_namespace
from tests.support.pods import Cluster, Pod, owner_of, wait_for

T = "acme"
MIB = 1 << 20


def _namespace_with_tmpfs(folder: Path, size: str) -> tuple[str, ...]:
    """A command prefix: a private mount namespace with a tmpfs of ``size`` at ``folder``, then the command."""
    script = 'mkdir -p "$0" && mount -t tmpfs -o size=' + size + ' tmpfs "$0" && exec "$@"'
    return (*private_mount_namespace(), "sh", "-c", script, str(folder))


@pytest.fixture
def fleet(tmp_path: Path, store_url: str) -> Iterator[tuple[Cluster, Store]]:
    cluster = Cluster(tmp_path, store_url, f"file://{tmp_path}/objects")
    store = open_store(store_url)
    try:
        yield cluster, store
    finally:
        cluster.stop_all()
        store.close()


def _ready(pod: Pod) -> httpx.Response:
    return httpx.get(pod.url + "/readyz", timeout=5.0)


def _project(c: httpx.Client, name: str, lifecycle_type: str) -> None:
    r = c.post("/api/v1/projects", json={"tenant": T, "name": name, "lifecycle_type": lifecycle_type})
    assert r.status_code == 201, r.text


def test_a_full_data_folder_answers_507_is_not_ready_and_claims_nothing_new(
    tmp_path: Path, fleet: tuple[Cluster, Store]
) -> None:
    cluster, store = fleet
    a = cluster.start(
        "a",
        "--no-self-pull",
        "--min-free-space",
        "4",
        "--tick",
        "0.3",
        prefix=_namespace_with_tmpfs(tmp_path / "a", "8m"),
    )
    files = f"/api/v1/projects/{T}/p1/files"
    with a.client() as c:
        _project(c, "p1", "AUTO")
        assert c.post(f"/api/v1/projects/{T}/p1/bring").status_code == 200
        assert c.put(files + "/big1", content=b"x" * (5 * MIB)).status_code in (200, 201)
        wait_for(lambda: _ready(a).status_code == 503, 10, "not ready once under the free-space floor")
        body = _ready(a).json()
        assert body["status"] == "RUNNING" and body["refusing"].startswith("disk-full:"), body

        r = c.put(files + "/big2", content=b"y" * (4 * MIB))  # more than is left: a real ENOSPC
        assert r.status_code == 507, r.text
        problem = r.json()
        assert problem["code"] == "disk-full" and problem["retryable"] is True, problem
        assert c.get(files + "/big2").status_code == 404  # nothing half-written is left
        assert len(c.get(files + "/big1").content) == 5 * MIB  # what was there is as it was

        _project(c, "p2", "AUTO")
        r = c.post(f"/api/v1/projects/{T}/p2/bring")  # not ready: later (another pod may take it), not here
        assert r.status_code == 503 and "Retry-After" in r.headers, r.text
        assert "data folder is full" in r.json()["detail"], r.text
        assert owner_of(store, T, "p2") == (None, False)  # refused before the claim
        a_id = a.pod_id()
        row = PodRegistry(store).get(a_id)
        assert row.refusing is not None and row.refusing.startswith("disk-full:"), row

        # b is the more utilized pod after its first project (1 of 10 against a's 1 of 100): only a's
        # refusal keeps the next ones off a
        b = cluster.start("b", "--no-master", "--capacity", "10", pull=False)
        placed = [f"q{i}" for i in range(3)]
        for name in placed:
            _project(c, name, "PERMANENT")
        wait_for(lambda: all(owner_of(store, T, n)[1] for n in placed), 30, "the PERMANENT projects placed")
        assert {owner_of(store, T, n)[0] for n in placed} == {b.pod_id()}  # nothing on the full pod, its master's
        # and the master never chose it: no placement was asked of it and refused
        assert "placement refused" not in a.output()

        assert c.delete(files + "/big1").status_code == 204
        wait_for(lambda: _ready(a).status_code == 200, 10, "ready again once there is room")
        assert _ready(a).json()["refusing"] is None
        assert PodRegistry(store).get(a_id).refusing is None
        assert c.post(f"/api/v1/projects/{T}/p2/bring").status_code == 200
