"""Project store conformance (project-lifecycle §9): the same tests against SQLite and PostgreSQL.

Every atomic building block — claim, renew, release, status transitions,
close, the holder queries, the selectors, pending placement, the derived
flag, lifecycle type, placement and sessions — with its guards, and proof
that a refused call changes nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from tenure.errors import (
    ConflictError,
    IllegalTransitionError,
    InvalidInputError,
    NotFoundError,
    StaleGenerationError,
    TenureError,
)
from tenure.projects import (
    AlreadyBoundError,
    Kind,
    LifecycleType,
    Ownership,
    PodIdentity,
    Project,
    ProjectClosedError,
    ProjectHomelessError,
    ProjectStore,
    StatusConflictError,
    SystemProjectError,
)
from tenure.projects.ownership import Renewal
from tenure.states import PROJECT, ProjectStatus
from tenure.store import Store
from tests.support.projects import TTL, T
from tests.support.store import wait_past

S = ProjectStatus


# --------------------------------------------------------------------------- helpers


def pod(node: str = "node") -> str:
    return PodIdentity.fresh(node).pod_id


def stores(store: Store) -> tuple[ProjectStore, Ownership]:
    return ProjectStore(store), Ownership(store)


def now(store: Store) -> float:
    return store.workspaces.now()


#: The shortest edge path from INIT to each status, through transition_status.
PATHS: dict[ProjectStatus, list[ProjectStatus]] = {
    S.INIT: [],
    S.RECOVERING: [S.RECOVERING],
    S.RUNNING: [S.RECOVERING, S.RUNNING],
    S.SUSPENDING: [S.RECOVERING, S.RUNNING, S.SUSPENDING],
    S.SUSPENDED: [S.SUSPENDED],
}


def move_to(ps: ProjectStore, project: Project, status: ProjectStatus) -> Project:
    """Drive a project from INIT to ``status`` through the store operations (CLOSED via close)."""
    current = ps.get(project.tenant, project.name)
    assert current.status is S.INIT
    if status is S.CLOSED:
        return ps.close(current.tenant, current.name, "closed", current.generation)
    for target in PATHS[status]:
        current = ps.transition_status(current.tenant, current.name, current.status, target, current.generation)
    assert current.status is status
    return current


def row(ps: ProjectStore, own: Ownership, project: Project, ttl: float = TTL) -> tuple[Project, str | None, bool]:
    """Everything a refused call must leave alone: the row and who owns it."""
    current = ps.get(project.tenant, project.name)
    owner = own.owner(current.id, ttl)
    return current, owner.pod_id, owner.live


def taken_over(store: Store) -> tuple[ProjectStore, Ownership, Project, Project, Project]:
    """Project p claimed by one pod, then, its lease judged with a shorter TTL, by another; returns the stores,
    the project, the first claim and the takeover."""
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    old = own.claim(T, "p", a, "node-a", None, TTL)
    assert old is not None
    wait_past(store, 0.02)
    new = own.claim(T, "p", b, "node-b", None, 0.01)
    assert new is not None
    return ps, own, project, old, new


def names(projects: list[Project]) -> set[str]:
    return {p.name for p in projects}


# --------------------------------------------------------------------------- P-93, P-03, P-04, P-16


#: project-lifecycle.md §9, method by method, in tenure's names (SPEC §2): the class holding the counterpart
#: and its positional parameters. Differences from the reference, each decided in SPEC: no ``now`` (the
#: store's clock decides, P-132), and ``generation`` on the writes that must be fenced (SPEC §3.3, P-34).
SECTION_9: dict[str, tuple[type, list[str]]] = {
    "claim": (Ownership, ["tenant", "name", "pod_id", "node_name", "address", "lease_ttl"]),
    "renew_leases": (Ownership, ["pod_id"]),
    "release_leases": (Ownership, ["pod_id"]),
    "release_lease": (Ownership, ["tenant", "name", "pod_id"]),
    "transition_status": (ProjectStore, ["tenant", "name", "expected", "target", "generation"]),
    "close": (ProjectStore, ["tenant", "name", "closed_group_id", "generation"]),
    "find_running_by_home_pod_id": (Ownership, ["pod_id"]),
    "find_by_home_pod_id": (Ownership, ["pod_id"]),
    "sum_score_by_home_pod_id": (Ownership, ["pod_id"]),
    "find_projects_needing_owner": (Ownership, ["lease_ttl", "limit", "skip"]),
    "find_pending_placement": (Ownership, ["lease_ttl", "pending_ttl", "limit"]),
    "mark_pending_placement": (ProjectStore, ["tenant", "name"]),
    "set_owner_required": (ProjectStore, ["tenant", "name", "value"]),
    "find_owner_required": (ProjectStore, []),
    "set_lifecycle_type": (ProjectStore, ["tenant", "name", "value"]),
    "set_placement": (ProjectStore, ["tenant", "name", "selector", "score"]),
}


def test_p93_every_section_9_operation_has_a_store_counterpart() -> None:
    import inspect

    assert len(SECTION_9) == 16, "project-lifecycle.md §9 lists sixteen operations"
    for op, (cls, expected) in SECTION_9.items():
        assert op in vars(cls), f"{cls.__name__}.{op} is missing"
        params = list(inspect.signature(vars(cls)[op]).parameters.values())[1:]  # without self
        positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert positional == expected, f"{cls.__name__}.{op}{positional}: §9 gives {expected}"
        assert all(
            p.default is not inspect.Parameter.empty for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY
        ), f"{op}: extra keyword parameters are optional"
    skip = inspect.signature(Ownership.find_projects_needing_owner).parameters["skip"]
    assert skip.default == 0, "skip is optional in §9 (limit[, skip])"


def test_p04_a_new_project_is_init_unowned_auto_and_generation_zero(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "fresh")
    assert (project.status, project.kind, project.lifecycle_type) == (S.INIT, Kind.USER, LifecycleType.AUTO)
    assert project.owner_required is False and project.generation == 0 and project.pending_since is None
    assert project.project_group == "default" and project.home_node is None and project.error is None
    owner = own.owner(project.id, TTL)
    assert owner.pod_id is None and not owner.live and owner.expires_in is None
    assert ps.list() == [project] and ps.get(T, "fresh") == project
    assert store.workspaces.workspace(project.workspace_id).head_snapshot_id is None


def test_create_twice_is_refused_and_unknown_projects_are_not_found(store: Store) -> None:
    ps, own = stores(store)
    first = ps.create(T, "p")
    with pytest.raises(ConflictError) as info:
        ps.create(T, "p")
    assert info.value.code == "project-exists"
    assert ps.list() == [first] and len(store.workspaces.workspaces()) == 1
    with pytest.raises(NotFoundError) as missing:
        ps.get(T, "nope")
    assert missing.value.code == "project-not-found"
    with pytest.raises(NotFoundError):
        own.claim(T, "nope", pod(), "n", None, TTL)


def test_p03_the_status_column_accepts_only_the_six_statuses(store: Store) -> None:
    import sqlite3

    import psycopg

    ps, _ = stores(store)
    project = ps.create(T, "p")
    update = "UPDATE projects SET status = :s WHERE id = :id"
    for status in ("INIT", "RECOVERING", "RUNNING", "SUSPENDING", "SUSPENDED", "CLOSED", "INIT"):
        with store.db.sql_transaction() as tx:  # the same statement with each of the six values is accepted
            tx.execute_sql(update, {"s": status, "id": project.id})
    for other in ("ARCHIVED", "PENDING", "ACTIVE", "running", ""):
        with pytest.raises(TenureError) as info:
            with store.db.sql_transaction() as tx:
                tx.execute_sql(update, {"s": other, "id": project.id})
        cause = info.value.__cause__
        if store.db.dialect == "sqlite":
            assert isinstance(cause, sqlite3.IntegrityError) and "CHECK constraint failed" in str(cause), cause
            assert "status IN (" in str(cause), cause
        else:
            assert isinstance(cause, psycopg.errors.CheckViolation), cause
            assert cause.diag.constraint_name == "projects_status_check", cause
        assert ps.get(T, "p").status is S.INIT


def test_p16_writing_one_axis_never_changes_the_others(store: Store) -> None:
    ps, own = stores(store)
    a = pod()
    project = ps.create(T, "p")
    assert ps.set_owner_required(T, "p", True)
    after_flag = ps.get(T, "p")
    assert (after_flag.status, after_flag.generation, after_flag.lifecycle_type) == (S.INIT, 0, LifecycleType.AUTO)
    assert own.owner(project.id, TTL).pod_id is None
    claimed = own.claim(T, "p", a, "node-a", None, TTL)
    assert claimed is not None
    assert (claimed.status, claimed.owner_required, claimed.lifecycle_type) == (S.INIT, True, LifecycleType.AUTO)
    running = move_to(ps, claimed, S.RUNNING)
    assert own.owner(project.id, TTL).pod_id == a and running.owner_required is True
    ps.set_lifecycle_type(T, "p", LifecycleType.PERMANENT)
    final = ps.get(T, "p")
    assert (final.status, final.owner_required, final.generation) == (S.RUNNING, True, claimed.generation)
    assert own.holds(project.id, a, TTL)


# --------------------------------------------------------------------------- bad input


BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("a/b", id="slash"),
    pytest.param("..", id="dotdot"),
    pytest.param(".", id="dot"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\tb", id="tab"),
    pytest.param("a\nb", id="newline-inside"),
    pytest.param("a\x1b[31m", id="escape"),
    pytest.param("x" * 200, id="200-chars"),
    pytest.param("x" * 129, id="129-chars"),
    pytest.param("spa ce", id="space"),
    pytest.param("-lead", id="leading-dash"),
    pytest.param("p\n", id="trailing-newline"),
]


@pytest.mark.parametrize("field", ["tenant", "name", "group"])
@pytest.mark.parametrize("bad", BAD_NAMES)
def test_bad_names_are_refused_with_invalid_name_and_nothing_is_written(store: Store, field: str, bad: str) -> None:
    ps, _ = stores(store)
    args = {"tenant": T, "name": "ok", "group": "default"}
    args[field] = bad
    with pytest.raises(InvalidInputError) as info:
        ps.create(args["tenant"], args["name"], group=args["group"])
    assert info.value.code == "invalid-name"
    assert ps.list() == [] and store.workspaces.workspaces() == []


def test_a_128_character_name_is_the_longest_accepted(store: Store) -> None:
    ps, _ = stores(store)
    assert ps.create(T, "x" * 128).name == "x" * 128


# --------------------------------------------------------------------------- claim: P-30, P-94..P-97, P-19, P-14


def test_p94_claim_of_a_free_project_sets_holder_node_and_store_clock_and_clears_pending(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    assert ps.mark_pending_placement(T, "p")
    a = pod("node-a")
    before = now(store)
    claimed = own.claim(T, "p", a, "node-a", "http://a:8470", TTL)
    after = now(store)
    assert claimed is not None and claimed.home_node == "node-a" and claimed.pending_since is None
    assert claimed == ps.get(T, "p")
    owner = own.owner(project.id, TTL)
    assert owner.pod_id == a and owner.node == "node-a" and owner.live
    assert owner.expires_in is not None
    # claimed_at lies between the two store-clock readings
    assert before - 1e-3 <= now(store) + owner.expires_in - TTL <= after + 1.0
    assert TTL - (after - before) - 1.0 < owner.expires_in <= TTL + 1e-3
    assert own.holds(project.id, a, TTL) and not own.holds(project.id, pod(), TTL)


def test_p30_claim_by_the_holder_is_a_renewal(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a = pod()
    first = own.claim(T, "p", a, "node-a", None, TTL)
    assert first is not None
    wait_past(store, 0.2)
    aged = own.owner(project.id, TTL).expires_in
    again = own.claim(T, "p", a, "node-a", None, TTL)
    assert again is not None and again.generation == first.generation
    assert own.owner(project.id, TTL).expires_in > aged + 0.1  # type: ignore[operator]


def test_p30_p95_claim_while_another_pod_holds_a_valid_lease_returns_none_and_writes_nothing(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod("node-a"), pod("node-b")
    assert ps.mark_pending_placement(T, "p")
    assert own.claim(T, "p", a, "node-a", None, TTL) is not None
    ps.mark_pending_placement(T, "p")
    before = row(ps, own, project)
    assert own.claim(T, "p", b, "node-b", None, TTL) is None
    assert row(ps, own, project) == before
    assert before[1] == a and before[2] is True


def test_p30_p22_a_restarted_process_with_the_same_node_name_is_not_a_renewal(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    old, new = PodIdentity.fresh("node-a"), PodIdentity.fresh("node-a")
    assert old.pod_id != new.pod_id
    assert own.claim(T, "p", old.pod_id, old.node_name, None, TTL) is not None
    before = row(ps, own, project)
    assert own.claim(T, "p", new.pod_id, new.node_name, None, TTL) is None
    assert row(ps, own, project) == before


def test_p19_p30_an_expired_lease_can_be_claimed_by_any_pod(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    first = own.claim(T, "p", a, "node-a", None, TTL)
    assert first is not None
    wait_past(store, 0.05)
    owner = own.owner(project.id, 0.05)
    assert owner.pod_id == a and not owner.live and owner.expires_in is not None and owner.expires_in < 0
    assert not own.holds(project.id, a, 0.05)
    taken = own.claim(T, "p", b, "node-b", None, 0.05)
    assert taken is not None and taken.home_node == "node-b"
    assert own.owner(project.id, TTL).pod_id == b


def test_p30_a_released_lease_is_free(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    assert own.claim(T, "p", a, "node-a", None, TTL) is not None
    assert own.release_lease(T, "p", a)
    assert own.claim(T, "p", b, "node-b", None, TTL) is not None
    assert own.owner(project.id, TTL).pod_id == b


def test_p33_the_lease_ttl_is_policy_read_at_each_decision(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    assert own.claim(T, "p", a, "node-a", None, TTL) is not None
    wait_past(store, 0.1)
    before = ps.get(T, "p")
    # lowering the TTL expires the claim at once ...
    assert own.owner(project.id, 0.05).live is False
    # ... raising it makes the same claim valid again at once, with no row rewritten
    assert own.owner(project.id, TTL).live is True
    assert own.claim(T, "p", b, "node-b", None, TTL) is None
    assert ps.get(T, "p") == before
    # and a claim judged with the short TTL takes it over
    assert own.claim(T, "p", b, "node-b", None, 0.05) is not None
    assert own.owner(project.id, TTL).pod_id == b


def test_p96_claim_rejects_a_closed_project_and_leaves_the_row_unchanged(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    claimed = own.claim(T, "p", a, "node-a", None, TTL)
    assert claimed is not None
    ps.close(T, "p", "closed", claimed.generation)
    before = row(ps, own, project)
    for who in (a, b):
        with pytest.raises(ProjectClosedError) as info:
            own.claim(T, "p", who, "node", None, TTL)
        assert info.value.code == "project-closed"
        assert row(ps, own, project) == before
    # even with an expired lease
    wait_past(store, 0.02)
    with pytest.raises(ProjectClosedError):
        own.claim(T, "p", b, "node-b", None, 0.01)
    assert row(ps, own, project) == before


@pytest.mark.parametrize("podless", ["", None])
def test_p97_claim_rejects_a_podless_caller_with_an_argument_error(store: Store, podless: str | None) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    before = row(ps, own, project)
    with pytest.raises(InvalidInputError) as info:
        own.claim(T, "p", podless, "node", None, TTL)  # type: ignore[arg-type]
    assert info.value.code == "podless-claim"
    assert row(ps, own, project) == before


def test_claim_rejects_a_homeless_project(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "h", lifecycle_type=LifecycleType.HOMELESS)
    before = row(ps, own, project)
    with pytest.raises(ProjectHomelessError) as info:
        own.claim(T, "h", pod(), "node", None, TTL)
    assert info.value.code == "project-homeless"
    assert row(ps, own, project) == before


def test_generation_rises_when_the_holder_changes_but_not_on_renewal(store: Store) -> None:
    ps, own = stores(store)
    ps.create(T, "p")
    a, b = pod(), pod()
    first = own.claim(T, "p", a, "node-a", None, TTL)
    assert first is not None and first.generation == 1
    assert own.claim(T, "p", a, "node-a", None, TTL).generation == 1  # type: ignore[union-attr]
    assert own.renew_leases(a) is not None and ps.get(T, "p").generation == 1
    wait_past(store, 0.02)
    taken = own.claim(T, "p", b, "node-b", None, 0.01)
    assert taken is not None and taken.generation == 2
    assert own.claim(T, "p", b, "node-b", None, TTL).generation == 2  # type: ignore[union-attr]
    wait_past(store, 0.02)
    back = own.claim(T, "p", a, "node-a", None, 0.01)
    assert back is not None and back.generation == 3
    # the project generation is its workspace's writer generation
    assert store.workspaces.workspace(back.workspace_id).writer_generation == 3


def test_p14_takeover_does_not_change_status_and_fences_the_former_holder(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    claimed = own.claim(T, "p", a, "node-a", None, TTL)
    assert claimed is not None
    running = move_to(ps, claimed, S.RUNNING)
    assert own.renew_leases(a) == Renewal(lost=0, status="RUNNING")  # a beats: it has a pod lease now
    wait_past(store, 0.02)
    taken = own.claim(T, "p", b, "node-b", None, 0.01)
    assert taken is not None and taken.status is S.RUNNING and taken.generation == running.generation + 1
    assert own.renew_leases(a) == Renewal(lost=1, status="RUNNING"), "the takeover moved a's lost counter"
    with pytest.raises(StaleGenerationError) as info:
        ps.transition_status(T, "p", S.RUNNING, S.SUSPENDING, running.generation)
    assert info.value.code == "stale-generation"
    assert ps.get(T, "p") == taken
    assert own.owner(project.id, TTL).pod_id == b


# --------------------------------------------------------------------------- renew / release: P-98..P-102


def test_p98_renew_leases_extends_every_lease_of_the_pod_in_one_row(store: Store) -> None:
    """P-98 as ADR 0016 maps it: one renewal of the pod's own lease extends every lease it holds."""
    ps, own = stores(store)
    a, b = pod(), pod()
    mine = [ps.create("t1", "p1"), ps.create("t1", "p2"), ps.create("t2", "p1")]
    theirs = ps.create("t2", "p2")
    for p in mine:
        assert own.claim(p.tenant, p.name, a, "node-a", None, TTL) is not None
    assert own.claim(theirs.tenant, theirs.name, b, "node-b", None, TTL) is not None
    wait_past(store, 0.2)
    before = {p.id: own.owner(p.id, TTL).expires_in for p in [*mine, theirs]}
    assert own.renew_leases(a) == Renewal(lost=0, status="RUNNING")
    after = {p.id: own.owner(p.id, TTL).expires_in for p in [*mine, theirs]}
    for p in mine:
        assert after[p.id] > before[p.id] + 0.1  # type: ignore[operator]
    assert after[theirs.id] <= before[theirs.id]  # type: ignore[operator]
    assert own.renew_leases(b) == Renewal(lost=0, status="RUNNING")
    wait_past(store, 0.2)
    again = {p.id: own.owner(p.id, TTL).expires_in for p in mine}
    assert own.renew_leases(a) is not None
    for p in mine:  # bound to the pod's lease now: each later renewal extends them all again
        assert own.owner(p.id, TTL).expires_in > again[p.id] + 0.1  # type: ignore[operator]


