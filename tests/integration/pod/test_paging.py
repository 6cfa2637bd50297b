"""Paging the projects that need an owner by key, never by OFFSET (P-83).

The boot self-pull and the master's tick read the needing-owner set a page at a time while they claim
from it: every project brought leaves the set, so an OFFSET past the first page skips as many projects as
the pages before it brought. Paged by key (the statements' own order), each page starts after the last
project seen, and every eligible project is reached. Pods run in this process on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tenure.cluster import master as master_module
from tenure.cluster.placement import PodLoad
from tenure.pod import runtime as runtime_module
from tenure.pod.runtime import PodRuntime
from tenure.projects import LifecycleType, ProjectStore
from tenure.projects.ownership import NeedingOwnerCursor, Ownership
from tenure.store import Store
from tests.support.pods import wait_for
from tests.support.runtime import pod_maker, stop_all
from tests.support.store import wait_past

T = "acme"
TTL = 60.0
#: more than one page of the pull (``runtime.PULL_PAGE``, 100) and of the tick (``master.PAGE``, 500)
PROJECTS = 110


@pytest.fixture
def make(store: Store, tmp_path: Path) -> Iterator[Callable[..., PodRuntime]]:
    made: list[PodRuntime] = []
    yield pod_maker(store, tmp_path, made, ttl=TTL)
    stop_all(made)


def eligible(store: Store, count: int, prefix: str = "p") -> set[str]:
    projects = ProjectStore(store)
    for i in range(count):
        projects.create(T, f"{prefix}{i:03}", lifecycle_type=LifecycleType.PERMANENT)
    return {f"{prefix}{i:03}" for i in range(count)}


def held_by(store: Store, pod: PodRuntime) -> set[str]:
    return {p.name for p in Ownership(store).find_by_home_pod_id(pod.pod_id)}


def test_the_boot_pull_brings_every_eligible_project_across_pages(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    """110 eligible projects, room for all: one boot pull brings 110 (paged by OFFSET it brought the first page
    and skipped what the shrunken set had moved below the offset)."""
    assert runtime_module.PULL_PAGE == 100 < PROJECTS, "the default page: more than one page of projects"
    names = eligible(store, PROJECTS)
    pod = make("a", self_pull=True, capacity=1000.0, bring_workers=8)
    pod.start()
    assert held_by(store, pod) == names
    assert len(pod.registry.ids()) == PROJECTS


def test_the_boot_pull_pages_on_past_projects_it_drops(
    store: Store, make: Callable[..., PodRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small pages mixing projects the pod brings and ones it drops (a selector that does not match): a page
    that brings nothing still moves the key on, and the pull reaches every matching project."""
    monkeypatch.setattr(runtime_module, "PULL_PAGE", 7)
    names = eligible(store, 40)
    projects = ProjectStore(store)
    for i in range(0, 40, 3):
        projects.set_placement(T, f"p{i:03}", {"gpu": "yes"}, 1.0)
    wanted = {f"p{i:03}" for i in range(40) if i % 3}
    pod = make("a", self_pull=True, capacity=1000.0)
    pod.start()
    assert held_by(store, pod) == wanted
    assert names - wanted == {p.name for p in Ownership(store).find_projects_needing_owner(TTL, 100)}


