"""What a caller may do to a project on this pod: the one face the HTTP API and the CLI call.

:class:`ProjectOps` holds every operation a client can ask of a pod — projects, their lifecycle, files,
sessions, snapshots, history, pods and this host's mounts — with the two rules every one of them keeps:

* **Tenant visibility.** A caller sees only the projects its :class:`~tenure.pod.tokens.Principal` may see;
  another tenant's project, session, snapshot or mount is answered exactly like a missing one.
* **Routing as a result.** An operation that must run on the project's owner asks
  :meth:`PodRuntime.route <tenure.pod.runtime.PodRuntime.route>` once and returns what it said: the
  operation's result when the project runs here, :class:`Elsewhere` (the live owner's endpoint) or
  :class:`Later` (seconds to wait). Nothing deep inside raises a redirect; the caller decides what a
  redirect means (307 over HTTP, a followed request in the CLI's ``--url`` mode).

Results are plain JSON-ready dicts, the documents of docs/api.md, so the HTTP layer only serializes them.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from tenure.errors import ConflictError, InvalidInputError, NotFoundError, TenureError
from tenure.faults import crash_point, register
from tenure.mounts.store import Mount
from tenure.pod.documents import ProjectSpec, demand_document, preserved_by_project, project_document, session_dict
from tenure.pod.gate import WriteUnsavedError
from tenure.pod.lineage import expect_lineage
from tenure.pod.runtime import Intent, PodRuntime, Route
from tenure.pod.tokens import Principal
from tenure.projects.demand import check_demand_source
from tenure.projects.records import LifecycleType, Project, project_not_found
from tenure.states import ProjectStatus
from tenure.workspaces import files

#: a durable write's change is in the folder; the checkpoint that is to save it has not run yet
DURABLE_WRITTEN = register("durable.written", "a durable write's change is in the folder; its checkpoint not yet run")

__all__ = [
    "Elsewhere",
    "ForbiddenError",
    "Later",
    "ProjectOps",
    "ProjectSpec",
    "Routed",
    "project_document",
    "session_dict",
]

T = TypeVar("T")


class ForbiddenError(TenureError):
    code = "forbidden"
    http_status = 403
    default_hint = "this token may not do that; use an admin token or one scoped to that tenant"


@dataclass(frozen=True)
class Elsewhere:
    """The project runs on another live pod: ask ``endpoint`` (same path and query)."""

    endpoint: str


@dataclass(frozen=True)
class Later:
    """The project cannot be served yet (its owner's pod is silent, or placement is deciding)."""

    retry_after: float
    message: str
    project: str


#: an operation's result, or where (or when) to ask instead
Routed: TypeAlias = T | Elsewhere | Later


class ProjectOps:
    """Every operation a client may ask of this pod (see the module docstring)."""

    def __init__(self, pod: PodRuntime) -> None:
        self.pod = pod
        self._discarding = threading.Lock()

    # ------------------------------------------------------------------ visibility and routing

    def project(self, principal: Principal, tenant: str, name: str) -> Project:
        """The project, if ``principal`` may see it (another tenant's: ``project-not-found``)."""
        if not principal.sees(tenant):
            raise project_not_found(tenant, name)
        return self.pod.projects.get(tenant, name)

    def visible(self, principal: Principal, tenant: str, name: str) -> None:
        """Refuse another tenant's project exactly like a missing one, without reading it."""
        if not principal.sees(tenant):
            raise project_not_found(tenant, name)

    def where(self, principal: Principal, tenant: str, name: str, intent: Intent = Intent.SERVE) -> Routed[Project]:
        """The project running here (brought here if nobody holds it), or where / when to ask instead."""
        self.visible(principal, tenant, name)
        return _routed(self.pod.route(tenant, name, intent=intent))

    def expect_lineage(self, project: Project, if_lineage: int | None) -> None:
        """Refuse with ``lineage-changed`` (412) when the client holds another lineage than the project's."""
        expect_lineage(project, if_lineage, lambda: self.preserved(project))

    def preserved(self, project: Project) -> list[dict[str, Any]]:
        """The project's preserved deltas recorded in the store (ADR 0044), newest first."""
        return [d.to_dict() for d in self.pod.keeper.deltas.of_project(project.id)]

    def show(self, project: Project, *, fresh: bool = False) -> dict[str, Any]:
        """A project with its owner (pod, live, seconds left), whether it runs on this pod, and its lost work:
        read from the store when ``fresh`` (``GET`` of the project), else as this pod last read it (every 10
        beats, and when this host recorded one), so the answers of operations cost no read of their own."""
        owner = self.pod.ownership.owner(project.id, self.pod.config.lease_ttl)
        running = project.id in self.pod.registry
        lost = self.preserved(project) if fresh else self.pod.keeper.known(project.id)
        return project_document(project, owner, running, self.pod.saving(project.id), lost)

    # ------------------------------------------------------------------ projects

    def create(self, principal: Principal, spec: ProjectSpec) -> dict[str, Any]:
        """Create an INIT project (a tenant token: of its own tenant only)."""
        if not principal.sees(spec.tenant):
            raise ForbiddenError(f"this token may not create projects of tenant {spec.tenant}", tenant=spec.tenant)
        project = self.pod.projects.create(
            spec.tenant,
            spec.name,
            lifecycle_type=spec.lifecycle_type,
            group=spec.group,
            selector=spec.selector,
            score=spec.score,
        )
        return self.show(project)

    def projects(
        self, principal: Principal, tenant: str | None = None, status: ProjectStatus | None = None
    ) -> list[dict[str, Any]]:
        """Every project ``principal`` may see (optionally of one tenant and one status), each with its owner."""
        listed = self.pod.ownership.projects_with_owners(self.pod.config.lease_ttl, status)
        lost = preserved_by_project(self.pod.store)
        return [
            project_document(pr, owner, pr.id in self.pod.registry, self.pod.saving(pr.id), lost.get(pr.id))
            for pr, owner in listed
            if principal.sees(pr.tenant) and (tenant is None or pr.tenant == tenant)
        ]

    def get(self, principal: Principal, tenant: str, name: str) -> dict[str, Any]:
        return self.show(self.project(principal, tenant, name), fresh=True)

    def bring(
        self, principal: Principal, tenant: str, name: str, *, from_snapshot: str | None = None
    ) -> Routed[dict[str, Any]]:
        """Bring the project to RUNNING here (a SUSPENDED one too), or say where it runs.

        ``from_snapshot`` restores that READY snapshot instead of the head: only where no live owner runs it
        elsewhere and only on a ready pod.
        """
        if from_snapshot is None:
            routed = self.where(principal, tenant, name, Intent.BRING)
            return routed if not isinstance(routed, Project) else self.show(routed)
        project = self.project(principal, tenant, name)
        self._own_snapshot(project, from_snapshot)
        located = _routed(self.pod.route(tenant, name, intent=Intent.LOCATE, project=project))
        if not isinstance(located, Project):
            return located
        if not self.pod.ready:
            return Later(self.pod.config.beat_interval, "this pod is not ready", f"{tenant}/{name}")
        return self.show(self.pod.bring(tenant, name, from_snapshot=from_snapshot))

    def _own_snapshot(self, project: Project, snapshot_id: str) -> None:
        """``snapshot_id`` is exactly the id of a snapshot of ``project``'s workspace (no prefix, no other
        project's), else ``snapshot-not-found`` naming no more than a bounded prefix of what was asked."""
        try:
            snap = self.pod.store.snapshots.get(snapshot_id)
        except NotFoundError:
            snap = None
        if snap is None or snap.id != snapshot_id or snap.workspace_id != project.workspace_id:
            raise NotFoundError(
                f"project {project.ref} has no snapshot {snapshot_id[:80]!r}",
                code="snapshot-not-found",
                hint=f"list them with `tenure snapshot list {project.ref}`",
                snapshot=snapshot_id[:80],
            )

    def suspend(
        self, principal: Principal, tenant: str, name: str, *, if_lineage: int | None = None
    ) -> Routed[dict[str, Any]]:
        """Suspend on the owner: engines stopped, checkpoint, folder removed, lease released."""
        project = self.project(principal, tenant, name)
        if project.status not in (ProjectStatus.SUSPENDED, ProjectStatus.INIT, ProjectStatus.CLOSED):
            located = _routed(self.pod.route(tenant, name, intent=Intent.LOCATE, project=project))
            if not isinstance(located, Project):
                return located
        self.expect_lineage(project, if_lineage)
        return self.show(self.pod.suspend(tenant, name))

    def close(self, principal: Principal, tenant: str, name: str) -> Routed[dict[str, Any]]:
        """Close (terminal); sent to the live owner when there is one, done here when its pod is silent."""
        project = self.project(principal, tenant, name)
        if project.status is not ProjectStatus.CLOSED:
            located = _routed(self.pod.route(tenant, name, intent=Intent.LOCATE_LIVE, project=project))
            if not isinstance(located, Project):
                return located
        return self.show(self.pod.close(tenant, name))

    def set_type(self, principal: Principal, tenant: str, name: str, lifecycle_type: LifecycleType) -> dict[str, Any]:
        self.visible(principal, tenant, name)
        project = self.pod.projects.set_lifecycle_type(tenant, name, lifecycle_type)
        self.pod.note_policy(project)
        return self.show(project)

    def set_placement(
        self, principal: Principal, tenant: str, name: str, selector: dict[str, str], score: float
    ) -> dict[str, Any]:
        self.visible(principal, tenant, name)
        return self.show(self.pod.projects.set_placement(tenant, name, selector, score))

    def set_autosave(self, principal: Principal, tenant: str, name: str, seconds: float | None) -> dict[str, Any]:
        """The project's autosave policy (seconds; 0 off; ``None`` the pod's default); the pod that runs it
        uses it at once when that is this pod, else within a few beats."""
        self.visible(principal, tenant, name)
        project = self.pod.projects.set_autosave(tenant, name, seconds)
        self.pod.note_policy(project)
        return self.show(project)

    def checkpoint(
        self, principal: Principal, tenant: str, name: str, *, if_lineage: int | None = None
    ) -> Routed[dict[str, Any]]:
        """Checkpoint the project's folder now (it runs here, or is brought here first).

        With ``if_lineage`` it is refused (``lineage-changed``) when the project has started another lineage
        since — a takeover from an owner that had not checkpointed — instead of acknowledging a checkpoint
        that may lack writes the client made under its lineage.
        """
        routed = self.where(principal, tenant, name)
        if not isinstance(routed, Project):
            return routed
        self.expect_lineage(routed, if_lineage)
        self.pod.demanded_by_request(routed)
        result = self.pod.checkpoint(tenant, name)
        return dict(result.to_dict(), lineage=routed.lineage)

    def history(
        self, principal: Principal, tenant: str, name: str, *, limit: int = 100, before: float | None = None
    ) -> dict[str, Any]:
        """The project's ownership timeline, newest first."""
        project = self.project(principal, tenant, name)
        events = self.pod.lifecycle.timeline.history(project.id, limit=limit, before=before)
        return {"project": project.ref, "events": [e.to_dict() for e in events]}

    # ------------------------------------------------------------------ sessions

    def create_session(self, principal: Principal, tenant: str, name: str) -> dict[str, Any]:
        """A new unbound session: the project is in demand while it exists (it comes back on its own)."""
        return session_dict(self.pod.projects.create_session(self.project(principal, tenant, name)))

    def delete_session(self, principal: Principal, session_id: str) -> dict[str, Any]:
        """Delete a session; its project's demand is re-derived (an EPHEMERAL project with no session and
        no other demand left is suspended by its owner within a beat)."""
        project = self._session_project(principal, session_id)
        self.pod.projects.delete_session(session_id)
        current = self.pod.projects.get(project.tenant, project.name)
        return {"session": session_id, "project": project.ref, "owner_required": current.owner_required}

    # ------------------------------------------------------------------ demand

    def demand(self, principal: Principal, tenant: str, name: str) -> dict[str, Any]:
        """Why the project needs an owner: its demand records, its sessions, ``owner_required``."""
        project = self.project(principal, tenant, name)
        return demand_document(self.pod.projects, project)

    def add_demand(
        self, principal: Principal, tenant: str, name: str, source: str, expires_in: float | None
    ) -> dict[str, Any]:
        """Explicit demand from ``source`` (until removed, or for ``expires_in`` seconds)."""
        self.visible(principal, tenant, name)
        check_demand_source(source)
        self.pod.projects.add_demand(tenant, name, source, expires_in)
        return demand_document(self.pod.projects, self.pod.projects.get(tenant, name))

    def remove_demand(self, principal: Principal, tenant: str, name: str, source: str) -> dict[str, Any]:
        self.visible(principal, tenant, name)
        check_demand_source(source)
        self.pod.projects.remove_demand(tenant, name, source)
        return demand_document(self.pod.projects, self.pod.projects.get(tenant, name))

    def sessions(self, principal: Principal, tenant: str, name: str) -> list[dict[str, Any]]:
        project = self.project(principal, tenant, name)
        return [session_dict(s) for s in self.pod.projects.sessions(project)]

    def _session_project(self, principal: Principal, session_id: str) -> Project:
        session = self.pod.projects.session(session_id)
        project = self.pod.projects.by_id(session.project_id)
        if not principal.sees(project.tenant):
            raise NotFoundError(f"no session {session_id}", code="session-not-found")
        return project

    def bind_session(
        self, principal: Principal, session_id: str, connection_id: str, *, if_lineage: int | None = None
    ) -> Routed[dict[str, Any]]:
        """Bind the session to a client connection on the pod that runs its project (409 already-bound)."""
        project = self._session_project(principal, session_id)
        running = _routed(self.pod.route(project.tenant, project.name, intent=Intent.SERVE))
        if not isinstance(running, Project):
            return running
        self.expect_lineage(running, if_lineage)
        bound = self.pod.projects.bind_session(session_id, connection_id, self.pod.pod_id, running.generation)
        return session_dict(bound)

    def unbind_session(self, principal: Principal, session_id: str, connection_id: str) -> Routed[dict[str, Any]]:
        """Release the session from the connection it is bound to (idempotent; another connection's: 409)."""
        project = self._session_project(principal, session_id)
        running = _routed(self.pod.route(project.tenant, project.name, intent=Intent.SERVE))
        if not isinstance(running, Project):
            return running
        return session_dict(self.pod.projects.unbind_session(session_id, connection_id, running.generation))

    # ------------------------------------------------------------------ files

    def _folder(self, project: Project) -> str:
        return self.pod.workspaces.folder_for(project.id)

    def list_files(self, principal: Principal, tenant: str, name: str, path: str) -> Routed[dict[str, Any]]:
        """The entries of a folder of the project's workspace folder (symlinks listed, never followed)."""
        self.visible(principal, tenant, name)
        files.check_path(path)
        routed = self.where(principal, tenant, name)
        if not isinstance(routed, Project):
            return routed
        return {"path": path, "entries": files.list_folder(self._folder(routed), path), "lineage": routed.lineage}

    def open_file(self, principal: Principal, tenant: str, name: str, path: str) -> Routed[tuple[int, int, int]]:
        """An open descriptor of a file of the project's folder, its size and the project's lineage (the
        caller closes the descriptor)."""
        self.visible(principal, tenant, name)
        files.check_path(path)
        routed = self.where(principal, tenant, name)
        if not isinstance(routed, Project):
            return routed
        return (*files.open_file(self._folder(routed), path), routed.lineage)

    def ready_to_write(
        self, principal: Principal, tenant: str, name: str, if_lineage: int | None = None
    ) -> Routed[Project]:
        """Before a write's body is read: served here (or where to ask), and at the lineage the client holds."""
        routed = self.where(principal, tenant, name)
        if isinstance(routed, Project):
            self.expect_lineage(routed, if_lineage)
        return routed

    def check_write(self, principal: Principal, tenant: str, name: str, path: str) -> None:
        """Before a write's body is read: the project visible and the path well formed (``bad-path``)."""
        self.visible(principal, tenant, name)
        files.check_path(path)

    def write_file(
        self,
        principal: Principal,
        tenant: str,
        name: str,
        path: str,
        data: bytes | files.StagedFile,
        *,
        durable: bool = False,
        if_lineage: int | None = None,
    ) -> Routed[dict[str, Any]]:
        """Write a file whole (parents created) while the project runs here and nothing is ending it.

        The write holds the project's write gate: a suspend, hand-over or close under way refuses it
        (``project-quiescing``); after one, the route says where the project went. ``durable``: answered only
        once the write is inside a published checkpoint (group-committed with the project's other durable
        writes, :mod:`tenure.pod.durable`), whose snapshot the answer names.
        """
        done = self._change(principal, tenant, name, lambda root: files.write_file(root, path, data), if_lineage)
        if not isinstance(done, tuple):
            return done
        created, lineage = done
        return dict(self._made_durable(tenant, name, durable), created=created, lineage=lineage)

    def delete_file(
        self,
        principal: Principal,
        tenant: str,
        name: str,
        path: str,
        *,
        durable: bool = False,
        if_lineage: int | None = None,
    ) -> Routed[dict[str, Any]]:
        """Delete a file or symlink (the link, not its target), or an empty folder, under the write gate."""
        files.check_path(path)
        done = self._change(principal, tenant, name, lambda root: files.delete_path(root, path), if_lineage)
        if not isinstance(done, tuple):
            return done
        return dict(self._made_durable(tenant, name, durable), lineage=done[1])

    def _change(
        self, principal: Principal, tenant: str, name: str, change: Callable[[str], T], if_lineage: int | None
    ) -> Routed[tuple[T, int]]:
        """``change`` of the project's folder under its write gate, served here and at the client's lineage;
        what it returned and the lineage it was made under."""
        self.visible(principal, tenant, name)
        project = self.pod.projects.get(tenant, name)
        with self.pod.gate.writing(project.id, project.ref):
            routed = self.where(principal, tenant, name)
            if not isinstance(routed, Project):
                return routed
            self.expect_lineage(routed, if_lineage)
            self.pod.demanded_by_request(routed)
            try:
                return change(self._folder(routed)), routed.lineage
            except TenureError as exc:
                self.pod.note_full(exc)  # disk-full: not ready, no new claims, until a probe fits
                raise

    def _made_durable(self, tenant: str, name: str, durable: bool) -> dict[str, Any]:
        """For a durable write: wait for a checkpoint that started after it, and name its snapshot.

        The change is in the folder already: a checkpoint that fails (the project began to be handed over
        meanwhile, the store went away) is answered ``write-unsaved``, never with the refusal the checkpoint
        met (``project-quiescing`` before a write means nothing was written)."""
        if not durable:
            return {"durable": False, "snapshot": None}
        crash_point(DURABLE_WRITTEN)
        try:
            result, batch = self.pod.commits.of(tenant, name).wait()
        except TenureError as exc:
            raise WriteUnsavedError(
                f"the write reached {tenant}/{name}'s folder, but the checkpoint to save it failed: {exc.message}",
                project=f"{tenant}/{name}",
                cause=exc.code,
            ) from exc
        return {"durable": True, "snapshot": result.snapshot.id, "batch": batch}

    # ------------------------------------------------------------------ snapshots

    def snapshots(self, principal: Principal, tenant: str, name: str) -> list[dict[str, Any]]:
        """The project's snapshots, oldest first; ``head`` marks the workspace's head."""
        project = self.project(principal, tenant, name)
        head = self.pod.store.workspaces.workspace(project.workspace_id).head_snapshot_id
        snaps = self.pod.store.snapshots.list(project.workspace_id)
        pinned = self.pod.store.snapshots.pinned_ids()
        return [dict(s.to_dict(), head=s.id == head, pinned=s.id in pinned) for s in snaps]

    def snapshot(self, principal: Principal, snapshot_id: str) -> dict[str, Any]:
        """One snapshot record (another tenant's: ``snapshot-not-found``)."""
        return dict(self._visible_snapshot(principal, snapshot_id).to_dict())

    def verify_snapshot(self, principal: Principal, snapshot_id: str, *, sample: float = 1.0) -> dict[str, Any]:
        """Re-hash the snapshot's objects; a damaged READY snapshot becomes DEGRADED (``ok`` false)."""
        snap = self._visible_snapshot(principal, snapshot_id)
        return dict(self.pod.workspaces.verify(snap.id, sample=sample).to_dict())

    def _visible_snapshot(self, principal: Principal, snapshot_id: str) -> Any:
        snap = self.pod.store.snapshots.get(snapshot_id)
        if principal.unrestricted:
            return snap
        tenant = self.pod.projects.tenant_of_workspace(snap.workspace_id)
        if tenant is not None and principal.sees(tenant):
            return snap
        raise NotFoundError(
            f"no snapshot {snapshot_id!r}",
            code="snapshot-not-found",
            hint="list snapshots with `tenure snapshot list WORKSPACE`",
            snapshot=snapshot_id,
        )

    # ------------------------------------------------------------------ pods

    def pods(self) -> list[dict[str, Any]]:
        """Every pod row with whether it is live (heard from within the liveness TTL)."""
        return [
            dict(pod.to_dict(), live=live, this=pod.id == self.pod.pod_id)
            for pod, live in self.pod.pods.list_with_liveness(self.pod.config.liveness_ttl)
        ]

    def pod_row(self, pod_id: str) -> dict[str, Any]:
        """One pod row; for this pod, ``reconcile``: its last restart reconciliation's counts per verdict."""
        pod = self.pod.pods.get(pod_id)
        live = dict((row.id, alive) for row, alive in self.pod.pods.list_with_liveness(self.pod.config.liveness_ttl))
        data = dict(pod.to_dict(), live=live.get(pod.id, False), this=pod.id == self.pod.pod_id)
        counts = getattr(self.pod.reconcile_report, "counts", None) or {}
        data["reconcile"] = {str(v): int(n) for v, n in sorted(counts.items())} if data["this"] else None
        return data

    def drain(self, principal: Principal, pod_id: str) -> Elsewhere | dict[str, Any]:
        """Drain this pod in the background (it hands every project over, then stops), or name the pod's endpoint."""
        if not principal.unrestricted:
            raise ForbiddenError("draining a pod needs an admin or cluster token", pod=pod_id)
        if pod_id != self.pod.pod_id:
            self.pod.pods.get(pod_id)
            endpoint = self.pod.pods.resolve_endpoint(pod_id, self.pod.config.liveness_ttl)
            if endpoint is None:
                raise ConflictError(
                    f"pod {pod_id} is not live",
                    code="pod-not-live",
                    pod=pod_id,
                    hint="a silent pod's projects move once their leases run out",
                )
            return Elsewhere(endpoint)
        self.pod.start_drain()
        return {"pod_id": self.pod.pod_id, "status": "DRAINING"}

    # ------------------------------------------------------------------ mounts of this host

    def mounts(self, principal: Principal) -> list[dict[str, Any]]:
        """This host's mount records (a tenant token: its tenant's), with status, verdict and preserved folder."""
        return [m.to_dict() for m in self.pod.lifecycle.mounts.store.list() if _sees_mount(principal, m)]

    def mount(self, principal: Principal, mount_id: str) -> dict[str, Any]:
        return self._mount(principal, mount_id).to_dict()

    def mount_files(self, principal: Principal, mount_id: str, path: str) -> dict[str, Any]:
        """The entries of a folder of the mount's preserved delta (symlinks listed, never followed)."""
        files.check_path(path)
        folder = self._preserved(self._mount(principal, mount_id))
        return {"mount": mount_id, "path": path, "entries": files.list_folder(folder, path)}

    def open_mount_file(self, principal: Principal, mount_id: str, path: str) -> tuple[int, int]:
        """An open descriptor of a file of the mount's preserved delta and its size (the caller closes it)."""
        files.check_path(path)
        return files.open_file(self._preserved(self._mount(principal, mount_id)), path)

    def discard_mount(self, principal: Principal, mount_id: str) -> dict[str, Any]:
        """Delete the mount's preserved delta now, its record here and in the store, and the delta's own
        snapshot (it cannot be recovered afterwards)."""
        with self._discarding:
            folder = self._preserved(self._mount(principal, mount_id))
            self.pod.keeper.discard(mount_id)
            shutil.rmtree(folder)
            self.pod.lifecycle.mounts.store.delete(mount_id)
        return {"mount": mount_id, "discarded": folder}

    def recover_mount(
        self,
        principal: Principal,
        mount_id: str,
        *,
        to: str | None = None,
        into_project: bool = False,
        if_lineage: int | None = None,
    ) -> Routed[dict[str, Any]]:
        """Recover a preserved delta recorded in the store, from any pod (ADR 0044).

        ``to``: restored from the object store into a new or empty folder of this pod's host, outside its
        data folder (an admin token only: it writes where the pod's user may). ``into_project``: its changed
        files written back into the running project, on the pod that runs it (redirected there), under the
        project's write gate and at the lineage the client holds — the files the new owner changed since are
        overwritten; files the delta removed stay.
        """
        delta = self.pod.keeper.deltas.find(mount_id)
        project = None if delta is None else self.pod.projects.by_id(delta.project_id)
        if delta is None or project is None or not principal.sees(project.tenant):
            raise NotFoundError(
                f"no preserved delta {mount_id} recorded in the store",
                code="mount-not-found",
                mount=mount_id,
                hint="GET /api/v1/projects/TENANT/NAME lists a project's preserved deltas (a host records a new one"
                " within a beat)",
            )
        if (to is None) == (not into_project):
            raise InvalidInputError(
                "recover needs exactly one of `to` (a folder) and `into_project`",
                code="invalid-input",
                hint='send {"to": "/abs/dir"} or {"into_project": true}',
            )
        if to is not None:
            if not principal.unrestricted:
                raise ForbiddenError("only an admin token may recover into a folder of the pod's host")
            return self.pod.keeper.restore_to(delta, to)
        keeper = self.pod.keeper

        def merge(root: str) -> dict[str, Any]:
            return keeper.merge_into(delta, lambda path, data: files.write_file(root, path, data))

        done = self._change(principal, project.tenant, project.name, merge, if_lineage)
        if not isinstance(done, tuple):
            return done
        merged, lineage = done
        return dict(merged, project=project.ref, lineage=lineage)

    def _mount(self, principal: Principal, mount_id: str) -> Mount:
        """A mount record of this host; a tenant token's only for its tenant's projects (others: not found)."""
        mount = self.pod.lifecycle.mounts.store.get(mount_id)
        if _sees_mount(principal, mount):
            return mount
        raise NotFoundError(
            f"no mount {mount_id} on this host",
            code="mount-not-found",
            mount=mount_id,
            hint="list this host's mounts with GET /api/v1/mounts",
        )

    def _preserved(self, mount: Mount) -> str:
        """The mount's preserved folder: a real folder (not a symlink) right under ``<data>/preserved/``."""
        folder = mount.preserved_folder
        root = os.path.realpath(os.path.join(self.pod.config.data_dir, "preserved"))
        if (
            folder
            and os.path.isdir(folder)
            and not os.path.islink(folder)
            and os.path.dirname(os.path.realpath(folder)) == root
        ):
            return folder
        raise ConflictError(
            f"mount {mount.id} has no preserved delta on this host",
            code="no-preserved-delta",
            mount=mount.id,
            hint="GET /api/v1/mounts lists the mounts with a preserved folder",
        )


def _sees_mount(principal: Principal, mount: Mount) -> bool:
    if principal.unrestricted:
        return True
    tenant, sep, _ = (mount.project_ref or "").partition("/")
    return bool(sep) and principal.sees(tenant)


def _routed(route: Route) -> Project | Elsewhere | Later:
    if route.redirect is not None:
        return Elsewhere(route.redirect)
    if route.retry_after is not None:
        return Later(route.retry_after, route.reason, route.ref)
    assert route.project is not None
    return route.project
