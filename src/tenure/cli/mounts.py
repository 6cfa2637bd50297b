"""``tenure mounts`` — this host's mounts and the preserved deltas reconciliation kept (ADR 0021).

``list`` and ``show`` read the host-local mount store of the data folder
(only the data folder: whatever store ``--db`` names is never opened), or,
with ``--url``, the pod's own (``discard`` too);
``recover ID --to DIR`` copies a preserved delta out to a new or empty folder
outside the data folder (the preserved folder is left as it is); with ``--url``
any pod restores a delta recorded in the store from the object store
(``--to``, a folder of the pod's host) or merges it into its running project
(``--into-project``);
``discard ID`` deletes a preserved delta before its recovery window ends.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click

from tenure.cli.ops import ops
from tenure.cli.output import console, emit, json_option, table
from tenure.cli.remote import remote
from tenure.errors import ConflictError, InvalidInputError, NotFoundError
from tenure.mounts.recovery import check_recovery_target
from tenure.pod.lineage import IF_LINEAGE

if TYPE_CHECKING:
    from tenure.mounts.store import MountStore

__all__ = ["mounts"]


def data_folder(ctx: click.Context) -> str:
    """The data folder the global options (or ``TENURE_DATA``, or ``./.tenure``) name; nothing is created."""
    from tenure.cli.context import usable

    root = ctx.find_root().obj or {}
    data_dir = os.path.abspath(root.get("data") or os.environ.get("TENURE_DATA") or ".tenure")
    usable(data_dir)
    return data_dir


def mount_store(ctx: click.Context) -> MountStore:
    """The host-local mount store of the data folder (ADR 0021).

    It is read from the data folder alone: the control-plane store (``--db``,
    which may be PostgreSQL) is never opened, so the commands work on the
    data folder of any pod. Without ``mounts.db`` there is nothing to read:
    ``no-tenure-data``, and nothing is created.
    """
    from tenure.mounts.store import MOUNTS_FILE, MountStore

    data_dir = data_folder(ctx)
    path = os.path.join(data_dir, MOUNTS_FILE)
    if not os.path.isfile(path):
        raise NotFoundError(
            f"no tenure data here: the mount store {path} does not exist",
            code="no-tenure-data",
            path=path,
            data_dir=data_dir,
            hint="mounts are recorded by a pod (`tenure serve`) in its data folder; point --data / TENURE_DATA"
            " at the data folder of the pod on this host",
        )
    return MountStore(data_dir)


@click.group()
def mounts() -> None:
    """This host's mounts, and the preserved deltas a user can recover."""


@mounts.command("list")
@json_option
@click.pass_context
def list_(ctx: click.Context) -> None:
    """Every mount recorded on this host (with --url: on the pod's host), with its status, verdict and
    preserved folder."""
    rows = ops(ctx).mounts()
    emit(
        ctx,
        rows,
        lambda: table(
            None,
            ["mount", "project", "state", "generation", "verdict", "preserved"],
            [
                [
                    m["id"],
                    m.get("project_ref") or "-",
                    m["state"],
                    m["generation"],
                    m.get("verdict") or "-",
                    m.get("preserved_folder") or "-",
                ]
                for m in rows
            ],
        ),
    )


@mounts.command("show")
@click.argument("mount_id")
@json_option
@click.pass_context
def show(ctx: click.Context, mount_id: str) -> None:
    """One mount record."""
    data = ops(ctx).mount(mount_id)
    emit(ctx, data, lambda: table(None, ["field", "value"], [[k, v] for k, v in data.items()]))


def preserved_folder(ctx: click.Context, mount_id: str) -> tuple[MountStore, str]:
    """This host's mount store and the mount's preserved folder (``no-preserved-delta`` without one)."""
    store = mount_store(ctx)
    mount = store.get(mount_id)
    if not mount.preserved_folder or not os.path.isdir(mount.preserved_folder):
        raise ConflictError(
            f"mount {mount_id} has no preserved delta on this host",
            code="no-preserved-delta",
            mount=mount_id,
            hint="`tenure mounts list` shows the mounts with a preserved folder",
        )
    return store, mount.preserved_folder


@mounts.command("recover")
@click.argument("mount_id")
@click.option(
    "--to",
    "dest",
    default=None,
    help="An empty or new folder, outside the data folder, to copy the preserved delta into (with --url: a"
    " folder of the pod's host, restored from the object store).",
)
@click.option(
    "--into-project",
    is_flag=True,
    help="With --url: write the delta's changed files back into its running project, on the pod that runs it.",
)
@click.option("--if-lineage", type=int, default=None, help="With --into-project: the project's lineage you hold.")
@json_option
@click.pass_context
def recover(ctx: click.Context, mount_id: str, dest: str | None, into_project: bool, if_lineage: int | None) -> None:
    """Recover MOUNT_ID's preserved delta: copy it to DIR (links copied as links; the preserved folder stays),
    or, with --url, restore it from the object store or merge it into its project from any pod."""
    if (dest is None) == (not into_project):
        raise InvalidInputError("pass exactly one of --to DIR and --into-project", code="invalid-input")
    api = remote(ctx)
    if api is not None:
        body: dict[str, Any] = {"to": os.path.abspath(dest)} if dest is not None else {"into_project": True}
        headers = {IF_LINEAGE: str(if_lineage)} if if_lineage is not None else None
        path = f"/api/v1/mounts/{quote(mount_id, safe='')}/recover"
        done = dict(api.call("POST", path, json=body, headers=headers))
        where = done.get("to") or f"project {done.get('project')} ({len(done.get('merged', []))} files)"
        emit(ctx, done, lambda: console.print(f"recovered mount {mount_id} into {where}"))
        return
    if into_project:
        raise InvalidInputError(
            "merging a preserved delta into its project is done by the pod that runs it",
            code="needs-a-pod",
            hint="pass --url of any pod",
        )
    assert dest is not None
    _, source = preserved_folder(ctx, mount_id)
    dest = os.path.abspath(dest)
    check_recovery_target(data_folder(ctx), dest)
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
    emit(ctx, {"mount": mount_id, "to": dest}, lambda: console.print(f"recovered mount {mount_id} into {dest}"))


@mounts.command("discard")
@click.argument("mount_id")
@json_option
@click.pass_context
def discard(ctx: click.Context, mount_id: str) -> None:
    """Delete MOUNT_ID's preserved delta now (it cannot be recovered afterwards)."""
    done = ops(ctx).discard_mount(mount_id)
    emit(ctx, done, lambda: console.print(f"discarded {done['discarded']}"))
