"""``tenure session`` — the client sessions of a project (create, list, bind).

Binding happens on the pod that runs the project, so ``bind`` needs
``--url`` (a running pod; a redirect to the owner is followed). ``create``
and ``list`` work in-process too.
"""

from __future__ import annotations

from typing import Any

import click

from tenure.cli.ops import ops, split_ref
from tenure.cli.output import console, emit, json_option, table

__all__ = ["session"]


def _table(ctx: click.Context, rows: list[dict[str, Any]]) -> None:
    emit(
        ctx,
        rows,
        lambda: table(
            None,
            ["session", "project", "connection", "pod"],
            [
                [r["id"], r["project_id"], r.get("bound_connection_id") or "-", r.get("bound_pod_id") or "-"]
                for r in rows
            ],
        ),
    )


@click.group()
def session() -> None:
    """Client sessions of a project: create, list, bind (bind on the pod that runs it: --url)."""


@session.command("create")
@click.argument("ref")
@json_option
@click.pass_context
def create(ctx: click.Context, ref: str) -> None:
    """A new, unbound session of project TENANT/NAME."""
    tenant, name = split_ref(ref)
    _table(ctx, [ops(ctx).create_session(tenant, name)])


@session.command("list")
@click.argument("ref")
@json_option
@click.pass_context
def list_(ctx: click.Context, ref: str) -> None:
    """The sessions of project TENANT/NAME."""
    tenant, name = split_ref(ref)
    _table(ctx, ops(ctx).sessions(tenant, name))


@session.command("bind")
@click.argument("session_id")
@click.option("--connection", "connection_id", required=True, help="The client connection to bind the session to.")
@json_option
@click.pass_context
def bind(ctx: click.Context, session_id: str, connection_id: str) -> None:
    """Bind SESSION_ID to a client connection on the pod that runs its project (409 already-bound)."""
    _table(ctx, [ops(ctx).bind_session(session_id, connection_id, unbind=False)])


@session.command("unbind")
@click.argument("session_id")
@click.option("--connection", "connection_id", required=True, help="The client connection the session is bound to.")
@json_option
@click.pass_context
def unbind(ctx: click.Context, session_id: str, connection_id: str) -> None:
    """Release SESSION_ID from its client connection on the pod that runs its project (idempotent)."""
    _table(ctx, [ops(ctx).bind_session(session_id, connection_id, unbind=True)])


@session.command("delete")
@click.argument("session_id")
@json_option
@click.pass_context
def delete(ctx: click.Context, session_id: str) -> None:
    """Delete a session: the demand it made ends (an EPHEMERAL project not otherwise in use is suspended)."""
    done = ops(ctx).delete_session(session_id)
    emit(ctx, done, lambda: console.print(f"deleted session {session_id} of {done['project']}"))
