"""A truthful pods table: a STOPPED pod carries no load, a pod that stopped beating (kill -9) shows dead, and
the rows of stopped and dead pods that hold nothing go — by ``tenure pods prune`` (and
``POST /api/v1/pods/prune``), and by a live pod's beat an hour after they stopped.

Pods run in this process on SQLite and PostgreSQL: a "dead" pod is one that stops beating, as after kill -9
(its row keeps saying RUNNING).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.cli.main import root
from tenure.pod import runtime as runtime_module
from tenure.pod.runtime import PodRuntime
from tenure.projects import LifecycleType, ProjectStore
from tenure.projects.ownership import Ownership
from tenure.projects.pods import PodHealth, PodIdentity, PodRegistry
from tenure.states import PodState
from tenure.store import Store
from tests.support.runtime import pod_maker, stop_all
from tests.support.store import wait_past

T = "acme"
#: the pods' lease TTL; their liveness TTL is half of it
TTL = 2.0
LIVENESS = TTL / 2


@pytest.fixture
def make(store: Store, tmp_path: Path) -> Iterator[Callable[..., PodRuntime]]:
    made: list[PodRuntime] = []
    build = pod_maker(store, tmp_path, made, ttl=TTL)
    yield lambda name, **options: build(name, **{"master": False, **options})  # nothing placed behind the test
    stop_all(made)


def beating(pod: PodRuntime) -> PodRuntime:
    """Started, with its beat thread (a live pod)."""
    pod.start()
    pod.run_beats()
    return pod


def tenure(store: Store, tmp_path: Path, *args: str) -> Any:
    """The CLI in-process (``--json``) on the store and the pods' object folder, from a data folder of its own;
    the parsed document."""
    flags = ["--data", str(tmp_path / "cli"), "--db", store.url, "--objects", f"file://{tmp_path}/objects"]
    result = CliRunner().invoke(root, [*flags, "--json", *args], obj={})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def by_id(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["id"]: doc for doc in docs}


def hold(store: Store, pod_id: str, name: str) -> None:
    """Pod ``pod_id`` claims a new project ``name`` (and keeps it: a pod that holds a project)."""
    ProjectStore(store).create(T, name, lifecycle_type=LifecycleType.PERMANENT)
    assert Ownership(store).claim(T, name, pod_id, "n", None, 3600.0) is not None


def registered(store: Store, status: PodState = PodState.RUNNING) -> str:
    """A pod row that never beats (a short-lived pod, or one killed at once), moved to ``status``."""
    identity = PodIdentity.fresh("n")
    pods = PodRegistry(store)
    pods.register(identity)
    if status is not PodState.RUNNING:
        pods.transition(identity.pod_id, PodState.RUNNING, status)
    return identity.pod_id


def test_a_stopped_pod_carries_no_load(store: Store, tmp_path: Path, make: Callable[..., PodRuntime]) -> None:
    observer = beating(make("observer", beat_interval=0.1))
    pod = make("a")
    pod.start()
    for i in range(2):
        ProjectStore(store).create(T, f"p{i}", lifecycle_type=LifecycleType.PERMANENT)
        pod.bring(T, f"p{i}")
    pod.beat()  # reports its load
    row = PodRegistry(store).get(pod.pod_id)
    assert (row.score, row.running) == (2.0, 2)
    pod.stop()
    row = PodRegistry(store).get(pod.pod_id)
    assert row.status == PodState.STOPPED.value and (row.score, row.running) == (0.0, 0), "cleared when stopping"
    with TestClient(create_app(observer)) as client:
        shown = by_id(client.get("/api/v1/pods").json()["pods"])[pod.pod_id]
        one = client.get(f"/api/v1/pods/{pod.pod_id}").json()
    for doc in (shown, one, by_id(tenure(store, tmp_path, "pods"))[pod.pod_id]):
        assert (doc["status"], doc["health"], doc["live"]) == ("STOPPED", "stopped", False)
        assert (doc["score"], doc["running"]) == (0.0, 0)
    assert list(shown).index("health") == list(shown).index("status") + 1, "health is shown next to status"


def test_a_row_stopped_with_a_load_reads_no_load(store: Store, tmp_path: Path) -> None:
    """A row some older tenure stopped without clearing its load: the listings read 0 all the same."""
    pods = PodRegistry(store)
    identity = PodIdentity.fresh("n")
    pods.register(identity)
    assert pods.heartbeat(identity.pod_id, score=5.0, running=3)
    with store.db.transaction() as tx:  # the transition as it was: status only
        tx.count("pod_transition", {"id": identity.pod_id, "e": "RUNNING", "t": "STOPPED"})
    assert pods.get(identity.pod_id).score == 5.0
    (view,) = [v for v in pods.list_with_health(15.0) if v.pod.id == identity.pod_id]
    assert view.health is PodHealth.STOPPED and (view.pod.score, view.pod.running) == (0.0, 0)
    (listed,) = [p for p, _ in pods.list_with_liveness(15.0) if p.id == identity.pod_id]
    assert (listed.score, listed.running) == (0.0, 0)
    doc = by_id(tenure(store, tmp_path, "pods"))[identity.pod_id]
    assert (doc["health"], doc["score"], doc["running"]) == ("stopped", 0.0, 0)


def test_a_pod_whose_lease_ran_out_shows_dead(store: Store, tmp_path: Path, make: Callable[..., PodRuntime]) -> None:
    """kill -9: the row keeps saying RUNNING, but once the liveness TTL has passed the pod reads dead."""
    observer = beating(make("observer", beat_interval=0.1))
    killed = make("killed")
    killed.start()  # RUNNING, and it never beats: as if killed with -9 right after its start
    with TestClient(create_app(observer)) as client:
        first = by_id(client.get("/api/v1/pods").json()["pods"])[killed.pod_id]
        assert (first["status"], first["health"], first["live"]) == ("RUNNING", "live", True)
        wait_past(store, LIVENESS)
        docs = by_id(client.get("/api/v1/pods").json()["pods"])
        one = client.get(f"/api/v1/pods/{killed.pod_id}").json()
    for doc in (docs[killed.pod_id], one):
        assert (doc["status"], doc["health"], doc["live"]) == ("RUNNING", "dead", False)
    assert (docs[observer.pod_id]["health"], docs[observer.pod_id]["live"]) == ("live", True)
    cli = by_id(tenure(store, tmp_path, "pods", "--liveness-ttl", str(LIVENESS)))
    assert cli[killed.pod_id]["health"] == "dead" and cli[observer.pod_id]["health"] == "live"
    human = CliRunner().invoke(
        root, ["--data", str(tmp_path / "cli"), "--db", store.url, "pods", "--liveness-ttl", str(LIVENESS)], obj={}
    )
    assert human.exit_code == 0 and "health" in human.stdout and "dead" in human.stdout, human.output


def test_a_starting_pod_that_beats_is_live_not_dead(store: Store) -> None:
    """``live`` stays what routing uses (RUNNING or DRAINING and heard from); health says the pod is alive."""
    pods = PodRegistry(store)
    identity = PodIdentity.fresh("n")
    pods.register(identity, status=PodState.STARTING)
    (view,) = [v for v in pods.list_with_health(15.0) if v.pod.id == identity.pod_id]
    assert view.health is PodHealth.LIVE and view.live is False


def test_prune_removes_exactly_the_stopped_and_dead_pods_that_hold_nothing(
    store: Store, tmp_path: Path, make: Callable[..., PodRuntime]
) -> None:
    live = beating(make("live", beat_interval=0.1))
    live_holding = beating(make("live-holding", beat_interval=0.1))
    hold(store, live_holding.pod_id, "held-by-live")
    stopped = registered(store, PodState.STOPPED)
    stopped_holding = registered(store)
    hold(store, stopped_holding, "held-by-stopped")  # stopped without releasing: its lease is found through its row
    PodRegistry(store).transition(stopped_holding, PodState.RUNNING, PodState.STOPPED)
    dead = registered(store)  # RUNNING, never beats
    dead_holding = registered(store)
    hold(store, dead_holding, "held-by-dead")
    draining_dead = registered(store, PodState.DRAINING)
    wait_past(store, LIVENESS)
    before = {p["id"] for p in tenure(store, tmp_path, "pods")}

    # the default: only pods last heard from more than an hour ago; these are seconds old
    assert tenure(store, tmp_path, "pods", "--liveness-ttl", str(LIVENESS), "prune") == {
        "pruned": [],
        "older_than": 3600.0,
    }
    done = tenure(store, tmp_path, "pods", "--liveness-ttl", str(LIVENESS), "prune", "--older-than", "0s")
    assert done["older_than"] == 0.0
    assert set(done["pruned"]) == {stopped, dead, draining_dead}
    after = {p["id"] for p in tenure(store, tmp_path, "pods")}
    assert after == before - {stopped, dead, draining_dead}
    assert {live.pod_id, live_holding.pod_id, stopped_holding, dead_holding} <= after
    assert live.ready and Ownership(store).holds(
        ProjectStore(store).get(T, "held-by-live").id, live_holding.pod_id, TTL
    )
    # the CLI's own short-lived pods: a command that acts on a project leaves a STOPPED row, which prune removes
    ProjectStore(store).create(T, "cli-made")
    shown = tenure(store, tmp_path, "project", "suspend", f"{T}/cli-made")
    assert shown["status"] == "SUSPENDED"
    cli_pods = {p["id"] for p in tenure(store, tmp_path, "pods")} - after
    assert cli_pods and all(p["health"] == "stopped" for p in tenure(store, tmp_path, "pods") if p["id"] in cli_pods)
    again = tenure(store, tmp_path, "pods", "--liveness-ttl", str(LIVENESS), "prune", "--older-than", "0")
    assert set(again["pruned"]) == cli_pods


def test_prune_over_the_api(store: Store, make: Callable[..., PodRuntime]) -> None:
    live = beating(make("live", beat_interval=0.1))
    stopped = registered(store, PodState.STOPPED)
    dead = registered(store)
    with TestClient(create_app(live)) as client:
        kept = client.post("/api/v1/pods/prune")
        assert kept.status_code == 200 and kept.json() == {"pruned": [], "older_than": 3600.0}
        wait_past(store, live.config.liveness_ttl)
        done = client.post("/api/v1/pods/prune", params={"older_than": 0})
        assert done.status_code == 200 and set(done.json()["pruned"]) == {stopped, dead}
        assert client.post("/api/v1/pods/prune", params={"older_than": -1}).status_code == 422
        assert {p["id"] for p in client.get("/api/v1/pods").json()["pods"]} == {live.pod_id}


def test_a_live_pods_beat_reaps_stopped_pods_that_hold_nothing_an_hour_after_they_stopped(
    store: Store, make: Callable[..., PodRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    live = make("live")
    live.start()
    stopped = registered(store, PodState.STOPPED)
    stopped_holding = registered(store)
    hold(store, stopped_holding, "held")
    PodRegistry(store).transition(stopped_holding, PodState.RUNNING, PodState.STOPPED)
    dead = registered(store)  # silent, not for a day yet: the day's retention is its own
    wait_past(store, 0.5)
    live.beat()  # the default retention: an hour after the stop
    ids = {p.id for p, _ in PodRegistry(store).list()}
    assert {stopped, stopped_holding, dead, live.pod_id} <= ids
    monkeypatch.setattr(runtime_module, "REAP_STOPPED_AFTER_S", 0.5)
    live.beat()
    ids = {p.id for p, _ in PodRegistry(store).list()}
    assert stopped not in ids, "STOPPED and holding nothing, stopped longer ago than the retention"
    assert {stopped_holding, dead, live.pod_id} <= ids


def test_reap_pods_with_a_stopped_age_spares_live_and_holding_pods(store: Store) -> None:
    own = Ownership(store)
    stopped = registered(store, PodState.STOPPED)
    running = registered(store)
    wait_past(store, 0.3)
    assert own.reap_pods(3600.0) == 0, "without stopped_age: only pods silent for the age"
    assert own.reap_pods(3600.0, stopped_age=0.2) == 1
    ids = {p.id for p, _ in PodRegistry(store).list()}
    assert stopped not in ids and running in ids


def test_the_api_never_prunes_the_pod_answering(store: Store, make: Callable[..., PodRuntime]) -> None:
    """Even a pod whose own beats stalled (silent past its liveness TTL, holding nothing) keeps its row."""
    answering = make("answering")
    answering.start()  # never beats
    dead = registered(store)
    wait_past(store, answering.config.liveness_ttl)
    with TestClient(create_app(answering)) as client:
        done = client.post("/api/v1/pods/prune", params={"older_than": 0})
    assert done.status_code == 200 and done.json()["pruned"] == [dead]
    assert PodRegistry(store).get(answering.pod_id).status == PodState.RUNNING.value
