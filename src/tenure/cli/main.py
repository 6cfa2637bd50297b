"""``tenure`` — the command line. Each command: options → services → one library call → output."""

from __future__ import annotations

import sys
from typing import Any

import click

from tenure.cli.output import run_guarded


class GuardedGroup(click.Group):
    """The root group: every TenureError becomes one line and an exit code, here only."""

    def invoke(self, ctx: click.Context) -> Any:
        return run_guarded(ctx, lambda: super(GuardedGroup, self).invoke(ctx))


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data", envvar="TENURE_DATA", metavar="DIR", help="Data folder (default ./.tenure; env TENURE_DATA).")
@click.option(
    "--db",
    envvar="TENURE_DB",
    metavar="URL",
    help="Store URL: sqlite:///PATH or postgresql://… (default sqlite:///DATA/tenure.db).",
)
@click.option(
    "--objects",
    envvar="TENURE_OBJECTS",
    metavar="URL",
    help=(
        "Object store URL: file://PATH, postgresql://… or s3://BUCKET/PREFIX?region=… "
        "(default file://DATA/objects; env TENURE_OBJECTS; S3: docs/operations.md)."
    ),
)
@click.option(
    "--key-file",
    envvar="TENURE_KEY_FILE",
    metavar="FILE",
    help="Key file of an encrypted object store: 32 random bytes, raw or base64 (env TENURE_KEY_FILE).",
)
@click.option(
    "--passphrase-file",
    metavar="FILE",
    help="Read the passphrase of an encrypted object store from FILE's first line (or set TENURE_PASSPHRASE).",
)
@click.option(
    "--url",
    envvar="TENURE_URL",
    metavar="URL",
    help="Send project, session and snapshot commands to the pod at URL (env TENURE_URL).",
)
@click.option("--token", envvar="TENURE_TOKEN", metavar="TOKEN", help="API bearer token for --url (env TENURE_TOKEN).")
@click.option("--json", "json_", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(package_name="tenure")
@click.pass_context
def root(
    ctx: click.Context,
    data: str | None,
    db: str | None,
    objects: str | None,
    key_file: str | None,
    passphrase_file: str | None,
    url: str | None,
    token: str | None,
    json_: bool,
    debug: bool,
) -> None:
    """tenure: durable, fenced, deduplicated workspaces."""
    ctx.ensure_object(dict)
    ctx.obj.update(
        {
            "data": data,
            "db": db,
            "objects": objects,
            "key_file": key_file,
            "passphrase_file": passphrase_file,
            "url": url,
            "token": token,
            "json": json_,
            "debug": debug,
        }
    )
    if not debug:
        quiet_drivers()


def quiet_drivers() -> None:
    """Keep the drivers' own log lines and warnings (psycopg, its pool) off stderr; ``--debug`` shows them.

    Every failure reaches the user as tenure's one-line error (or JSON
    document); a successful command prints nothing on stderr.
    """
    import logging
    import warnings

    for name in ("psycopg", "psycopg_pool"):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    warnings.filterwarnings("ignore", module=r"psycopg")


_COMMANDS = {
    "workspace": ("tenure.cli.workspace", "workspace"),
    "snapshot": ("tenure.cli.snapshot", "snapshot"),
    "gc": ("tenure.cli.snapshot", "gc"),
    "db": ("tenure.cli.db", "db"),
    "project": ("tenure.cli.project", "project"),
    "pods": ("tenure.cli.project", "pods"),
    "intake": ("tenure.cli.intake", "intake"),
    "serve": ("tenure.cli.serve", "serve"),
    "mounts": ("tenure.cli.mounts", "mounts"),
    "session": ("tenure.cli.session", "session"),
    "token": ("tenure.cli.token", "token"),
    "verify": ("tenure.cli.verify", "verify"),
    "objects": ("tenure.cli.objects", "objects"),
}


def _load(name: str) -> click.Command | None:
    """Import a command group only when it is used (start-up stays fast)."""
    import importlib

    if name not in _COMMANDS:
        return None
    module, attr = _COMMANDS[name]
    command = getattr(importlib.import_module(module), attr)
    assert isinstance(command, click.Command)
    return command


root.list_commands = lambda ctx: sorted(_COMMANDS)  # type: ignore[method-assign]
root.get_command = lambda ctx, cmd_name: _load(cmd_name)  # type: ignore[method-assign]


def main() -> None:
    root.main(args=sys.argv[1:], prog_name="tenure", obj={})


if __name__ == "__main__":  # pragma: no cover
    main()
