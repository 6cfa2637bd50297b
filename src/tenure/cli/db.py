"""``tenure db`` — schema migrations."""

from __future__ import annotations

import click

from tenure.cli.context import services
from tenure.cli.output import console, emit, json_option


@click.group()
def db() -> None:
    """Control-plane store maintenance."""


@db.command()
@json_option
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Apply pending schema migrations (also done automatically on first use)."""
    from tenure.store.connector import open_connector
    from tenure.store.migrate import migrate as run

    connector = open_connector(services(ctx).config.db_url)
    try:
        applied = run(connector)
    finally:
        connector.close()
    names = [f"{m.version:04d}_{m.name}" for m in applied]
    emit(
        ctx,
        {"applied": names},
        lambda: console.print("applied: " + ", ".join(names) if names else "schema is up to date"),
    )
