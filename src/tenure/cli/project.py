"""``tenure project`` and ``tenure pods`` — projects, ownership and the lifecycle.

Until the pod daemon exists, commands that act on a project run as a
short-lived pod: they register a pod row with a fresh id, do their work, and
release their leases and stop the pod row on exit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from tenure.cli.context import services
from tenure.cli.output import console, emit, err_console, json_option, progress_bar, table
from tenure.cli.remote import project_path, remote
from tenure.errors import InvalidInputError
from tenure.states import ProjectStatus

if TYPE_CHECKING:  # the command modules load their services lazily, on first use
    from tenure.projects import LifecycleService, Project, ProjectStore


def _ref(value: str) -> tuple[str, str]:
    tenant, sep, name = value.partition("/")
    if not sep or not tenant or not name:
        raise InvalidInputError(
            f"expected TENANT/NAME, got {value!r}",
            code="invalid-project-ref",
            hint="write the project as tenant/name, e.g. acme/website",
        )
    return tenant, name


def _lease_ttl(ctx: click.Context) -> float:
    value = ctx.find_root().obj.get("lease_ttl") or os.environ.get("TENURE_LEASE_TTL") or 60.0
    return float(value)


@contextmanager
def short_lived_pod(ctx: click.Context) -> Iterator[LifecycleService]:
    """A pod for the duration of one command: registered, then stopped with its leases released."""
    from tenure.projects import LifecycleConfig, LifecycleService, PodIdentity, PodRegistry

    svc = services(ctx)
    identity = PodIdentity.fresh(os.environ.get("TENURE_NODE_NAME"))
    pods = PodRegistry(svc.store)
    pods.register(identity)  # RUNNING: a short-lived pod has no start-up to do
    if not ctx.find_root().obj.get("json"):
        err_console.print(f"[dim]acting as short-lived pod {identity.pod_id} on {identity.node_name}[/]")
    lifecycle = LifecycleService(
        svc.store, svc.objects, svc.config.data_dir, identity, config=LifecycleConfig(lease_ttl=_lease_ttl(ctx))
    )
    try:
        yield lifecycle
    finally:
        lifecycle.shutdown()
        pods.set_status(identity.pod_id, "STOPPED")


def _projects(ctx: click.Context) -> ProjectStore:
    from tenure.projects import ProjectStore

    return ProjectStore(services(ctx).store)


def _show(ctx: click.Context, project: Project, extra: dict[str, Any] | None = None) -> None:
    _show_dict(ctx, dict(project.to_dict(), **(extra or {})))


def _show_dict(ctx: click.Context, data: dict[str, Any]) -> None:
    emit(ctx, data, lambda: table(None, ["field", "value"], [[k, v] for k, v in data.items()]))


@click.group()
@click.option(
    "--lease-ttl",
    type=click.FloatRange(min=0, min_open=True),
    envvar="TENURE_LEASE_TTL",
    help="Ownership lease TTL in seconds (default 60; env TENURE_LEASE_TTL).",
)
@click.pass_context
def project(ctx: click.Context, lease_ttl: float | None) -> None:
    """Projects: one owner at a time, brought, suspended and closed."""
    if lease_ttl:
        ctx.find_root().obj["lease_ttl"] = lease_ttl


@project.command("create")
@click.argument("ref")
@click.option(
    "--type",
    "type_",
    type=click.Choice(["AUTO", "EPHEMERAL", "PERMANENT", "HOMELESS"]),
    default="AUTO",
    show_default=True,
    help="Lifecycle type (HOMELESS is fixed at creation).",
)
@click.option("--system", is_flag=True, help="A SYSTEM project: it can never be closed.")
@click.option("--group", default="default", show_default=True, help="Project group.")
@click.option(
    "--selector",
    "selector",
    multiple=True,
    metavar="KEY=VALUE",
    help="Pod label the owner must have (repeatable); set with the project, so it is never placed without it.",
)
@click.option("--score", type=float, default=None, help="Resource score the project needs (default 1).")
@json_option
@click.pass_context
def create(
    ctx: click.Context, ref: str, type_: str, system: bool, group: str, selector: tuple[str, ...], score: float | None
) -> None:
    """Create project TENANT/NAME (status INIT)."""
    from tenure.projects import Kind, LifecycleType, ProjectStore

    tenant, name = _ref(ref)
    pairs = _selector(selector) if selector else None
    api = remote(ctx)
    if api is not None:
        if system:
            raise InvalidInputError("SYSTEM projects are created in-process only", code="system-over-api")
        body: dict[str, Any] = {"tenant": tenant, "name": name, "lifecycle_type": type_, "group": group}
        if pairs is not None:
            body["selector"] = pairs
        if score is not None:
            body["score"] = score
        _show_dict(ctx, api.call("POST", "/api/v1/projects", json=body))
        return
    p = ProjectStore(services(ctx, create=True).store).create(
        tenant,
        name,
        kind=Kind.SYSTEM if system else Kind.USER,
        lifecycle_type=LifecycleType(type_),
        group=group,
        selector=pairs,
        score=score,
    )
    emit(ctx, p.to_dict(), lambda: console.print(f"created project [bold]{p.ref}[/] ({p.id}), status {p.status.value}"))


def _selector(items: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` options → a placement selector (``invalid-selector`` for anything else)."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidInputError(
                f"selector {item!r} is not KEY=VALUE", code="invalid-selector", hint="write it as --selector zone=eu"
            )
        pairs[key] = value
    return pairs


@project.command("list")
@click.option("--status", type=click.Choice([s.value for s in ProjectStatus]))
@json_option
@click.pass_context
def list_(ctx: click.Context, status: str | None) -> None:
    """List projects."""
    api = remote(ctx)
    if api is not None:
        listed = api.call("GET", "/api/v1/projects", params={"status": status} if status else None)["projects"]
        emit(
            ctx,
            listed,
            lambda: table(
                None,
                ["project", "status", "type", "kind", "generation", "node"],
                [
                    [
                        f"{p['tenant']}/{p['name']}",
                        p["status"],
                        p["lifecycle_type"],
                        p["kind"],
                        p["generation"],
                        p.get("home_node") or "-",
                    ]
                    for p in listed
                ],
            ),
        )
        return
    services(ctx, create=False)
    rows = _projects(ctx).list(ProjectStatus(status) if status else None)
    emit(
        ctx,
        [p.to_dict() for p in rows],
        lambda: table(
            None,
            ["project", "status", "type", "kind", "generation", "node"],
            [
                [p.ref, p.status.value, p.lifecycle_type.value, p.kind.value, p.generation, p.home_node or "-"]
                for p in rows
            ],
        ),
    )


@project.command("show")
@click.argument("ref")
@json_option
@click.pass_context
def show(ctx: click.Context, ref: str) -> None:
    """Show a project, its owner and (when RUNNING and here) its workspace folder."""
    from tenure.projects import Ownership
    from tenure.projects.lifecycle import project_folder

    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        _show_dict(ctx, api.call("GET", project_path(tenant, name)))
        return
    svc = services(ctx, create=False)
    p = _projects(ctx).get(tenant, name)
    owner = Ownership(svc.store).owner(p.id, _lease_ttl(ctx))
    folder = project_folder(svc.config.data_dir, p)
    shown = folder if p.status is ProjectStatus.RUNNING and os.path.isdir(folder) else None
    _show(ctx, p, {"owner": owner.to_dict(), "workspace_folder": shown})


@project.command("history")
@click.argument("ref")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="At most this many events.")
@json_option
@click.pass_context
def history(ctx: click.Context, ref: str, limit: int) -> None:
    """The ownership timeline of TENANT/NAME, newest first: who held it, since when, and why it moved."""
    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        data = api.call("GET", project_path(tenant, name, "history"), params={"limit": limit})
    else:
        from tenure.projects.timeline import Timeline

        svc = services(ctx, create=False)
        p = _projects(ctx).get(tenant, name)
        events = Timeline(svc.store).history(p.id, limit=limit)
        data = {"project": p.ref, "events": [e.to_dict() for e in events]}
    emit(
        ctx,
        data,
        lambda: table(
            None,
            ["time", "kind", "pod", "generation", "detail"],
            [
                [_when(e["at"]), e["kind"], e.get("pod_id") or "-", _or_dash(e.get("generation")), _detail(e)]
                for e in data["events"]
            ],
        ),
    )


def _when(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(float(at), UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def _detail(event: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted((event.get("detail") or {}).items()))


@project.command("bring")
@click.argument("ref")
@click.option(
    "--from-snapshot",
    "from_snapshot",
    metavar="ID",
    help="Restore this READY snapshot instead of the head (the way back from a damaged head).",
)
@json_option
@click.pass_context
def bring(ctx: click.Context, ref: str, from_snapshot: str | None) -> None:
    """Bring TENANT/NAME to RUNNING on this (short-lived) pod, or on the pod at --url."""
    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        body = {"from_snapshot": from_snapshot} if from_snapshot else None
        _show_dict(ctx, api.call("POST", project_path(tenant, name, "bring"), json=body))
        return
    services(ctx, create=False)
    with short_lived_pod(ctx) as lifecycle, progress_bar(ctx, "restore") as progress:
        lifecycle.workspaces.progress = progress
        p = lifecycle.bring(tenant, name, from_snapshot=from_snapshot)
        folder = lifecycle.folder(p)
    _show(ctx, p, {"workspace_folder": folder})


@project.command("suspend")
@click.argument("ref")
@json_option
@click.pass_context
def suspend(ctx: click.Context, ref: str) -> None:
    """Suspend TENANT/NAME: engines stopped, checkpoint published, folder removed."""
    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        _show_dict(ctx, api.call("POST", project_path(tenant, name, "suspend")))
        return
    services(ctx, create=False)
    with short_lived_pod(ctx) as lifecycle, progress_bar(ctx, "checkpoint") as progress:
        lifecycle.workspaces.progress = progress
        p = lifecycle.suspend(tenant, name)
    _show(ctx, p)


@project.command("close")
@click.argument("ref")
@click.option("--group", "group", default="closed", show_default=True, help="Archive group for the closed project.")
@click.option("--yes", "-y", "yes", is_flag=True, help="Close without asking (required without a terminal).")
@json_option
@click.pass_context
def close(ctx: click.Context, ref: str, group: str, yes: bool) -> None:
    """Close TENANT/NAME for good: its workspace and snapshots are disposed.

    Close cannot be undone. On a terminal it shows what it disposes of and
    asks first; without a terminal (scripts) it needs --yes and otherwise
    refuses with confirmation-required, changing nothing.
    """
    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        if not yes:
            _confirm_remote_close(ctx, f"{tenant}/{name}")
        _show_dict(ctx, api.call("POST", project_path(tenant, name, "close")))
        return
    services(ctx, create=False)
    if not yes:
        _confirm_close(ctx, tenant, name)
    with short_lived_pod(ctx) as lifecycle:
        p = lifecycle.close(tenant, name, group)
    _show(ctx, p)


def _confirm_remote_close(ctx: click.Context, ref: str) -> None:
    if not sys.stdin.isatty():
        raise InvalidInputError(
            f"closing {ref} cannot be undone; nothing was changed",
            code="confirmation-required",
            project=ref,
            hint=f"run it on a terminal to confirm, or pass --yes: tenure project close {ref} --yes",
        )
    if not click.confirm(f"Close {ref}? It cannot be undone.", default=False, err=True):
        err_console.print("not closed; nothing was changed")
        ctx.exit(1)


def _confirm_close(ctx: click.Context, tenant: str, name: str) -> None:
    """Name what close disposes of and ask; refuse without a terminal. Nothing is written before the answer."""
    from tenure.projects import Kind
    from tenure.projects.lifecycle import project_folder
    from tenure.states import SnapshotState

    svc = services(ctx)
    p = _projects(ctx).get(tenant, name)
    if p.status is ProjectStatus.CLOSED or p.kind is Kind.SYSTEM:
        return  # a no-op, or refused before anything happens: nothing to dispose of
    folder = project_folder(svc.config.data_dir, p)
    here = folder if os.path.isdir(folder) else None
    published = (SnapshotState.READY, SnapshotState.DEGRADED)
    snapshots = [s for s in svc.store.snapshots.list(p.workspace_id) if s.state in published] if p.workspace_id else []
    disposed = f"{len(snapshots)} snapshot{'' if len(snapshots) == 1 else 's'}"
    if here is not None:
        disposed = f"the workspace folder {here} and {disposed}"
    if not sys.stdin.isatty():
        raise InvalidInputError(
            f"closing {p.ref} ({p.status.value}) cannot be undone and disposes of {disposed}; nothing was changed",
            code="confirmation-required",
            project=p.ref,
            status=p.status.value,
            workspace_folder=here,
            snapshots=len(snapshots),
            hint=f"run it on a terminal to confirm, or pass --yes: tenure project close {p.ref} --yes",
        )
    err_console.print(f"Closing [bold]{escape(p.ref)}[/] ({p.status.value}) cannot be undone. It disposes of:")
    if here is not None:
        err_console.print(f"  - the workspace folder {escape(here)} (uncommitted changes included)")
    err_console.print(f"  - {len(snapshots)} snapshot{'' if len(snapshots) == 1 else 's'} (reclaimed by `tenure gc`)")
    if not click.confirm(f"Close {p.ref}?", default=False, err=True):
        err_console.print("not closed; nothing was changed")
        ctx.exit(1)


@project.command("claim")
@click.argument("ref")
@click.option("--pod-id", help="Claim for this pod id (default: a fresh short-lived pod).")
@json_option
@click.pass_context
def claim(ctx: click.Context, ref: str, pod_id: str | None) -> None:
    """Operator/debug: only claim the lease (owning is not running)."""
    from tenure.projects import OwnershipFacade, PodIdentity

    tenant, name = _ref(ref)
    services(ctx, create=False)
    pid = pod_id if pod_id is not None else _fresh_pod_id()
    pod = PodIdentity(pid, os.environ.get("TENURE_NODE_NAME") or "cli")
    p = OwnershipFacade(services(ctx).store, pod, lease_ttl=_lease_ttl(ctx)).claim_for_local_pod(tenant, name)
    _show(ctx, p, {"pod_id": pid})


def _fresh_pod_id() -> str:
    import uuid

    return str(uuid.uuid4())


@project.command("set-type")
@click.argument("ref")
@click.argument("type_", metavar="TYPE", type=click.Choice(["AUTO", "EPHEMERAL", "PERMANENT", "HOMELESS"]))
@json_option
@click.pass_context
def set_type(ctx: click.Context, ref: str, type_: str) -> None:
    """Switch the lifecycle type between AUTO, EPHEMERAL and PERMANENT."""
    from tenure.projects import LifecycleType

    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        _show_dict(ctx, api.call("PUT", project_path(tenant, name, "type"), json={"lifecycle_type": type_}))
        return
    services(ctx, create=False)
    _show(ctx, _projects(ctx).set_lifecycle_type(tenant, name, LifecycleType(type_)))


@project.command("set-placement")
@click.argument("ref")
@click.option("--selector", "selector", multiple=True, metavar="KEY=VALUE", help="Pod label the owner must have.")
@click.option("--score", type=float, default=1.0, show_default=True, help="Resource score the project needs.")
@json_option
@click.pass_context
def set_placement(ctx: click.Context, ref: str, selector: tuple[str, ...], score: float) -> None:
    """Set the placement selector and score."""
    tenant, name = _ref(ref)
    pairs = _selector(selector)
    api = remote(ctx)
    if api is not None:
        body = {"selector": pairs, "score": score}
        _show_dict(ctx, api.call("PUT", project_path(tenant, name, "placement"), json=body))
        return
    services(ctx, create=False)
    _show(ctx, _projects(ctx).set_placement(tenant, name, pairs, score))


@click.group("pods", invoke_without_command=True)
@click.option("--liveness-ttl", type=float, default=15.0, show_default=True)
@json_option
@click.pass_context
def pods(ctx: click.Context, liveness_ttl: float) -> None:
    """List pods and whether each is live (``tenure pods``), show one (``tenure pods show POD``) or drain one
    (``tenure pods drain POD``)."""
    ctx.obj["liveness_ttl"] = liveness_ttl
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_pods)


@pods.command("list")
@json_option
@click.pass_context
def list_pods(ctx: click.Context) -> None:
    """List pods with their status, load and whether each is live."""
    from tenure.projects import PodRegistry

    liveness_ttl = float(ctx.find_root().obj.get("liveness_ttl") or 15.0)
    rows = PodRegistry(services(ctx, create=False).store).list_with_liveness(liveness_ttl)
    emit(
        ctx,
        [dict(p.to_dict(), live=live) for p, live in rows],
        lambda: table(
            None,
            ["pod", "node", "status", "live", "running", "score", "endpoint"],
            [
                [p.id, p.node_name, p.status, "yes" if live else "no", p.running, p.score, p.endpoint or "-"]
                for p, live in rows
            ],
        ),
    )


@pods.command("show")
@click.argument("pod_id")
@json_option
@click.pass_context
def show_pod(ctx: click.Context, pod_id: str) -> None:
    """One pod: status, load, liveness, endpoint, labels, capacity — and its last restart reconciliation's
    counts per verdict when POD holds this host's data folder, or is the pod at --url."""
    from urllib.parse import quote

    api = remote(ctx)
    if api is not None:
        data = dict(api.call("GET", "/api/v1/pods/" + quote(pod_id, safe="")))
    else:
        from tenure.mounts.report import data_folder_pod, read_report
        from tenure.projects import PodRegistry

        svc = services(ctx, create=False)
        liveness_ttl = float(ctx.find_root().obj.get("liveness_ttl") or 15.0)
        registry = PodRegistry(svc.store)
        pod = registry.get(pod_id)
        live = any(row.id == pod.id and alive for row, alive in registry.list_with_liveness(liveness_ttl))
        this = data_folder_pod(svc.config.data_dir) == pod.id
        report = read_report(svc.config.data_dir) if this else None
        counts = report["counts"] if report is not None and report.get("pod_id") == pod.id else None
        data = dict(pod.to_dict(), live=live, this=this, reconcile=counts)

    def human() -> None:
        rows: list[list[Any]] = [[k, v] for k, v in data.items() if k not in ("labels", "reconcile")]
        rows += [[f"label {k}", v] for k, v in sorted((data.get("labels") or {}).items())]
        counts = data.get("reconcile")
        if counts is None:
            rows.append(["reconcile", "- (only for this host's pod, or the pod at --url)"])
        else:
            rows += [[f"reconcile {verdict}", n] for verdict, n in sorted(counts.items())] or [["reconcile", "none"]]
        table(None, ["field", "value"], rows)

    emit(ctx, data, human)


