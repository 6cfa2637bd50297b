"""The pod daemon's entries on the ownership timeline: forward drift, the drain hand-over, the reverse-drift
release, and the hourly retention run from the beat (tenure serve --history-days)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.errors import TenureError
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import ProjectStore
from tenure.projects.lifecycle import EnginesStartRequested, EnginesStopRequested
from tenure.projects.timeline import EventKind, Timeline
from tenure.store import Store
from tests.integration.pod.test_node import make_node
from tests.support.runtime import stop_all
from tests.support.store import wait_past

T = "acme"


class FailingEngine:
    def start(self, event: EnginesStartRequested, folder: str) -> None:
        raise RuntimeError("engine refuses to start")

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        pass


@pytest.fixture
def nodes() -> Iterator[list[PodRuntime]]:
    made: list[PodRuntime] = []
    yield made
    stop_all(made)


def test_a_pod_that_lost_a_project_records_forward_drift_after_the_takeover(
    store: Store, tmp_path: Path, nodes: list[PodRuntime]
) -> None:
    project = ProjectStore(store).create(T, "p")
    objects = str(tmp_path / "objects")
    a = make_node(store, tmp_path, objects, "a", lease_ttl=0.3)
    b = make_node(store, tmp_path, objects, "b", lease_ttl=0.3)
    nodes.extend([a, b])
    a.start()
    b.start()
    brought = a.bring(T, "p")
    wait_past(store, 0.35)  # a does not beat: its lease runs out
    taken = b.bring(T, "p")
    a.beat()

    events = Timeline(store).history(project.id)
    assert [(e.kind, e.pod_id) for e in events] == [
        ("drift-forward", a.pod.pod_id),
        ("bring", b.pod.pod_id),
        ("takeover", b.pod.pod_id),
        ("bring", a.pod.pod_id),
        ("claim", a.pod.pod_id),
    ]
    assert events[2].detail == {"from": a.pod.pod_id, "to": b.pod.pod_id}
    assert events[2].generation == taken.generation > brought.generation
    assert events[0].detail["closed"] is False


def test_a_drain_records_each_hand_over(store: Store, tmp_path: Path, nodes: list[PodRuntime]) -> None:
    project = ProjectStore(store).create(T, "p")
    a = make_node(store, tmp_path, str(tmp_path / "objects"), "a")
    nodes.append(a)
    a.start()
    a.bring(T, "p")
    assert a.drain() == [f"{T}/p"]
    assert [e.kind for e in Timeline(store).history(project.id, limit=1)] == ["drain"]


def test_a_bring_that_keeps_failing_records_the_engine_failures_and_the_release(
    store: Store, tmp_path: Path, nodes: list[PodRuntime]
) -> None:
    project = ProjectStore(store).create(T, "p")
    config = ServeConfig(data_dir=str(tmp_path / "a"), self_pull=False, bring_retries=1, bring_backoff=0.0)
    from tenure.objects.local import LocalObjectStore

    a = PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")), engines=[FailingEngine()])
    nodes.append(a)
    a.start()
    with pytest.raises(TenureError):
        a.bring(T, "p")
    a._dark[project.id].next_at = 0.0
    a.beat()
    events = Timeline(store).history(project.id)
    assert [e.kind for e in events] == ["release", "engine-failure", "engine-failure", "claim"]
    assert events[0].detail["reason"] == "bring kept failing"
    assert events[1].detail["phase"] == "start"


def test_the_beat_prunes_the_timeline_at_most_hourly(store: Store, tmp_path: Path, nodes: list[PodRuntime]) -> None:
    timeline = Timeline(store)
    for i in range(150):
        timeline.record(None, "old-project", EventKind.BRING, n=i)
    wait_past(store, 0.2)
    a = make_node(store, tmp_path, str(tmp_path / "objects"), "a", history_days=0.1 / 86400)
    nodes.append(a)
    a.start()
    a.beat()
    kept = timeline.history("old-project", limit=1000)
    assert [e.detail["n"] for e in kept] == list(range(149, 49, -1)), "the newest 100 of the project stay"
    for i in range(150, 160):
        timeline.record(None, "old-project", EventKind.BRING, n=i)
    wait_past(store, 0.2)
    a.beat()
    assert len(timeline.history("old-project", limit=1000)) == 110, "not again within the hour"
