"""The store-outage brake (ADR 0050): when the store was out of reach for every pod, nothing changes owner.

Two real pods on PostgreSQL, each through a proxy of its own that can stop forwarding
(``tests/support/pgproxy.py``). Both are cut off for longer than the lease TTL — a store outage as every
pod sees it — and then come back one after the other: the master first, the pod whose projects it could
take second. Without the brake the master's first tick after its return places the other pod's projects
(their leases ran out by the store clock) and takes them over; with it the master holds its takeovers
until the other pod has renewed, and nothing moves. A pod that really died is still taken over once the
hold has passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import LifecycleType, Ownership, ProjectStore
from tenure.store import Store, open_store
from tenure.store.postgres import PostgresConnector
from tests.support.pgproxy import FAST, StallingProxy
from tests.support.pods import wait_for
from tests.support.runtime import stop_all
from tests.support.store import wait_past

pytestmark = pytest.mark.postgres

T = "acme"
TTL = 1.0
BEAT = 0.2


class Fleet:
    def __init__(self, pg_url: str, tmp: Path, stack: ExitStack) -> None:
        self.pg_url, self.tmp, self.stack = pg_url, tmp, stack
        self.direct: Store = stack.enter_context(_closing(open_store(pg_url)))
        self.made: list[PodRuntime] = []

    def pod(self, name: str, **options: Any) -> tuple[PodRuntime, StallingProxy]:
        proxy = self.stack.enter_context(StallingProxy.before(self.pg_url))
        store = Store(PostgresConnector(proxy.url(self.pg_url), settings=FAST), auto_migrate=False)
        self.stack.callback(store.close)
        settings: dict[str, Any] = {
            "self_pull": False,
            "lease_ttl": TTL,
            "liveness_ttl": TTL / 2,
            "beat_interval": BEAT,
            "tick": 3600.0,
            "takeover_hold_beats": 5.0,  # 1 s: the other pod's next beat, with a CI host's margin
        }
        settings.update(options)
        node = PodRuntime(
            ServeConfig(data_dir=str(self.tmp / name), **settings), store, LocalObjectStore(str(self.tmp / "objects"))
        )
        self.made.append(node)
        self.stack.callback(lambda: stop_all([node]))  # before its store closes (the stack unwinds in reverse)
        node.start()
        return node, proxy

    def owners(self, names: list[str]) -> dict[str, tuple[str | None, int]]:
        ownership, projects = Ownership(self.direct), ProjectStore(self.direct)
        found = {}
        for name in names:
            project = projects.get(T, name)
            found[name] = (ownership.owner(project.id, TTL).pod_id, project.generation)
        return found


class _closing:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> Store:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[Fleet]:
    with ExitStack() as stack:
        yield Fleet(pg_url, tmp_path, stack)


def _setup(fleet: Fleet) -> tuple[PodRuntime, StallingProxy, PodRuntime, StallingProxy, list[str]]:
    projects = ProjectStore(fleet.direct)
    names = [f"p{i}" for i in range(4)]
    for name in names:
        projects.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
    a, a_proxy = fleet.pod("a", master=False)
    for name in names:
        a.bring(T, name)
    b, b_proxy = fleet.pod("b")
    a.run_beats()
    b.run_beats()
    wait_for(lambda: b.master.is_master, 10, "b takes the master role")
    return a, a_proxy, b, b_proxy, names


def _outage(fleet: Fleet, *proxies: StallingProxy) -> None:
    for proxy in proxies:
        proxy.stall()
    wait_past(fleet.direct, TTL + 0.5)  # every lease of a and b has run out by the store clock


def test_a_store_outage_for_every_pod_moves_no_project(fleet: Fleet) -> None:
    a, a_proxy, b, b_proxy, names = _setup(fleet)
    before = fleet.owners(names)
    assert {owner for owner, _ in before.values()} == {a.pod.pod_id}
    _outage(fleet, a_proxy, b_proxy)
    b_proxy.resume()  # the master is back first; a is still cut off
    ticks = b.master.ticks
    wait_for(lambda: b.master.ticks > ticks and b.master.is_master, 15, "b ticks after its return")
    assert b.master.last_tick is not None and b.master.last_tick.held > 0, "the tick held its takeovers"
    a_proxy.resume()
    back = a._last_renewal
    wait_for(lambda: a._last_renewal > back, 15, "a renews after its return")
    wait_for(lambda: b.takeover_hold() == 0, 15, "b's hold passed")
    ticks = b.master.ticks
    wait_for(lambda: b.master.ticks > ticks and not b.master.last_tick.held, 15, "an unheld tick")  # type: ignore[union-attr]
    assert fleet.owners(names) == before, "nothing changed owner (or generation)"


def test_a_pod_that_stays_away_is_still_taken_over_once_the_hold_passed(fleet: Fleet) -> None:
    a, a_proxy, b, b_proxy, names = _setup(fleet)
    _outage(fleet, a_proxy, b_proxy)
    b_proxy.resume()  # a never comes back (as if it died with the outage)
    wait_for(lambda: {owner for owner, _ in fleet.owners(names).values()} == {b.pod.pod_id}, 30, "taken over")
