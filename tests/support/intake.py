"""Shared helpers for the intake tests: real zips, real folders, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tenure.intake import CheckpointStore, InboxProcessor, Package, ResultKind, Workspace
from tenure.intake.canonical import id_hash
from tenure.intake.pack import new_manifest, write_package
from tenure.intake.package import GENERATION_RECORD
from tenure.intake.storage import CaseStorage
from tenure.intake.writer import export_package

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: The intake machine's phases in order (intake-lifecycle-v1.md "Transitions and retry" with SPEC §7's default
#: phase list), written out from the spec, never read from the code.
PHASES = (
    "NEW",
    "VALIDATED",
    "BUILDING_CASE",
    "INTERPRETING",
    "HYPOTHESIZING",
    "DIAGNOSING",
    "REPORTING",
    "OUTPUT_READY",
    "HANDED_OFF",
)


def put(
    ws: Workspace,
    name: str,
    case: str = "case-A",
    package: str = "pkg-1",
    files: Mapping[str, bytes] | None = None,
    **manifest_args: Any,
) -> Path:
    """Write a fresh NEW package into the inbox under ``name``."""
    manifest = new_manifest(case, package, **manifest_args)
    files = {"input/report.txt": f"{case}/{package}".encode()} if files is None else files
    path = ws.inbox / name
    write_package(path, manifest, files)
    return path


def admit(ws: Workspace, case: str = "case-A", package: str = "pkg-1", **kwargs: Any) -> Package:
    """Put a package in the inbox, poll, and return the stored generation 1."""
    put(ws, f"in-{id_hash(case)[:12]}-{id_hash(package)[:12]}.zip", case, package, **kwargs)
    results = [r for r in InboxProcessor(ws).poll() if r.input_path is not None]
    assert [r.kind for r in results] == [ResultKind.ACCEPTED], results
    return CheckpointStore(ws).current(case, package)


def to_building(ws: Workspace, case: str = "case-A", package: str = "pkg-1") -> Package:
    admit(ws, case, package)
    return CheckpointStore(ws).advance(case, package, "BUILDING_CASE", step_id="start")


def past(seconds: float = 1) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


def future(seconds: float = 3600) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def complete_package(generation: Path, out: Path) -> Path:
    """The complete package (format v1) of a stored generation file, exported to ``out``.

    A stored generation in format v2 holds only its own checkpoints (ADR
    0110); tests that edit "the package" of a generation edit this.
    """
    folder = generation.parent
    storage = CaseStorage(Workspace(folder.parents[2]))
    package = storage.load_generation(folder, int(generation.name[1:9]))
    export_package(package, out)
    return out


def is_stored_v2(path: Path) -> bool:
    with zipfile.ZipFile(path) as zf:
        return GENERATION_RECORD in zf.NameToInfo


def rewrite_zip(
    source: Path,
    out: Path,
    changes: Mapping[str, bytes | None] | None = None,
    manifest: Callable[[dict[str, Any]], None] | None = None,
    edit: Mapping[str, Callable[[dict[str, Any]], None]] | None = None,
    method: int = zipfile.ZIP_DEFLATED,
) -> Path:
    """Copy a zip with entries replaced/removed/added and JSON entries edited.

    A stored generation in format v2 is copied as its complete package.
    """
    if is_stored_v2(source):
        with tempfile.TemporaryDirectory(prefix="complete-") as folder:
            complete = complete_package(source, Path(folder) / "complete.zip")
            return rewrite_zip(complete, out, changes, manifest, edit, method)
    changes = dict(changes or {})
    edits = dict(edit or {})
    if manifest is not None:
        edits["manifest.json"] = manifest
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w", method) as dst:
        for info in src.infolist():
            if info.filename in changes:
                continue
            data = src.read(info)
            if info.filename in edits:
                document = json.loads(data)
                edits[info.filename](document)
                data = json.dumps(document).encode()
            dst.writestr(info.filename, data)
        for name, data in changes.items():
            if data is not None:
                dst.writestr(name, data)
    return out


def run_python(
    code: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (a real worker process)."""
    full_env = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=full_env, timeout=timeout, check=False
    )


POLL = (
    "import sys, json\n"
    "from tenure.intake import Workspace, InboxProcessor\n"
    "res = InboxProcessor(Workspace(sys.argv[1])).poll(max_jobs=int(sys.argv[2]) "
    "if len(sys.argv) > 2 else 100)\n"
    "print(json.dumps([r.to_dict() for r in res]))\n"
)

ADVANCE = (
    "import sys, json\n"
    "from tenure.intake import Workspace, CheckpointStore\n"
    "p = CheckpointStore(Workspace(sys.argv[1])).advance(sys.argv[2], sys.argv[3], "
    "sys.argv[4], step_id=sys.argv[5])\n"
    "print(p.generation)\n"
)
