"""``tenure project`` and ``tenure pods`` — projects, ownership and the lifecycle.

Each command has one body over :func:`tenure.cli.ops.ops`: in-process, a command that acts on a project
runs as a short-lived pod (it registers a pod row with a fresh id, does its work, and releases its leases
and stops the pod row on exit); with ``--url`` it asks the pod there. Both print the same document.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from rich.markup import escape

from tenure.cli.context import services
from tenure.cli.durations import Duration, parse_duration
from tenure.cli.ops import lease_ttl, ops, split_ref
from tenure.cli.output import console, emit, err_console, json_option, table
from tenure.cli.remote import remote
from tenure.defaults import LIVENESS_TTL_S
from tenure.errors import InvalidInputError
from tenure.states import PodState, ProjectStatus

_ref = split_ref


def _show_dict(ctx: click.Context, data: dict[str, Any]) -> None:
    emit(ctx, data, lambda: table(None, ["field", "value"], [[k, _cell(v)] for k, v in data.items()]))


def _cell(value: Any) -> Any:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return value


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
    tenant, name = _ref(ref)
    pairs = _selector(selector) if selector else None
    from tenure.pod.documents import ProjectSpec
    from tenure.projects import LifecycleType

    spec = ProjectSpec(tenant, name, LifecycleType(type_), group, pairs, score)
    made = ops(ctx).create_project(spec, system=system)
    emit(
        ctx,
        made,
        lambda: console.print(
            f"created project [bold]{escape(tenant)}/{escape(name)}[/] ({made['id']}), status {made['status']}"
        ),
    )


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
    """List projects, each with its owner."""
    listed = ops(ctx).projects(status)
    emit(
        ctx,
        listed,
        lambda: table(
            None,
            ["project", "status", "type", "kind", "generation", "owner", "live"],
            [
                [
                    f"{p['tenant']}/{p['name']}",
                    p["status"],
                    p["lifecycle_type"],
                    p["kind"],
                    p["generation"],
                    (p.get("owner") or {}).get("node") or p.get("home_node") or "-",
                    "yes" if (p.get("owner") or {}).get("live") else "no",
                ]
                for p in listed
            ],
        ),
    )


@project.command("show")
@click.argument("ref")
@json_option
@click.pass_context
def show(ctx: click.Context, ref: str) -> None:
    """Show a project, its owner and (when RUNNING on this host) its workspace folder."""
    tenant, name = _ref(ref)
    _show_dict(ctx, ops(ctx).project(tenant, name))


@project.command("history")
@click.argument("ref")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="At most this many events.")
@json_option
@click.pass_context
def history(ctx: click.Context, ref: str, limit: int) -> None:
    """The ownership timeline of TENANT/NAME, newest first: who held it, since when, and why it moved."""
    tenant, name = _ref(ref)
    data = ops(ctx).history(tenant, name, limit)
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
    _show_dict(ctx, ops(ctx).bring(tenant, name, from_snapshot))


@project.command("suspend")
@click.argument("ref")
@click.option(
    "--if-lineage",
    type=click.IntRange(min=1),
    default=None,
    help="refuse (lineage-changed) unless the project is still at this lineage: writes made under it are kept",
)
@json_option
@click.pass_context
def suspend(ctx: click.Context, ref: str, if_lineage: int | None) -> None:
    """Suspend TENANT/NAME: engines stopped, checkpoint published, folder removed."""
    tenant, name = _ref(ref)
    _show_dict(ctx, ops(ctx).suspend(tenant, name, if_lineage))


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
    if not yes:
        if remote(ctx) is not None:
            _confirm_remote_close(ctx, f"{tenant}/{name}")
        else:
            _confirm_close(ctx, tenant, name)
    _show_dict(ctx, ops(ctx).close(tenant, name, group))


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
    from tenure.projects import Kind, ProjectStore
    from tenure.projects.lifecycle import project_folder
    from tenure.states import SnapshotState

    svc = services(ctx, create=False)
    p = ProjectStore(svc.store).get(tenant, name)
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
    p = OwnershipFacade(services(ctx).store, pod, lease_ttl=lease_ttl(ctx)).claim_for_local_pod(tenant, name)
    _show_dict(ctx, dict(p.to_dict(), pod_id=pid))


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
    tenant, name = _ref(ref)
    _show_dict(ctx, ops(ctx).set_type(tenant, name, type_))


@project.command("set-placement")
@click.argument("ref")
@click.option("--selector", "selector", multiple=True, metavar="KEY=VALUE", help="Pod label the owner must have.")
@click.option("--score", type=float, default=1.0, show_default=True, help="Resource score the project needs.")
@json_option
@click.pass_context
def set_placement(ctx: click.Context, ref: str, selector: tuple[str, ...], score: float) -> None:
    """Set the placement selector and score."""
    tenant, name = _ref(ref)
    _show_dict(ctx, ops(ctx).set_placement(tenant, name, _selector(selector), score))


def when_text(at: float | None) -> str:
    """A Unix time as UTC text, or "—"."""
    import datetime

    if at is None:
        return "—"
    return datetime.datetime.fromtimestamp(at, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@project.command("demand")
@click.argument("ref")
@click.option("--need", "change", flag_value="need", help="Record that the project needs an owner.")
@click.option("--done", "change", flag_value="done", help="Remove the demand from --source.")
@click.option("--source", default="api", show_default=True, help="Who needs it (1-64 letters, digits, . _ : -).")
@click.option("--expires-in", type=Duration(allow_zero=False), default=None, help="With --need: ends after this.")
@json_option
@click.pass_context
def demand(ctx: click.Context, ref: str, change: str | None, source: str, expires_in: float | None) -> None:
    """Show why the project needs an owner (its demand and sessions), or add (--need) or remove (--done) a
    demand: an AUTO project in demand comes back on its own after its owner dies."""
    tenant, name = _ref(ref)
    doc = ops(ctx).demand(tenant, name, change, source, expires_in)
    rows = [[d["source"], when_text(d["created_at"]), when_text(d["expires_at"])] for d in doc["sources"]]

    def show() -> None:
        console.print(
            f"{doc['project']} ({doc['lifecycle_type']}): owner required {doc['owner_required']},"
            f" {doc['sessions']} session(s)"
        )
        table(None, ["source", "since", "ends"], rows)

    emit(ctx, doc, show)


@project.command("set-autosave")
@click.argument("ref")
@click.argument("seconds", metavar="SECONDS|default")
@json_option
@click.pass_context
def set_autosave(ctx: click.Context, ref: str, seconds: str) -> None:
    """Set the autosave policy: while the project runs, its folder is checkpointed at most every SECONDS
    (durations like 30s or 5m too) when it changed; 0 turns it off, `default` follows the pod's
    `tenure serve --autosave`."""
    tenant, name = _ref(ref)
    try:
        value = None if seconds == "default" else parse_duration(seconds)
    except ValueError:
        raise InvalidInputError(
            f"{seconds!r} is not a duration", code="invalid-autosave", hint="pass e.g. 30s, 5m, 0 (off) or default"
        ) from None
    _show_dict(ctx, ops(ctx).set_autosave(tenant, name, value))


@click.group("pods", invoke_without_command=True)
@click.option("--liveness-ttl", type=float, default=LIVENESS_TTL_S, show_default=True)
@json_option
@click.pass_context
def pods(ctx: click.Context, liveness_ttl: float) -> None:
    """List pods and whether each is live (``tenure pods``), show one (``tenure pods show POD``), drain one
    (``tenure pods drain POD``) or remove the rows of stopped and dead ones (``tenure pods prune``)."""
    ctx.obj["liveness_ttl"] = liveness_ttl
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_pods)


@pods.command("list")
@json_option
@click.pass_context
def list_pods(ctx: click.Context) -> None:
    """List pods with their status, health (live, dead: silent past the liveness TTL, or stopped), load and
    whether each is live (RUNNING or DRAINING and heard from: what placements and redirects use)."""
    rows = ops(ctx).pods()
    emit(
        ctx,
        rows,
        lambda: table(
            None,
            ["pod", "node", "status", "health", "live", "running", "score", "endpoint"],
            [
                [
                    p["id"] + (" (this host)" if p.get("this") else ""),
                    p["node_name"],
                    p["status"],
                    p.get("health", "-"),
                    "yes" if p["live"] else "no",
                    p["running"],
                    p["score"],
                    p.get("endpoint") or "-",
                ]
                for p in rows
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
    data = ops(ctx).pod(pod_id)

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


@pods.command("prune")
@click.option(
    "--older-than",
    type=Duration(),
    default="1h",
    show_default=True,
    help="Only pods last heard from longer ago than this (45s, 15m, 12h, 7d, or seconds).",
)
@json_option
@click.pass_context
def prune_pods(ctx: click.Context, older_than: float) -> None:
    """Remove the rows of STOPPED and dead pods (silent past the liveness TTL) that hold no project and were
    last heard from longer ago than --older-than. A live pod, and a pod any project still names as its
    holder, are never removed. With --url the pod there prunes (an admin or cluster token)."""
    done = ops(ctx).prune_pods(older_than)
    pruned = done["pruned"]
    emit(
        ctx,
        done,
        lambda: console.print(f"pruned {len(pruned)} pod row(s)" + "".join(f"\n  {pod_id}" for pod_id in pruned)),
    )


@pods.command("drain")
@click.argument("pod_id")
@click.option("--wait", is_flag=True, help="Wait until the pod has handed every project over (STOPPED).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds --wait waits at most.")
@json_option
@click.pass_context
def drain_pod(ctx: click.Context, pod_id: str, wait: bool, timeout: float) -> None:
    """Mark POD DRAINING: it hands every project over (checkpoint, release), then stops.

    In-process the pod is marked in the store and sees it at its next beat; with --url the pod at --url
    asks POD (or is POD) to drain at once.
    """
    done = ops(ctx).drain(pod_id, wait=wait, timeout=timeout)
    status = done["status"]
    emit(
        ctx,
        done,
        lambda: console.print(
            f"pod {pod_id} is {status}"
            + ("" if status == PodState.STOPPED.value else "; it hands its projects over, then stops")
        ),
    )
