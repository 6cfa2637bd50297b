"""Ownership: the only module that reads ``home_pod_id``, ``claimed_at``, ``pod_bound`` and the pods'
``lease_renewed_at`` and ``lost`` (with the ``pod_losses`` it is counted from).

A project's owner is a lease: ``home_pod_id`` names the holder (a pod's
fresh UUID), ``claimed_at`` is when it claimed, by the store clock. A pod
that beats has a lease of its own (``pods.lease_renewed_at``, renewed by one
single-row statement per beat), and the leases of the projects it claims
are bound to it (``pod_bound``): they live as long as the pod keeps beating,
so a beat costs the same whatever the number of projects held (ADR 0016). A
holder that never beats (a short-lived CLI pod) has a lease of its own,
``claimed_at`` + TTL. An expired lease means nobody owns the project,
whatever the columns say. The lease TTL is policy, passed in with every
decision, never stored.

The claim is one compare-and-swap statement decided on the row alone (free,
self, or expired). A claim that changes the holder also issues the project
workspace's next writer lease in the same transaction, so the project's
fencing generation *is* its writer generation (ADR 0007).

A takeover (or a fence) records the former holder's loss in a row of its
own, ``pod_losses``, never on that pod's ``pods`` row: the former holder's
beat locks its row until it commits, and a pod paused between its renewal
and its COMMIT would otherwise hold up every claim of its projects. The
holder's next renewal counts those rows into its ``lost`` counter (ADR 0045).

Every other module asks this one; ``tests/unit/test_strict_read_rule.py``
fails if any other source file mentions those columns or runs a named query
(``tenure/store/sql/queries.sql``) that does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tenure.errors import ConflictError, InvalidInputError, NotFoundError
from tenure.projects.records import LifecycleType, Project, project_not_found
from tenure.projects.timeline import Timeline
from tenure.states import PodState, ProjectStatus, WorkspaceState
from tenure.store import Store, Workspace
from tenure.store.connector import Row, Tx
from tenure.store.queries import state_params

#: A project's writer lease lives as long as its ownership: it is revoked by
#: the next holder's claim, so its own TTL is not what ends it.
PROJECT_WRITER_TTL_S = 10 * 365 * 24 * 3600.0

_CLOSED = state_params(ProjectStatus.CLOSED)
#: Who needs an owner: an active status, and PERMANENT or AUTO with demand.
_NEEDS_OWNER = state_params(
    ProjectStatus.INIT, ProjectStatus.RECOVERING, ProjectStatus.RUNNING, LifecycleType.PERMANENT, LifecycleType.AUTO
)

#: a pending_ttl that reaches back past any mark
_FOREVER = 1e12


@dataclass(frozen=True)
class Renewal:
    """What a beat's renewal returns: the pod's lost counter (drift when it moved) and its status."""

    lost: int
    status: str


@dataclass(frozen=True)
class Owner:
    """What the ownership module says about a project's lease, by the store clock."""

    pod_id: str | None
    node: str | None
    live: bool
    expires_in: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NeedingOwnerCursor:
    """Where the next page of :meth:`Ownership.page_projects_needing_owner` starts: after this key.

    ``unbound`` says which of the two statements the key is in (the dead pods' projects come first);
    ``key`` and ``project_id`` are the last row's sort key in that statement's order.
    """

    unbound: bool
    key: float
    project_id: str


#: before the first row of either statement (their keys are store-clock times and ids, never below these)
_FIRST_DEAD = NeedingOwnerCursor(False, -1.0, "")
_FIRST_UNBOUND = NeedingOwnerCursor(True, -1.0, "")


@dataclass(frozen=True)
class Claimed:
    """What a bring's claim returns (:meth:`Ownership.claim_to_bring`): the project under its lease and
    its workspace as the claim's transaction left it."""

    project: Project
    workspace: Workspace


def _need_pod(pod_id: str) -> None:
    if not pod_id:
        raise InvalidInputError(
            "claim needs the caller's pod id",
            code="podless-claim",
            hint="claims are made by a pod; start one or pass --pod-id",
        )


