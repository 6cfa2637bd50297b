"""``tenure intake``: the intake commands (init, poll, show, advance, block,
resume, reopen, fail, pack).

Human output is a rich table; ``--json`` (or the root group's global
``json`` flag) prints one stable JSON document. Errors print one line,
``error[<code>]: <message>``, on stderr and exit with the error's exit code;
``--debug`` adds the traceback.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from rich.console import Console
from rich.table import Table

from tenure.errors import InvalidInputError, TenureError
from tenure.intake import CheckpointStore, InboxProcessor, Package, PollResult, Workspace
from tenure.intake.canonical import id_hash
from tenure.intake.pack import pack_directory

__all__ = ["intake"]

F = TypeVar("F", bound=Callable[..., Any])


def _flag(ctx: click.Context, name: str, local: bool) -> bool:
    """A per-command flag, or the same flag set globally in ``ctx.obj``."""
    obj = ctx.obj
    return bool(local or (isinstance(obj, dict) and obj.get(name)))


def _handle_errors(func: F) -> F:
    """Turn a TenureError into ``error[<code>]: <message>`` and its exit code."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        try:
            return func(*args, **kwargs)
        except TenureError as error:
            if _flag(ctx, "debug", False):
                traceback.print_exc(file=sys.stderr)
            click.echo(f"error[{error.code}]: {error}", err=True)
            ctx.exit(error.exit_code)
    return wrapper  # type: ignore[return-value]


def _emit(ctx: click.Context, as_json: bool, document: Any, table: Table | None) -> None:
    if _flag(ctx, "json", as_json) or table is None:
        click.echo(json.dumps(document, indent=2, sort_keys=True, default=str))
    else:
        Console(width=200).print(table)


def _package_table(packages: list[Package]) -> Table:
    table = Table("case", "package", "gen", "rev", "state", "routing", "retries", "checkpoints")
    for p in packages:
        table.add_row(p.case_id, p.package_id, str(p.generation), str(p.analysis_revision),
                      p.state.value, p.routing, str(p.retry_count), str(len(p.chain)))
    return table


def _results_table(results: list[PollResult]) -> Table:
    table = Table("result", "input", "case", "package", "gen", "state", "code", "message")
    for r in results:
        table.add_row(r.kind.value, r.input_path.name if r.input_path else "",
                      r.case_id or "", r.package_id or "",
                      "" if r.generation is None else str(r.generation), r.state or "",
                      r.code or "", r.message or "")
    return table


json_option = click.option("--json", "as_json", is_flag=True, help="Print stable JSON.")
dir_argument = click.argument("directory", type=click.Path(file_okay=False, path_type=Path))


@click.group()
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def intake(ctx: click.Context, debug: bool) -> None:
    """File-based intake: inbox admission, package generations and checkpoints."""
    obj = ctx.ensure_object(dict)
    if debug:
        obj["debug"] = True


@intake.command("init")
@dir_argument
@json_option
@click.pass_context
@_handle_errors
def init_command(ctx: click.Context, directory: Path, as_json: bool) -> None:
    """Create the intake layout in DIRECTORY (inbox/, quarantine/, cases/, ...)."""
    workspace = Workspace(directory)
    _emit(ctx, as_json, {"root": str(workspace.root)}, None if as_json else _root_table(workspace))


def _root_table(workspace: Workspace) -> Table:
    table = Table("folder", "path")
    for name in ("inbox", "quarantine", "cache", "cases", "outbox", "review"):
        table.add_row(name, str(getattr(workspace, name)))
    return table


@intake.command("poll")
@dir_argument
@click.option("--max-jobs", type=click.IntRange(min=0), default=100, show_default=True,
              help="Inputs to act on in this pass (DEFERRED and BUSY do not count).")
@json_option
@click.pass_context
@_handle_errors
def poll_command(ctx: click.Context, directory: Path, max_jobs: int, as_json: bool) -> None:
    """Run one pass over the inbox and the blocked cases."""
    results = InboxProcessor(Workspace(directory)).poll(max_jobs=max_jobs)
    _emit(ctx, as_json, {"results": [r.to_dict() for r in results]}, _results_table(results))


@intake.command("show")
@dir_argument
@click.argument("case", required=False)
@click.option("--package", "package_id", help="Show one package of CASE with its chain.")
@json_option
@click.pass_context
@_handle_errors
def show_command(ctx: click.Context, directory: Path, case: str | None, package_id: str | None,
                 as_json: bool) -> None:
    """List stored packages (all, or CASE's); with --package, its checkpoint chain."""
    store = CheckpointStore(Workspace(directory))
    if case is not None and package_id is not None:
        package = store.current(case, package_id)
        chain = [{"generation": c.generation, "state": c.state, "step_id": c.step_id,
                  "created_at": c.data["created_at"], "path": c.path}
                 for c in reversed(package.chain)]
        table = Table("gen", "state", "step", "created")
        for row in chain:
            table.add_row(str(row["generation"]), row["state"], row["step_id"], row["created_at"])
        _emit(ctx, as_json, {"package": package.summary(), "checkpoints": chain}, table)
        return
    packages = [p for p in store.packages()
                if case is None or id_hash(p.case_id) == id_hash(case)]
    _emit(ctx, as_json, {"packages": [p.summary() for p in packages]}, _package_table(packages))


