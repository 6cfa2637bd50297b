"""The ownership timeline (tenure/projects/timeline.py) on a real store, SQLite and PostgreSQL: the claim
path records holder changes in its own transaction, the lifecycle records bring / suspend / close and the
engines, events read newest first on the store clock, and retention keeps the newest of each project."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tenure.objects.local import LocalObjectStore
from tenure.projects import LifecycleConfig, LifecycleService, Ownership, PodIdentity, ProjectStore
from tenure.projects.lifecycle import EnginesStartRequested, EnginesStopRequested
from tenure.projects.timeline import Event, EventKind, Timeline
from tenure.store import Store
from tests.support.store import wait_past

T = "acme"
TTL = 60.0
SHORT = 0.05  # a lease TTL under which any claim older than a moment has expired


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


class Engine:
    def start(self, event: EnginesStartRequested, folder: str) -> None:
        pass

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        pass


@pytest.fixture
def lifecycle(store: Store, tmp_path: Path) -> Iterator[LifecycleService]:
    service = LifecycleService(
        store,
        LocalObjectStore(str(tmp_path / "objects")),
        str(tmp_path / "data"),
        PodIdentity.fresh("host-a", "http://host-a:8470"),
        config=LifecycleConfig(lease_ttl=TTL),
        engines=[Engine()],
    )
    yield service
    service.shutdown()


# ---------------------------------------------------------------------- holder changes, in the claim transaction


def test_a_takeover_records_the_former_pod_the_new_pod_and_the_raised_generation(store: Store) -> None:
    project = ProjectStore(store).create(T, "web")
    ownership = Ownership(store)
    first = ownership.claim(T, "web", "pod-a", "host-a", None, TTL)
    assert first is not None
    wait_past(store, SHORT * 2)
    taken = ownership.claim(T, "web", "pod-b", "host-b", None, SHORT)  # pod-a's lease counts as run out
    assert taken is not None and taken.generation > first.generation

    newest, oldest = Timeline(store).history(project.id)
    assert (newest.kind, newest.pod_id, newest.generation) == ("takeover", "pod-b", taken.generation)
    assert newest.detail == {"from": "pod-a", "to": "pod-b"}
    assert (oldest.kind, oldest.pod_id, oldest.generation, oldest.detail) == ("claim", "pod-a", first.generation, {})


def test_a_claim_refused_because_another_pod_holds_the_lease_records_nothing(store: Store) -> None:
    project = ProjectStore(store).create(T, "web")
    ownership = Ownership(store)
    assert ownership.claim(T, "web", "pod-a", "host-a", None, TTL) is not None
    assert ownership.claim(T, "web", "pod-b", "host-b", None, TTL) is None, "pod-a's lease is live"
    assert ownership.claim(T, "web", "pod-a", "host-a", None, TTL) is not None, "a renewal changes no holder"
    events = Timeline(store).history(project.id)
    assert [(e.kind, e.pod_id) for e in events] == [("claim", "pod-a")]


def test_adopting_the_projects_of_this_hosts_previous_pod_is_a_takeover_with_its_reason(store: Store) -> None:
    project = ProjectStore(store).create(T, "web")
    ownership = Ownership(store)
    assert ownership.claim(T, "web", "old-pod", "host-a", None, TTL) is not None
    adopted = ownership.adopt(T, "web", "new-pod", "host-a", "old-pod")
    assert adopted is not None
    newest = Timeline(store).history(project.id, limit=1)[0]
    assert (newest.kind, newest.pod_id, newest.generation) == ("takeover", "new-pod", adopted.generation)
    assert newest.detail == {"from": "old-pod", "to": "new-pod", "reason": "restart on the same data folder"}


# ---------------------------------------------------------------------- reading


def test_events_come_out_newest_first_with_store_clock_times(store: Store) -> None:
    timeline = Timeline(store)
    before = store.workspaces.now()
    for kind in (EventKind.CLAIM, EventKind.BRING, EventKind.SUSPEND, EventKind.BRING):
        timeline.record(None, "p1", kind, pod_id="pod-a", generation=1, note=kind.value)
    timeline.record(None, "p2", EventKind.CLAIM, pod_id="pod-b")
    after = store.workspaces.now()

    events = timeline.history("p1")
    assert kinds(events) == ["bring", "suspend", "bring", "claim"]
    assert all(before <= e.at <= after for e in events), "times are the store clock's"
    assert [e.at for e in events] == sorted((e.at for e in events), reverse=True)
    assert [e.detail["note"] for e in events] == ["bring", "suspend", "bring", "claim"]
    assert kinds(timeline.history("p1", limit=2)) == ["bring", "suspend"]
    assert timeline.history("nothing") == []

    as_json = events[0].to_dict()
    assert set(as_json) == {"id", "project_id", "at", "kind", "pod_id", "generation", "detail"}
    assert json.loads(json.dumps(as_json)) == as_json


def test_history_before_a_time_pages_back(store: Store) -> None:
    timeline = Timeline(store)
    timeline.record(None, "p1", EventKind.CLAIM)
    wait_past(store, 0.01)
    cut = store.workspaces.now()
    wait_past(store, 0.01)
    timeline.record(None, "p1", EventKind.BRING)
    assert kinds(timeline.history("p1", before=cut)) == ["claim"]
    assert kinds(timeline.history("p1")) == ["bring", "claim"]


def test_a_failed_write_outside_a_transaction_is_only_logged(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    timeline = Timeline(store)
    timeline.record(None, "p1", EventKind.BRING, unserializable=object())  # written as its str()
    assert kinds(timeline.history("p1")) == ["bring"]
    with store.db.sql_transaction() as tx:  # the table gone: every insert fails
        tx.execute_sql("DROP TABLE project_events")
    with caplog.at_level(logging.WARNING, logger="tenure.timeline"):
        timeline.record(None, "p1", EventKind.SUSPEND)  # does not raise
    assert "timeline event not recorded" in caplog.text


# ---------------------------------------------------------------------- the lifecycle


def test_bring_suspend_and_close_are_each_recorded_once(store: Store, lifecycle: LifecycleService) -> None:
    project = ProjectStore(store).create(T, "web")
    brought = lifecycle.bring(T, "web")
    lifecycle.bring(T, "web")  # already running here: nothing new happens
    lifecycle.suspend(T, "web")
    lifecycle.suspend(T, "web")  # idempotent
    closed = lifecycle.close(T, "web")

    events = Timeline(store).history(project.id)
    assert kinds(events) == [
        "close",
        "claim",  # the close fence: the closing pod holds the new generation
        "suspend",
        "engine-stop",
        "bring",
        "engine-start",
        "claim",
    ]
    assert {e.pod_id for e in events} == {lifecycle.pod.pod_id}
    by_kind = {e.kind: e for e in events}
    assert by_kind["bring"].generation == brought.generation
    assert by_kind["close"].generation == closed.generation > brought.generation
    assert events[1].detail == {"reason": "close fence"}


# ---------------------------------------------------------------------- retention


def test_retention_keeps_the_newest_of_each_project_and_drops_the_older_ones(store: Store) -> None:
    timeline = Timeline(store)
    for i in range(5):
        timeline.record(None, "busy", EventKind.BRING, n=i)
    for i in range(2):
        timeline.record(None, "quiet", EventKind.BRING, n=i)
    wait_past(store, 1.2)
    timeline.record(None, "busy", EventKind.SUSPEND, n=5)
    for i in range(3):
        timeline.record(None, "fresh", EventKind.BRING, n=i)

    one_second = 1.0 / 86400
    assert timeline.prune(keep_days=one_second, keep_per_project=2) == 4

    assert [e.detail["n"] for e in timeline.history("busy")] == [5, 4], "the newest 2, old or not"
    assert [e.detail["n"] for e in timeline.history("quiet")] == [1, 0], "no more than 2: all kept"
    assert [e.detail["n"] for e in timeline.history("fresh")] == [2, 1, 0], "inside the window: all kept"
    assert timeline.prune(keep_days=one_second, keep_per_project=2) == 0


# ---------------------------------------------------------------------- the CLI


def test_cli_history_prints_the_project_and_its_events_as_json(store: Store, tmp_path: Path) -> None:
    from tenure.cli.main import root

    base = ["--data", str(tmp_path / "d"), "--db", store.url, "--objects", f"file://{tmp_path}/objects"]

    def run(*args: str) -> Any:
        result = CliRunner().invoke(root, [*base, *args], obj={})
        assert result.exit_code == 0, result.output
        return result

    run("project", "create", "acme/web")
    run("project", "claim", "acme/web", "--pod-id", "pod-a")
    shown = json.loads(run("--json", "project", "history", "acme/web").stdout)
    project_id = ProjectStore(store).get(T, "web").id
    assert shown == {
        "project": "acme/web",
        "events": [
            {
                "id": shown["events"][0]["id"],
                "project_id": project_id,
                "at": shown["events"][0]["at"],
                "kind": "claim",
                "pod_id": "pod-a",
                "generation": 1,
                "detail": {},
            }
        ],
    }
    assert isinstance(shown["events"][0]["at"], float)

    table = run("project", "history", "acme/web").stdout
    assert "claim" in table and "pod-a" in table and "generation" in table
    missing = CliRunner().invoke(root, [*base, "project", "history", "acme/nope"], obj={})
    assert missing.exit_code == 3 and "project-not-found" in missing.output
