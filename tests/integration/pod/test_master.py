"""The cluster master in process, on a real store (SQLite and PostgreSQL): election by an epoch-fenced lease,
placements the store refuses from a deposed master, the distributor tick (labels, load, capacity, demand),
and the stale-bind sweep (project-lifecycle §6.2, P-51, P-84…P-89, P-127; ADR 0023).

Pods are real :class:`PodRuntime` objects on one store; placement requests travel between them in process
(``Master.transport``) instead of over HTTP, which the process tests cover.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.cluster.placement import PodLoad
from tenure.cluster.store import ClusterStore, StaleEpochError
from tenure.errors import TenureError
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import LifecycleType, ProjectStore
from tenure.projects.ownership import Ownership
from tenure.projects.timeline import Timeline
from tenure.store import Store
from tests.support.pods import wait_for
from tests.support.store import wait_past

T = "acme"


class Pods:
    """Nodes on one store whose masters reach each other in process."""

    def __init__(self, store: Store, tmp_path: Path) -> None:
        self.store, self.tmp = store, tmp_path
        self.nodes: dict[str, PodRuntime] = {}

    def start(self, name: str, **options: Any) -> PodRuntime:
        settings: dict[str, Any] = {
            "self_pull": False,
            "lease_ttl": 60.0,
            "liveness_ttl": 60.0,
            "tick": 3600.0,
            "max_moves": 1000,
        }
        settings.update(options)
        node = PodRuntime(
            ServeConfig(data_dir=str(self.tmp / name), listen="127.0.0.1:1", **settings),
            self.store,
            LocalObjectStore(str(self.tmp / "objects")),
        )
        node.master.transport = self.deliver
        node.start()
        node.pods.heartbeat(node.pod.pod_id)
        self.nodes[node.pod.pod_id] = node
        return node

    def deliver(self, target: PodLoad, tenant: str, name: str, epoch: int) -> bool:
        self.nodes[target.pod_id].accept_placement(tenant, name, epoch)
        return True

    def stop_all(self) -> None:
        for node in self.nodes.values():
            node._stop.set()
            node.master._stop.set()
            try:
                node.stop()
            except TenureError:
                pass


@pytest.fixture
def pods(store: Store, tmp_path: Path) -> Iterator[Pods]:
    made = Pods(store, tmp_path)
    yield made
    made.stop_all()


def create(store: Store, name: str, score: float = 1.0, selector: dict[str, str] | None = None) -> None:
    projects = ProjectStore(store)
    projects.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
    if score != 1.0 or selector:
        projects.set_placement(T, name, selector or {}, score)


def holders(store: Store, ttl: float = 60.0) -> dict[str, str | None]:
    ownership = Ownership(store)
    found = {}
    for project in ProjectStore(store).list():
        owner = ownership.owner(project.id, ttl)
        found[project.name] = owner.pod_id if owner.live else None
    return found


def all_placed(store: Store, names: list[str]) -> bool:
    held = holders(store)
    return all(held.get(n) for n in names)


# ------------------------------------------------------------------------------------------ election


def test_p84_one_pod_holds_the_master_role_and_the_epoch_rises_with_each_new_holder(store: Store, pods: Pods) -> None:
    a = pods.start("a", master_ttl=0.4)
    b = pods.start("b", master_ttl=0.4)
    a.master.beat()
    b.master.beat()
    assert (a.master.is_master, b.master.is_master) == (True, False)
    first = ClusterStore(store).master()
    assert (first.pod_id, first.live) == (a.pod.pod_id, True)
    b.master.beat()
    assert not b.master.is_master, "a live master lease is not taken"
    # a stops renewing (killed): its lease runs out by the store clock, then b takes it
    wait_past(store, 0.5)
    b.master.beat()
    second = ClusterStore(store).master()
    assert (second.pod_id, b.master.is_master) == (b.pod.pod_id, True)
    assert second.epoch > first.epoch
    a.master.beat()
    assert not a.master.is_master, "the former master finds itself deposed at its next beat"


def test_p84_a_master_that_resigns_lets_another_take_the_role_at_once(store: Store, pods: Pods) -> None:
    a = pods.start("a")
    b = pods.start("b")
    a.master.beat()
    a.master.resign()
    b.master.beat()
    assert b.master.is_master and not a.master.is_master


@pytest.mark.parametrize("term", ["all-true", "other-pod", "old-epoch", "lease-run-out"])
def test_a_placement_is_written_only_under_the_live_masters_epoch_each_term_alone(
    store: Store, pods: Pods, term: str
) -> None:
    """The placement statement's predicate: the writer is the master, at its epoch, and its lease is live."""
    create(store, "p")
    a = pods.start("a", master_ttl=0.5)
    a.master.beat()
    epoch = a.master.epoch
    assert epoch is not None
    project = ProjectStore(store).get(T, "p")
    cluster = ClusterStore(store)
    writer, at = a.pod.pod_id, epoch
    if term == "other-pod":
        writer = "not-the-master"
    elif term == "old-epoch":
        at = epoch - 1
    elif term == "lease-run-out":
        wait_past(store, 0.6)
    written = cluster.place(writer, at, project.id, a.pod.pod_id)
    assert written is (term == "all-true")
    assert (cluster.placement(project.id) is not None) is (term == "all-true")