def _owner(row: Row) -> Owner:
    """The :class:`Owner` of a row with ``home_pod_id``, ``home_node`` and ``expires_in``."""
    expires_in = None if row["expires_in"] is None else float(row["expires_in"])
    live = row["home_pod_id"] is not None and expires_in is not None and expires_in > 0
    return Owner(row["home_pod_id"], row["home_node"], live, expires_in)


class ProjectClosedError(ConflictError):
    code = "project-closed"
    default_hint = "a CLOSED project accepts no further operations"


class ProjectSuspendedError(ConflictError):
    """A workspace operation on a SUSPENDED project (P-92): its folder is only in its last snapshot."""

    code = "project-suspended"
    default_hint = (
        "bring it first (`tenure project bring TENANT/NAME`, or POST .../bring); a suspend is never undone implicitly"
    )


class ProjectHomelessError(ConflictError):
    code = "project-homeless"
    default_hint = "HOMELESS projects hold metadata only and never have an owner"


def refuse_unservable(
    ref: str, status: ProjectStatus, lifecycle_type: LifecycleType, *, suspended_ok: bool = False
) -> None:
    """The one refusal of a project that cannot run anywhere now: CLOSED, HOMELESS, or (unless
    ``suspended_ok``: an explicit bring, a claim) SUSPENDED, whose workspace is only in its last snapshot
    (P-92)."""
    if status is ProjectStatus.CLOSED:
        raise ProjectClosedError(f"project {ref} is CLOSED", project=ref)
    if lifecycle_type is LifecycleType.HOMELESS:
        raise ProjectHomelessError(f"project {ref} is HOMELESS", project=ref)
    if status is ProjectStatus.SUSPENDED and not suspended_ok:
        raise ProjectSuspendedError(
            f"project {ref} is SUSPENDED: its workspace is in its last snapshot, on no pod",
            project=ref,
        )