@pods.command("drain")
@click.argument("pod_id")
@click.option("--wait", is_flag=True, help="Wait until the pod has handed every project over (STOPPED).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds --wait waits at most.")
@json_option
@click.pass_context
def drain_pod(ctx: click.Context, pod_id: str, wait: bool, timeout: float) -> None:
    """Mark POD DRAINING: at its next beat it hands every project over (checkpoint, release), then stops."""
    import time

    from tenure.errors import ConflictError
    from tenure.projects import PodRegistry
    from tenure.projects.records import PodStatus

    registry = PodRegistry(services(ctx, create=False).store)
    pod = registry.get(pod_id)
    if pod.status == PodStatus.RUNNING.value:
        registry.transition(pod_id, PodStatus.RUNNING, PodStatus.DRAINING)
    elif pod.status not in (PodStatus.DRAINING.value, PodStatus.STOPPED.value):
        raise ConflictError(
            f"pod {pod_id} is {pod.status}; only a RUNNING pod can be drained",
            code="pod-status-conflict",
            pod=pod_id,
            hint="wait until it is RUNNING, or stop its process",
        )
    deadline = time.monotonic() + timeout
    while wait and registry.get(pod_id).status != PodStatus.STOPPED.value and time.monotonic() < deadline:
        time.sleep(0.5)  # polling the store: the pod may run on another host
    status = registry.get(pod_id).status
    emit(
        ctx,
        {"pod": pod_id, "status": status},
        lambda: console.print(
            f"pod {pod_id} is {status}"
            + ("" if status == PodStatus.STOPPED.value else "; it hands its projects over at its next beat")
        ),
    )
