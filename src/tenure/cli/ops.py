"""The two ways a CLI command reaches a pod: in-process (a short-lived pod) or over ``--url`` (the HTTP API).

Each command has one body: it asks :func:`ops` for the :class:`CliOps` of this invocation and calls one
method, which returns the same document in both modes — the pod API's documents (docs/api.md), built by
the same functions (:mod:`tenure.pod.ops`). Where a mode cannot answer a key, the key is still there with
``null``: ``workspace_folder`` is a path on the host that runs the project, so over ``--url`` it is ``null``.

* :class:`LocalOps` — in-process, on the store and data folder the global options name. A command that acts
  on a project (bring, suspend, close) is a pod for its duration (SPEC §9, "Short-lived pods"): it
  registers a pod row, does its work and releases its leases on exit. ``running_here`` and ``this`` mean
  "on the pod that holds this data folder".
* :class:`RemoteOps` — over the API of the pod at ``--url`` (redirects to a project's owner followed with
  the token, :mod:`tenure.cli.remote`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import click

from tenure.cli.context import services
from tenure.cli.output import err_console, progress_bar
from tenure.cli.remote import Remote, project_path, remote
from tenure.defaults import LEASE_TTL_S, LIVENESS_TTL_S
from tenure.errors import ConflictError, InvalidInputError, StoreError
from tenure.pod.lineage import IF_LINEAGE
from tenure.states import PodState, ProjectStatus

if TYPE_CHECKING:
    from tenure.mounts.store import MountStore
    from tenure.pod.documents import ProjectSpec
    from tenure.projects import LifecycleService, Project

__all__ = ["CliOps", "LocalOps", "RemoteOps", "lease_ttl", "ops", "split_ref"]


def split_ref(value: str) -> tuple[str, str]:
    """``TENANT/NAME`` → (tenant, name); ``invalid-project-ref`` otherwise."""
    tenant, sep, name = value.partition("/")
    if not sep or not tenant or not name:
        raise InvalidInputError(
            f"expected TENANT/NAME, got {value!r}",
            code="invalid-project-ref",
            hint="write the project as tenant/name, e.g. acme/website",
        )
    return tenant, name


class CliOps(Protocol):
    """What a CLI command may ask of a pod; every method returns the pod API's document for it."""

    def create_project(self, spec: ProjectSpec, *, system: bool) -> dict[str, Any]: ...
    def projects(self, status: str | None) -> list[dict[str, Any]]: ...
    def project(self, tenant: str, name: str) -> dict[str, Any]: ...
    def history(self, tenant: str, name: str, limit: int) -> dict[str, Any]: ...
    def bring(self, tenant: str, name: str, from_snapshot: str | None) -> dict[str, Any]: ...
    def suspend(self, tenant: str, name: str, if_lineage: int | None = None) -> dict[str, Any]: ...
    def close(self, tenant: str, name: str, group: str) -> dict[str, Any]: ...
    def set_type(self, tenant: str, name: str, lifecycle_type: str) -> dict[str, Any]: ...
    def set_placement(self, tenant: str, name: str, selector: dict[str, str], score: float) -> dict[str, Any]: ...
    def set_autosave(self, tenant: str, name: str, seconds: float | None) -> dict[str, Any]: ...
    def create_session(self, tenant: str, name: str) -> dict[str, Any]: ...
    def sessions(self, tenant: str, name: str) -> list[dict[str, Any]]: ...
    def bind_session(self, session_id: str, connection_id: str, *, unbind: bool) -> dict[str, Any]: ...
    def delete_session(self, session_id: str) -> dict[str, Any]: ...
    def demand(
        self, tenant: str, name: str, change: str | None, source: str, expires_in: float | None
    ) -> dict[str, Any]: ...
    def snapshots(self, ref: str) -> list[dict[str, Any]]: ...
    def snapshot(self, snapshot_id: str) -> dict[str, Any]: ...
    def verify_snapshot(self, snapshot_id: str, sample: float) -> dict[str, Any]: ...
    def pods(self) -> list[dict[str, Any]]: ...
    def pod(self, pod_id: str) -> dict[str, Any]: ...
    def drain(self, pod_id: str, *, wait: bool, timeout: float) -> dict[str, Any]: ...
    def prune_pods(self, older_than: float) -> dict[str, Any]: ...
    def mounts(self) -> list[dict[str, Any]]: ...
    def mount(self, mount_id: str) -> dict[str, Any]: ...
    def discard_mount(self, mount_id: str) -> dict[str, Any]: ...


