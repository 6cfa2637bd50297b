"""The cluster master with real ``tenure serve`` processes on PostgreSQL (ADR 0023, P-84…P-89): placement by
labels and load across pods, demand for what fits nowhere until a matching pod joins, a new master after the
old one is killed (and the deposed epoch refused), and a pod holding many RUNNING projects killed with every
project RUNNING elsewhere afterwards with its checkpointed files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tenure.cluster.store import ClusterStore
from tenure.projects.ownership import Ownership
from tenure.projects.store import ProjectStore
from tenure.store import Store, open_store
from tests.support.pods import TTL, Cluster, Pod, wait_for

pytestmark = pytest.mark.postgres

T = "acme"
#: the master places; nothing pulls on its own
MASTERED = ("--tick", "0.3")


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[tuple[Cluster, Store]]:
    c = Cluster(tmp_path, pg_url, f"file://{tmp_path}/objects")
    store = open_store(pg_url)
    try:
        yield c, store
    finally:
        c.stop_all()
        store.close()


def create(pod: Pod, name: str, *, score: float = 1.0, selector: dict[str, str] | None = None) -> None:
    """A PERMANENT project with its placement set in the same request (never placed before its selector)."""
    body = {"tenant": T, "name": name, "lifecycle_type": "PERMANENT", "selector": selector or {}, "score": score}
    with pod.client() as c:
        r = c.post("/api/v1/projects", json=body)
        assert r.status_code == 201, r.text


def holders(store: Store) -> dict[str, str | None]:
    ownership = Ownership(store)
    found: dict[str, str | None] = {}
    for project in ProjectStore(store).list():
        owner = ownership.owner(project.id, TTL)
        running = project.status.value == "RUNNING"
        found[project.name] = owner.pod_id if owner.live and running else None
    return found


def placed(store: Store, names: list[str]) -> bool:
    held = holders(store)
    return all(held.get(n) for n in names)


def test_projects_are_placed_by_labels_and_load_and_what_fits_nowhere_waits_as_demand(
    cluster: tuple[Cluster, Store],
) -> None:
    c, store = cluster
    a = c.start("a", "--labels", "zone=a", "--capacity", "40", *MASTERED, pull=False)
    b = c.start("b", "--labels", "zone=a", "--capacity", "40", *MASTERED, pull=False)
    z = c.start("z", "--labels", "zone=b", "--capacity", "40", *MASTERED, pull=False)
    ids = {p.pod_id(): name for name, p in (("a", a), ("b", b), ("z", z))}
    zoned = [f"zb{i}" for i in range(4)]
    for name in zoned:
        create(a, name, selector={"zone": "b"})
    plain = [f"p{i}" for i in range(24)]
    for i, name in enumerate(plain):
        create(a, name, score=1.0 + i % 2)
    create(a, "zc", selector={"zone": "c"})
    wait_for(lambda: placed(store, plain + zoned), 90, "every placeable project RUNNING")
    held = holders(store)
    assert {ids[held[n] or ""] for n in zoned} == {"z"}, "a selector is honoured"
    load = {"a": 0.0, "b": 0.0, "z": 0.0}
    for i, name in enumerate(plain):
        load[ids[held[name] or ""]] += 1.0 + i % 2
    load["z"] += len(zoned)
    assert all(v <= 40 for v in load.values()), load
    assert max(load.values()) - min(load.values()) <= 2.0, f"even within one project's score: {load}"
    assert held["zc"] is None
    with a.client() as client:
        demand = wait_for(lambda: client.get("/api/v1/cluster/demand").json()["pending"], 20, "demand")
        assert [d["name"] for d in demand] == ["zc"]
    c.start("c", "--labels", "zone=c", *MASTERED, pull=False)
    wait_for(lambda: placed(store, ["zc"]), 60, "placed once a matching pod joined")
    with a.client() as client:
        wait_for(lambda: client.get("/api/v1/cluster/demand").json()["count"] == 0, 20, "demand cleared")


def test_kill_9_of_the_master_elects_another_and_the_deposed_epoch_is_refused(
    cluster: tuple[Cluster, Store],
) -> None:
    c, store = cluster
    first = c.start("a", *MASTERED, pull=False)
    second = c.start("b", *MASTERED, pull=False)
    masters = ClusterStore(store)
    old = wait_for(lambda: (m := masters.master()).live and m, 20, "a master")
    victim = first if old.pod_id == first.pod_id() else second
    survivor = second if victim is first else first
    create(survivor, "p")
    killed = time.monotonic()
    victim.proc.kill()
    victim.proc.wait(10)
    new = wait_for(lambda: (m := masters.master()).live and m.pod_id != old.pod_id and m, 30, "a new master")
    took = time.monotonic() - killed
    assert new.epoch > old.epoch
    assert took <= TTL + 3.0, f"a new master {took:.2f} s after kill -9 (master TTL {TTL} s)"
    project = ProjectStore(store).get(T, "p")
    assert not masters.place(old.pod_id or "", old.epoch, project.id, survivor.pod_id()), "refused by the store"
    with survivor.client() as client:
        r = client.post("/api/v1/cluster/place", json={"tenant": T, "name": "p", "epoch": old.epoch})
        assert r.status_code == 409 and r.json()["code"] == "stale-epoch", r.text
        page = {"epoch": old.epoch, "projects": [{"tenant": T, "name": "p"}]}
        r = client.post("/api/v1/cluster/place", json=page)
        assert r.status_code == 202 and r.json()["accepted"] == [], r.text
        assert [(x["project"], x["code"]) for x in r.json()["refused"]] == [(f"{T}/p", "stale-epoch")]
        r = client.post("/api/v1/cluster/place", json={**page, "tenant": T, "name": "p"})
        assert r.status_code == 400 and r.json()["code"] == "invalid-input", r.text
    wait_for(lambda: placed(store, ["p"]), 30, "the new master places p")


def test_kill_9_of_a_pod_holding_many_projects_runs_every_one_elsewhere_with_its_files(
    cluster: tuple[Cluster, Store],
) -> None:
    c, store = cluster
    count = 60
    holder = c.start("h", *MASTERED, pull=False)
    names = [f"p{i:03d}" for i in range(count)]
    for name in names:
        create(holder, name)
    wait_for(lambda: placed(store, names), 120, "every project running on the only pod")
    with holder.client() as client:
        for name in names:
            assert client.put(f"/api/v1/projects/{T}/{name}/files/f.txt", content=name.encode()).status_code == 201
            assert client.post(f"/api/v1/projects/{T}/{name}/checkpoint").status_code == 200
    others = [c.start(n, *MASTERED, pull=False) for n in ("x", "y")]
    h_id = holder.pod_id()
    killed = time.monotonic()
    holder.proc.kill()
    holder.proc.wait(10)
    moved_at: dict[str, float] = {}

    def all_moved() -> bool:
        for name, pod in holders(store).items():
            if pod is not None and pod != h_id and name not in moved_at:
                moved_at[name] = time.monotonic() - killed
        return len(moved_at) == count

    wait_for(all_moved, 180, "every project RUNNING on another pod")
    last = max(moved_at.values())
    print(f"\n{count} projects moved after kill -9: first {min(moved_at.values()):.2f} s, last {last:.2f} s")
    assert min(moved_at.values()) >= TTL - 0.3, "nothing moved before the dead pod's lease ran out"
    for name in names:
        url = f"{others[0].url}/api/v1/projects/{T}/{name}/files/f.txt"
        with httpx.Client(follow_redirects=True, timeout=10) as client:
            assert client.get(url).content == name.encode(), name