def test_a_master_tick_over_more_than_a_page_places_every_project(
    store: Store, make: Callable[..., PodRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(master_module, "PAGE", 25)
    names = eligible(store, PROJECTS)
    a, b = make("a", capacity=1000.0, tick=3600.0, max_moves=1000), make("b", capacity=1000.0, tick=3600.0)
    nodes = {node.pod_id: node for node in (a, b)}

    def deliver(target: PodLoad, tenant: str, name: str, epoch: int) -> bool:
        nodes[target.pod_id].accept_placement(tenant, name, epoch)
        return True

    for node in (a, b):
        node.master.transport = deliver
        node.start()
    a.master.beat()
    assert a.master.is_master
    report = a.master.tick()
    assert report is not None and not report.deposed
    assert report.placed == PROJECTS and report.pending == 0
    assert {ref.split("/")[1] for ref, _ in report.placements} == names
    wait_for(lambda: held_by(store, a) | held_by(store, b) == names, 60, "every placed project claimed")
    assert held_by(store, a) and held_by(store, b), "placed by load on both pods"


def test_keyset_pages_cover_the_dead_pods_projects_then_the_unbound_ones_while_the_set_shrinks(
    store: Store,
) -> None:
    """The store's keyset paging directly: pages of 4 over a dead pod's projects and unbound ones, half of
    each page taken out of the set as it is read (the set shrinks under the reader); every project is seen
    exactly once, and what is left afterwards is exactly what was not taken out."""
    from tenure.projects.pods import PodIdentity, PodRegistry

    projects, own = ProjectStore(store), Ownership(store)
    dead = PodIdentity.fresh("n")
    PodRegistry(store).register(dead)
    assert own.renew_leases(dead.pod_id) is not None
    for i in range(9):
        projects.create(T, f"d{i}", lifecycle_type=LifecycleType.PERMANENT)
        assert own.claim(T, f"d{i}", dead.pod_id, "n", None, 0.4) is not None
    for i in range(10):
        projects.create(T, f"u{i}", lifecycle_type=LifecycleType.PERMANENT)
    wait_past(store, 0.4)
    seen: list[str] = []
    taken: set[str] = set()
    cursor: NeedingOwnerCursor | None = None
    while True:
        page, cursor = own.page_projects_needing_owner(0.4, 4, cursor)
        if not page:
            break
        assert len(page) <= 4
        seen.extend(p.name for p in page)
        for p in page[::2]:  # every other one needs no owner any more: the set shrinks under the reader
            assert projects.set_lifecycle_type(T, p.name, LifecycleType.EPHEMERAL)
            taken.add(p.name)
    assert len(seen) == len(set(seen)) == 19
    assert set(seen[:9]) == {f"d{i}" for i in range(9)}, "the dead pod's projects first"
    assert own.page_projects_needing_owner(0.4, 0, None) == ([], None)
    left = {p.name for p in own.find_projects_needing_owner(0.4, 100)}
    assert left == set(seen) - taken and len(taken) == 10


def test_the_keyset_statements_are_served_by_the_needing_owner_indexes(store: Store) -> None:
    """Paged by key, a deep page is an index range scan from the key, like the first (P-107)."""
    from tenure.projects.pods import PodIdentity, PodRegistry

    projects, own = ProjectStore(store), Ownership(store)
    for i in range(200):
        projects.create(T, f"p{i:03}", lifecycle_type=LifecycleType.PERMANENT)
    live = PodIdentity.fresh("n")
    PodRegistry(store).register(live)
    assert own.renew_leases(live.pod_id) is not None
    params = own.needing_owner_after_params(TTL, 5, NeedingOwnerCursor(True, 0.0, "p-0"))
    with store.db.sql_transaction() as tx:
        for table in ("projects", "pods"):  # these two only: a whole-database ANALYZE locks every table there
            tx.execute_sql(f"ANALYZE {table}")
        if tx.dialect == "postgres":
            tx.execute_sql("SET LOCAL enable_seqscan = off")

            def plan(sql: str) -> str:
                return " ".join(r["QUERY PLAN"] for r in tx.execute_sql("EXPLAIN " + sql, params))

            assert "projects_needing_owner" in plan(own.needing_owner_after_sql())
            dead = plan(own.needing_owner_of_dead_pods_after_sql())
            assert "Seq Scan" not in dead and "pods_by_lease" in dead and "projects_by_holder" in dead, dead
        else:

            def plan(sql: str) -> str:
                return " ".join(r["detail"] for r in tx.execute_sql("EXPLAIN QUERY PLAN " + sql, params))

            unbound = plan(own.needing_owner_after_sql())
            assert "USING INDEX projects_needing_owner" in unbound and "TEMP B-TREE" not in unbound, unbound
            dead = plan(own.needing_owner_of_dead_pods_after_sql())
            assert "SEARCH q USING INDEX pods_by_lease" in dead and "projects_by_holder" in dead, dead