def ops(ctx: click.Context) -> CliOps:
    """The :class:`RemoteOps` when ``--url`` / ``TENURE_URL`` is given, else the :class:`LocalOps`."""
    api = remote(ctx)
    return RemoteOps(api) if api is not None else LocalOps(ctx)


def _liveness_ttl(ctx: click.Context) -> float:
    return float(ctx.find_root().obj.get("liveness_ttl") or LIVENESS_TTL_S)


def lease_ttl(ctx: click.Context) -> float:
    value = ctx.find_root().obj.get("lease_ttl") or os.environ.get("TENURE_LEASE_TTL") or LEASE_TTL_S
    return float(value)


def _runs_on(owner: Any, pod_id: str | None) -> bool:
    """Whether ``owner`` is a live lease of pod ``pod_id`` (this data folder's pod, in-process)."""
    return bool(owner.live and owner.pod_id is not None and owner.pod_id == pod_id)


def _session_dict(session: Any) -> dict[str, Any]:
    from tenure.pod.documents import session_dict

    return session_dict(session)


def _stopped(status: str) -> bool:
    return status == PodState.STOPPED.value


def _drain_refused(pod_id: str, status: str) -> ConflictError:
    return ConflictError(
        f"pod {pod_id} is {status}; only a RUNNING pod can be drained",
        code="pod-status-conflict",
        pod=pod_id,
        hint="wait until it is RUNNING, or stop its process",
    )


# ---------------------------------------------------------------------- in-process


