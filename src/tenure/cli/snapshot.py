"""``tenure snapshot`` and ``tenure gc`` — inspect, verify, delete, prune, collect."""

from __future__ import annotations

import time

import click
from rich.markup import escape

from tenure.cli.context import services
from tenure.cli.durations import Duration
from tenure.cli.ops import ops
from tenure.cli.output import console, emit, human_bytes, json_option, printable, progress_bar, table
from tenure.cli.workspace import expiry_grace_option


@click.group()
def snapshot() -> None:
    """Snapshots: immutable, content-addressed trees."""


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


@snapshot.command("list")
@click.argument("workspace")
@json_option
@click.pass_context
def list_(ctx: click.Context, workspace: str) -> None:
    """List the snapshots of WORKSPACE, or of project TENANT/NAME (over --url: of a project only), oldest first."""
    listed = ops(ctx).snapshots(workspace)
    emit(
        ctx,
        listed,
        lambda: table(
            None,
            ["id", "state", "created", "files", "new bytes", ""],
            [
                [
                    s["id"],
                    s["state"],
                    _when(s["created_at"]),
                    s.get("files"),
                    human_bytes(s["bytes_new"]) if s.get("bytes_new") is not None else "-",
                    ("head " if s.get("head") else "") + ("pinned" if s.get("pinned") else ""),
                ]
                for s in listed
            ],
        ),
    )


@snapshot.command("show")
@click.argument("snapshot_id")
@json_option
@click.pass_context
def show(ctx: click.Context, snapshot_id: str) -> None:
    """Show one snapshot record."""
    data = ops(ctx).snapshot(snapshot_id)
    emit(ctx, data, lambda: table(None, ["field", "value"], [[k, v] for k, v in data.items()]))


@snapshot.command("verify")
@click.argument("snapshot_id")
@click.option(
    "--sample",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=1.0,
    show_default=True,
    help="Fraction of data objects to re-read and re-hash (tree objects are always checked).",
)
@json_option
@click.pass_context
def verify(ctx: click.Context, snapshot_id: str, sample: float) -> None:
    """Re-hash a snapshot's objects; mark it DEGRADED if any is missing or corrupt."""
    report = ops(ctx).verify_snapshot(snapshot_id, sample)

    def human() -> None:
        status = "[green]ok[/]" if report["ok"] else "[red]DAMAGED[/]"
        console.print(
            f"snapshot {report['snapshot']['id']}: {status} ({report['checked']} objects checked,"
            f" state {report['snapshot']['state']})"
        )
        for path in report["lost_paths"]:
            console.print(f"  lost: {printable(path)}")

    emit(ctx, report, human)
    if not report["ok"]:
        ctx.exit(6)


@snapshot.command("repair")
@click.argument("snapshot_id")
@click.option(
    "--from",
    "folder",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder holding the lost files at the paths the snapshot records (only read, never written).",
)
@json_option
@click.pass_context
def repair(ctx: click.Context, snapshot_id: str, folder: str) -> None:
    """Put back a DEGRADED snapshot's lost objects from files of FOLDER; READY again when none is missing.

    Exits 0 when the snapshot is READY at the end, 6 when it is still DEGRADED.
    """
    with progress_bar(ctx, "repair") as progress:
        report = services(ctx, create=False).workspaces.repair(snapshot_id, folder, progress=progress)

    def human() -> None:
        snap = report.snapshot
        if report.nothing_to_repair:
            console.print(f"snapshot {snap.id}: nothing to repair (state {snap.state.value})")
            return
        status = "[green]READY[/]" if report.ok else "[red]still DEGRADED[/]"
        count = len(report.repaired)
        console.print(
            f"snapshot {snap.id}: repaired {count} object{'' if count == 1 else 's'}"
            f" ({human_bytes(report.bytes_read)} read from {escape(printable(folder))}); {status}"
        )
        if report.unrepairable:
            n = len(report.unrepairable)
            console.print(f"{n} path{'' if n == 1 else 's'} unrepairable:")
            for u in report.unrepairable:
                console.print(f"  {printable(u.path)}: {u.reason} — {printable(u.detail)}", markup=False)
        elif not report.ok:
            console.print(f"  still missing: {len(report.missing)}, corrupt: {len(report.corrupt)}")

    emit(ctx, report.to_dict(), human)
    if not report.ok:
        ctx.exit(6)


