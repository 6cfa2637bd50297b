"""Demand (ADR 0046, P-28, P-79, P-116, P-117): what makes a project need an owner, so that an AUTO project in
demand comes back on its own after its owner dies and one with none does not; sessions, explicit demand with
an expiry, request-made demand, an engine's handle, and EPHEMERAL projects suspended once not in use.

Pods run in this process on SQLite and PostgreSQL with sub-second lease TTLs; a "dead" pod is one that stops
beating (its lease runs out by the store clock), as after kill -9.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import ProjectStore
from tenure.projects.demand import DemandHandle
from tenure.projects.ownership import Ownership
from tenure.projects.records import LifecycleType
from tenure.states import ProjectStatus
from tenure.store import Store
from tests.support.pods import wait_for
from tests.support.runtime import pod_maker, stop_all

T = "acme"
TTL = 0.6


@pytest.fixture
def make(store: Store, tmp_path: Path) -> Iterator[Callable[..., PodRuntime]]:
    made: list[PodRuntime] = []
    yield pod_maker(store, tmp_path, made, ttl=TTL, start=True)
    stop_all(made)


def _dead(store: Store, project_id: str) -> bool:
    return not Ownership(store).owner(project_id, TTL).live


def test_an_auto_project_with_a_session_comes_back_after_its_owner_dies_and_one_without_demand_does_not(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a, b = make("a"), make("b")
    projects = ProjectStore(store)
    wanted, idle = projects.create(T, "wanted"), projects.create(T, "idle")  # both AUTO, the default
    assert wanted.lifecycle_type is LifecycleType.AUTO
    with TestClient(create_app(a)) as c:
        session = c.post(f"/api/v1/projects/{T}/wanted/sessions")
        assert session.status_code == 201
        assert c.get(f"/api/v1/projects/{T}/wanted").json()["owner_required"] is True
        assert c.get(f"/api/v1/projects/{T}/idle").json()["owner_required"] is False
    a.bring(T, "wanted")
    a.bring(T, "idle")
    assert projects.demand(idle) == [], "a bring is no demand of its own"
    wait_for(lambda: _dead(store, wanted.id) and _dead(store, idle.id), what="a's leases to run out")
    brought = {p.name for p in b.pull()}
    assert brought == {"wanted"}, "only the project in demand comes back on its own"
    assert projects.get(T, "wanted").status is ProjectStatus.RUNNING
    assert Ownership(store).owner(wanted.id, TTL).pod_id == b.pod_id


def test_deleting_the_last_session_ends_the_demand_and_suspends_an_ephemeral_project(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = make("a")
    ProjectStore(store).create(T, "eph", lifecycle_type=LifecycleType.EPHEMERAL)
    with TestClient(create_app(a)) as c:
        p = f"/api/v1/projects/{T}/eph"
        first = c.post(p + "/sessions").json()["id"]
        second = c.post(p + "/sessions").json()["id"]
        assert c.post(p + "/bring").status_code == 200
        deleted = c.delete(f"/api/v1/sessions/{first}")
        assert deleted.status_code == 200 and deleted.json()["owner_required"] is True
        a.beat()
        assert ProjectStore(store).get(T, "eph").status is ProjectStatus.RUNNING, "one session is left"
        assert c.delete(f"/api/v1/sessions/{second}").json()["owner_required"] is False
        assert c.delete(f"/api/v1/sessions/{second}").status_code == 404
        a.beat()
        assert ProjectStore(store).get(T, "eph").status is ProjectStatus.SUSPENDED
        assert "eph" not in {ProjectStore(store).by_id(pid).name for pid in a.registry.ids()}


def test_explicit_demand_with_an_expiry_ends_by_itself_and_can_be_removed(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = make("a")
    ProjectStore(store).create(T, "web")
    p = f"/api/v1/projects/{T}/web/demand"
    with TestClient(create_app(a)) as c:
        for bad in ({"source": "request"}, {"source": "session:x"}, {"source": "a b"}):
            refused = c.post(p, json=bad)
            assert refused.status_code == 400 and refused.json()["code"] == "invalid-demand", bad
        assert c.post(p, json={"expires_in": 0}).status_code == 422
        added = c.post(p, json={"source": "cron", "expires_in": 0.3}).json()
        assert added["owner_required"] is True and [d["source"] for d in added["sources"]] == ["cron"]
        assert added["sources"][0]["expires_at"] is not None
        kept = c.post(p, json={"source": "queue"}).json()
        assert {d["source"] for d in kept["sources"]} == {"cron", "queue"}
        wait_for(lambda: ProjectStore(store).expire_demand(3600.0) > 0, what="the cron demand to end")
        assert [d["source"] for d in c.get(p).json()["sources"]] == ["queue"]
        assert c.get(p).json()["owner_required"] is True
        gone = c.delete(p, params={"source": "queue"}).json()
        assert gone["owner_required"] is False and gone["sources"] == []


def test_an_idle_unbound_session_expires_with_its_demand(store: Store, make: Callable[..., PodRuntime]) -> None:
    make("a")
    projects = ProjectStore(store)
    project = projects.create(T, "web")
    projects.create_session(project)
    assert projects.get(T, "web").owner_required is True
    wait_for(lambda: projects.expire_demand(0.2) > 0, what="the session to be idle for its TTL")
    assert projects.sessions(project) == [] and projects.get(T, "web").owner_required is False


def test_a_write_keeps_an_auto_project_in_demand_without_a_transaction_per_request(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    a = make("a")
    projects = ProjectStore(store)
    project = projects.create(T, "web")
    with TestClient(create_app(a)) as c:
        assert c.put(f"/api/v1/projects/{T}/web/files/a.txt", content=b"a").status_code == 201
        (first,) = projects.demand(project)
        assert first["source"] == "request" and first["expires_at"] is not None
        assert projects.get(T, "web").owner_required is True
        assert c.put(f"/api/v1/projects/{T}/web/files/b.txt", content=b"b").status_code == 201
        assert c.post(f"/api/v1/projects/{T}/web/checkpoint").status_code == 200
        (again,) = projects.demand(project)
        assert again["expires_at"] == first["expires_at"], "the record is not written again while far from its end"


def test_an_engine_keeps_a_project_in_demand_through_its_handle(store: Store, tmp_path: Path) -> None:
    handles: list[DemandHandle] = []

    class Scheduler:
        def attach(self, demand: DemandHandle) -> None:
            handles.append(demand)

        def start(self, event: Any, folder: str) -> None: ...

        def stop(self, event: Any, folder: str) -> None: ...

    config = ServeConfig(data_dir=str(tmp_path / "a"), self_pull=False)
    PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")), engines=[Scheduler()])
    assert len(handles) == 1
    projects = ProjectStore(store)
    projects.create(T, "batch")
    handles[0].need(T, "batch", "nightly-job")
    assert projects.get(T, "batch").owner_required is True
    handles[0].done(T, "batch", "nightly-job")
    assert projects.get(T, "batch").owner_required is False


def test_pending_placement_has_its_own_name(store: Store, make: Callable[..., PodRuntime]) -> None:
    a = make("a")
    with TestClient(create_app(a)) as c:
        pending, old = c.get("/api/v1/cluster/pending"), c.get("/api/v1/cluster/demand")
        assert pending.status_code == 200 and pending.json() == old.json()
