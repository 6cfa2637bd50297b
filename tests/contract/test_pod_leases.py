"""Project leases bound to their pod's lease (ADR 0016): a beat renews them all in one row, they end
when the pod stops beating, a takeover moves the former holder's lost counter, and the needing-owner
selector finds a dead pod's projects through indexes without reading a live pod's."""

from __future__ import annotations

from tenure.projects import LifecycleType, ProjectStore
from tenure.projects.ownership import Ownership, Renewal
from tenure.projects.pods import PodIdentity, PodRegistry
from tenure.states import PodState
from tenure.store import Store
from tests.contract.test_projects import T, move_to, now
from tests.support.store import wait_past

S_TTL = 0.4


def beating_pod(store: Store) -> str:
    identity = PodIdentity.fresh("n")
    PodRegistry(store).register(identity)
    assert Ownership(store).renew_leases(identity.pod_id) == Renewal(lost=0, status="RUNNING")
    return identity.pod_id


def test_a_beating_pods_leases_outlive_the_ttl_and_end_when_it_stops(store: Store) -> None:
    ps, own = ProjectStore(store), Ownership(store)
    a, b = beating_pod(store), beating_pod(store)
    for i in range(3):
        ps.create(T, f"p{i}", lifecycle_type=LifecycleType.PERMANENT)
        assert own.claim(T, f"p{i}", a, "n", None, S_TTL) is not None
    start = now(store)
    while now(store) - start < 3 * S_TTL:  # three TTLs of beats, no claim
        assert own.renew_leases(a) is not None
        wait_past(store, S_TTL / 4)
        assert own.find_projects_needing_owner(S_TTL, 10) == []
    assert all(own.holds(p.id, a, S_TTL) for p in ps.list())
    assert own.claim(T, "p0", b, "n", None, S_TTL) is None, "a live pod's lease holds"
    wait_past(store, S_TTL)  # a stops beating
    assert sorted(p.name for p in own.find_projects_needing_owner(S_TTL, 10)) == ["p0", "p1", "p2"]
    assert own.claim(T, "p0", b, "n", None, S_TTL) is not None
    assert own.renew_leases(a) == Renewal(lost=1, status="RUNNING")


def test_a_claim_before_the_first_beat_is_bound_by_that_beat(store: Store) -> None:
    ps, own = ProjectStore(store), Ownership(store)
    a = PodIdentity.fresh("n").pod_id  # no pod lease yet: a lease of its own
    ps.create(T, "p")
    assert own.claim(T, "p", a, "n", None, S_TTL) is not None
    assert own.renew_leases(a) is not None  # first beat binds it
    wait_past(store, S_TTL)
    assert own.renew_leases(a) is not None
    assert own.holds(ps.get(T, "p").id, a, S_TTL), "bound to the pod's lease: its own claim time no longer ends it"


def test_a_fence_by_close_moves_the_former_holders_lost_counter(store: Store) -> None:
    ps, own = ProjectStore(store), Ownership(store)
    a, closer = beating_pod(store), beating_pod(store)
    project = ps.create(T, "p")
    assert own.claim(T, "p", a, "n", None, 60.0) is not None
    own.fence(ps.get(T, "p"), closer, "n")
    assert own.renew_leases(a) == Renewal(lost=1, status="RUNNING")
    assert own.owner(project.id, 60.0).pod_id == closer


def test_a_stopped_pod_renews_nothing(store: Store) -> None:
    a = beating_pod(store)
    PodRegistry(store).set_status(a, PodState.STOPPED.value)
    assert Ownership(store).renew_leases(a) is None


def test_paging_runs_across_the_dead_pods_projects_and_the_unbound_ones(store: Store) -> None:
    ps, own = ProjectStore(store), Ownership(store)
    dead = beating_pod(store)
    for i in range(5):
        ps.create(T, f"d{i}", lifecycle_type=LifecycleType.PERMANENT)
        assert own.claim(T, f"d{i}", dead, "n", None, S_TTL) is not None
    for i in range(4):
        ps.create(T, f"u{i}", lifecycle_type=LifecycleType.PERMANENT)
    wait_past(store, S_TTL)
    pages = [own.find_projects_needing_owner(S_TTL, 3, skip) for skip in range(0, 12, 3)]
    flat = [p.name for page in pages for p in page]
    assert len(flat) == len(set(flat)) == 9
    assert set(flat[:5]) == {f"d{i}" for i in range(5)}, "the dead pods' projects first"


def test_p107_the_dead_pods_statement_is_served_by_indexes(store: Store) -> None:
    """With many projects held by live pods and a few pods dead, the plan starts from the dead pods."""
    ps, own = ProjectStore(store), Ownership(store)
    live = [beating_pod(store) for _ in range(20)]
    for i in range(400):
        ps.create(T, f"p{i}", lifecycle_type=LifecycleType.PERMANENT)
        assert own.claim(T, f"p{i}", live[i % 20], "n", None, 60.0) is not None
    params = own.needing_owner_params(S_TTL, 5, 0)
    sql = own.needing_owner_of_dead_pods_sql()
    with store.db.sql_transaction() as tx:
        for table in ("projects", "pods"):  # these two only: a whole-database ANALYZE locks every table there
            tx.execute_sql(f"ANALYZE {table}")
        if tx.dialect == "postgres":  # a few hundred rows: without this PostgreSQL rightly prefers a scan
            tx.execute_sql("SET LOCAL enable_seqscan = off")
            plan = " ".join(r["QUERY PLAN"] for r in tx.execute_sql("EXPLAIN " + sql, params))
            assert "Seq Scan" not in plan and "Index Scan using pods_by_lease" in plan, plan
            assert "projects_by_holder" in plan, plan
        else:
            plan = " ".join(r["detail"] for r in tx.execute_sql("EXPLAIN QUERY PLAN " + sql, params))
            assert "SEARCH q USING INDEX pods_by_lease" in plan, plan
            assert "SEARCH p USING INDEX projects_by_holder" in plan, plan


def test_moved_project_keeps_its_status(store: Store) -> None:
    ps, own = ProjectStore(store), Ownership(store)
    a, b = beating_pod(store), beating_pod(store)
    claimed = own.claim(T, ps.create(T, "p").name, a, "n", None, S_TTL)
    assert claimed is not None
    running = move_to(ps, claimed, ps.get(T, "p").status.__class__.RUNNING)
    wait_past(store, S_TTL)
    taken = own.claim(T, "p", b, "n", None, S_TTL)
    assert taken is not None and taken.status is running.status and taken.generation == running.generation + 1


def test_rows_of_long_silent_pods_that_hold_nothing_are_reaped(store: Store) -> None:
    ps, own = ProjectStore(store), Ownership(store)
    holder, idle = beating_pod(store), beating_pod(store)
    ps.create(T, "p")
    assert own.claim(T, "p", holder, "n", None, 60.0) is not None
    wait_past(store, 0.2)
    fresh = beating_pod(store)
    assert own.reap_pods(0.1) == 1, "only the silent pod that holds nothing"
    ids = {p.id for p, _ in PodRegistry(store).list()}
    assert holder in ids and fresh in ids and idle not in ids
