"""Project store operations other than ownership: records, status, type, placement, demand, sessions.

Each operation is one atomic conditional statement (plus the reads that
explain a refusal). None orchestrates: no workspace work, no events — that is
the lifecycle service's job. Status writes carry the project's generation,
so a fenced former owner changes nothing.
"""

from __future__ import annotations

import builtins
import json
import math
import re
from collections.abc import Callable
from typing import Any

from tenure.errors import ConflictError, InvalidInputError, NotFoundError, StaleGenerationError, TenureError
from tenure.projects.ownership import ProjectClosedError
from tenure.projects.records import Kind, LifecycleType, Project, Session, project_not_found
from tenure.states import PROJECT, ProjectStatus
from tenure.store import Store, validate_name
from tenure.store.connector import Tx
from tenure.store.queries import state_params
from tenure.store.workspaces import new_id

_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,62})$")
CLOSED_GROUP = "closed"
_CLOSED = state_params(ProjectStatus.CLOSED)
#: the longest autosave period a project may ask for (a day): beyond it, a recovery point means little
MAX_AUTOSAVE_S = 86400.0


class StatusConflictError(ConflictError):
    """The project's status is not the one the caller expected."""

    code = "status-conflict"
    default_hint = "read the project again; another operation changed its status"


class SystemProjectError(ConflictError):
    code = "system-project"
    default_hint = "SYSTEM projects cannot be closed or change lifecycle type"


class AlreadyBoundError(ConflictError):
    code = "already-bound"
    default_hint = "the session is bound to another live connection"


def validate_selector(selector: dict[str, str]) -> dict[str, str]:
    """A pod selector: label key → exact value (ADR 0008)."""
    if not isinstance(selector, dict):
        raise InvalidInputError("a placement selector is a JSON object of label = value", code="invalid-selector")
    for key, value in selector.items():
        if not (isinstance(key, str) and isinstance(value, str) and _LABEL.fullmatch(key) and _LABEL.fullmatch(value)):
            raise InvalidInputError(
                f"invalid selector entry {key!r}={value!r}",
                code="invalid-selector",
                hint="keys and values: 1-63 of letters, digits, '.', '_', '/', '-'",
            )
    return selector


class ProjectStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db

    # ------------------------------------------------------------------ records

    def create(
        self,
        tenant: str,
        name: str,
        *,
        kind: Kind = Kind.USER,
        lifecycle_type: LifecycleType = LifecycleType.AUTO,
        group: str = "default",
        selector: dict[str, str] | None = None,
        score: float | None = None,
    ) -> Project:
        """A new INIT project with its (empty) workspace record.

        ``selector`` and ``score`` set its placement in the same transaction,
        so a PERMANENT project is never placed before its selector is known.
        """
        validate_name("tenant", tenant)
        validate_name("project", name)
        validate_name("project group", group)
        if selector is not None or score is not None:
            self._check_placement(selector or {}, 1.0 if score is None else score)
        pid = new_id("p-")
        with self.db.transaction() as tx:
            if tx.one("project_id_by_name", {"t": tenant, "n": name}):
                raise ConflictError(
                    f"project {tenant}/{name} already exists", code="project-exists", project=f"{tenant}/{name}"
                )
            ws = self.store.workspaces.create(f"prj-{pid[2:]}", tx=tx)
            tx.execute(
                "project_insert",
                {
                    "id": pid,
                    "t": tenant,
                    "n": name,
                    "g": group,
                    "k": kind.value,
                    "lt": lifecycle_type.value,
                    "w": ws.id,
                    **state_params(ProjectStatus.INIT),
                },
            )
            if selector is not None or score is not None:
                tx.execute(
                    "project_set_placement",
                    {
                        "s": json.dumps(selector or {}, sort_keys=True),
                        "sc": float(1.0 if score is None else score),
                        "id": pid,
                    },
                )
            return self._get(tx, tenant, name)

    @staticmethod
    def _get(tx: Tx, tenant: str, name: str) -> Project:
        row = tx.one("project_by_name", {"t": tenant, "n": name})
        if row is None:
            raise project_not_found(tenant, name)
        return Project.from_row(row)

    def get(self, tenant: str, name: str) -> Project:
        with self.db.transaction(write=False) as tx:
            return self._get(tx, tenant, name)

    def by_id(self, project_id: str) -> Project:
        """The project with id ``project_id`` (``project-not-found`` otherwise)."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("project_by_id", {"id": project_id})
        if row is None:
            raise NotFoundError(f"no project with id {project_id}", code="project-not-found", project=project_id)
        return Project.from_row(row)

    def new_lineage(self, project: Project) -> Project:
        """A new lineage for ``project`` under its generation (ADR 0042); ``stale-generation`` if fenced."""
        with self.db.transaction() as tx:
            rows = tx.execute("project_new_lineage", {"id": project.id, "g": project.generation})
            if rows:
                return Project.from_row(rows[0])
            current = self._get(tx, project.tenant, project.name)
        raise StaleGenerationError(
            f"project {project.ref}: generation {project.generation} is fenced, {current.generation} is current",
            generation=project.generation,
            current_generation=current.generation,
            project=project.ref,
        )

    def tenant_of_workspace(self, workspace_id: str) -> str | None:
        """The tenant of the project whose workspace is ``workspace_id`` (None: no project's)."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("project_by_workspace", {"w": workspace_id})
        return None if row is None else str(row["tenant"])

    def list(self, status: ProjectStatus | None = None) -> builtins.list[Project]:
        with self.db.transaction(write=False) as tx:
            if status is None:
                rows = tx.execute("projects_all")
            else:
                rows = tx.execute("projects_with_status", {"s": status.value})
        return [Project.from_row(r) for r in rows]

    # ------------------------------------------------------------------ status (lifecycle service only)

    def transition_status(
        self,
        tenant: str,
        name: str,
        expected: ProjectStatus,
        target: ProjectStatus,
        generation: int,
        *,
        error: str | None = None,
        then: Callable[[Tx, Project], None] | None = None,
    ) -> Project:
        """Atomic ``expected → target``, fenced by the generation; conflict error otherwise.

        Returns the row as the statement wrote it (``RETURNING``: nothing is read back; the row is read
        only to say why a refused move changed nothing). ``then`` runs in the same transaction after the
        move, given the moved row: the caller's addition to that commit (the lifecycle's timeline event).
        """
        PROJECT.check(expected, target)
        with self.db.transaction() as tx:
            rows = tx.execute(
                "project_transition",
                {"t": target.value, "e": expected.value, "g": generation, "tn": tenant, "n": name, "err": error},
            )
            if rows:
                moved = Project.from_row(rows[0])
                if then is not None:
                    then(tx, moved)
                return moved
            self._refuse(self._get(tx, tenant, name), expected, generation)
            raise AssertionError("unreachable")

    @staticmethod
    def _refuse(current: Project, expected: ProjectStatus, generation: int) -> None:
        if current.generation != generation:
            raise StaleGenerationError(
                f"project {current.ref}: generation {generation} is fenced, {current.generation} is current",
                generation=generation,
                current_generation=current.generation,
                project=current.ref,
            )
        if current.status is ProjectStatus.CLOSED:
            raise ProjectClosedError(f"project {current.ref} is CLOSED", project=current.ref)
        raise StatusConflictError(
            f"project {current.ref} is {current.status.value}, expected {expected.value}",
            project=current.ref,
            expected=expected.value,
            actual=current.status.value,
        )

    def record_error(self, project: Project, error: str | None) -> None:
        with self.db.transaction() as tx:
            if tx.count("project_record_error", {"e": error, "id": project.id, "g": project.generation}) != 1:
                raise StaleGenerationError(
                    f"project {project.ref}: generation {project.generation} is fenced; the error was not recorded",
                    generation=project.generation,
                    project=project.ref,
                )

    def close(self, tenant: str, name: str, closed_group_id: str, generation: int) -> Project:
        """status = CLOSED and the archive group; refuses SYSTEM projects (checked first)."""
        with self.db.transaction() as tx:
            current = self._get(tx, tenant, name)
            if current.kind is Kind.SYSTEM:
                raise SystemProjectError(f"project {current.ref} is a SYSTEM project", project=current.ref)
            PROJECT.check(current.status, ProjectStatus.CLOSED)
            rows = tx.execute(
                "project_close",
                {"grp": closed_group_id, "id": current.id, "g": generation, **_CLOSED, **state_params(Kind.SYSTEM)},
            )
            if not rows:
                self._refuse(current, current.status, generation)
            return Project.from_row(rows[0])

    # ------------------------------------------------------------------ type, placement, demand

    def set_lifecycle_type(self, tenant: str, name: str, value: LifecycleType) -> Project:
        """Switch between AUTO, EPHEMERAL and PERMANENT; refuses HOMELESS (either side) and SYSTEM."""
        if value is LifecycleType.HOMELESS:
            raise InvalidInputError(
                "a project cannot become HOMELESS; that type is fixed at creation", code="lifecycle-type-refused"
            )
        with self.db.transaction() as tx:
            current = self._get(tx, tenant, name)
            if current.kind is Kind.SYSTEM:
                raise SystemProjectError(f"project {current.ref} is a SYSTEM project", project=current.ref)
            if current.lifecycle_type is LifecycleType.HOMELESS:
                raise InvalidInputError(
                    f"project {current.ref} is HOMELESS; its type is fixed", code="lifecycle-type-refused"
                )
            tx.execute(
                "project_set_lifecycle_type",
                {"v": value.value, "id": current.id, **state_params(LifecycleType.HOMELESS, Kind.SYSTEM)},
            )
            return self._get(tx, tenant, name)

    @staticmethod
    def _check_placement(selector: dict[str, str], score: float) -> None:
        validate_selector(selector)
        if not (isinstance(score, (int, float)) and math.isfinite(score) and score > 0):
            raise InvalidInputError(
                f"invalid placement score {score!r}", code="invalid-score", hint="a positive, finite number"
            )

    def set_placement(self, tenant: str, name: str, selector: dict[str, str], score: float) -> Project:
        self._check_placement(selector, score)
        with self.db.transaction() as tx:
            current = self._get(tx, tenant, name)
            tx.execute(
                "project_set_placement",
                {"s": json.dumps(selector, sort_keys=True), "sc": float(score), "id": current.id},
            )
            return self._get(tx, tenant, name)

    def set_autosave(self, tenant: str, name: str, seconds: float | None) -> Project:
        """The project's autosave policy: checkpointed at most every ``seconds`` while its folder changes on
        the pod that runs it; 0 off; ``None`` the pod's default (``tenure serve --autosave``)."""
        if seconds is not None and (not math.isfinite(seconds) or seconds < 0 or seconds > MAX_AUTOSAVE_S):
            raise InvalidInputError(
                f"autosave must be 0 (off) or a number of seconds up to {MAX_AUTOSAVE_S:.0f}, not {seconds!r}",
                code="invalid-autosave",
                hint="pass seconds (e.g. 30), 0 to turn it off, or null for the pod's default",
                autosave=str(seconds),
            )
        with self.db.transaction() as tx:
            current = self._get(tx, tenant, name)
            tx.execute("project_set_autosave", {"a": None if seconds is None else float(seconds), "id": current.id})
            return self._get(tx, tenant, name)

    def mark_pending_placement(self, tenant: str, name: str) -> bool:
        """Set ``pending_since`` only if empty ("waiting since"); a claim clears it."""
        with self.db.transaction() as tx:
            return tx.count("project_mark_pending", {"t": tenant, "n": name}) == 1

    def set_owner_required(self, tenant: str, name: str, value: bool) -> bool:
        """Write the derived flag only when it flips; return whether it did."""
        with self.db.transaction() as tx:
            return tx.count("project_set_owner_required", {"v": int(value), "t": tenant, "n": name}) == 1

    def find_owner_required(self) -> builtins.list[Project]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("projects_owner_required")
        return [Project.from_row(r) for r in rows]

    def add_demand(self, tenant: str, name: str, source: str, expires_in: float | None = None) -> bool:
        """Register that the project needs an owner (scheduled or pending work, a client's request):
        a record from ``source``, until it is removed or, with ``expires_in``, for that many seconds (by the
        store clock); one from the same source is replaced. Re-derives ``owner_required`` in the same
        transaction; whether it flipped."""
        if expires_in is not None and (not math.isfinite(expires_in) or expires_in <= 0):
            raise InvalidInputError(
                f"a demand's expiry is a positive number of seconds, not {expires_in!r}",
                code="invalid-demand",
                expires_in=str(expires_in),
            )
        with self.db.transaction() as tx:
            project = self._get(tx, tenant, name)
            if expires_in is None:
                tx.execute("project_demand_insert", {"p": project.id, "s": source})
            else:
                tx.execute("project_demand_insert_until", {"p": project.id, "s": source, "e": float(expires_in)})
            return tx.count("project_rederive_owner_required", {"t": tenant, "n": name}) == 1

    def remove_demand(self, tenant: str, name: str, source: str) -> bool:
        """The record from ``source`` removed; re-derives ``owner_required``; whether it flipped."""
        with self.db.transaction() as tx:
            project = self._get(tx, tenant, name)
            tx.execute("project_demand_delete", {"p": project.id, "s": source})
            return tx.count("project_rederive_owner_required", {"t": tenant, "n": name}) == 1

    def demand(self, project: Project) -> builtins.list[dict[str, Any]]:
        """The project's demand records that have not expired: ``{source, created_at, expires_at}``."""
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("project_demand_of", {"p": project.id})
        return [
            {"source": r["source"], "created_at": float(r["created_at"]), "expires_at": _opt_float(r["expires_at"])}
            for r in rows
        ]

    def in_demand(self, project: Project) -> bool:
        """Whether the project has a session or a demand record that has not expired."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("project_in_demand", {"p": project.id})
        return bool(row and int(row["in_demand"]))

    def expire_demand(self, session_ttl: float) -> int:
        """Demand records past their end, and unbound sessions idle for ``session_ttl`` seconds, deleted;
        every flag re-derived when anything went. How many records and sessions went."""
        with self.db.transaction() as tx:
            gone = tx.count("project_demand_expire", {}) + tx.count("sessions_expire", {"ttl": float(session_ttl)})
            if gone:
                tx.execute("projects_rederive_owner_required")
            return gone

    def rederive_owner_required(self, tenant: str, name: str) -> bool:
        with self.db.transaction() as tx:
            return tx.count("project_rederive_owner_required", {"t": tenant, "n": name}) == 1

    def rederive_all(self) -> int:
        """Boot: re-derive every flag from the sessions and demand records (flips only)."""
        with self.db.transaction() as tx:
            return tx.count("projects_rederive_owner_required")

    # ------------------------------------------------------------------ sessions

    def create_session(self, project: Project) -> Session:
        """A new unbound session: the project is in demand while it exists (``owner_required``)."""
        sid = new_id("c-")
        with self.db.transaction() as tx:
            tx.execute("session_insert", {"id": sid, "p": project.id})
            tx.execute("project_rederive_owner_required", {"t": project.tenant, "n": project.name})
        return self.session(sid)

    def delete_session(self, session_id: str) -> Project:
        """Delete a session (its project's demand re-derived in the same transaction); its project."""
        with self.db.transaction() as tx:
            row = tx.one("session_by_id", {"id": session_id})
            if row is None:
                raise NotFoundError(f"no session {session_id}", code="session-not-found")
            found = tx.one("project_by_id", {"id": str(row["project_id"])})
            assert found is not None  # sessions reference their project
            project = Project.from_row(found)
            tx.execute("session_delete", {"id": session_id})
            tx.execute("project_rederive_owner_required", {"t": project.tenant, "n": project.name})
        return project

    def session(self, session_id: str) -> Session:
        with self.db.transaction(write=False) as tx:
            row = tx.one("session_by_id", {"id": session_id})
        if row is None:
            raise NotFoundError(f"no session {session_id}", code="session-not-found")
        return Session.from_row(row)

    def sessions(self, project: Project) -> builtins.list[Session]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("sessions_of_project", {"p": project.id})
        return [Session.from_row(r) for r in rows]

    def bind_session(self, session_id: str, connection_id: str, pod_id: str, generation: int) -> Session:
        """Bind a session to a client connection, fenced by the project generation."""
        with self.db.transaction() as tx:
            rows = tx.count(
                "session_bind", {"c": connection_id, "pod": pod_id, "id": session_id, "g": generation, **_CLOSED}
            )
            row = tx.one("session_with_project", {"id": session_id})
        if row is None:
            raise NotFoundError(f"no session {session_id}", code="session-not-found")
        if rows == 1:
            return Session.from_row(row)
        raise _session_refused(row, session_id, generation, "")

    def unbind_session(self, session_id: str, connection_id: str, generation: int) -> Session:
        """Release a session from the client connection it is bound to, fenced by the project generation.

        Idempotent: a session already unbound is returned as it is. A session
        bound to *another* connection is left alone (``already-bound``): a
        client releases only its own binding.
        """
        with self.db.transaction() as tx:
            rows = tx.count("session_unbind", {"c": connection_id, "id": session_id, "g": generation, **_CLOSED})
            row = tx.one("session_with_project", {"id": session_id})
        if row is None:
            raise NotFoundError(f"no session {session_id}", code="session-not-found")
        if rows == 1 or (row["bound_connection_id"] is None and int(row["generation"]) == generation):
            return Session.from_row(row)
        raise _session_refused(row, session_id, generation, f", not {connection_id}")

    def unbind_sessions(self, project: Project) -> int:
        """Unbind every session of ``project``, fenced by its generation (idempotent).

        Bring's step 1a runs the same statement in its claim's transaction
        (:meth:`Ownership.claim_to_bring`).

        A former owner that resumes inside bring after a newer claim changes
        nothing: the generation is compared in the same statement.
        """
        with self.db.transaction() as tx:
            unbound = tx.count("sessions_unbind", {"p": project.id, "g": project.generation})
            if unbound == 0:
                current = self._get(tx, project.tenant, project.name)
                if current.generation != project.generation:
                    raise StaleGenerationError(
                        f"project {project.ref}: generation {project.generation} is fenced,"
                        f" {current.generation} is current",
                        generation=project.generation,
                        current_generation=current.generation,
                        project=project.ref,
                    )
            return unbound


def _session_refused(row: Any, session_id: str, generation: int, bound_detail: str) -> TenureError:
    """Why a fenced bind or unbind of ``session_id`` changed nothing: stale generation, CLOSED, or bound elsewhere."""
    if int(row["generation"]) != generation:
        return StaleGenerationError(
            f"session {session_id}: project generation {generation} is fenced",
            generation=generation,
            current_generation=int(row["generation"]),
        )
    if row["status"] == ProjectStatus.CLOSED.value:
        return ProjectClosedError(f"session {session_id} belongs to a CLOSED project", session=session_id)
    return AlreadyBoundError(
        f"session {session_id} is bound to connection {row['bound_connection_id']}{bound_detail}",
        connection=row["bound_connection_id"],
    )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