class LocalOps:
    """The CLI in-process: the store and data folder of the global options (see the module docstring)."""

    def __init__(self, ctx: click.Context) -> None:
        self.ctx = ctx

    # the services, opened on first use: a read-only command creates nothing
    def _svc(self, *, create: bool = False) -> Any:
        return services(self.ctx, create=create)

    @contextmanager
    def _short_lived_pod(self) -> Iterator[LifecycleService]:
        """A pod for the duration of one command: registered, then stopped with its leases released."""
        from tenure.projects import LifecycleConfig, LifecycleService, PodIdentity, PodRegistry

        svc = self._svc()
        identity = PodIdentity.fresh(os.environ.get("TENURE_NODE_NAME"))
        pods = PodRegistry(svc.store)
        pods.register(identity)  # RUNNING: a short-lived pod has no start-up to do
        if not self.ctx.find_root().obj.get("json"):
            err_console.print(f"[dim]acting as short-lived pod {identity.pod_id} on {identity.node_name}[/]")
        lifecycle = LifecycleService(
            svc.store,
            svc.objects,
            svc.config.data_dir,
            identity,
            config=LifecycleConfig(lease_ttl=lease_ttl(self.ctx)),
        )
        try:
            yield lifecycle
        finally:
            lifecycle.shutdown()
            pods.set_status(identity.pod_id, "STOPPED")

    def _host_pod(self) -> str | None:
        from tenure.mounts.report import data_folder_pod

        return data_folder_pod(self._svc().config.data_dir)

    def _document(self, project: Project, *, folder: bool = True) -> dict[str, Any]:
        """The API's project document, ``running_here`` meaning "on this data folder's pod"."""
        from tenure.pod.documents import project_document
        from tenure.projects import Ownership
        from tenure.projects.lifecycle import project_folder
        from tenure.projects.preserved import PreservedDeltas

        svc = self._svc()
        owner = Ownership(svc.store).owner(project.id, lease_ttl(self.ctx))
        preserved = [d.to_dict() for d in PreservedDeltas(svc.store).of_project(project.id)]
        doc = project_document(project, owner, _runs_on(owner, self._host_pod()), preserved=preserved)
        if folder:
            path = project_folder(svc.config.data_dir, project)
            doc["workspace_folder"] = path if project.status is ProjectStatus.RUNNING and os.path.isdir(path) else None
        return doc

    def _store(self) -> Any:
        from tenure.projects import ProjectStore

        return ProjectStore(self._svc().store)

    def create_project(self, spec: ProjectSpec, *, system: bool) -> dict[str, Any]:
        from tenure.projects import Kind, ProjectStore

        created = ProjectStore(self._svc(create=True).store).create(
            spec.tenant,
            spec.name,
            kind=Kind.SYSTEM if system else Kind.USER,
            lifecycle_type=spec.lifecycle_type,
            group=spec.group,
            selector=spec.selector,
            score=spec.score,
        )
        return self._document(created)

    def projects(self, status: str | None) -> list[dict[str, Any]]:
        from tenure.pod.documents import preserved_by_project, project_document
        from tenure.projects import Ownership

        host = self._host_pod()
        store = self._svc().store
        listed = Ownership(store).projects_with_owners(lease_ttl(self.ctx), ProjectStatus(status) if status else None)
        lost = preserved_by_project(store)
        return [project_document(p, o, _runs_on(o, host), preserved=lost.get(p.id)) for p, o in listed]

    def project(self, tenant: str, name: str) -> dict[str, Any]:
        return self._document(self._store().get(tenant, name))

    def history(self, tenant: str, name: str, limit: int) -> dict[str, Any]:
        from tenure.projects.timeline import Timeline

        project = self._store().get(tenant, name)
        events = Timeline(self._svc().store).history(project.id, limit=limit)
        return {"project": project.ref, "events": [e.to_dict() for e in events]}

    def bring(self, tenant: str, name: str, from_snapshot: str | None) -> dict[str, Any]:
        self._svc()
        with self._short_lived_pod() as lifecycle, progress_bar(self.ctx, "restore") as progress:
            lifecycle.workspaces.progress = progress
            brought = lifecycle.bring(tenant, name, from_snapshot=from_snapshot)
            folder = lifecycle.folder(brought)
        return dict(self._document(brought), workspace_folder=folder)

    def suspend(self, tenant: str, name: str, if_lineage: int | None = None) -> dict[str, Any]:
        from tenure.pod.lineage import expect_lineage
        from tenure.projects.preserved import PreservedDeltas

        project = self._store().get(tenant, name)
        deltas = PreservedDeltas(self._svc().store)
        expect_lineage(project, if_lineage, lambda: [d.to_dict() for d in deltas.of_project(project.id)])
        with self._short_lived_pod() as lifecycle, progress_bar(self.ctx, "checkpoint") as progress:
            lifecycle.workspaces.progress = progress
            suspended = lifecycle.suspend(tenant, name)
        return self._document(suspended)

    def close(self, tenant: str, name: str, group: str) -> dict[str, Any]:
        self._svc()
        with self._short_lived_pod() as lifecycle:
            closed = lifecycle.close(tenant, name, group)
        return self._document(closed)

    def set_type(self, tenant: str, name: str, lifecycle_type: str) -> dict[str, Any]:
        from tenure.projects import LifecycleType

        return self._document(self._store().set_lifecycle_type(tenant, name, LifecycleType(lifecycle_type)))

    def set_placement(self, tenant: str, name: str, selector: dict[str, str], score: float) -> dict[str, Any]:
        return self._document(self._store().set_placement(tenant, name, selector, score))

    def set_autosave(self, tenant: str, name: str, seconds: float | None) -> dict[str, Any]:
        return self._document(self._store().set_autosave(tenant, name, seconds))

    def create_session(self, tenant: str, name: str) -> dict[str, Any]:
        store = self._store()
        return _session_dict(store.create_session(store.get(tenant, name)))

    def sessions(self, tenant: str, name: str) -> list[dict[str, Any]]:
        store = self._store()
        return [_session_dict(s) for s in store.sessions(store.get(tenant, name))]

    def delete_session(self, session_id: str) -> dict[str, Any]:
        store = self._store()
        project = store.delete_session(session_id)
        current = store.get(project.tenant, project.name)
        return {"session": session_id, "project": project.ref, "owner_required": current.owner_required}

    def demand(
        self, tenant: str, name: str, change: str | None, source: str, expires_in: float | None
    ) -> dict[str, Any]:
        from tenure.pod.documents import demand_document
        from tenure.projects.demand import check_demand_source

        store = self._store()
        if change == "need":
            store.add_demand(tenant, name, check_demand_source(source), expires_in)
        elif change == "done":
            store.remove_demand(tenant, name, check_demand_source(source))
        return demand_document(store, store.get(tenant, name))

    def bind_session(self, session_id: str, connection_id: str, *, unbind: bool) -> dict[str, Any]:
        doing = "unbinding" if unbind else "binding"
        raise InvalidInputError(
            f"{doing} a session happens on the pod that runs its project",
            code="needs-a-pod",
            hint="pass --url http://HOST:PORT of a running tenure serve (or set TENURE_URL)",
        )

    def snapshots(self, ref: str) -> list[dict[str, Any]]:
        svc = self._svc()
        if "/" in ref:
            tenant, name = split_ref(ref)
            workspace_id = self._store().get(tenant, name).workspace_id
            ws = svc.store.workspaces.workspace(workspace_id)
        else:
            ws = svc.store.workspaces.workspace(ref)
        pinned = svc.store.snapshots.pinned_ids()
        return [
            dict(s.to_dict(), head=s.id == ws.head_snapshot_id, pinned=s.id in pinned)
            for s in svc.store.snapshots.list(ws.id)
        ]

    def snapshot(self, snapshot_id: str) -> dict[str, Any]:
        return dict(self._svc().store.snapshots.get(snapshot_id).to_dict())

    def verify_snapshot(self, snapshot_id: str, sample: float) -> dict[str, Any]:
        return dict(self._svc().workspaces.verify(snapshot_id, sample=sample).to_dict())

    def pods(self) -> list[dict[str, Any]]:
        from tenure.projects import PodRegistry

        host = self._host_pod()
        registry = PodRegistry(self._svc().store)
        rows = registry.list_with_liveness(_liveness_ttl(self.ctx))
        return registry.with_health(
            [dict(p.to_dict(), live=live, this=p.id == host) for p, live in rows], _liveness_ttl(self.ctx)
        )

    def pod(self, pod_id: str) -> dict[str, Any]:
        from tenure.mounts.report import read_report
        from tenure.projects import PodRegistry

        svc = self._svc()
        registry = PodRegistry(svc.store)
        pod = registry.get(pod_id)
        live = any(row.id == pod.id and alive for row, alive in registry.list_with_liveness(_liveness_ttl(self.ctx)))
        this = self._host_pod() == pod.id
        report = read_report(svc.config.data_dir) if this else None
        counts = report["counts"] if report is not None and report.get("pod_id") == pod.id else None
        return registry.with_health(
            [dict(pod.to_dict(), live=live, this=this, reconcile=counts)], _liveness_ttl(self.ctx)
        )[0]

    def prune_pods(self, older_than: float) -> dict[str, Any]:
        """Delete the rows of STOPPED and dead pods that hold no project, last heard from more than
        ``older_than`` seconds ago (the store clock; dead: silent past the ``--liveness-ttl``)."""
        from tenure.projects.ownership import Ownership

        pruned = Ownership(self._svc().store).prune_pods(older_than, _liveness_ttl(self.ctx))
        return {"pruned": pruned, "older_than": older_than}

    def drain(self, pod_id: str, *, wait: bool, timeout: float) -> dict[str, Any]:
        from tenure.projects import PodRegistry

        registry = PodRegistry(self._svc().store)
        pod = registry.get(pod_id)
        if pod.status == PodState.RUNNING.value:
            registry.transition(pod_id, PodState.RUNNING, PodState.DRAINING)
        elif pod.status not in (PodState.DRAINING.value, PodState.STOPPED.value):
            raise _drain_refused(pod_id, pod.status)
        deadline = time.monotonic() + timeout
        while wait and not _stopped(registry.get(pod_id).status) and time.monotonic() < deadline:
            time.sleep(0.5)  # polling the store: the pod may run on another host
        return {"pod": pod_id, "status": registry.get(pod_id).status}

    def _mount_store(self) -> MountStore:
        from tenure.cli.mounts import mount_store

        return mount_store(self.ctx)

    def mounts(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self._mount_store().list()]

    def mount(self, mount_id: str) -> dict[str, Any]:
        return self._mount_store().get(mount_id).to_dict()

    def discard_mount(self, mount_id: str) -> dict[str, Any]:
        from tenure.cli.mounts import preserved_folder

        store, source = preserved_folder(self.ctx, mount_id)
        shutil.rmtree(source)
        store.delete(mount_id)
        return {"mount": mount_id, "discarded": source}


