"""Acknowledged means saved, with real `tenure serve` processes on PostgreSQL (ADR 0042, ADR 0044): durable
writes survive kill -9 of their owner byte for byte, a checkpoint under the old lineage after a takeover is
412 (and succeeds after a drain's hand-over), and autosave saves a plain write before a kill -9."""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from tenure.projects.store import ProjectStore
from tenure.store import Store
from tests.support.pods import TTL, Cluster, Pod, create, owner_of, wait_for

PROJECTS = 10
WRITES_PER_PROJECT = 20
#: after this many acknowledged durable writes, the pod holding the most projects is killed (-9)
KILL_AT = (40, 100, 160)


class _Pods:
    """The live pods, replaced as they are killed and started (shared by the writers and the killer)."""

    def __init__(self, cluster: Cluster, first: list[Pod]) -> None:
        self.cluster, self.live, self.lock, self.started = cluster, list(first), threading.Lock(), len(first)

    def urls(self) -> list[str]:
        with self.lock:
            return [p.url for p in self.live]

    def kill_busiest(self, store: Store) -> None:
        with self.lock:
            ids = {p.url: p.pod_id() for p in self.live}
        held = {url: 0 for url in ids}
        for project in ProjectStore(store).list():
            owner, live = owner_of(store, project.tenant, project.name)
            for url, pod_id in ids.items():
                if live and owner == pod_id:
                    held[url] += 1
        victim_url = max(held, key=lambda u: held[u])
        with self.lock:
            victim = next(p for p in self.live if p.url == victim_url)
            self.live.remove(victim)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        fresh = self.cluster.start(f"pod{self.started}")
        self.started += 1
        with self.lock:
            self.live.append(fresh)


def _answered(call: Any) -> httpx.Response | None:
    """``call()``'s answer once it is not a 503 (a takeover pending) and no dead pod was asked; else None."""
    try:
        r = call()
    except httpx.HTTPError:
        return None  # redirected to a pod that is dead: ask again
    return None if r.status_code == 503 else r


def _durable_put(pods: _Pods, path: str, data: bytes, deadline: float) -> dict[str, Any] | None:
    """PUT ``data`` durably, retrying on any pod until acknowledged (2xx) or ``deadline``; the answer."""
    while time.monotonic() < deadline:
        for url in pods.urls():
            try:
                with httpx.Client(base_url=url, timeout=10.0, follow_redirects=True) as c:
                    r = c.put(path, params={"durable": "true"}, content=data)
            except httpx.HTTPError:
                continue
            if r.status_code in (200, 201):
                body = r.json()
                assert body["durable"] is True and body["snapshot"], body
                return dict(body)
            if r.status_code >= 500 and r.status_code != 503:
                raise AssertionError(f"{path}: {r.status_code} {r.text}")
        time.sleep(0.05)  # every pod refused for now (503 while a takeover is pending): ask again
    return None