def _pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    result = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise InvalidInputError(f"{what} {value!r} must look like NAME=VALUE", code="invalid-input",
                               hint=f"pass {what} as NAME=VALUE")
        result[name] = rest
    return result


def _details(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidInputError(f"--details is not JSON: {error}", hint="pass a JSON object") from None


def _finish(ctx: click.Context, as_json: bool, package: Package) -> None:
    _emit(ctx, as_json, {"package": package.summary()}, _package_table([package]))


step_option = click.option("--step-id", required=True, help="Stable id of this step (idempotence key).")
details_option = click.option("--details", help="JSON object recorded in the checkpoint.")


def common(func: F) -> F:
    """DIRECTORY CASE PACKAGE --step-id --details --json, and the context."""
    decorated: Any = click.pass_context(func)
    for decorator in (json_option, details_option, step_option, click.argument("package"),
                      click.argument("case"), dir_argument):
        decorated = decorator(decorated)
    return cast(F, decorated)


@intake.command("advance")
@dir_argument
@click.argument("case")
@click.argument("package")
@click.argument("state")
@step_option
@details_option
@click.option("--artifact", "artifacts", multiple=True, metavar="PATH=FILE",
              help="Add FILE's bytes to the package at PATH (repeatable).")
@click.option("--pointer", "pointers", multiple=True, metavar="NAME=PATH",
              help="Set manifest artifacts.NAME to PATH (repeatable).")
@json_option
@click.pass_context
@_handle_errors
def advance_command(ctx: click.Context, directory: Path, case: str, package: str, state: str,
                    step_id: str, details: str | None, artifacts: tuple[str, ...],
                    pointers: tuple[str, ...], as_json: bool) -> None:
    """Advance CASE/PACKAGE to STATE as one checkpointed step."""
    files = {path: Path(source).read_bytes() for path, source in _pairs(artifacts, "--artifact").items()}
    result = CheckpointStore(Workspace(directory)).advance(
        case, package, state.upper(), step_id=step_id, details=_details(details),
        artifacts=files, artifact_pointers=_pairs(pointers, "--pointer"))
    _finish(ctx, as_json, result)


@intake.command("block")
@common
@click.option("--reason", required=True, help="Why the step is blocked.")
@click.option("--retry-at", required=True, help="ISO 8601 time with an offset, e.g. 2030-01-01T00:00:00+00:00.")
@_handle_errors
def block_command(ctx: click.Context, directory: Path, case: str, package: str, step_id: str,
                  details: str | None, as_json: bool, reason: str, retry_at: str) -> None:
    """Block CASE/PACKAGE until --retry-at."""
    try:
        moment = datetime.fromisoformat(retry_at)
    except ValueError:
        raise InvalidInputError(f"--retry-at {retry_at!r} is not an ISO 8601 time",
                           hint="use e.g. 2030-01-01T00:00:00+00:00") from None
    result = CheckpointStore(Workspace(directory)).block(
        case, package, step_id=step_id, reason=reason, retry_at=moment, details=_details(details))
    _finish(ctx, as_json, result)


@intake.command("resume")
@common
@_handle_errors
def resume_command(ctx: click.Context, directory: Path, case: str, package: str, step_id: str,
                   details: str | None, as_json: bool) -> None:
    """Resume a BLOCKED CASE/PACKAGE to the state it interrupted."""
    result = CheckpointStore(Workspace(directory)).resume(case, package, step_id=step_id,
                                                          details=_details(details))
    _finish(ctx, as_json, result)


@intake.command("reopen")
@common
@_handle_errors
def reopen_command(ctx: click.Context, directory: Path, case: str, package: str, step_id: str,
                   details: str | None, as_json: bool) -> None:
    """Reopen a HANDED_OFF or FAILED_TO_ANALYZE CASE/PACKAGE (revision + 1)."""
    result = CheckpointStore(Workspace(directory)).reopen(case, package, step_id=step_id,
                                                          details=_details(details))
    _finish(ctx, as_json, result)


@intake.command("fail")
@common
@_handle_errors
def fail_command(ctx: click.Context, directory: Path, case: str, package: str, step_id: str,
                 details: str | None, as_json: bool) -> None:
    """Mark CASE/PACKAGE as FAILED_TO_ANALYZE."""
    result = CheckpointStore(Workspace(directory)).fail(case, package, step_id=step_id,
                                                        details=_details(details))
    _finish(ctx, as_json, result)


@intake.command("pack")
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
@_handle_errors
def pack_command(ctx: click.Context, source: Path, out: Path, as_json: bool) -> None:
    """Build a valid NEW package OUT.zip from SOURCE (holding manifest.json)."""
    package = pack_directory(source, out)
    document = {"path": str(out), "fingerprint": package.fingerprint,
                "case_id": package.case_id, "package_id": package.package_id,
                "files": package.files}
    table = Table("path", "case", "package", "files", "fingerprint")
    table.add_row(str(out), package.case_id, package.package_id, str(len(package.files)),
                  package.fingerprint)
    _emit(ctx, as_json, document, table)


if __name__ == "__main__":
    intake()