# ---------------------------------------------------------------------- over the API


class RemoteOps:
    """The CLI over the API of the pod at ``--url`` (see the module docstring)."""

    def __init__(self, api: Remote) -> None:
        self.api = api

    def _project(
        self, method: str, tenant: str, name: str, *rest: str, json: Any = None, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        doc = dict(self.api.call(method, project_path(tenant, name, *rest), json=json, headers=headers))
        doc.setdefault("workspace_folder", None)  # a path on the pod's host: not known here
        return doc

    def create_project(self, spec: ProjectSpec, *, system: bool) -> dict[str, Any]:
        if system:
            raise InvalidInputError("SYSTEM projects are created in-process only", code="system-over-api")
        body: dict[str, Any] = {
            "tenant": spec.tenant,
            "name": spec.name,
            "lifecycle_type": spec.lifecycle_type.value,
            "group": spec.group,
        }
        if spec.selector is not None:
            body["selector"] = spec.selector
        if spec.score is not None:
            body["score"] = spec.score
        return dict(self.api.call("POST", "/api/v1/projects", json=body), workspace_folder=None)

    def projects(self, status: str | None) -> list[dict[str, Any]]:
        found = self.api.call("GET", "/api/v1/projects", params={"status": status} if status else None)
        return list(found["projects"])

    def project(self, tenant: str, name: str) -> dict[str, Any]:
        return self._project("GET", tenant, name)

    def history(self, tenant: str, name: str, limit: int) -> dict[str, Any]:
        return dict(self.api.call("GET", project_path(tenant, name, "history"), params={"limit": limit}))

    def bring(self, tenant: str, name: str, from_snapshot: str | None) -> dict[str, Any]:
        body = {"from_snapshot": from_snapshot} if from_snapshot else None
        return self._project("POST", tenant, name, "bring", json=body)

    def suspend(self, tenant: str, name: str, if_lineage: int | None = None) -> dict[str, Any]:
        lineage = {} if if_lineage is None else {IF_LINEAGE: str(if_lineage)}
        return self._project("POST", tenant, name, "suspend", headers=lineage)

    def close(self, tenant: str, name: str, group: str) -> dict[str, Any]:
        return self._project("POST", tenant, name, "close")

    def set_type(self, tenant: str, name: str, lifecycle_type: str) -> dict[str, Any]:
        return self._project("PUT", tenant, name, "type", json={"lifecycle_type": lifecycle_type})

    def set_placement(self, tenant: str, name: str, selector: dict[str, str], score: float) -> dict[str, Any]:
        return self._project("PUT", tenant, name, "placement", json={"selector": selector, "score": score})

    def set_autosave(self, tenant: str, name: str, seconds: float | None) -> dict[str, Any]:
        return self._project("PUT", tenant, name, "autosave", json={"seconds": seconds})

    def create_session(self, tenant: str, name: str) -> dict[str, Any]:
        return dict(self.api.call("POST", project_path(tenant, name, "sessions")))

    def sessions(self, tenant: str, name: str) -> list[dict[str, Any]]:
        return list(self.api.call("GET", project_path(tenant, name, "sessions"))["sessions"])

    def delete_session(self, session_id: str) -> dict[str, Any]:
        return dict(self.api.call("DELETE", f"/api/v1/sessions/{quote(session_id, safe='')}"))

    def demand(
        self, tenant: str, name: str, change: str | None, source: str, expires_in: float | None
    ) -> dict[str, Any]:
        path = project_path(tenant, name, "demand")
        if change == "need":
            return dict(self.api.call("POST", path, json={"source": source, "expires_in": expires_in}))
        if change == "done":
            return dict(self.api.call("DELETE", path, params={"source": source}))
        return dict(self.api.call("GET", path))

    def bind_session(self, session_id: str, connection_id: str, *, unbind: bool) -> dict[str, Any]:
        verb = "unbind" if unbind else "bind"
        path = f"/api/v1/sessions/{quote(session_id, safe='')}/{verb}"
        return dict(self.api.call("POST", path, json={"connection_id": connection_id}))

    def snapshots(self, ref: str) -> list[dict[str, Any]]:
        if "/" not in ref:
            raise InvalidInputError(
                f"{ref!r} names a workspace; over --url snapshots are listed by project",
                code="project-ref-needed",
                hint="give the project as TENANT/NAME, or list a workspace's snapshots without --url",
            )
        tenant, name = split_ref(ref)
        return list(self.api.call("GET", project_path(tenant, name, "snapshots"))["snapshots"])

    def snapshot(self, snapshot_id: str) -> dict[str, Any]:
        return dict(self.api.call("GET", f"/api/v1/snapshots/{quote(snapshot_id, safe='')}"))

    def verify_snapshot(self, snapshot_id: str, sample: float) -> dict[str, Any]:
        path = f"/api/v1/snapshots/{quote(snapshot_id, safe='')}/verify"
        return dict(self.api.call("POST", path, params={"sample": sample}))

    def pods(self) -> list[dict[str, Any]]:
        return list(self.api.call("GET", "/api/v1/pods")["pods"])

    def pod(self, pod_id: str) -> dict[str, Any]:
        return dict(self.api.call("GET", "/api/v1/pods/" + quote(pod_id, safe="")))

    def prune_pods(self, older_than: float) -> dict[str, Any]:
        """Asked of the pod at ``--url`` (admin or cluster token); dead means silent past that pod's liveness TTL."""
        return dict(self.api.call("POST", "/api/v1/pods/prune", params={"older_than": older_than}))

    def drain(self, pod_id: str, *, wait: bool, timeout: float) -> dict[str, Any]:
        """Ask the pod (through any pod: the request is redirected to it) to drain; ``wait``: until STOPPED.

        A pod that has stopped no longer answers: when the pod at ``--url`` is the one drained, a
        ``pod-unreachable`` after the drain began is taken as STOPPED.
        """
        status = str(self.pod(pod_id)["status"])
        if status == PodState.RUNNING.value:
            status = str(self.api.call("POST", f"/api/v1/pods/{quote(pod_id, safe='')}/drain")["status"])
        elif status not in (PodState.DRAINING.value, PodState.STOPPED.value):
            raise _drain_refused(pod_id, status)
        deadline = time.monotonic() + timeout
        while wait and not _stopped(status) and time.monotonic() < deadline:
            time.sleep(0.5)  # polling the pod: it stops once every project is handed over
            try:
                status = str(self.pod(pod_id)["status"])
            except StoreError as exc:
                if exc.code != "pod-unreachable":
                    raise
                status = PodState.STOPPED.value
        return {"pod": pod_id, "status": status}

    def mounts(self) -> list[dict[str, Any]]:
        return list(self.api.call("GET", "/api/v1/mounts")["mounts"])

    def mount(self, mount_id: str) -> dict[str, Any]:
        return dict(self.api.call("GET", "/api/v1/mounts/" + quote(mount_id, safe="")))

    def discard_mount(self, mount_id: str) -> dict[str, Any]:
        return dict(self.api.call("POST", f"/api/v1/mounts/{quote(mount_id, safe='')}/discard"))