def test_p99_p100_a_takeover_moves_the_lost_counter_and_the_taken_row_is_not_renewed(store: Store) -> None:
    ps, own = stores(store)
    a, b = pod(), pod()
    projects = [ps.create(T, f"p{i}") for i in range(3)]
    for p in projects:
        assert own.claim(T, p.name, a, "node-a", None, TTL) is not None
    assert own.renew_leases(a) == Renewal(lost=0, status="RUNNING")
    wait_past(store, 0.02)
    assert own.claim(T, "p1", b, "node-b", None, 0.01) is not None
    taken_expiry = own.owner(projects[1].id, TTL).expires_in
    wait_past(store, 0.02)
    assert own.renew_leases(a) == Renewal(lost=1, status="RUNNING")
    owner = own.owner(projects[1].id, TTL)
    assert owner.pod_id == b and owner.expires_in < taken_expiry  # type: ignore[operator]
    assert names(own.find_by_home_pod_id(a)) == {"p0", "p2"}


def test_p101_release_leases_frees_every_lease_of_the_pod_only(store: Store) -> None:
    ps, own = stores(store)
    a, b = pod(), pod()
    for name in ("p1", "p2"):
        ps.create(T, name)
        assert own.claim(T, name, a, "node-a", None, TTL) is not None
    other = ps.create(T, "p3")
    assert own.claim(T, "p3", b, "node-b", None, TTL) is not None
    assert own.release_leases(a) == 2
    for name in ("p1", "p2"):
        project = ps.get(T, name)
        owner = own.owner(project.id, TTL)
        assert owner.pod_id is None and owner.node is None and not owner.live and project.home_node is None
    assert own.owner(other.id, TTL).pod_id == b
    assert own.release_leases(a) == 0
    assert own.renew_leases(a) == Renewal(lost=0, status="RUNNING"), "a release is not a loss"
    assert own.find_by_home_pod_id(a) == []


