"""How many transactions a bring costs: the control-plane store's and the host-local mount store's.

The budget (one HTTP request, the pod's beat and master not running): a bring
of a project with no head at most :data:`HTTP_FRESH_BOUND` control-plane
transactions and :data:`MOUNT_BOUND` on the mount store; a takeover bring (the
previous owner's lease ran out, a head to restore) at most
:data:`HTTP_TAKEOVER_BOUND`. Counted by the connectors themselves
(``Connector.transactions``, :class:`tenure.store.connector.Counts`); on
PostgreSQL the server's own count (``pg_stat_database``) must agree, which
shows that the pool runs nothing of its own (no health-check query) that the
connector would not see.

Above the lifecycle an HTTP bring needs :data:`ABOVE_THE_LIFECYCLE`
transactions at least: the token check, the pod's routing read (the project
with its owner, :meth:`Ownership.project_with_owner`) and the owner shown in
the answer. So ``LifecycleService.bring`` given the routing's record must fit
in the rest (:func:`test_lifecycle_bring_fits_the_budget`), and the pod hands
it the record it routed by, so an HTTP bring meets the bound exactly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import ProjectStore
from tenure.states import ProjectStatus
from tenure.store import Store, open_store

T = "acme"
R = TypeVar("R")

#: the budget of one HTTP bring of a project with no head (control-plane transactions)
HTTP_FRESH_BOUND = 6
#: the budget of one HTTP takeover bring with a head to restore
HTTP_TAKEOVER_BOUND = 8
#: the budget on the mount store, either way
MOUNT_BOUND = 3
#: what an HTTP bring needs above the lifecycle at least: the token check (``TokenStore.any_exist`` or
#: ``verify``), the pod's routing read (``Ownership.project_with_owner``), the owner in the answer
ABOVE_THE_LIFECYCLE = 3


# ---------------------------------------------------------------------- counting


@dataclass(frozen=True)
class Counted:
    """Transactions run during one call: the control-plane store's, the mount store's, and on PostgreSQL
    the server's own count of the control-plane ones (``None`` on SQLite)."""

    control_plane: int
    mounts: int
    server: int | None


class Server:
    """The PostgreSQL server's count of transactions in the store's database (``pg_stat_database``).

    A backend publishes its counts only from time to time; each pooled connection is made to publish its
    own at once (``pg_stat_force_next_flush()``, one transaction of its own on that connection, which
    :meth:`transactions` leaves out of the count it returns). Read from another database, so the reading
    counts nowhere.
    """

    def __init__(self, store: Store) -> None:
        import psycopg

        from tests.conftest import ADMIN_URL

        self.store = store
        with store.db.sql_transaction(write=False) as tx:
            self.database = str(tx.execute_sql("SELECT current_database() AS d")[0]["d"])
        self.admin = psycopg.connect(ADMIN_URL, autocommit=True)
        self._flushes = 0  # transactions this object ran to flush the statistics

    def transactions(self) -> int:
        """Committed plus rolled-back transactions so far, as of the last call's flushes (see the class)."""
        pool: Any = self.store.db.pool  # type: ignore[attr-defined]
        connections = [pool.getconn() for _ in range(int(pool.get_stats()["pool_size"]))]
        try:
            for conn in connections:
                # a scan of a (catalog) table, so that the backend has statistics pending: with none, it keeps
                # its transaction counts for a later flush, whatever pg_stat_force_next_flush() asked
                conn.execute("SELECT pg_stat_force_next_flush() FROM pg_catalog.pg_am LIMIT 1")
        finally:
            for conn in connections:
                pool.putconn(conn)
        self.admin.execute("SELECT pg_stat_clear_snapshot()")
        row = self.admin.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (self.database,)
        ).fetchone()
        assert row is not None
        self._flushes += len(connections)  # each published with the rest: left out of the count
        return int(row[0]) - self._flushes

    def close(self) -> None:
        self.admin.close()


def counted(store: Store, pod: PodRuntime, call: Callable[[], R], *, server: Server | None = None) -> tuple[R, Counted]:
    """Run ``call`` and count its transactions (with ``server``, the server's count too)."""
    mounts = pod.lifecycle.mounts.store.db
    before = (store.db.transactions, mounts.transactions, server.transactions() if server else 0)
    result = call()
    after = (store.db.transactions, mounts.transactions, server.transactions() if server else 0)
    return result, Counted(after[0] - before[0], after[1] - before[1], after[2] - before[2] if server else None)


# ---------------------------------------------------------------------- the pods


class Pods:
    """Pods on one store and one object store, each with its own data folder; none beats."""

    def __init__(self, store: Store, tmp_path: Path) -> None:
        self.store = store
        self.tmp_path = tmp_path
        self.objects = LocalObjectStore(str(tmp_path / "objects"))
        self.started: list[PodRuntime] = []

    def start(self, name: str, *, lease_ttl: float = 60.0) -> PodRuntime:
        config = ServeConfig(data_dir=str(self.tmp_path / name), self_pull=False, lease_ttl=lease_ttl)
        pod = PodRuntime(config, self.store, self.objects)
        pod.start()  # RUNNING, without the beat thread: no beat, no master tick
        self.started.append(pod)
        return pod

    def stop(self) -> None:
        for pod in self.started:
            try:
                pod.stop()
            except Exception:  # noqa: BLE001 - teardown
                pass

    def with_head(self, name: str) -> str:
        """Project ``name`` brought by a pod that checkpointed a file and then went silent (no beat)."""
        projects = ProjectStore(self.store)
        projects.create(T, name)
        former = self.start(f"former-{name}")
        project = former.lifecycle.bring(T, name)
        with open(os.path.join(former.lifecycle.folder(project), "notes.txt"), "w", encoding="utf-8") as fh:
            fh.write("kept")
        former.checkpoint(T, name)
        return project.id

    def taker(self, name: str, project_id: str) -> PodRuntime:
        """A pod under a short lease policy, once the former owner's lease has run out by it."""
        taker = self.start(f"taker-{name}", lease_ttl=1.0)
        deadline = time.monotonic() + 30
        while taker.ownership.owner(project_id, taker.config.lease_ttl).live:
            assert time.monotonic() < deadline, "the former owner's lease never ran out"
            time.sleep(0.1)
        return taker