def test_a_page_of_placements_is_written_whole_or_not_at_all(store: Store, pods: Pods) -> None:
    """ADR 0053: one transaction per page. A batch one of whose projects a newer epoch placed writes none of
    them, timeline events included; the same batch under the newest epoch writes all."""
    for name in ("p", "q", "r"):
        create(store, name)
    a = pods.start("a", master_ttl=0.4)
    b = pods.start("b", master_ttl=0.4)
    a.master.beat()
    old = a.master.epoch
    assert old is not None
    ids = [ProjectStore(store).get(T, n).id for n in ("p", "q", "r")]
    cluster = ClusterStore(store)
    wait_past(store, 0.5)
    b.master.beat()
    new = b.master.epoch
    assert new is not None and new > old
    assert cluster.place(b.pod.pod_id, new, ids[1], b.pod.pod_id)  # q, by the newer epoch
    events_before = len(Timeline(store).history(ids[0]))
    assert not cluster.place_many(a.pod.pod_id, old, [(i, a.pod.pod_id) for i in ids]), "the deposed master"
    assert cluster.placement(ids[0]) is None and cluster.placement(ids[2]) is None, "nothing of the batch"
    assert cluster.placement(ids[1]).epoch == new  # type: ignore[union-attr]
    assert len(Timeline(store).history(ids[0])) == events_before, "no placement event either"
    assert cluster.place_many(b.pod.pod_id, new, [(i, b.pod.pod_id) for i in ids])
    assert all(cluster.placement(i).epoch == new for i in ids)  # type: ignore[union-attr]


def test_a_placement_request_of_several_projects_accepts_each_checked_one_and_names_each_refusal(
    store: Store, pods: Pods
) -> None:
    for name in ("p", "q"):
        create(store, name)
    a = pods.start("a")
    a.master.beat()
    epoch = a.master.epoch
    assert epoch is not None
    cluster = ClusterStore(store)
    assert cluster.place(a.pod.pod_id, epoch, ProjectStore(store).get(T, "p").id, a.pod.pod_id)
    answers = a.accept_placements([(T, "p"), (T, "q"), (T, "missing")], epoch)
    assert answers[0] is None, "p is placed on a at this epoch"
    assert isinstance(answers[1], StaleEpochError), "no placement of q in the store"
    assert isinstance(answers[2], TenureError) and answers[2].code == "project-not-found"
    wait_for(lambda: ProjectStore(store).get(T, "p").id in a.registry, 10, "p brought")


