"""``tenure intake``: the intake commands (init, poll, show, advance, block,
resume, reopen, fail, export, gc, pack).

Output and errors go through :mod:`tenure.cli.output` like every other
command group: a table for humans, one stable JSON document under ``--json``
(keys documented in docs/intake.md), and errors as one line with the exit
code of the error's family, printed by the root group.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from tenure.cli.output import emit, json_option, table
from tenure.errors import InvalidInputError
from tenure.intake import CheckpointStore, InboxProcessor, Package, PollResult, Workspace
from tenure.intake.canonical import id_hash
from tenure.intake.pack import pack_directory

__all__ = ["intake"]

F = TypeVar("F", bound=Callable[..., Any])

_FOLDERS = ("inbox", "quarantine", "cache", "cases", "outbox", "review")


def _package_table(packages: list[Package]) -> None:
    table(
        None,
        ["case", "package", "gen", "rev", "state", "routing", "retries", "checkpoints"],
        [
            [
                p.case_id,
                p.package_id,
                p.generation,
                p.analysis_revision,
                p.state.value,
                p.routing,
                p.retry_count,
                len(p.chain),
            ]
            for p in packages
        ],
    )


def _results_table(results: list[PollResult]) -> None:
    table(
        None,
        ["result", "input", "case", "package", "gen", "state", "code", "message"],
        [
            [
                r.kind.value,
                r.input_path.name if r.input_path else None,
                r.case_id,
                r.package_id,
                r.generation,
                r.state,
                r.code,
                r.message,
            ]
            for r in results
        ],
    )


dir_argument = click.argument("directory", type=click.Path(file_okay=False, path_type=Path))


@click.group()
def intake() -> None:
    """File-based intake: inbox admission, package generations and checkpoints."""


@intake.command("init")
@dir_argument
@json_option
@click.pass_context
def init_command(ctx: click.Context, directory: Path) -> None:
    """Create the intake layout in DIRECTORY (inbox/, quarantine/, cases/, ...)."""
    workspace = Workspace(directory, create=True)
    emit(
        ctx,
        {"root": str(workspace.root)},
        lambda: table(None, ["folder", "path"], [[name, getattr(workspace, name)] for name in _FOLDERS]),
    )


@intake.command("poll")
@dir_argument
@click.option(
    "--max-jobs",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="Inputs to act on in this pass (DEFERRED and BUSY do not count).",
)
@json_option
@click.pass_context
def poll_command(ctx: click.Context, directory: Path, max_jobs: int) -> None:
    """Run one pass over the inbox and the blocked cases."""
    results = InboxProcessor(Workspace(directory, create=False)).poll(max_jobs=max_jobs)
    emit(ctx, {"results": [r.to_dict() for r in results]}, lambda: _results_table(results))


@intake.command("show")
@dir_argument
@click.argument("case", required=False)
@click.option("--package", "package_id", help="Show one package of CASE with its chain.")
@json_option
@click.pass_context
def show_command(ctx: click.Context, directory: Path, case: str | None, package_id: str | None) -> None:
    """List stored packages (all, or CASE's); with --package, its checkpoint chain."""
    store = CheckpointStore(Workspace(directory, create=False))
    if case is not None and package_id is not None:
        package = store.current(case, package_id)
        chain = [
            {
                "generation": c.generation,
                "state": c.state,
                "step_id": c.step_id,
                "created_at": c.data["created_at"],
                "path": c.path,
            }
            for c in reversed(package.chain)
        ]
        emit(
            ctx,
            {"package": package.summary(), "checkpoints": chain},
            lambda: table(
                None,
                ["gen", "state", "step", "created"],
                [[c["generation"], c["state"], c["step_id"], c["created_at"]] for c in chain],
            ),
        )
        return
    packages = [p for p in store.packages() if case is None or id_hash(p.case_id) == id_hash(case)]
    emit(ctx, {"packages": [p.summary() for p in packages]}, lambda: _package_table(packages))


def _pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    result = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise InvalidInputError(f"{what} {value!r} must look like NAME=VALUE", hint=f"pass {what} as NAME=VALUE")
        result[name] = rest
    return result


def _read_artifact(path: str, source: str) -> bytes:
    try:
        return Path(source).read_bytes()
    except OSError as error:
        raise InvalidInputError(
            f"--artifact {path}={source}: cannot read {source}: {error.strerror}",
            hint="pass a readable file as --artifact PATH=FILE",
            path=source,
        ) from None


def _details(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidInputError(f"--details is not JSON: {error}", hint="pass a JSON object") from None


def _finish(ctx: click.Context, package: Package) -> None:
    emit(ctx, {"package": package.summary()}, lambda: _package_table([package]))


step_option = click.option("--step-id", required=True, help="Stable id of this step (idempotence key).")
details_option = click.option("--details", help="JSON object recorded in the checkpoint.")


def common(func: F) -> F:
    """DIRECTORY CASE PACKAGE --step-id --details --json, and the context."""
    decorated: Any = click.pass_context(func)
    for decorator in (
        json_option,
        details_option,
        step_option,
        click.argument("package"),
        click.argument("case"),
        dir_argument,
    ):
        decorated = decorator(decorated)
    return cast(F, decorated)


@intake.command("advance")
@dir_argument
@click.argument("case")
@click.argument("package")
@click.argument("state")
@step_option
@details_option
@click.option(
    "--artifact",
    "artifacts",
    multiple=True,
    metavar="PATH=FILE",
    help="Add FILE's bytes to the package at PATH (repeatable).",
)
@click.option(
    "--pointer",
    "pointers",
    multiple=True,
    metavar="NAME=PATH",
    help="Set manifest artifacts.NAME to PATH (repeatable).",
)
@json_option
@click.pass_context
def advance_command(
    ctx: click.Context,
    directory: Path,
    case: str,
    package: str,
    state: str,
    step_id: str,
    details: str | None,
    artifacts: tuple[str, ...],
    pointers: tuple[str, ...],
) -> None:
    """Advance CASE/PACKAGE to STATE as one checkpointed step."""
    files = {path: _read_artifact(path, source) for path, source in _pairs(artifacts, "--artifact").items()}
    result = CheckpointStore(Workspace(directory, create=False)).advance(
        case,
        package,
        state.upper(),
        step_id=step_id,
        details=_details(details),
        artifacts=files,
        artifact_pointers=_pairs(pointers, "--pointer"),
    )
    _finish(ctx, result)


@intake.command("block")
@common
@click.option("--reason", required=True, help="Why the step is blocked.")
@click.option("--retry-at", required=True, help="ISO 8601 time with an offset, e.g. 2030-01-01T00:00:00+00:00.")
def block_command(
    ctx: click.Context,
    directory: Path,
    case: str,
    package: str,
    step_id: str,
    details: str | None,
    reason: str,
    retry_at: str,
) -> None:
    """Block CASE/PACKAGE until --retry-at."""
    try:
        moment = datetime.fromisoformat(retry_at)
    except ValueError:
        raise InvalidInputError(
            f"--retry-at {retry_at!r} is not an ISO 8601 time", hint="use e.g. 2030-01-01T00:00:00+00:00"
        ) from None
    result = CheckpointStore(Workspace(directory, create=False)).block(
        case, package, step_id=step_id, reason=reason, retry_at=moment, details=_details(details)
    )
    _finish(ctx, result)


def _move_command(name: str, move: Callable[..., Package], doc: str) -> None:
    """Define ``tenure intake NAME``: the step ``move`` of CASE/PACKAGE, which takes nothing but the step."""

    @intake.command(name, help=doc)
    @common
    def command(
        ctx: click.Context, directory: Path, case: str, package: str, step_id: str, details: str | None
    ) -> None:
        store = CheckpointStore(Workspace(directory, create=False))
        _finish(ctx, move(store, case, package, step_id=step_id, details=_details(details)))


_move_command("resume", CheckpointStore.resume, "Resume a BLOCKED CASE/PACKAGE to the state it interrupted.")
_move_command("reopen", CheckpointStore.reopen, "Reopen a HANDED_OFF or FAILED_TO_ANALYZE CASE/PACKAGE (revision + 1).")
_move_command("fail", CheckpointStore.fail, "Mark CASE/PACKAGE as FAILED_TO_ANALYZE.")


@intake.command("export")
@dir_argument
@click.argument("case")
@click.argument("package")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def export_command(ctx: click.Context, directory: Path, case: str, package: str, out: Path) -> None:
    """Write CASE/PACKAGE's current generation as one complete package OUT.zip."""
    exported = CheckpointStore(Workspace(directory, create=False)).export(case, package, out)
    document = {"path": str(out), "package": exported.summary()}
    emit(
        ctx,
        document,
        lambda: table(
            None,
            ["path", "case", "package", "gen", "checkpoints", "fingerprint"],
            [
                [
                    out,
                    exported.case_id,
                    exported.package_id,
                    exported.generation,
                    len(exported.history),
                    exported.fingerprint,
                ]
            ],
        ),
    )


@intake.command("gc")
@dir_argument
@json_option
@click.pass_context
def gc_command(ctx: click.Context, directory: Path) -> None:
    """Remove generations no newest generation references, and temporary files of writes that died."""
    report = CheckpointStore(Workspace(directory, create=False)).collect()
    emit(
        ctx,
        report.to_dict(),
        lambda: table(
            None,
            ["folders", "generations removed", "temporary files removed", "skipped"],
            [[report.folders, len(report.generations), report.temporary, len(report.skipped)]],
        ),
    )


@intake.command("pack")
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def pack_command(ctx: click.Context, source: Path, out: Path) -> None:
    """Build a valid NEW package OUT.zip from SOURCE (holding manifest.json)."""
    package = pack_directory(source, out)
    document = {
        "path": str(out),
        "fingerprint": package.fingerprint,
        "case_id": package.case_id,
        "package_id": package.package_id,
        "files": package.files,
    }
    emit(
        ctx,
        document,
        lambda: table(
            None,
            ["path", "case", "package", "files", "fingerprint"],
            [[out, package.case_id, package.package_id, len(package.files), package.fingerprint]],
        ),
    )


def main(args: list[str] | None = None) -> None:
    """``python -m tenure.cli.intake ARGS`` runs ``tenure intake ARGS`` through the root group."""
    from tenure.cli.main import root

    root.main(args=["intake", *(sys.argv[1:] if args is None else args)], prog_name="tenure", obj={})


if __name__ == "__main__":
    main()
