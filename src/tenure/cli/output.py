"""Rendering and error handling shared by every command.

Human output goes to stdout as rich tables; ``--json`` prints one JSON
document per command (stable keys, documented in docs/cli.md). Errors print
one line, ``error[<code>]: <message> (<hint>)``, on stderr and exit with the
family's exit code (:data:`tenure.errors.FAMILIES`, the one mapping of families to exit
codes); under ``--json`` every error — an unexpected one (``internal``) and
an interrupt too — is instead one JSON document on stderr, and stdout stays
empty. ``--debug`` adds the traceback.

Names come from the file system and from callers, so nothing reaches the
terminal raw: in tables and error lines every control character (C0, DEL,
C1) and every lone surrogate (a file name that is not UTF-8, as Python's
``surrogateescape`` holds it) is shown as its ``\\xNN`` / ``\\udcNN`` escape
(:func:`printable`), and cells are never read as rich markup. A JSON document
keeps control characters (JSON escapes them) but writes a lone surrogate as
the text ``\\udcNN``, so every document decodes to valid Unicode (:func:`dumps`).
"""

from __future__ import annotations

import json
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text

from tenure.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, TenureError, exit_code

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
err_console = Console(stderr=True)


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters and lone surrogates as ``\\x1b`` / ``\\udcff`` text."""
    return _UNPRINTABLE.sub(_escape, text)


def _json_safe(value: Any) -> Any:
    """``value`` with every string's lone surrogates written as ``\\udcNN`` text; other objects as ``str()``."""
    if isinstance(value, str):
        return _SURROGATE.sub(_escape, value) if _SURROGATE.search(value) else value
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {_json_safe(k) if isinstance(k, str) else k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return _json_safe(str(value))


def dumps(data: Any) -> str:
    """The JSON text of a document: indented, sorted keys, ASCII, valid Unicode once decoded."""
    return json.dumps(_json_safe(data), indent=2, sort_keys=True)


def emit(ctx: click.Context, data: Any, human: Callable[[], None]) -> None:
    """Print ``data`` as JSON under ``--json``, else call ``human``."""
    if ctx.find_root().obj.get("json"):
        click.echo(dumps(data))
    else:
        human()


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout; each cell is ``str()`` of its value, escaped by :func:`printable`, never markup."""
    t = Table(title=title, show_edge=False, header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(Text("" if v is None else printable(str(v))) for v in row))
    console.print(t)


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@contextmanager
def progress_bar(ctx: click.Context, label: str, unit: str = "bytes") -> Iterator[Callable[[int, int], None] | None]:
    """A progress line on stderr for long work (hidden under --json or when not a terminal).

    The callback counts ``unit`` ("bytes" or "objects") done out of a total.
    It also takes file counts, ``files(done, total, bytes_total, listed)``
    (:class:`tenure.snapshots.build.FileProgress`, a checkpoint's): then the
    line shows files and bytes, and the totals, the rate and the time left
    only once ``listed`` says they are final; before that the bar pulses.
    """
    import threading

    root = ctx.find_root().obj
    if root.get("json") or not err_console.is_terminal:
        yield None
        return

    def amount(n: int) -> str:
        return human_bytes(n) if unit == "bytes" else f"{n:,} {unit}"

    columns = [TextColumn(label), BarColumn(), TextColumn("{task.fields[info]}")]
    if unit == "bytes":
        columns.append(TransferSpeedColumn())
    columns.append(TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=None, info="")

        class Update:
            """The callback: ``update(done, total)``; a checkpoint's also calls ``update.files(...)``."""

            def __init__(self) -> None:
                self.lock = threading.Lock()
                self.counted: tuple[int, int, bool] | None = None  # files done, files total, listing complete
                self.done = 0
                self.total = 0

            def __call__(self, done: int, total: int) -> None:
                with self.lock:
                    self.done, self.total = done, total
                    self.show()

            def files(self, done: int, total: int, bytes_total: int, listed: bool) -> None:
                with self.lock:
                    newly_listed = listed and not (self.counted and self.counted[2])
                    self.counted = (done, total, listed)
                    self.total = max(self.total, bytes_total)
                    self.show()
                if newly_listed:
                    bar.refresh()

            def show(self) -> None:
                if self.counted is None:  # a restore or a GC: the total is known from the start
                    bar.update(
                        task,
                        completed=self.done,
                        total=max(self.total, 1) if self.total else None,
                        info=f"{amount(self.done)}/{amount(self.total)}",
                    )
                    return
                files_done, files_total, listed = self.counted
                if not listed:  # still listing: the totals would grow, so no bar, percentage or time left
                    bar.update(
                        task,
                        completed=self.done,
                        total=None,
                        info=f"{files_done:,} files checked, listing… {amount(self.done)} read",
                    )
                    return
                total = max(self.total, self.done)
                bar.update(
                    task,
                    completed=self.done if total else 1,
                    total=total or 1,
                    info=f"{files_done:,}/{files_total:,} files {amount(self.done)}/{amount(total)}",
                )

        yield Update()


def _fail(ctx: click.Context, document: dict[str, Any], line: str, code: int) -> NoReturn:
    """Report an error on stderr (one line, or one JSON document under --json) and exit with ``code``."""
    root = ctx.find_root().obj or {}
    if root.get("json"):
        click.echo(dumps({"error": document}), err=True)
    else:
        click.echo(printable(line), err=True)
    sys.exit(code)


def run_guarded(ctx: click.Context, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; turn any error into one line (or one JSON document) and an exit code."""

    def debug() -> bool:
        return bool((ctx.find_root().obj or {}).get("debug"))

    try:
        return fn()
    except TenureError as exc:
        if debug():
            traceback.print_exc()
        _fail(ctx, exc.to_dict(), f"error[{exc.code}]: {exc}", exit_code(exc))
    except (click.exceptions.Exit, click.ClickException, click.Abort):
        raise
    except KeyboardInterrupt:
        _fail(
            ctx,
            {"code": "interrupted", "message": "interrupted", "hint": "", "retryable": True, "context": {}},
            "error[interrupted]: interrupted",
            EXIT_INTERRUPTED,
        )
    except Exception as exc:  # noqa: BLE001 - the one place unknown errors become one line
        if debug():
            traceback.print_exc()
        hint = "rerun with --debug for a traceback"
        _fail(
            ctx,
            {
                "code": "internal",
                "message": f"{type(exc).__name__}: {exc}",
                "hint": f"{hint} and report it",
                "retryable": False,
                "context": {},
            },
            f"error[internal]: {type(exc).__name__}: {exc} ({hint})",
            EXIT_INTERNAL,
        )


def json_option(fn: Any) -> Any:
    """``--json`` accepted after any subcommand too (``tenure workspace list --json``)."""

    def set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.find_root().obj["json"] = True

    return click.option(
        "--json",
        "json_",
        is_flag=True,
        expose_value=False,
        callback=set_json,
        help="Print one JSON document instead of tables.",
    )(fn)