def test_a_deposed_masters_placement_is_refused_by_the_store_and_by_the_pod(store: Store, pods: Pods) -> None:
    create(store, "p")
    a = pods.start("a", master_ttl=0.4)
    b = pods.start("b", master_ttl=0.4)
    a.master.beat()
    old = a.master.epoch
    assert old is not None
    wait_past(store, 0.5)
    b.master.beat()
    new = b.master.epoch
    assert new is not None and new > old
    project = ProjectStore(store).get(T, "p")
    assert not ClusterStore(store).place(a.pod.pod_id, old, project.id, b.pod.pod_id), "the store refuses"
    with pytest.raises(StaleEpochError):
        b.accept_placement(T, "p", old)  # nothing in the store names b at the old epoch
    assert ClusterStore(store).place(b.pod.pod_id, new, project.id, b.pod.pod_id)
    b.accept_placement(T, "p", new)
    wait_for(lambda: holders(store)["p"] == b.pod.pod_id, 30, "p brought on b")
    with pytest.raises(StaleEpochError) as refused:
        b.accept_placement(T, "p", old)
    assert refused.value.code == "stale-epoch"


# ------------------------------------------------------------------------------------------ the tick


def test_p89_p127_three_hundred_projects_are_placed_within_capacity_and_evenly(store: Store, pods: Pods) -> None:
    import random

    rng = random.Random(7)
    scores = {f"p{i:03d}": float(rng.choice([1, 1, 2, 3])) for i in range(300)}
    for name, score in scores.items():
        create(store, name, score)
    nodes = [pods.start(n, capacity=250.0) for n in ("a", "b", "c")]
    nodes[0].master.beat()
    report = nodes[0].master.tick()
    assert report is not None and report.placed == 300 and report.pending == 0
    wait_for(lambda: all_placed(store, list(scores)), 120, "every project claimed by its pod")
    load = {n.pod.pod_id: 0.0 for n in nodes}
    for name, holder in holders(store).items():
        assert holder is not None
        load[holder] += scores[name]
    assert all(v <= 250.0 for v in load.values()), load
    assert max(load.values()) - min(load.values()) <= max(scores.values()), f"spread within one score: {load}"


def test_p89_a_project_goes_only_to_pods_its_selector_matches(store: Store, pods: Pods) -> None:
    for i in range(6):
        create(store, f"gpu{i}", selector={"gpu": "yes"})
    a = pods.start("a", labels={"gpu": "no"})
    b = pods.start("b", labels={"gpu": "yes"})
    a.master.beat()
    a.master.tick()
    wait_for(lambda: all_placed(store, [f"gpu{i}" for i in range(6)]), 30, "placed")
    assert set(holders(store).values()) == {b.pod.pod_id}
    project = ProjectStore(store).get(T, "gpu0")
    [placed] = [e for e in a.lifecycle.timeline.history(project.id) if e.kind == "placement"]
    assert (placed.pod_id, placed.detail["master"], placed.detail["epoch"]) == (b.pod.pod_id, a.pod.pod_id, 1)


def test_p89_what_fits_nowhere_is_pending_and_demand_until_a_matching_pod_arrives(store: Store, pods: Pods) -> None:
    create(store, "big", score=50.0)
    create(store, "tpu", selector={"tpu": "v5"})
    a = pods.start("a", capacity=10.0)
    a.master.beat()
    report = a.master.tick()
    assert report is not None and (report.placed, report.pending) == (0, 2)
    demand = {p.name: p.pending_since for p in a.master.publish_demand()}
    assert set(demand) == {"big", "tpu"} and all(demand.values())
    assert a.metrics.demand_projects._value.get() == 2.0
    first_since = demand["tpu"]
    a.master.tick()
    assert {p.name: p.pending_since for p in a.master.publish_demand()}["tpu"] == first_since, "waiting since"
    b = pods.start("b", labels={"tpu": "v5"}, capacity=100.0)
    a.master.tick()
    wait_for(lambda: all_placed(store, ["big", "tpu"]), 30, "placed once a pod fits")
    assert set(holders(store).values()) == {b.pod.pod_id}
    assert a.master.publish_demand() == [], "a claim clears the demand"
    assert all(p.pending_since is None for p in ProjectStore(store).list())