@snapshot.command("delete")
@click.argument("snapshot_id")
@json_option
@click.pass_context
def delete(ctx: click.Context, snapshot_id: str) -> None:
    """Logically delete a snapshot (→ DELETING); `tenure gc` reclaims its objects."""
    snap = services(ctx, create=False).store.snapshots.delete(snapshot_id)
    emit(ctx, snap.to_dict(), lambda: console.print(f"snapshot {snap.id} is {snap.state.value}"))


@snapshot.command("prune")
@click.argument("workspace")
@click.option("--keep-last", type=click.IntRange(min=0), default=10, show_default=True)
@click.option(
    "--keep-autosaves",
    type=click.IntRange(min=0),
    default=24,
    show_default=True,
    help="autosave snapshots kept, counted apart from --keep-last",
)
@json_option
@click.pass_context
def prune(ctx: click.Context, workspace: str, keep_last: int, keep_autosaves: int) -> None:
    """Delete all but the newest KEEP_LAST snapshots and the newest KEEP_AUTOSAVES autosaves (the head and
    pinned ones are always kept); autosaves never count toward KEEP_LAST.

    Deleted snapshots become DELETING; `tenure gc` reclaims their objects
    once those are older than its grace period (--grace, 1 hour by default).
    """
    from tenure.states import SnapshotState

    svc = services(ctx, create=False)
    ws = svc.store.workspaces.workspace(workspace)
    newest = svc.store.snapshots.newest(ws.id, keep_last, keep_autosaves)
    doomed = svc.store.snapshots.prune(ws.id, keep_last, keep_autosaves)
    published = [s for s in svc.store.snapshots.list(ws.id) if s.state in (SnapshotState.READY, SnapshotState.DEGRADED)]
    pinned = svc.store.snapshots.pinned_ids()
    fork_heads = {w.head_snapshot_id for w in svc.store.workspaces.workspaces() if w.id != ws.id}
    kept = []
    for snap in published:
        why = (
            ("head", snap.id == ws.head_snapshot_id),
            ("pinned", snap.id in pinned),
            (newest.get(snap.id, "newest"), snap.id in newest),
            ("fork-head", snap.id in fork_heads),
        )
        reasons = [reason for reason, applies in why if applies]
        kept.append({"id": snap.id, "reasons": reasons})
    data = {"deleted": [s.id for s in doomed], "kept": kept, "keep_last": keep_last, "keep_autosaves": keep_autosaves}

    def human() -> None:
        console.print(
            f"{len(doomed)} snapshot{'' if len(doomed) == 1 else 's'} marked DELETING"
            + (f": {', '.join(s.id for s in doomed)}" if doomed else "")
        )
        if kept:
            console.print(f"kept {len(kept)}: " + ", ".join(f"{k['id']} ({', '.join(k['reasons'])})" for k in kept))
        if doomed:
            console.print(
                "`tenure gc` reclaims their objects once they are older than its grace period (1 hour by"
                " default; `tenure gc --grace 0` reclaims them now, in-flight uploads stay pinned)"
            )

    emit(ctx, data, human)


@snapshot.command("pin")
@click.argument("snapshot_id")
@json_option
@click.pass_context
def pin(ctx: click.Context, snapshot_id: str) -> None:
    """Keep a snapshot: prune and delete will skip it."""
    svc = services(ctx, create=False)
    pid = svc.store.snapshots.pin_snapshot(snapshot_id, svc.workspaces.holder, kind="keep")
    emit(ctx, {"pin": pid, "snapshot": snapshot_id}, lambda: console.print(f"pinned {snapshot_id}"))