class Ownership:
    """Claims, renewals, releases and the holder queries, over one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.timeline = Timeline(store)

    # ------------------------------------------------------------------ the claim path

    def claim(
        self, tenant: str, name: str, pod_id: str, node_name: str, address: str | None, lease_ttl: float
    ) -> Project | None:
        """CAS: take the lease if it is free, ours, or expired. ``None`` when another pod holds it."""
        _need_pod(pod_id)
        with self.db.transaction() as tx:
            before = tx.one("project_holder_for_update", {"t": tenant, "n": name})
            return self._claim(tx, before, tenant, name, pod_id, node_name, lease_ttl)

    def claim_to_bring(
        self, tenant: str, name: str, pod_id: str, node_name: str, lease_ttl: float, *, expiry_grace: float
    ) -> Claimed | None:
        """A bring's claim and step 1a in one transaction; ``None`` when another pod holds the lease.

        In order: the project row locked; its workspace, if EXPIRING, back to
        IDLE within ``expiry_grace`` (a bring is a use, ADR 0019: past the
        grace ``expiry-grace-over`` is raised and nothing changes); the CAS of
        :meth:`claim` (a takeover issues the next writer lease in it); every
        session of the project unbound, fenced by the generation the claim
        left; and the workspace read back, so the bring restores the head
        this transaction saw without reading it again. The caller's pod
        routing or the bring itself has just read the project row.
        """
        _need_pod(pod_id)
        with self.db.transaction() as tx:
            before = tx.one("project_holder_for_update", {"t": tenant, "n": name})
            if before is not None:
                ws = self.store.workspaces.workspace(before["workspace_id"], tx)
                if ws.state is WorkspaceState.EXPIRING:
                    self.store.workspaces.undo_expiry(ws.id, expiry_grace, tx)
            project = self._claim(tx, before, tenant, name, pod_id, node_name, lease_ttl)
            if project is None:
                return None
            tx.count("sessions_unbind", {"p": project.id, "g": project.generation})
            return Claimed(project, self.store.workspaces.workspace(project.workspace_id, tx))

    def _claim(
        self, tx: Tx, before: Row | None, tenant: str, name: str, pod_id: str, node_name: str, lease_ttl: float
    ) -> Project | None:
        """The CAS of :meth:`claim` in ``tx``, after ``project_holder_for_update`` read ``before``."""
        claimed = tx.execute(
            "project_claim",
            {
                "pod": pod_id,
                "node": node_name,
                "t": tenant,
                "n": name,
                "ttl": lease_ttl,
                **_CLOSED,
                **state_params(LifecycleType.HOMELESS),
            },
        )
        if not claimed:
            self._why_not(tx, tenant, name)
            return None
        project = Project.from_row(claimed[0])
        if project.generation == int(claimed[0]["writer_generation"]):
            return project  # a renewal: one statement
        former = before["home_pod_id"] if before is not None else None
        return self._took_over(tx, project, pod_id, former)

    def _took_over(self, tx: Tx, project: Project, pod_id: str, former: str | None, **why: Any) -> Project:
        """After a CAS that changed the holder: the new writer lease, the former holder's loss."""
        lease = self.store.workspaces.acquire(project.workspace_id, pod_id, PROJECT_WRITER_TTL_S, takeover=True, tx=tx)
        if former is not None and former != pod_id:  # a takeover: the former holder's next beat sees it
            tx.execute("pod_loss_record", {"old": former, "p": project.id, "g": lease.generation})
        rows = tx.execute("project_set_generation", {"g": lease.generation, "id": project.id})
        self.timeline.holder_changed(tx, project.id, pod_id, former, lease.generation, **why)  # same transaction
        return Project.from_row(rows[0])

    def adopt(self, tenant: str, name: str, pod_id: str, node_name: str, predecessor: str) -> Project | None:
        """Take the lease over from this host's previous pod, live or not (ADR 0020).

        Only for a pod that holds the exclusive lock on the data folder its
        predecessor held: the kernel released that lock when the predecessor
        died, so its leases need not be waited out. A normal takeover
        otherwise: the generation rises and a new writer lease is issued in
        the same transaction. ``None`` when the predecessor no longer holds
        the project (another pod took it meanwhile).
        """
        with self.db.transaction() as tx:
            adopted = tx.execute(
                "project_adopt",
                {"pod": pod_id, "node": node_name, "t": tenant, "n": name, "prev": predecessor, **_CLOSED},
            )
            if not adopted:
                return None
            return self._took_over(
                tx, Project.from_row(adopted[0]), pod_id, predecessor, reason="restart on the same data folder"
            )

    def fence(self, project: Project, pod_id: str, node_name: str) -> Project:
        """Close's fence: a new generation (new writer lease, older ones revoked), held by the closing pod.

        The lease goes to the closer in the same statement, so a former owner
        that is still alive is refused as "held" by its next claim instead of
        adopting the new generation as a renewal of its own lease.
        """
        with self.db.transaction() as tx:
            before = tx.one("project_holder_for_update", {"t": project.tenant, "n": project.name})
            lease = self.store.workspaces.acquire(
                project.workspace_id, pod_id, PROJECT_WRITER_TTL_S, takeover=True, tx=tx
            )
            fenced = tx.count(
                "project_fence", {"g": lease.generation, "pod": pod_id, "node": node_name, "id": project.id, **_CLOSED}
            )
            row = tx.one("project_by_name", {"t": project.tenant, "n": project.name})
            assert row is not None
            if not fenced:
                raise ProjectClosedError(f"project {project.ref} is CLOSED", project=project.ref)
            former = before["home_pod_id"] if before is not None else None
            if former is not None and former != pod_id:
                tx.execute("pod_loss_record", {"old": former, "p": project.id, "g": lease.generation})
            self.timeline.holder_changed(tx, project.id, pod_id, former, lease.generation, reason="close fence")
            return Project.from_row(row)

    @staticmethod
    def _why_not(tx: Tx, tenant: str, name: str) -> None:
        """A claim matched nothing: raise for a missing, CLOSED or HOMELESS project (else it is held)."""
        row = tx.one("project_status_and_type", {"t": tenant, "n": name})
        if row is None:
            raise NotFoundError(f"no project {tenant}/{name}", code="project-not-found", project=f"{tenant}/{name}")
        ref, status, kind = f"{tenant}/{name}", ProjectStatus(row["status"]), LifecycleType(row["lifecycle_type"])
        refuse_unservable(ref, status, kind, suspended_ok=True)

    def renew_leases(self, pod_id: str) -> Renewal | None:
        """One beat: renew the pod's own lease, which every pod-bound lease it holds lives by.

        One single-row statement whatever the number of projects held, plus
        an index lookup that binds the leases the pod claimed before it beat
        (it finds nothing once they are bound). Returns the pod's lost
        counter — every takeover or fence of one of its projects records a
        loss in its own transaction, and the first renewal that runs after
        that commits counts it in, so a caller re-reads its project set only
        when the counter moved — and its status; ``None`` for a STOPPED pod
        (nothing is renewed). No claim ever waits on this transaction (ADR 0045).
        """
        with self.db.transaction() as tx:
            row = tx.one("pod_renew_lease", {"pod": pod_id, **state_params(PodState.RUNNING, PodState.STOPPED)})
            if row is None:
                return None
            if int(row["pending"]):  # SQLite: the losses just counted; PostgreSQL deleted them in the renewal
                tx.execute("pod_losses_clear", {"pod": pod_id})
            tx.execute("projects_bind_to_pod", {"pod": pod_id, **_CLOSED})
            return Renewal(lost=int(row["lost"]), status=str(row["status"]))

    def reap_pods(self, age: float, *, stopped_age: float | None = None) -> int:
        """Delete the rows of pods silent for ``age`` seconds that hold no project; return how many.

        ``stopped_age``: also the rows of STOPPED pods that hold no project and stopped more than that many
        seconds ago (a STOPPED pod never beats again; its row only fills the pods table)."""
        with self.db.transaction() as tx:
            reaped = tx.count("pods_reap", {"age": age})
            if stopped_age is not None:
                params = {"age": stopped_age, "ttl": age, "keep": "", **state_params(PodState.STOPPED)}
                reaped += len(tx.execute("pods_prune", params))
            tx.execute("pod_losses_reap")  # the losses of pods without a row: nobody will count them
            return reaped

    def prune_pods(self, older_than: float, liveness_ttl: float, *, keep: str | None = None) -> list[str]:
        """Delete the rows of STOPPED and dead pods that hold no project and were last heard from more than
        ``older_than`` seconds ago (store clock); return their ids. A pod is dead when it is not STOPPED
        and was silent past ``liveness_ttl``; a live pod, a pod any project still names as its holder
        (its leases are found through its row), and pod ``keep`` (the pod asking) are never removed."""
        age = max(0.0, older_than)
        params = {"age": age, "ttl": liveness_ttl, "keep": keep or "", **state_params(PodState.STOPPED)}
        with self.db.transaction() as tx:
            rows = tx.execute("pods_prune", params)
            if rows:
                tx.execute("pod_losses_reap")  # the losses of the pods just removed: nobody will count them
        return sorted(str(r["id"]) for r in rows)

    def release_leases(self, pod_id: str) -> int:
        """Release everything this pod holds (orderly shutdown; best effort)."""
        with self.db.transaction() as tx:
            return tx.count("projects_release_leases", {"pod": pod_id})

    def release_lease(self, tenant: str, name: str, pod_id: str, *, checkpointed_at: int | None = None) -> bool:
        """Release one lease, only if it is still ours (the drain primitive).

        ``checkpointed_at``: the generation a final checkpoint was just published under (a suspend, a drain's
        hand-over); the release then vouches that every acknowledged write is in the head, so the next
        holder keeps the lineage (ADR 0042). Without it the next holder starts a new lineage.
        """
        with self.db.transaction() as tx:
            if checkpointed_at is None:
                return tx.count("project_release_lease", {"t": tenant, "n": name, "pod": pod_id}) == 1
            done = {"t": tenant, "n": name, "pod": pod_id, "g": checkpointed_at}
            return tx.count("project_release_lease_vouched", done) == 1

    def release_closed(self, project_id: str) -> None:
        """A CLOSED project has no owner: clear its lease columns."""
        with self.db.transaction() as tx:
            tx.execute("project_release_closed", {"id": project_id, **_CLOSED})

    # ------------------------------------------------------------------ questions

    def owner(self, project_id: str, lease_ttl: float) -> Owner:
        """Who holds the project's lease, and is it still valid (store clock)?"""
        with self.db.transaction(write=False) as tx:
            row = tx.one("project_owner", {"id": project_id, "ttl": lease_ttl})
        if row is None:
            raise NotFoundError(f"no project {project_id}", code="project-not-found")
        return _owner(row)

    def project_with_owner(self, tenant: str, name: str, lease_ttl: float) -> tuple[Project, Owner]:
        """Project ``tenant/name`` and who holds its lease (as :meth:`owner` says), read in one statement.

        What a pod routes a request by — the record (status, type, selector,
        id for the activation registry) and the holder — in one transaction
        instead of a ``ProjectStore.get`` then an :meth:`owner` (or
        :meth:`holds`). ``project-not-found`` when there is none.
        """
        with self.db.transaction(write=False) as tx:
            row = tx.one("project_with_owner_by_name", {"t": tenant, "n": name, "ttl": lease_ttl})
        if row is None:
            raise project_not_found(tenant, name)
        return Project.from_row(row), _owner(row)

    def projects_with_owners(
        self, lease_ttl: float, status: ProjectStatus | None = None
    ) -> list[tuple[Project, Owner]]:
        """Every project (of ``status``, or all), by tenant and name, each with who holds its lease: one
        statement for a listing that shows owners (``GET /projects``, the dashboard's refresh)."""
        params = {"ttl": lease_ttl, "s": None if status is None else status.value}
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("projects_with_owners", params)
        return [(Project.from_row(r), _owner(r)) for r in rows]

    def holds(self, project_id: str, pod_id: str, lease_ttl: float) -> bool:
        owner = self.owner(project_id, lease_ttl)
        return owner.live and owner.pod_id == pod_id

    def find_by_home_pod_id(self, pod_id: str) -> list[Project]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("projects_held_by_pod", {"pod": pod_id, **_CLOSED})
        return [Project.from_row(r) for r in rows]

    def find_running_by_home_pod_id(self, pod_id: str) -> list[Project]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("projects_running_on_pod", {"pod": pod_id, **state_params(ProjectStatus.RUNNING)})
        return [Project.from_row(r) for r in rows]

    def sum_score_by_home_pod_id(self, pod_id: str) -> float:
        with self.db.transaction(write=False) as tx:
            row = tx.one("projects_score_on_pod", {"pod": pod_id, **_CLOSED})
        return float(row["s"]) if row else 0.0

    def needing_owner_sql(self) -> str:
        """The statement of :meth:`find_projects_needing_owner` as written (for EXPLAIN in tests and benchmarks)."""
        return self.db.queries.sql(self.db.dialect, "projects_needing_owner")

    @staticmethod
    def needing_owner_params(lease_ttl: float, limit: int, skip: int = 0) -> dict[str, Any]:
        """The parameters :meth:`find_projects_needing_owner` passes to that statement."""
        return {"ttl": lease_ttl, "limit": limit, "skip": skip, **_NEEDS_OWNER}

    def needing_owner_of_dead_pods_sql(self) -> str:
        """The statement for pod-bound projects of pods whose lease ran out (for EXPLAIN)."""
        return self.db.queries.sql(self.db.dialect, "projects_needing_owner_of_dead_pods")

    def find_projects_needing_owner(self, lease_ttl: float, limit: int, skip: int = 0) -> list[Project]:
        """Needs an owner and has no live lease; never SUSPENDED, SUSPENDING or CLOSED.

        Two index range scans, paged as one list: the pod-bound projects of
        pods whose lease ran out (from ``pods_by_lease``), then the projects
        that are not pod-bound (``projects_needing_owner``). A live pod's
        projects are in neither, however many it holds.
        """
        if limit <= 0:
            return []
        with self.db.transaction(write=False) as tx:
            dead = tx.execute("projects_needing_owner_of_dead_pods", self.needing_owner_params(lease_ttl, limit, skip))
            rows = list(dead)
            if len(rows) < limit:
                before = skip
                if skip:
                    total = tx.one("projects_needing_owner_of_dead_pods_count", self.needing_owner_params(lease_ttl, 0))
                    before = max(0, skip - int(total["n"] if total else 0))
                params = self.needing_owner_params(lease_ttl, limit - len(rows), before)
                rows.extend(tx.execute("projects_needing_owner", params))
        return [Project.from_row(r) for r in rows]

    def score_needing_owner(self, lease_ttl: float) -> float:
        """Σ placement scores of every project :meth:`find_projects_needing_owner` lists (one statement)."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("projects_needing_owner_score", self.needing_owner_params(lease_ttl, 0))
        return float(row["s"]) if row else 0.0

    def page_projects_needing_owner(
        self, lease_ttl: float, limit: int, after: NeedingOwnerCursor | None = None
    ) -> tuple[list[Project], NeedingOwnerCursor | None]:
        """One page of :meth:`find_projects_needing_owner`, paged by key (P-83): the page after ``after``
        (``None``: the first page) and the cursor of the next one.

        A reader that claims what it reads (the self-pull, the master's tick) shrinks the set as it pages:
        an OFFSET then skips as many projects as the pages before it took. Each page here starts after the
        last row seen, in the statements' own order — the dead pods' projects by (pod lease, id), then the
        unbound projects by (claim time, id) — so every project that still needs an owner is reached once.
        An empty page is the end.
        """
        if limit <= 0:
            return [], after
        cursor = after or _FIRST_DEAD
        rows: list[Row] = []
        with self.db.transaction(write=False) as tx:
            if not cursor.unbound:
                params = self.needing_owner_after_params(lease_ttl, limit, cursor)
                rows = list(tx.execute("projects_needing_owner_of_dead_pods_after", params))
                cursor = self._cursor(cursor, rows)
                if len(rows) < limit:
                    cursor = _FIRST_UNBOUND
            if len(rows) < limit:
                params = self.needing_owner_after_params(lease_ttl, limit - len(rows), cursor)
                more = list(tx.execute("projects_needing_owner_after", params))
                cursor = self._cursor(cursor, more)
                rows.extend(more)
        return [Project.from_row(r) for r in rows], cursor

    def needing_owner_after_sql(self) -> str:
        """The statement of :meth:`page_projects_needing_owner` for the unbound projects (for EXPLAIN in tests)."""
        return self.db.queries.sql(self.db.dialect, "projects_needing_owner_after")

    def needing_owner_of_dead_pods_after_sql(self) -> str:
        """The statement of :meth:`page_projects_needing_owner` for the dead pods' projects (for EXPLAIN)."""
        return self.db.queries.sql(self.db.dialect, "projects_needing_owner_of_dead_pods_after")

    @staticmethod
    def needing_owner_after_params(
        lease_ttl: float, limit: int, cursor: NeedingOwnerCursor | None = None
    ) -> dict[str, Any]:
        """The parameters :meth:`page_projects_needing_owner` passes: a page of ``limit`` after ``cursor``."""
        at = cursor or _FIRST_DEAD
        return {"ttl": lease_ttl, "limit": limit, "after_k": at.key, "after_id": at.project_id, **_NEEDS_OWNER}

    @staticmethod
    def _cursor(cursor: NeedingOwnerCursor, rows: list[Row]) -> NeedingOwnerCursor:
        if not rows:
            return cursor
        return NeedingOwnerCursor(cursor.unbound, float(rows[-1]["k"]), str(rows[-1]["id"]))

    def unbind_ownerless_sessions(self, lease_ttl: float) -> int:
        """The stale-bind sweep (P-51): unbind the sessions of projects with no live owner; return how many."""
        with self.db.transaction() as tx:
            return tx.count("sessions_unbind_ownerless", {"ttl": lease_ttl})

    def next_lease_expiry(self, lease_ttl: float) -> float | None:
        """Seconds until the first pod lease (or unbound project lease) runs out unless renewed; None if none."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("pods_next_lease_expiry", {"ttl": lease_ttl})
        return None if row is None or row["wait"] is None else max(0.0, float(row["wait"]))

    def find_pending_placement(
        self, lease_ttl: float, pending_ttl: float | None = None, limit: int = 1000
    ) -> list[Project]:
        """Pending placement (P-108, the demand an autoscaler sees): projects the master found no pod with room
        for, marked at most ``pending_ttl`` seconds ago (None: however long ago), that still need an owner and
        have none, waiting longest first. The API, the gauges and the master all read this one statement."""
        params = {"ttl": lease_ttl, "pending": _FOREVER if pending_ttl is None else pending_ttl, "limit": limit}
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("projects_pending_placement", {**params, **_NEEDS_OWNER})
        return [Project.from_row(r) for r in rows]