def test_a_placement_counts_once_whether_or_not_its_pod_has_reported_it_yet(store: Store, pods: Pods) -> None:
    """A pod's load is what it holds (its beat's report or the store's, the larger) plus what was placed on
    it and not claimed yet: a pod whose beat already reports its new projects is not charged for them a
    second time as in flight, so pods that beat at different moments are compared on equal terms."""
    worker = {"role": "worker"}
    first = [f"w{i}" for i in range(6)]
    for name in first:
        create(store, name, selector=worker)
    a = pods.start("a", labels={"role": "master"})
    b = pods.start("b", labels=worker)
    c = pods.start("c", labels=worker)
    a.master.beat()
    report = a.master.tick()
    assert report is not None and report.placed == 6
    wait_for(lambda: len(b.registry.ids()) == len(c.registry.ids()) == 3, 30, "three running on each worker")
    b.beat()  # b reports the three it runs; c has not beaten since it started
    load = {p.pod_id: p.score for p in a.master.eligible_pods()}
    assert load == {a.pod.pod_id: 0.0, b.pod.pod_id: 3.0, c.pod.pod_id: 3.0}
    second = [f"x{i}" for i in range(4)]
    for name in second:
        create(store, name, selector=worker)
    a.master.tick()
    wait_for(lambda: all_placed(store, second), 30, "second wave claimed")
    held = holders(store)
    assert sorted(held[n] or "" for n in second) == sorted([b.pod.pod_id] * 2 + [c.pod.pod_id] * 2)


def test_new_work_goes_to_a_pod_that_joins(store: Store, pods: Pods) -> None:
    for i in range(20):
        create(store, f"old{i}")
    a = pods.start("a")
    pods.start("b")
    a.master.beat()
    a.master.tick()
    wait_for(lambda: all_placed(store, [f"old{i}" for i in range(20)]), 30, "first wave")
    c = pods.start("c")
    for i in range(10):
        create(store, f"new{i}")
    for node in pods.nodes.values():
        node.beat()  # each pod reports what it runs (P-106): the master reads the load from there
    a.master.tick()
    wait_for(lambda: all_placed(store, [f"new{i}" for i in range(10)]), 30, "second wave")
    held = holders(store)
    assert {held[f"new{i}"] for i in range(10)} == {c.pod.pod_id}, "the least utilized pod takes the new work"


def test_p88_the_tick_never_places_a_suspended_or_held_project(store: Store, pods: Pods) -> None:
    create(store, "held")
    create(store, "asleep")
    a = pods.start("a")
    a.bring(T, "held")
    a.bring(T, "asleep")
    a.suspend(T, "asleep")
    b = pods.start("b")
    b.master.beat()
    report = b.master.tick()
    assert report is not None and report.placed == 0
    assert holders(store) == {"held": a.pod.pod_id, "asleep": None}


def test_max_moves_bounds_each_tick(store: Store, pods: Pods) -> None:
    for i in range(12):
        create(store, f"p{i}")
    a = pods.start("a", max_moves=5)
    a.master.beat()
    report = a.master.tick()
    assert report is not None and report.placed == 5


def test_a_tick_that_reached_max_moves_is_followed_by_the_next_at_once(store: Store, pods: Pods) -> None:
    """``--max-moves`` bounds a tick's length, not the placement rate: with 12 projects needing an owner and
    5 moves a tick, the master's loop places all 12 in three ticks back to back, not one tick an hour."""
    for i in range(12):
        create(store, f"p{i}")
    a = pods.start("a", max_moves=5, tick=3600.0)
    a.master.beat()
    a.master.start()
    wait_for(lambda: all_placed(store, [f"p{i}" for i in range(12)]), 20, "all 12 placed")