@snapshot.command("unpin")
@click.argument("snapshot_id")
@json_option
@click.pass_context
def unpin(ctx: click.Context, snapshot_id: str) -> None:
    """Remove keep pins from a snapshot."""
    n = services(ctx, create=False).store.snapshots.unpin_snapshot(snapshot_id)
    emit(ctx, {"removed": n}, lambda: console.print(f"removed {n} pin(s)"))


@click.command()
@click.option(
    "--grace",
    "grace_s",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Never remove unreferenced objects younger than this many seconds.",
)
@click.option(
    "--expire-idle",
    "idle_ttl_s",
    type=Duration(allow_zero=False),
    default=None,
    metavar="DURATION",
    help="First expire workspaces idle this long (e.g. 30d) and delete those past their expiry grace."
    " Destructive, so off unless given.",
)
@expiry_grace_option(
    "expiry_grace_s", "With --expire-idle: how long an EXPIRING workspace can be brought back before it is deleted."
)
@json_option
@click.pass_context
def gc(ctx: click.Context, grace_s: float, idle_ttl_s: float | None, expiry_grace_s: float) -> None:
    """Reclaim objects no readable snapshot references.

    Objects that a readable snapshot references, that an upload or restore in
    progress has pinned, or that are younger than the grace period are kept;
    the output says how many of each.

    With --expire-idle, an expiry pass runs first: IDLE workspaces unused for
    that long become EXPIRING (`tenure workspace undo-expiry` brings one
    back), and EXPIRING ones past --expiry-grace are deleted, their snapshots
    DELETING. Never a workspace with a live writer lease, nor the workspace
    of a project that is not SUSPENDED.
    """
    svc = services(ctx, create=False).workspaces
    expiry = None if idle_ttl_s is None else svc.expire_idle(idle_ttl_s, expiry_grace_s)
    with progress_bar(ctx, "gc", unit="objects") as progress:
        result = svc.gc(grace_s=grace_s, progress=progress)

    def human() -> None:
        if expiry is not None:
            console.print(
                f"expiry (idle {_duration(expiry.idle_ttl_s)}, grace {_duration(expiry.grace_s)}):"
                f" {len(expiry.expired)} expired, {len(expiry.deleted)} deleted"
                f" ({len(expiry.snapshots_deleting)} snapshots DELETING), {len(expiry.skipped)} skipped"
            )
            for name in expiry.expired:
                console.print(f"  expiring: {escape(name)}")
            for name in expiry.deleted:
                console.print(f"  deleted: {escape(name)}")
            for skip in expiry.skipped:
                console.print(f"  kept ({skip.action}): {escape(skip.workspace)}: {skip.reason}, {escape(skip.detail)}")
        kept = result.stored - result.removed
        console.print(f"removed {result.removed} of {result.stored} objects; kept {kept}:")
        console.print(f"  {result.referenced} referenced by the {result.roots} snapshots that can still be read")
        console.print(f"  {result.spared_by_pins} pinned by uploads or restores in progress")
        line = f"  {result.young} unreferenced but younger than the grace period ({_duration(result.grace_s)})"
        if result.young and result.young_reclaimable_in is not None:
            line += f": reclaimable in {_duration(result.young_reclaimable_in)}, or now with `tenure gc --grace 0`"
        console.print(line)
        if result.damaged:
            console.print(
                f"[yellow]{len(result.damaged)} damaged trees were kept as far as they can be read:"
                f" {', '.join(result.damaged[:5])}; run `tenure snapshot verify` on their snapshots[/]"
            )

    data = result.to_dict()
    if expiry is not None:
        data["expiry"] = expiry.to_dict()
    emit(ctx, data, human)


def _duration(seconds: float) -> str:
    """A short human duration: 45 s, 12 min, 1 h 5 min."""
    s = max(0, round(seconds))
    if s < 90:
        return f"{s} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    hours, minutes = divmod(round(s / 60), 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")