@pytest.fixture
def pods(store_url: str, tmp_path: Path) -> Iterator[Pods]:
    store = open_store(store_url)
    made = Pods(store, tmp_path)
    yield made
    made.stop()
    store.close()


def bring_over_http(pod: PodRuntime, name: str, server: Server | None = None) -> Counted:
    """One ``POST …/bring`` to ``pod``'s API, counted; the project RUNNING here after it."""
    client = TestClient(create_app(pod), follow_redirects=False)

    def bring() -> None:
        response = client.post(f"/api/v1/projects/{T}/{name}/bring")
        assert response.status_code == 200, response.text
        assert response.json()["status"] == ProjectStatus.RUNNING.value and response.json()["running_here"]

    _, count = counted(pod.store, pod, bring, server=server)
    return count


def http_fresh(pods: Pods, server: Server | None = None) -> Counted:
    """An HTTP bring of a project with no head."""
    pod = pods.start("pod")
    ProjectStore(pods.store).create(T, "fresh")
    return bring_over_http(pod, "fresh", server)


def http_takeover(pods: Pods, server: Server | None = None) -> Counted:
    """An HTTP bring of a project whose former owner went silent, its lease run out, its head restored."""
    project_id = pods.with_head("taken")
    pod = pods.taker("taken", project_id)
    count = bring_over_http(pod, "taken", server)
    project = ProjectStore(pods.store).get(T, "taken")
    with open(os.path.join(pod.lifecycle.folder(project), "notes.txt"), encoding="utf-8") as fh:
        assert fh.read() == "kept", "the head was restored"
    assert pod.ownership.holds(project.id, pod.pod.pod_id, 60.0)
    return count


# ---------------------------------------------------------------------- the lifecycle's share


@pytest.mark.parametrize("given", [True, False], ids=["record-given", "record-read"])
def test_lifecycle_bring_fits_the_budget(pods: Pods, given: bool) -> None:
    """LifecycleService.bring leaves ABOVE_THE_LIFECYCLE of each budget to the layers above it."""
    projects = ProjectStore(pods.store)
    pod = pods.start("pod")
    projects.create(T, "fresh")
    record = projects.get(T, "fresh") if given else None
    fresh, count = counted(pods.store, pod, lambda: pod.lifecycle.bring(T, "fresh", project=record))
    assert fresh.status is ProjectStatus.RUNNING
    own_read = 0 if given else 1
    assert count.control_plane <= HTTP_FRESH_BOUND - ABOVE_THE_LIFECYCLE + own_read, count
    assert count.mounts <= MOUNT_BOUND, count

    project_id = pods.with_head("taken")
    taker = pods.taker("taken", project_id)
    record = projects.get(T, "taken") if given else None
    taken, count = counted(pods.store, taker, lambda: taker.lifecycle.bring(T, "taken", project=record))
    assert taken.status is ProjectStatus.RUNNING and taken.generation > 1
    assert count.control_plane <= HTTP_TAKEOVER_BOUND - ABOVE_THE_LIFECYCLE + own_read, count
    assert count.mounts <= MOUNT_BOUND, count


# ---------------------------------------------------------------------- through the HTTP API


def test_an_http_bring_of_a_project_with_no_head(pods: Pods) -> None:
    count = http_fresh(pods)
    assert count.mounts <= MOUNT_BOUND, count
    assert count.control_plane <= HTTP_FRESH_BOUND, count


def test_an_http_takeover_bring_with_a_head_to_restore(pods: Pods) -> None:
    count = http_takeover(pods)
    assert count.mounts <= MOUNT_BOUND, count
    assert count.control_plane <= HTTP_TAKEOVER_BOUND, count


# ---------------------------------------------------------------------- the server's own count


@pytest.mark.postgres
@pytest.mark.parametrize("case", ["fresh", "takeover"])
def test_the_server_counts_no_more_transactions_than_the_connector(tmp_path: Path, case: str) -> None:
    """pg_stat_database agrees with ``Connector.transactions`` over an HTTP bring: the pool runs no
    health-check (or any other) statement of its own. An autovacuum worker visiting the database counts
    there too, so a window it fell into is tried again on a fresh schema (three times at most)."""
    from tests.conftest import new_pg_schema_url

    seen: list[Counted] = []
    for attempt in range(3):
        store = open_store(new_pg_schema_url())
        pods, server = Pods(store, tmp_path / str(attempt)), Server(store)
        try:
            count = (http_fresh if case == "fresh" else http_takeover)(pods, server)
        finally:
            pods.stop()
            server.close()
            store.close()
        seen.append(count)
        if count.server == count.control_plane:
            break
    assert seen[-1].server == seen[-1].control_plane, f"the server counted otherwise: {seen}"