def test_p102_release_lease_only_by_the_holder(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    assert own.claim(T, "p", a, "node-a", None, TTL) is not None
    before = row(ps, own, project)
    assert own.release_lease(T, "p", b) is False
    assert row(ps, own, project) == before
    assert own.release_lease(T, "p", a) is True
    assert own.owner(project.id, TTL).pod_id is None
    assert own.release_lease(T, "p", a) is False
    assert own.release_lease(T, "nope", a) is False


# --------------------------------------------------------------------------- transition_status: P-103, P-15


def test_p103_transition_status_conflict_raises_and_leaves_the_row_unchanged(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    claimed = own.claim(T, "p", pod(), "node", None, TTL)
    assert claimed is not None
    before = row(ps, own, project)
    with pytest.raises(StatusConflictError) as info:
        ps.transition_status(T, "p", S.RUNNING, S.SUSPENDING, claimed.generation)
    assert info.value.code == "status-conflict"
    assert info.value.context["expected"] == "RUNNING" and info.value.context["actual"] == "INIT"
    assert row(ps, own, project) == before


def test_p103_transition_status_with_a_stale_generation_is_refused(store: Store) -> None:
    ps, own, project, old, _ = taken_over(store)
    before = row(ps, own, project)
    with pytest.raises(StaleGenerationError) as info:
        ps.transition_status(T, "p", S.INIT, S.RECOVERING, old.generation)
    assert info.value.context["current_generation"] == old.generation + 1
    assert row(ps, own, project) == before


def test_p15_transition_status_follows_the_edge_table(store: Store) -> None:
    ps, own = stores(store)
    edges = [(src, dst) for src in S for dst in S if PROJECT.allows(src, dst)]
    assert len(edges) == 13
    for i, (src, dst) in enumerate(edges):
        project = move_to(ps, ps.create(T, f"e{i}"), src)
        moved = ps.transition_status(T, project.name, src, dst, project.generation)
        assert moved.status is dst and ps.get(T, project.name).status is dst
    illegal = [(src, dst) for src in S for dst in S if not PROJECT.allows(src, dst)]
    for i, (src, dst) in enumerate(illegal):
        project = move_to(ps, ps.create(T, f"i{i}"), src)
        before = row(ps, own, project)
        with pytest.raises(IllegalTransitionError) as info:
            ps.transition_status(T, project.name, src, dst, project.generation)
        assert info.value.context["machine"] == "project"
        assert (info.value.context["state"], info.value.context["target"]) == (src.name, dst.name)
        assert row(ps, own, project) == before


def test_p15_transition_status_of_an_unknown_project_is_not_found(store: Store) -> None:
    ps, _ = stores(store)
    with pytest.raises(NotFoundError):
        ps.transition_status(T, "nope", S.INIT, S.RECOVERING, 0)


# --------------------------------------------------------------------------- close: P-104, P-67


def test_p104_close_sets_closed_and_the_closed_group(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    claimed = own.claim(T, "p", pod(), "node", None, TTL)
    assert claimed is not None
    running = move_to(ps, claimed, S.RUNNING)
    closed = ps.close(T, "p", "archive-7", running.generation)
    assert closed.status is S.CLOSED and closed.project_group == "archive-7"
    assert ps.get(T, "p") == closed and project.project_group == "default"


def test_p104_p67_close_rejects_a_system_project_and_changes_nothing(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "hub", kind=Kind.SYSTEM)
    claimed = own.claim(T, "hub", pod(), "node", None, TTL)
    assert claimed is not None
    running = move_to(ps, claimed, S.RUNNING)
    before = row(ps, own, project)
    with pytest.raises(SystemProjectError) as info:
        ps.close(T, "hub", "closed", running.generation)
    assert info.value.code == "system-project"
    assert row(ps, own, project) == before and before[0].status is S.RUNNING


def test_close_is_fenced_and_a_closed_project_cannot_be_closed_again(store: Store) -> None:
    ps, own, project, old, new = taken_over(store)
    before = row(ps, own, project)
    with pytest.raises(StaleGenerationError):
        ps.close(T, "p", "closed", old.generation)
    assert row(ps, own, project) == before
    ps.close(T, "p", "closed", new.generation)
    closed = row(ps, own, project)
    with pytest.raises(IllegalTransitionError):
        ps.close(T, "p", "other", new.generation)
    assert row(ps, own, project) == closed and closed[0].project_group == "closed"


# --------------------------------------------------------------------------- holder queries: P-105, P-106


def test_p105_find_by_home_pod_id_and_find_running_by_home_pod_id(store: Store) -> None:
    ps, own = stores(store)
    a, b = pod("same-node"), pod("same-node")
    layout = {
        "run": (a, S.RUNNING),
        "init": (a, S.INIT),
        "susp": (a, S.SUSPENDING),
        "rec": (a, S.RECOVERING),
        "other": (b, S.RUNNING),
        "free": (None, S.RUNNING),
    }
    for name, (holder, status) in layout.items():
        project = ps.create(T, name)
        if holder is not None:
            project = own.claim(T, name, holder, "same-node", None, TTL)  # type: ignore[assignment]
        move_to(ps, project, status)
    assert [p.name for p in own.find_running_by_home_pod_id(a)] == ["run"]
    assert names(own.find_by_home_pod_id(a)) == {"run", "init", "susp", "rec"}
    assert [p.name for p in own.find_running_by_home_pod_id(b)] == ["other"]
    assert names(own.find_by_home_pod_id(b)) == {"other"}
    assert own.find_by_home_pod_id(pod()) == [] and own.find_running_by_home_pod_id(pod()) == []
    # keyed on the pod id, never on the node name
    assert own.find_by_home_pod_id("same-node") == []
    found = own.find_by_home_pod_id(a)
    assert all(isinstance(p, Project) and p == ps.get(T, p.name) for p in found)


def test_p106_sum_score_by_home_pod_id(store: Store) -> None:
    ps, own = stores(store)
    a, b = pod(), pod()
    for name, holder, score in [("p1", a, 2.5), ("p2", a, 4.0), ("p3", b, 7.0), ("p4", None, 11.0)]:
        ps.create(T, name)
        ps.set_placement(T, name, {}, score)
        if holder:
            assert own.claim(T, name, holder, "n", None, TTL) is not None
    assert own.sum_score_by_home_pod_id(a) == pytest.approx(6.5)
    assert own.sum_score_by_home_pod_id(b) == pytest.approx(7.0)
    assert own.sum_score_by_home_pod_id(pod()) == 0.0
    assert own.release_lease(T, "p2", a)
    assert own.sum_score_by_home_pod_id(a) == pytest.approx(2.5)


# --------------------------------------------------------------------------- selector: P-87, P-88, P-107


LEASES = ("none", "live", "expired", "released")


def _needs_owner(status: ProjectStatus, lt: LifecycleType, required: bool, lease: str) -> bool:
    return (
        status in (S.INIT, S.RECOVERING, S.RUNNING)
        and (lt is LifecycleType.PERMANENT or (lt is LifecycleType.AUTO and required))
        and lease != "live"
    )


def test_p87_p88_p107_find_projects_needing_owner_selects_exactly_the_right_set(store: Store) -> None:
    ps, own = stores(store)
    a = pod("node-a")
    combos = [
        c
        for c in itertools.product(list(S), list(LifecycleType), (False, True), LEASES)
        if not (c[1] is LifecycleType.HOMELESS and c[3] != "none")
    ]

    def build(combo: tuple[ProjectStatus, LifecycleType, bool, str], name: str) -> None:
        status, lt, required, lease = combo
        project = ps.create(T, name, lifecycle_type=lt)
        if required:
            assert ps.set_owner_required(T, name, True)
        if lease != "none":
            project = own.claim(T, name, a, "node-a", None, TTL)  # type: ignore[assignment]
            assert project is not None
        move_to(ps, project, status)
        if lease == "released":
            assert own.release_lease(T, name, a)

    label = {c: f"{c[0].name}-{c[1].name}-{int(c[2])}-{c[3]}".lower() for c in combos}
    # expired claims first, then a gap on the store clock, then the live ones
    for combo in combos:
        if combo[3] != "live":
            build(combo, label[combo])
    wait_past(store, 0.5)
    midpoint = now(store)
    wait_past(store, 0.5)
    for combo in combos:
        if combo[3] == "live":
            build(combo, label[combo])

    def ttl() -> float:
        """A TTL under which, right now, claims before the midpoint have expired and those after it are live."""
        return now(store) - midpoint - 0.25

    expected = {label[c] for c in combos if _needs_owner(*c)}
    assert len(expected) == 3 * 3 * 3  # 3 statuses x (PERMANENT x2 + AUTO/required) x 3 lease states
    found = own.find_projects_needing_owner(ttl(), 10_000)
    assert [p.name for p in found if p.name not in expected] == []
    assert names(found) == expected and len(found) == len(expected)
    for combo in combos:
        live = own.owner(ps.get(T, label[combo]).id, ttl()).live
        assert live is (combo[3] == "live"), label[combo]

    # limit and skip: pages are disjoint, bounded by the limit, and cover the set
    assert len(own.find_projects_needing_owner(ttl(), 5)) == 5
    pages = [own.find_projects_needing_owner(ttl(), 4, skip) for skip in range(0, len(expected) + 4, 4)]
    assert all(len(page) <= 4 for page in pages)
    flat = [p.name for page in pages for p in page]
    assert len(flat) == len(set(flat)) == len(expected) and set(flat) == expected
    assert own.find_projects_needing_owner(ttl(), 10, skip=len(expected)) == []
    assert own.find_projects_needing_owner(ttl(), 0) == []
    # the TTL is policy: with a long one the expired claims count as live again
    long_ttl = names(own.find_projects_needing_owner(3600.0, 10_000))
    assert long_ttl == {label[c] for c in combos if _needs_owner(*c) and c[3] != "expired"}


def test_p107_find_projects_needing_owner_is_served_by_an_index(store: Store) -> None:
    _, own = stores(store)
    params = own.needing_owner_params(TTL, 5, 0)
    with store.db.sql_transaction() as tx:
        if tx.dialect == "postgres":
            tx.execute_sql("SET LOCAL enable_seqscan = off")
            plan = " ".join(r["QUERY PLAN"] for r in tx.execute_sql("EXPLAIN " + own.needing_owner_sql(), params))
        else:
            plan = " ".join(
                r["detail"] for r in tx.execute_sql("EXPLAIN QUERY PLAN " + own.needing_owner_sql(), params)
            )
    assert "projects_needing_owner" in plan, plan


# --------------------------------------------------------------------------- pending placement: P-108, P-109


def test_p109_mark_pending_placement_keeps_the_first_timestamp_and_a_claim_clears_it(store: Store) -> None:
    ps, own = stores(store)
    ps.create(T, "p")
    assert ps.mark_pending_placement(T, "p") is True
    first = ps.get(T, "p").pending_since
    assert first is not None
    wait_past(store, 0.02)
    assert ps.mark_pending_placement(T, "p") is False
    assert ps.get(T, "p").pending_since == first
    a = pod()
    claimed = own.claim(T, "p", a, "node-a", None, TTL)
    assert claimed is not None and claimed.pending_since is None
    assert ps.mark_pending_placement(T, "p") is True
    assert own.claim(T, "p", a, "node-a", None, TTL).pending_since is None  # type: ignore[union-attr]


def test_p108_find_pending_placement_returns_unowned_waiting_projects(store: Store) -> None:
    ps, own = stores(store)
    a = pod()
    for name in ("old", "waiting", "owned", "expired", "never"):
        ps.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
    ps.create(T, "no-demand")  # AUTO with no demand: it needs no owner, so it is no demand for room
    assert ps.mark_pending_placement(T, "no-demand")
    assert ps.mark_pending_placement(T, "old")
    wait_past(store, 1.0)
    assert ps.mark_pending_placement(T, "waiting")
    assert own.claim(T, "owned", a, "node-a", None, TTL) is not None
    assert ps.mark_pending_placement(T, "owned")
    assert own.claim(T, "expired", a, "node-a", None, TTL) is not None
    assert ps.mark_pending_placement(T, "expired")
    assert [p.name for p in own.find_pending_placement(TTL, 3600.0)] == ["old", "waiting"]
    assert names(own.find_pending_placement(TTL, 0.7)) == {"waiting"}
    wait_past(store, 0.02)
    assert names(own.find_pending_placement(0.01, 3600.0)) == {"old", "waiting", "owned", "expired"}
    assert [p.name for p in own.find_pending_placement(0.01)] == ["old", "waiting", "owned", "expired"]
    assert [p.name for p in own.find_pending_placement(0.01, limit=1)] == ["old"]


# --------------------------------------------------------------------------- owner_required: P-110


def test_p110_set_owner_required_writes_only_when_the_value_flips(store: Store) -> None:
    ps, _ = stores(store)
    ps.create(T, "p")
    ps.create(T, "q")
    assert ps.set_owner_required(T, "p", False) is False
    untouched = ps.get(T, "p")
    assert ps.set_owner_required(T, "p", True) is True
    flipped = ps.get(T, "p")
    assert flipped.owner_required is True and flipped.updated_at >= untouched.updated_at
    wait_past(store, 0.02)
    assert ps.set_owner_required(T, "p", True) is False
    assert ps.get(T, "p") == flipped  # no write: updated_at unchanged
    assert [p.name for p in ps.find_owner_required()] == ["p"]
    assert ps.set_owner_required(T, "p", False) is True
    assert ps.find_owner_required() == []
    assert ps.set_owner_required(T, "nope", True) is False


def test_p116_owner_required_is_derived_from_demand_records(store: Store) -> None:
    ps, _ = stores(store)
    ps.create(T, "p")
    assert ps.add_demand(T, "p", "scheduler") is True
    assert ps.add_demand(T, "p", "hook") is False
    assert ps.add_demand(T, "p", "hook") is False
    assert ps.remove_demand(T, "p", "scheduler") is False
    assert ps.get(T, "p").owner_required is True
    assert ps.remove_demand(T, "p", "hook") is True
    assert ps.get(T, "p").owner_required is False
    ps.set_owner_required(T, "p", True)
    assert ps.rederive_all() == 1 and ps.get(T, "p").owner_required is False
    assert ps.rederive_all() == 0


# --------------------------------------------------------------------------- lifecycle type: P-111


def test_p111_set_lifecycle_type_switches_between_auto_ephemeral_and_permanent(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    claimed = own.claim(T, "p", pod(), "node", None, TTL)
    assert claimed is not None
    for value in (LifecycleType.EPHEMERAL, LifecycleType.PERMANENT, LifecycleType.AUTO, LifecycleType.PERMANENT):
        changed = ps.set_lifecycle_type(T, "p", value)
        assert changed.lifecycle_type is value and changed.generation == claimed.generation
        assert changed.status is S.INIT and own.owner(project.id, TTL).live


@pytest.mark.parametrize(
    "start", [LifecycleType.AUTO, LifecycleType.EPHEMERAL, LifecycleType.PERMANENT, LifecycleType.HOMELESS]
)
def test_p111_set_lifecycle_type_refuses_homeless_as_target_and_as_current(store: Store, start: LifecycleType) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p", lifecycle_type=start)
    before = row(ps, own, project)
    with pytest.raises(InvalidInputError) as info:
        ps.set_lifecycle_type(T, "p", LifecycleType.HOMELESS)
    assert info.value.code == "lifecycle-type-refused"
    assert row(ps, own, project) == before
    if start is LifecycleType.HOMELESS:
        for value in (LifecycleType.AUTO, LifecycleType.EPHEMERAL, LifecycleType.PERMANENT):
            with pytest.raises(InvalidInputError) as again:
                ps.set_lifecycle_type(T, "p", value)
            assert again.value.code == "lifecycle-type-refused"
            assert row(ps, own, project) == before


def test_p111_set_lifecycle_type_refuses_system_projects(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "hub", kind=Kind.SYSTEM)
    before = row(ps, own, project)
    for value in (LifecycleType.EPHEMERAL, LifecycleType.PERMANENT, LifecycleType.AUTO):
        with pytest.raises(SystemProjectError) as info:
            ps.set_lifecycle_type(T, "hub", value)
        assert info.value.code == "system-project"
        assert row(ps, own, project) == before
    with pytest.raises(NotFoundError):
        ps.set_lifecycle_type(T, "nope", LifecycleType.AUTO)


# --------------------------------------------------------------------------- placement: P-112


def test_p112_set_placement_stores_the_selector_and_the_score(store: Store) -> None:
    ps, _ = stores(store)
    ps.create(T, "p")
    assert ps.get(T, "p").placement_selector == {} and ps.get(T, "p").placement_score == 1.0
    done = ps.set_placement(T, "p", {"zone": "eu-1", "gpu": "a100", "k8s.io/arch": "amd64"}, 3.5)
    assert done.placement_selector == {"zone": "eu-1", "gpu": "a100", "k8s.io/arch": "amd64"}
    assert done.placement_score == 3.5 and ps.get(T, "p") == done
    cleared = ps.set_placement(T, "p", {}, 1)
    assert cleared.placement_selector == {} and cleared.placement_score == 1.0
    with pytest.raises(NotFoundError):
        ps.set_placement(T, "nope", {}, 1.0)


BAD_SELECTORS = [
    pytest.param(["zone", "eu"], id="not-a-dict"),
    pytest.param({"zone": 1}, id="non-string-value"),
    pytest.param({1: "eu"}, id="non-string-key"),
    pytest.param({"": "eu"}, id="empty-key"),
    pytest.param({"zone": ""}, id="empty-value"),
    pytest.param({"zo ne": "eu"}, id="space-in-key"),
    pytest.param({"zone": "e;u"}, id="semicolon-in-value"),
    pytest.param({"zone": "eu,us"}, id="comma-in-value"),
    pytest.param({"k" * 64: "eu"}, id="key-64-chars"),
    pytest.param({"zone": "-eu"}, id="value-leading-dash"),
    pytest.param({"zone": "eu\x00"}, id="nul"),
    pytest.param({"zone": "eu\n"}, id="trailing-newline"),
]


@pytest.mark.parametrize("selector", BAD_SELECTORS)
def test_p112_an_invalid_selector_fails_validation_and_nothing_is_written(store: Store, selector: object) -> None:
    ps, _ = stores(store)
    ps.create(T, "p")
    ps.set_placement(T, "p", {"zone": "eu"}, 2.0)
    before = ps.get(T, "p")
    with pytest.raises(InvalidInputError) as info:
        ps.set_placement(T, "p", selector, 5.0)  # type: ignore[arg-type]
    assert info.value.code == "invalid-selector"
    assert ps.get(T, "p") == before


@pytest.mark.parametrize("score", [0, -1.0, math.nan, math.inf, "3"])
def test_p112_an_invalid_score_is_refused_and_nothing_is_written(store: Store, score: object) -> None:
    ps, _ = stores(store)
    ps.create(T, "p")
    before = ps.get(T, "p")
    with pytest.raises(InvalidInputError) as info:
        ps.set_placement(T, "p", {"zone": "eu"}, score)  # type: ignore[arg-type]
    assert info.value.code == "invalid-score"
    assert ps.get(T, "p") == before


# --------------------------------------------------------------------------- sessions: P-130, P-42, P-34


def test_sessions_bind_rebind_same_connection_and_already_bound(store: Store) -> None:
    ps, _ = stores(store)
    project = ps.create(T, "p")
    a = pod()
    session = ps.create_session(project)
    assert session.bound_connection_id is None and session.project_id == project.id
    bound = ps.bind_session(session.id, "conn-1", a, project.generation)
    assert (bound.bound_connection_id, bound.bound_pod_id) == ("conn-1", a)
    assert ps.bind_session(session.id, "conn-1", a, project.generation) == bound
    with pytest.raises(AlreadyBoundError) as info:
        ps.bind_session(session.id, "conn-2", pod(), project.generation)
    assert info.value.code == "already-bound" and info.value.context["connection"] == "conn-1"
    assert ps.session(session.id) == bound
    with pytest.raises(NotFoundError):
        ps.bind_session("c-nope", "conn-1", a, project.generation)


def test_p42_unbind_sessions_is_idempotent_and_scoped_to_the_projects(store: Store) -> None:
    ps, _ = stores(store)
    p, q = ps.create(T, "p"), ps.create(T, "q")
    s1, s2, s3 = ps.create_session(p), ps.create_session(p), ps.create_session(q)
    ps.bind_session(s1.id, "c1", "pod", p.generation)
    ps.bind_session(s3.id, "c3", "pod", q.generation)
    assert ps.unbind_sessions(p) == 1
    assert ps.unbind_sessions(p) == 0
    assert [s.bound_connection_id for s in ps.sessions(p)] == [None, None]
    assert ps.session(s3.id).bound_connection_id == "c3"
    assert ps.session(s2.id).bound_pod_id is None
    assert ps.bind_session(s1.id, "c9", "pod", p.generation).bound_connection_id == "c9"
    assert ps.unbind_sessions(p) == 1 and ps.unbind_sessions(q) == 1


def test_p34_a_session_bind_is_fenced_by_the_project_generation(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    a, b = pod(), pod()
    old = own.claim(T, "p", a, "node-a", None, TTL)
    assert old is not None
    session = ps.create_session(old)
    wait_past(store, 0.02)
    new = own.claim(T, "p", b, "node-b", None, 0.01)
    assert new is not None and new.generation == old.generation + 1
    with pytest.raises(StaleGenerationError) as info:
        ps.bind_session(session.id, "conn-a", a, old.generation)
    assert info.value.context["current_generation"] == new.generation
    assert ps.session(session.id).bound_connection_id is None
    assert ps.bind_session(session.id, "conn-b", b, new.generation).bound_pod_id == b
    assert project.id == session.project_id


def test_a_session_bind_on_a_closed_project_is_refused_as_project_closed(store: Store) -> None:
    ps, _ = stores(store)
    project = ps.create(T, "p")
    session = ps.create_session(project)
    closed = ps.close(T, "p", "closed", project.generation)
    with pytest.raises(ProjectClosedError):
        ps.bind_session(session.id, "conn-1", pod(), closed.generation)
    assert ps.session(session.id).bound_connection_id is None


def test_unknown_names_in_writers_change_nothing(store: Store) -> None:
    ps, own = stores(store)
    project = ps.create(T, "p")
    before = row(ps, own, project)
    assert ps.mark_pending_placement(T, "p/../x") is False
    assert ps.set_owner_required("", "p", True) is False
    assert own.release_lease(T, "..", pod()) is False
    with pytest.raises(NotFoundError):
        own.claim(T, "p/x", pod(), "n", None, TTL)
    with pytest.raises(NotFoundError):
        ps.get(T, "x" * 200)
    assert row(ps, own, project) == before


def test_a_lookup_with_a_nul_byte_is_bad_input_not_a_store_failure(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """Invariant 8: bad input carries a stable, non-retryable code; it is never an infrastructure failure."""
    ps, own = stores(store)
    project = ps.create(T, "p")
    before = row(ps, own, project)
    calls: list[Callable[[], object]] = [
        lambda: ps.get(T, "p\x00"),
        lambda: own.claim(T, "p\x00", pod(), "n", None, TTL),
    ]
    for call in calls:
        with pytest.raises((NotFoundError, InvalidInputError)) as info:
            call()
        assert not info.value.retryable
    assert row(ps, own, project) == before