@pytest.mark.postgres
def test_every_acknowledged_durable_write_survives_kill_9_of_its_owner_byte_for_byte(
    pg_cluster: tuple[Cluster, Store],
) -> None:
    cluster, store = pg_cluster
    a, b = cluster.start("a"), cluster.start("b")
    names = [f"p{i}" for i in range(PROJECTS)]
    for name in names:
        create(a, name)  # PERMANENT: placed and brought by the pods themselves
    wait_for(lambda: all(owner_of(store, "acme", n)[1] for n in names), 60, "every project placed")
    pods = _Pods(cluster, [a, b])
    acked: dict[tuple[str, str], bytes] = {}
    lock = threading.Lock()
    failures: list[str] = []
    deadline = time.monotonic() + 150.0
    rng = random.Random(20261202)
    payloads = {(n, i): rng.randbytes(rng.randrange(1, 8192)) for n in names for i in range(WRITES_PER_PROJECT)}

    def writer(name: str) -> None:
        try:
            for i in range(WRITES_PER_PROJECT):
                path = f"/api/v1/projects/acme/{name}/files/w/{i}.bin"
                if _durable_put(pods, path, payloads[(name, i)], deadline) is not None:
                    with lock:
                        acked[(name, f"w/{i}.bin")] = payloads[(name, i)]
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            failures.append(f"{name}: {exc}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for target in KILL_AT:
        wait_for(lambda t=target: len(acked) >= t or not any(th.is_alive() for th in threads), 120, f"{target} acks")
        pods.kill_busiest(store)
    for t in threads:
        t.join(160)
    assert not failures, failures
    assert len(acked) == PROJECTS * WRITES_PER_PROJECT, f"only {len(acked)} writes were acknowledged"
    wait_for(lambda: all(owner_of(store, "acme", n)[1] for n in names), 60, "every project owned again")
    missing = []
    for (name, path), data in sorted(acked.items()):
        with httpx.Client(base_url=pods.urls()[0], timeout=10.0, follow_redirects=True) as c:
            url = f"/api/v1/projects/acme/{name}/files/{path}"
            got = wait_for(lambda u=url: _answered(lambda: c.get(u)))
        if got.status_code != 200 or got.content != data:
            missing.append(f"{name}/{path}: {got.status_code}, {len(got.content)} bytes of {len(data)}")
    assert not missing, f"{len(missing)} acknowledged durable writes lost: {missing[:10]}"


@pytest.mark.postgres
def test_after_kill_9_a_checkpoint_under_the_old_lineage_is_412_and_after_a_drain_it_is_200(
    pg_cluster: tuple[Cluster, Store],
) -> None:
    cluster, store = pg_cluster
    a = cluster.start("a", pull=False)
    create(a, "p")
    with a.client() as c:
        brought = c.post("/api/v1/projects/acme/p/bring")
        lineage = brought.headers["Tenure-Lineage"]
        assert c.put("/api/v1/projects/acme/p/files/plain.txt", content=b"unsaved").status_code == 201
    b = cluster.start("b")
    a.proc.kill()
    a.proc.wait(10)
    with httpx.Client(base_url=b.url, timeout=10.0, follow_redirects=True) as c:
        old = {"Tenure-If-Lineage": lineage}
        refused = wait_for(lambda: _answered(lambda: c.post("/api/v1/projects/acme/p/checkpoint", headers=old)), 30)
        assert refused.status_code == 412 and refused.json()["code"] == "lineage-changed", refused.text
        new = c.get("/api/v1/projects/acme/p").headers["Tenure-Lineage"]
        assert new != lineage
        assert c.put("/api/v1/projects/acme/p/files/handed.txt", content=b"kept").status_code == 201
    d = cluster.start("d")
    b.proc.send_signal(signal.SIGTERM)  # a drain: final checkpoint, then the lease handed over
    b.proc.wait(30)
    with httpx.Client(base_url=d.url, timeout=10.0, follow_redirects=True) as c:
        held = {"Tenure-If-Lineage": new}
        done = wait_for(lambda: _answered(lambda: c.post("/api/v1/projects/acme/p/checkpoint", headers=held)), 30)
        assert done.status_code == 200, done.text
        assert c.get("/api/v1/projects/acme/p/files/handed.txt").content == b"kept"


@pytest.mark.postgres
def test_autosave_saves_a_plain_write_before_a_kill_9(pg_cluster: tuple[Cluster, Store]) -> None:
    cluster, store = pg_cluster
    a = cluster.start("a", "--autosave", "0.3", pull=False)
    create(a, "p")
    with a.client() as c:
        assert c.post("/api/v1/projects/acme/p/bring").status_code == 200
        assert c.post("/api/v1/projects/acme/p/checkpoint").status_code == 200  # the journal starts here
        written = c.put("/api/v1/projects/acme/p/files/plain.txt", content=b"autosaved")
        assert written.status_code == 201 and written.json()["durable"] is False

        def autosaved() -> bool:
            snaps = c.get("/api/v1/projects/acme/p/snapshots").json()["snapshots"]
            return any(s["reason"] == "autosave" and s["state"] == "READY" for s in snaps)

        wait_for(autosaved, 20, "an autosave after the write")
    b = cluster.start("b")
    a.proc.kill()
    a.proc.wait(10)
    with httpx.Client(base_url=b.url, timeout=10.0, follow_redirects=True) as c:
        got = wait_for(lambda: _answered(lambda: c.get("/api/v1/projects/acme/p/files/plain.txt")), 30)
        assert got.content == b"autosaved"


@pytest.mark.postgres
def test_an_auto_project_with_a_bound_session_runs_elsewhere_within_ttl_plus_3_s_of_kill_9(
    pg_cluster: tuple[Cluster, Store],
) -> None:
    """ADR 0046: a session is demand, so an AUTO project (the default type) comes back on its own."""
    cluster, store = pg_cluster
    a = cluster.start("a", pull=False)
    create(a, "web", "AUTO")
    with a.client() as c:
        session = c.post("/api/v1/projects/acme/web/sessions").json()["id"]
        assert c.post("/api/v1/projects/acme/web/bring").status_code == 200
        bound = c.post(f"/api/v1/sessions/{session}/bind", json={"connection_id": "conn-1"})
        assert bound.status_code == 200, bound.text
    b = cluster.start("b")  # pulls every 0.2 s
    a_id = a.pod_id()
    killed = time.monotonic()
    a.proc.kill()
    a.proc.wait(10)

    def running_on_b() -> bool:
        owner, live = owner_of(store, "acme", "web")
        return live and owner not in (a_id, None) and ProjectStore(store).get("acme", "web").status.value == "RUNNING"

    wait_for(running_on_b, TTL + 3.0, "the AUTO project RUNNING on b")
    elapsed = time.monotonic() - killed
    assert elapsed <= TTL + 3.0, f"{elapsed:.1f} s"
    assert b.pod_id() == owner_of(store, "acme", "web")[0]
