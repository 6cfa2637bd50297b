"""Rendering and error handling shared by every command.

Human output goes to stdout as rich tables; ``--json`` prints one JSON
document per command (stable keys, documented in docs/cli.md). Errors print
one line, ``error[<code>]: <message> (<hint>)``, on stderr and exit with the
family's exit code; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from tenure.errors import TenureError

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
err_console = Console(stderr=True)


def emit(ctx: click.Context, data: Any, human: Callable[[], None]) -> None:
    """Print ``data`` as JSON under ``--json``, else call ``human``."""
    if ctx.find_root().obj.get("json"):
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human()


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    t = Table(title=title, show_edge=False, header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    console.print(t)


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@contextmanager
def progress_bar(ctx: click.Context, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A byte progress bar on stderr for long work (hidden under --json or when not a terminal)."""
    root = ctx.find_root().obj
    if root.get("json") or not err_console.is_terminal:
        yield None
        return
    with Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def run_guarded(ctx: click.Context, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; turn a TenureError into one line and an exit code."""
    def debug() -> bool:
        return bool(ctx.find_root().obj.get("debug"))

    try:
        return fn()
    except TenureError as exc:
        if debug():
            traceback.print_exc()
        if ctx.find_root().obj.get("json"):
            click.echo(json.dumps({"error": exc.to_dict()}, indent=2, sort_keys=True), err=True)
        else:
            click.echo(f"error[{exc.code}]: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (click.exceptions.Exit, click.ClickException, click.Abort):
        raise
    except KeyboardInterrupt:
        click.echo("error[interrupted]: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the one place unknown errors become one line
        if debug():
            traceback.print_exc()
        click.echo(f"error[internal]: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)", err=True)
        sys.exit(70)


def json_option(fn: Any) -> Any:
    """``--json`` accepted after any subcommand too (``tenure workspace list --json``)."""

    def set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.find_root().obj["json"] = True

    return click.option("--json", "json_", is_flag=True, expose_value=False, callback=set_json,
                        help="Print one JSON document instead of tables.")(fn)
