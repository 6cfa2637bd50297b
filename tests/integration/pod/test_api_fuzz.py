"""Schemathesis over the pod API's own OpenAPI document, in process (no server): every operation, with
generated path, query, header and body values, must never answer 5xx, and a response whose status and
media type the document describes must match its schema.

The app runs on a real started :class:`PodRuntime` on SQLite with real data: ``acme/web`` brought (a few files,
a checkpoint, a session), ``acme/idle`` created, ``other/db`` brought then suspended. Each operation's
parameters and bodies carry those names as OpenAPI examples, so the explicit-example phase hits real
projects, files, snapshots, sessions and this pod, and the generated phases hit everything else.
``close``, ``type`` and ``placement`` are pointed at projects of their own, so a generated selector no
pod matches (503 by design) or a HOMELESS type never reaches the projects the other operations use; a
drain of this pod is answered 202 and recorded, the pod stays up. A mount of ``acme/web`` with a preserved
delta is the mount operations' example (a discard of it may come before the others).

A second pass runs the file operations with ``tenant`` and ``name`` fixed to ``acme/web`` (a running
project), so the generated paths and bodies reach the workspace folder instead of a 404.

Examples per operation: ``TENURE_FUZZ_EXAMPLES`` (default 15; ``make fuzz-api`` raises it).
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tenure.api.app import create_app
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects.pods import PodIdentity
from tenure.states import MountState
from tenure.store import open_store

EXAMPLES = int(os.environ.get("TENURE_FUZZ_EXAMPLES", "15"))
T = "acme"
POD_ID = "00000000-0000-4000-8000-00000000f022"
#: examples whose real value exists only once the pod has run: replaced in each case before it is sent
SNAPSHOT, MOUNT, MOUNT = "snapshot-of-acme-web", "session-of-acme-web", "mount-with-a-preserved-delta"
KNOWN = {"tenant": T, "name": "web", "path": "notes/a.txt", "snapshot_id": SNAPSHOT, "session_id": MOUNT}
KNOWN.update(pod_id=POD_ID, mount_id=MOUNT)
LONG = "notes/" + "n" * 256
#: operations that change a project's type, placement or existence work on a project of their own
OWN_PROJECT = {"/close": "closing", "/type": "typed", "/placement": "placed"}
BODIES = {
    ("post", "/api/v1/projects"): {"tenant": T, "name": "fresh", "lifecycle_type": "PERMANENT"},
    ("post", "/bring"): {"from_snapshot": SNAPSHOT},
    ("put", "/type"): {"lifecycle_type": "EPHEMERAL"},
    ("put", "/placement"): {"selector": {}, "score": 2.0},
    ("post", "/bind"): {"connection_id": "conn-fuzz"},
}


def _node(folder: str) -> PodRuntime:
    config = ServeConfig(data_dir=os.path.join(folder, "pod"), self_pull=False, lease_ttl=60.0)
    store = open_store(f"sqlite:///{folder}/tenure.db")
    identity = PodIdentity(POD_ID, "fuzz", config.endpoint)
    return PodRuntime(config, store, LocalObjectStore(os.path.join(folder, "objects")), identity=identity)


def _document(*, pinned: bool = False) -> dict[str, Any]:
    """The app's OpenAPI document (routes only: the node behind it is never started), with an example for
    each known path or query parameter; ``pinned``: the file operations' tenant and name are acme/web."""
    with tempfile.TemporaryDirectory() as folder:
        node = _node(folder)
        try:
            spec = copy.deepcopy(create_app(node).openapi())
        finally:
            node.store.close()
    for path, operations in spec["paths"].items():
        own = next((name for suffix, name in OWN_PROJECT.items() if path.endswith(suffix)), None)
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                value = own if parameter["name"] == "name" and own else KNOWN.get(parameter["name"])
                if pinned and "/files" in path and parameter["name"] in ("tenant", "name"):
                    parameter["schema"] = {"type": "string", "enum": [value]}
                if value is not None and parameter["in"] in ("path", "query"):
                    parameter["example"] = value
                if pinned and parameter["name"] == "path":  # also a component longer than NAME_MAX (255)
                    parameter["examples"] = {"file": {"value": parameter.pop("example")}, "long": {"value": LONG}}
            body = next((b for (m, suffix), b in BODIES.items() if m == method and path.endswith(suffix)), None)
            if body is not None:
                operation["requestBody"]["content"]["application/json"]["example"] = body
    return spec


schema = schemathesis.openapi.from_dict(_document())
files = schemathesis.openapi.from_dict(_document(pinned=True)).include(path_regex="/files")
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
CHECKS = [not_a_server_error, response_schema_conformance]


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    folder = str(tmp_path_factory.mktemp("fuzz"))
    node = _node(folder)
    drains: list[str] = []
    node.on_drain_requested = lambda: drains.append("asked")
    node.start()
    try:
        for tenant, name in ((T, "web"), (T, "idle"), ("other", "db"), *((T, n) for n in OWN_PROJECT.values())):
            node.projects.create(tenant, name)
        web = node.bring(T, "web")
        root = Path(node.workspaces.folder_for(web.id))
        (root / "notes").mkdir()
        (root / "notes" / "a.txt").write_bytes(b"hello")
        (root / "empty").mkdir()
        (root / "b.bin").write_bytes(bytes(range(256)))
        real = {
            SNAPSHOT: str(node.checkpoint(T, "web").to_dict()["snapshot"]["id"]),
            MOUNT: node.projects.create_session(web).id,
        }
        node.bring("other", "db")
        node.suspend("other", "db")
        real[MOUNT] = _preserved_delta(node)
        yield create_app(node), real
    finally:
        node.stop()
        node.store.close()


def _preserved_delta(node: PodRuntime) -> str:
    """A fenced mount of acme/web whose uncommitted data is kept under ``<data>/preserved/`` (its id)."""
    kept = Path(node.config.data_dir, "preserved", "delta")
    (kept / "notes").mkdir(parents=True)
    (kept / "notes" / "a.txt").write_bytes(b"kept")
    records = node.lifecycle.mounts.store
    mount = records.open("w-fuzz", str(kept), 1, project_ref=f"{T}/web")
    records.force(mount.id, MountState.CLOSED, "fuzz: fenced")
    records.set_verdict(mount.id, "preserved-delta", preserved_folder=str(kept), preserved_at=time.time())
    return mount.id


def _call(case: schemathesis.Case, app: FastAPI, real: dict[str, str]) -> None:
    for key, value in (case.path_parameters or {}).items():
        if isinstance(value, str) and value in real:
            case.path_parameters[key] = real[value]
    if isinstance(case.body, dict) and isinstance(case.body.get("from_snapshot"), str):
        case.body["from_snapshot"] = real.get(case.body["from_snapshot"], case.body["from_snapshot"])
    case.call_and_validate(app=app, checks=CHECKS)


@schema.parametrize()
@SETTINGS
def test_no_operation_answers_5xx_and_responses_match_the_schema(
    case: schemathesis.Case, pod: tuple[FastAPI, dict[str, str]]
) -> None:
    _call(case, *pod)


@files.parametrize()
@SETTINGS
def test_file_operations_on_a_running_project_never_answer_5xx(
    case: schemathesis.Case, pod: tuple[FastAPI, dict[str, str]]
) -> None:
    _call(case, *pod)