def test_a_takeover_does_not_wait_a_whole_tick(store: Store, pods: Pods) -> None:
    """The master's loop wakes when a silent pod's lease runs out, long before its 1-hour tick."""
    create(store, "p")
    a = pods.start("a", lease_ttl=0.5, liveness_ttl=0.2, beat_interval=0.1)
    a.bring(T, "p")
    b = pods.start("b", lease_ttl=0.5, liveness_ttl=0.2, beat_interval=0.1, tick=3600.0)
    b.master.beat()
    assert b.master.is_master
    b.master.tick()  # the regular tick ran: the next one is an hour away
    b.master.start()
    started = time.monotonic()
    # a is killed: it beats no more. b keeps beating (its liveness and its master lease), nothing else happens

    def taken() -> bool:
        b.beat()
        return holders(store, 0.5)["p"] == b.pod.pod_id

    wait_for(taken, 20, "taken over")
    assert time.monotonic() - started < 10.0


# ------------------------------------------------------------------------------------------ stale-bind sweep


def test_p51_the_sweep_unbinds_the_sessions_of_projects_without_an_owner(store: Store, pods: Pods) -> None:
    create(store, "owned")
    create(store, "orphan")
    a = pods.start("a")
    projects = ProjectStore(store)
    owned = a.bring(T, "owned")
    orphan = a.bring(T, "orphan")
    projects.set_placement(T, "orphan", {"zone": "nowhere"}, 1.0)  # unowned and placed nowhere: swept
    s1 = projects.create_session(owned)
    s2 = projects.create_session(orphan)
    projects.bind_session(s1.id, "conn-1", a.pod.pod_id, owned.generation)
    projects.bind_session(s2.id, "conn-2", a.pod.pod_id, orphan.generation)
    Ownership(store).release_lease(T, "orphan", a.pod.pod_id)
    a.master.beat()
    report = a.master.tick()
    assert report is not None and report.unbound_sessions == 1
    bound = {s.project_id: s.bound_connection_id for s in projects.sessions(owned) + projects.sessions(orphan)}
    assert bound == {owned.id: "conn-1", orphan.id: None}


def test_a_placement_the_target_refuses_is_not_counted_as_placed_and_is_asked_again(store: Store, pods: Pods) -> None:
    """A target that answers 401 (another cluster token) or is unreachable has not been given the project:
    the tick counts it under ``asked_failed``, never under ``placed`` or ``tenure_placements_total``, and
    once the placement is no longer in flight a later tick asks again."""
    a = pods.start("a")
    b = pods.start("b", labels={"zone": "b"})  # the target is another pod: asked through the transport
    a.master.beat()
    create(store, "p", selector={"zone": "b"})
    refused: list[str] = []

    def refuse(target: PodLoad, tenant: str, name: str, epoch: int) -> bool:
        refused.append(name)
        return False

    a.master.transport = refuse
    report = a.master.tick()
    assert (report.placed, report.asked_failed, report.placements) == (0, 1, [])
    assert refused == ["p"]
    assert "tenure_placements_total 0.0" in a.metrics.render().decode()
    assert holders(store)["p"] is None
    assert a.master.tick().placed == 0, "still in flight: not asked again at once"
    a.master.transport = pods.deliver
    a.master._in_flight.clear()  # its in-flight time is over (at least 5 s, ``in_flight_timeout``)
    assert a.master.tick().placed == 1
    wait_for(lambda: holders(store)["p"] == b.pod_id, what="b brings the project it was placed")


# ------------------------------------------------------------------------------------------ drain hand-over


def _wakes_in_process(pods: Pods, node: PodRuntime) -> None:
    node.wake_transport = lambda pod_id, endpoint: pods.nodes[pod_id].master.wake()


