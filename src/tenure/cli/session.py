"""``tenure session`` — the client sessions of a project (create, list, bind).

Binding happens on the pod that runs the project, so ``bind`` needs
``--url`` (a running pod; a redirect to the owner is followed). ``create``
and ``list`` work in-process too.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from tenure.cli.context import services
from tenure.cli.output import emit, json_option, table
from tenure.cli.remote import project_path, remote
from tenure.errors import InvalidInputError

__all__ = ["session"]


def _ref(value: str) -> tuple[str, str]:
    from tenure.cli.project import _ref as parse

    return parse(value)


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
    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        _table(ctx, [api.call("POST", project_path(tenant, name, "sessions"))])
        return
    from tenure.projects import ProjectStore

    store = ProjectStore(services(ctx, create=False).store)
    _table(ctx, [asdict(store.create_session(store.get(tenant, name)))])


@session.command("list")
@click.argument("ref")
@json_option
@click.pass_context
def list_(ctx: click.Context, ref: str) -> None:
    """The sessions of project TENANT/NAME."""
    tenant, name = _ref(ref)
    api = remote(ctx)
    if api is not None:
        _table(ctx, api.call("GET", project_path(tenant, name, "sessions"))["sessions"])
        return
    from tenure.projects import ProjectStore

    store = ProjectStore(services(ctx, create=False).store)
    _table(ctx, [asdict(s) for s in store.sessions(store.get(tenant, name))])


def _on_its_pod(ctx: click.Context, verb: str, doing: str, session_id: str, connection_id: str) -> None:
    """POST the session's ``verb`` to the pod at --url (binding happens on the pod that runs its project)."""
    api = remote(ctx)
    if api is None:
        raise InvalidInputError(
            f"{doing} a session happens on the pod that runs its project",
            code="needs-a-pod",
            hint="pass --url http://HOST:PORT of a running tenure serve (or set TENURE_URL)",
        )
    _table(ctx, [api.call("POST", f"/api/v1/sessions/{session_id}/{verb}", json={"connection_id": connection_id})])


@session.command("bind")
@click.argument("session_id")
@click.option("--connection", "connection_id", required=True, help="The client connection to bind the session to.")
@json_option
@click.pass_context
def bind(ctx: click.Context, session_id: str, connection_id: str) -> None:
    """Bind SESSION_ID to a client connection on the pod that runs its project (409 already-bound)."""
    _on_its_pod(ctx, "bind", "binding", session_id, connection_id)


@session.command("unbind")
@click.argument("session_id")
@click.option("--connection", "connection_id", required=True, help="The client connection the session is bound to.")
@json_option
@click.pass_context
def unbind(ctx: click.Context, session_id: str, connection_id: str) -> None:
    """Release SESSION_ID from its client connection on the pod that runs its project (idempotent)."""
    _on_its_pod(ctx, "unbind", "unbinding", session_id, connection_id)
