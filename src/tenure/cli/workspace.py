"""``tenure workspace`` — create, checkpoint, restore, list, undo an expiry."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.markup import escape

from tenure.cli.context import services
from tenure.cli.durations import Duration
from tenure.cli.output import console, emit, err_console, human_bytes, json_option, progress_bar, table

F = TypeVar("F", bound=Callable[..., Any])


@click.group()
def workspace() -> None:
    """Workspaces: a folder with a durable, fenced head snapshot."""


@workspace.command("create")
@click.argument("name")
@click.option("--from-snapshot", "from_snapshot", metavar="ID", help="Fork: start from an existing READY snapshot.")
@json_option
@click.pass_context
def create(ctx: click.Context, name: str, from_snapshot: str | None) -> None:
    """Create workspace NAME (empty, or a fork of a READY snapshot)."""
    ws = services(ctx, create=True).workspaces.create(name, from_snapshot)
    emit(
        ctx,
        ws.to_dict(),
        lambda: console.print(
            f"created workspace [bold]{ws.name}[/] ({ws.id})"
            + (f" from {ws.base_snapshot_id}" if from_snapshot else "")
        ),
    )


@workspace.command("checkpoint")
@click.argument("name")
@click.option(
    "--from", "folder", required=True, type=click.Path(exists=True, file_okay=False), help="Folder to checkpoint."
)
@click.option("--key", metavar="KEY", help="Idempotency key: repeating a checkpoint with it publishes once.")
@click.option(
    "--exclude",
    "exclude",
    multiple=True,
    metavar="PATTERN",
    help="Leave out paths matching PATTERN (gitignore syntax, like .tenureignore; repeatable).",
)
@click.option(
    "--wait", is_flag=True, help="If another writer holds the workspace, wait for it to finish instead of failing."
)
@json_option
@click.pass_context
def checkpoint(
    ctx: click.Context, name: str, folder: str, key: str | None, exclude: tuple[str, ...], wait: bool
) -> None:
    """Checkpoint FOLDER as the new head of workspace NAME.

    tenure's own data folder (and a local object folder or SQLite file) is
    never part of the snapshot, even when it lies inside FOLDER.
    """
    svc = services(ctx, create=True)

    def waiting(why: str) -> None:
        if not ctx.find_root().obj.get("json"):
            err_console.print(f"waiting: {escape(why)}")

    with progress_bar(ctx, "checkpoint") as progress:
        result = svc.workspaces.checkpoint(
            name, folder, key=key, progress=progress, exclude=exclude, wait=wait, on_wait=waiting
        )
    snap = result.snapshot
    inside = _inside(svc.config.data_dir, folder)

    def human() -> None:
        verb = "unchanged, head kept" if result.unchanged else "published"
        console.print(f"{verb}: snapshot [bold]{snap.id}[/]")
        table(
            None,
            ["files", "bytes read", "new bytes stored", "skipped"],
            [
                [
                    snap.files,
                    human_bytes(snap.bytes_read if not result.unchanged else 0),
                    human_bytes(snap.bytes_new if not result.unchanged else 0),
                    len(result.skipped),
                ]
            ],
        )
        for path, kind in result.skipped:
            console.print(f"  skipped {kind}: {path}")
        if inside is not None:
            console.print(f"  left out tenure's data folder: {escape(inside)}")

    emit(ctx, result.to_dict(), human)


def _inside(data_dir: str, folder: str) -> str | None:
    """``data_dir`` relative to ``folder`` when it lies inside it, else None."""
    base, data = os.path.realpath(folder), os.path.realpath(data_dir)
    return os.path.relpath(data, base) if data.startswith(base.rstrip(os.sep) + os.sep) else None


@workspace.command("restore")
@click.argument("name")
@click.option("--to", "dest", required=True, type=click.Path(file_okay=False), help="Empty or new folder.")
@click.option("--snapshot", metavar="ID", help="Restore this snapshot instead of the head.")
@click.option("--partial", is_flag=True, help="Restore intact files of a damaged snapshot and list the lost ones.")
@click.option(
    "--allow-deleting", is_flag=True, help="Read a DELETING snapshot anyway (its objects last until the next GC)."
)
@click.option(
    "--keep-setuid",
    "keep_setuid",
    is_flag=True,
    help="Restore setuid, setgid and sticky bits as stored (by default setuid and setgid are dropped,"
    " and sticky on files).",
)
@json_option
@click.pass_context
def restore(
    ctx: click.Context,
    name: str,
    dest: str,
    snapshot: str | None,
    partial: bool,
    allow_deleting: bool,
    keep_setuid: bool,
) -> None:
    """Restore workspace NAME (its head, or --snapshot) into DEST."""
    with progress_bar(ctx, "restore") as progress:
        svc = services(ctx, create=False)
        snap, result = svc.workspaces.restore(
            name,
            dest,
            snapshot=snapshot,
            partial=partial,
            allow_deleting=allow_deleting,
            keep_special_bits=keep_setuid,
            progress=progress,
        )
    lost = list(result.lost_paths)
    dropped = list(result.special_bits_dropped)
    data = {
        "snapshot": snap.to_dict(),
        "dest": dest,
        "files": result.files,
        "lost_paths": lost,
        "special_bits_dropped": dropped,
    }

    def human() -> None:
        console.print(f"restored snapshot [bold]{snap.id}[/] into {dest}")
        for path in lost:
            console.print(f"  lost: {escape(path)}")
        if dropped:
            shown = ", ".join(escape(p) for p in dropped[:5]) + (" ..." if len(dropped) > 5 else "")
            console.print(
                f"  setuid/setgid bits not restored on {len(dropped)} paths (--keep-setuid keeps them): {shown}"
            )

    emit(ctx, data, human)


@workspace.command("list")
@json_option
@click.pass_context
def list_(ctx: click.Context) -> None:
    """List workspaces."""
    rows = services(ctx, create=False).store.workspaces.workspaces()
    emit(
        ctx,
        [w.to_dict() for w in rows],
        lambda: table(
            None,
            ["name", "state", "head", "version", "generation"],
            [[w.name, w.state.value, w.head_snapshot_id or "-", w.version, w.writer_generation] for w in rows],
        ),
    )


def expiry_grace_option(dest: str, help: str) -> Callable[[F], F]:
    """``--expiry-grace DURATION`` into ``dest``: the grace an EXPIRING workspace has (default 7 days)."""
    return click.option(
        "--expiry-grace", dest, type=Duration(), default="7d", show_default=True, metavar="DURATION", help=help
    )


@workspace.command("undo-expiry")
@click.argument("name")
@expiry_grace_option("grace_s", "The grace period the expiry was given (`tenure gc --expiry-grace`).")
@json_option
@click.pass_context
def undo_expiry(ctx: click.Context, name: str, grace_s: float) -> None:
    """Bring back workspace NAME, EXPIRING, within its grace period: IDLE again, its head intact.

    Refused with `expiry-grace-over` once the grace has passed, and with
    `workspace-not-expiring` for a workspace that is not EXPIRING (a deleted
    one stays deleted).
    """
    ws = services(ctx, create=False).workspaces.undo_expiry(name, grace_s)
    emit(
        ctx,
        ws.to_dict(),
        lambda: console.print(
            f"workspace [bold]{escape(ws.name)}[/] is {ws.state.value} again (head {ws.head_snapshot_id or '-'})"
        ),
    )