def test_a_drain_wakes_the_master_so_each_released_project_is_placed_at_once(store: Store, pods: Pods) -> None:
    """ADR 0049: the master ticks once an hour here; a drain of 20 PERMANENT projects still has every one
    running on the other pod within seconds, because the draining pod wakes the master after each release."""
    names = [f"p{i}" for i in range(20)]
    for name in names:
        create(store, name)
    a = pods.start("a", master=False)
    for name in names:
        a.bring(T, name)
    b = pods.start("b", tick=3600.0)
    b.master.beat()
    b.master.tick()  # the regular tick ran: the next one is an hour away
    b.master.start()
    _wakes_in_process(pods, a)
    assert len(a.drain()) == 20 and a.drain_left == []
    wait_for(lambda: set(holders(store).values()) == {b.pod.pod_id}, 20, "every project on b")


def test_a_woken_pod_takes_the_master_role_a_draining_master_resigned(store: Store, pods: Pods) -> None:
    """The draining pod held the role: it resigns, and its wake-up makes the other pod take the role and
    tick at once (without it, the role would pass only at that pod's next beat, its tick an hour later)."""
    names = [f"p{i}" for i in range(5)]
    for name in names:
        create(store, name)
    a = pods.start("a", tick=3600.0)
    a.master.beat()
    assert a.master.is_master
    for name in names:
        a.bring(T, name)
    b = pods.start("b", tick=3600.0)
    b.master.start()
    assert not b.master.is_master
    _wakes_in_process(pods, a)
    a.drain()
    wait_for(lambda: set(holders(store).values()) == {b.pod.pod_id}, 20, "every project on b")
    assert b.master.is_master and ClusterStore(store).master().pod_id == b.pod.pod_id


def test_the_masters_last_tick_shows_a_tenant_token_only_its_own_tenants_placements(store: Store, pods: Pods) -> None:
    from fastapi.testclient import TestClient

    from tenure.api.app import create_app
    from tenure.pod.tokens import TokenStore

    create(store, "mine")
    ProjectStore(store).create("rival", "theirs", lifecycle_type=LifecycleType.PERMANENT)
    a = pods.start("a")
    a.master.beat()
    report = a.master.tick()
    assert report is not None and {ref for ref, _ in report.placements} == {f"{T}/mine", "rival/theirs"}
    _, tenant = TokenStore(store).create(T, admin=False, cluster=False)
    _, admin = TokenStore(store).create(None, admin=True, cluster=False)
    with TestClient(create_app(a)) as c:
        seen = c.get("/api/v1/cluster/master", headers={"Authorization": f"Bearer {tenant}"}).json()
        assert [p["project"] for p in seen["last_tick"]["placements"]] == [f"{T}/mine"]
        assert "rival" not in json.dumps(seen)
        everything = c.get("/api/v1/cluster/master", headers={"Authorization": f"Bearer {admin}"}).json()
        assert {p["project"] for p in everything["last_tick"]["placements"]} == {f"{T}/mine", "rival/theirs"}


def test_a_pod_too_old_for_a_page_of_placements_is_asked_one_project_at_a_time(store: Store, pods: Pods) -> None:
    """A rolling upgrade: the target (here a stand-in for a pod of an older release) answers 422 to a request
    with ``projects``; the master asks it again for each project alone and counts what it accepted."""
    import http.server
    import threading

    bodies: list[dict[str, Any]] = []

    class OldPod(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server spelling
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            status = 422 if "projects" in body else (202 if body["name"] != "refused" else 409)
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OldPod)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        a = pods.start("a")
        a.master.transport = None
        old = PodLoad("old-pod", f"http://127.0.0.1:{server.server_address[1]}", {}, 100.0, 0.0)
        answers = a.master._ask_many(old, [(T, "p"), (T, "refused"), (T, "q")], epoch=7)
        assert answers == [True, False, True]
        assert [b.get("name") for b in bodies] == [None, "p", "refused", "q"], "the page first, then one by one"
        assert all(b["epoch"] == 7 for b in bodies)
    finally:
        server.shutdown()
        server.server_close()
