"""``tenure token`` — bearer tokens of the HTTP API (create, list, revoke), managed in-process on the store."""

from __future__ import annotations

import time

import click

from tenure.cli.context import services
from tenure.cli.output import console, emit, json_option, table
from tenure.errors import InvalidInputError

__all__ = ["token"]


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _scope(tenant: str | None, admin: bool, cluster: bool) -> str:
    scopes = [s for s, on in (("admin", admin), ("cluster", cluster)) if on]
    if tenant is not None:
        scopes.append(f"tenant {tenant}")
    return ", ".join(scopes)


@click.group()
def token() -> None:
    """API tokens: once one exists, every HTTP API request but the health probes needs one."""


@token.command("create")
@click.option("--tenant", default=None, help="Scope the token to this tenant's projects.")
@click.option("--admin", is_flag=True, help="An admin token: sees every tenant.")
@click.option("--cluster", is_flag=True, help="A cluster token, for pod-to-pod calls (accepted like admin).")
@click.option("--label", default="", help="A note saying what the token is for.")
@json_option
@click.pass_context
def create(ctx: click.Context, tenant: str | None, admin: bool, cluster: bool, label: str) -> None:
    """Create a token and print its secret (shown this once; only its hash is stored)."""
    from tenure.pod.tokens import TokenStore

    token_id, secret = TokenStore(services(ctx).store).create(tenant, admin, cluster, label)
    data = {"id": token_id, "secret": secret, "tenant": tenant, "admin": admin, "cluster": cluster, "label": label}

    def human() -> None:
        console.print(f"token {token_id} ({_scope(tenant, admin, cluster)})", highlight=False)
        click.echo(secret)
        console.print("[dim]the secret is shown once: store it now[/]")

    emit(ctx, data, human)


@token.command("list")
@json_option
@click.pass_context
def list_(ctx: click.Context) -> None:
    """List tokens (never their secrets), revoked ones too."""
    from tenure.pod.tokens import TokenStore

    rows = TokenStore(services(ctx, create=False).store).list()
    emit(
        ctx,
        [t.to_dict() for t in rows],
        lambda: table(
            None,
            ["id", "scope", "label", "created", "revoked"],
            [
                [t.id, _scope(t.tenant, t.admin, t.cluster), t.label, _when(t.created_at), _when(t.revoked_at)]
                for t in rows
            ],
        ),
    )


@token.command("revoke")
@click.argument("token_id", required=False)
@click.option("--all", "everything", is_flag=True, help="Delete every token: the API is open again (loopback).")
@json_option
@click.pass_context
def revoke(ctx: click.Context, token_id: str | None, everything: bool) -> None:
    """Revoke token TOKEN_ID (at once, on every pod), or with --all delete every token and the cluster
    credential: pods started afterwards have an open API again (loopback only; running pods stay closed
    until restarted)."""
    from tenure.pod.tokens import TokenStore

    if everything == (token_id is not None):
        raise InvalidInputError("pass a TOKEN_ID or --all", code="invalid-input")
    tokens = TokenStore(services(ctx, create=False).store)
    if everything:
        gone = tokens.revoke_all()
        emit(
            ctx,
            {"deleted": gone},
            lambda: console.print(f"{gone} token(s) deleted: the API is open again", highlight=False),
        )
        return
    assert token_id is not None
    info = tokens.revoke(token_id)
    emit(ctx, info.to_dict(), lambda: console.print(f"token {info.id} revoked", highlight=False))


@token.command("rotate-cluster")
@json_option
@click.pass_context
def rotate_cluster(ctx: click.Context) -> None:
    """Replace the cluster credential the pods send each other (never printed); the old one is revoked and
    every pod reads the new one at its next refused request."""
    from tenure.pod.tokens import TokenStore

    info = TokenStore(services(ctx, create=False).store).rotate_cluster_credential()
    emit(ctx, info.to_dict(), lambda: console.print(f"cluster credential is now token {info.id}", highlight=False))
