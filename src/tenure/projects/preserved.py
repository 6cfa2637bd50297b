"""Lost work, recorded in the control-plane store where every pod sees it (ADR 0044).

A *preserved delta* is the folder of a project that a host found holding
files no checkpoint of the project has, once it no longer owned the project:
a takeover while the pod was paused or cut off, a fence, a close elsewhere,
restart reconciliation. The host keeps the folder under ``<data>/preserved/``
for the recovery window, uploads it to the object store as the head of a
workspace of its own (outside the project's head line, so the project's
history and lineage are untouched) and records it here with what a user
needs to decide: the project, the generation and lineage the writes were
made under, the host, the files that differ from the last checkpoint the
host took or restored and their bytes, and until when it is kept.

Every pod lists them on the project (``preserved``), counts them for
``/metrics`` and recovers one from the object store
(``POST /api/v1/mounts/{id}/recover``) wherever the host that found it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tenure.errors import NotFoundError
from tenure.store import Store
from tenure.store.records import Record, optional, record_dict

__all__ = ["PreservedDelta", "PreservedDeltas", "MAX_PATHS"]

#: at most this many changed paths are recorded per delta (``truncated`` says when there were more)
MAX_PATHS = 10_000


def _paths(text: str | None) -> tuple[str, ...]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return ()
    return tuple(str(p) for p in value) if isinstance(value, list) else ()


@dataclass(frozen=True)
class PreservedDelta(Record):
    """One preserved delta as the store records it (see the module docstring)."""

    id: str
    project_id: str
    workspace_id: str
    generation: int
    lineage: int | None
    pod_id: str | None
    host: str | None
    folder: str | None
    delta_workspace_id: str
    snapshot_id: str
    files: int
    bytes: int
    paths: tuple[str, ...] = field(default=())
    truncated: bool = False
    reason: str | None = None
    created_at: float = 0.0
    kept_until: float = 0.0
    recovered_at: float | None = None

    conversions = {
        "generation": int,
        "lineage": optional(int),
        "files": int,
        "bytes": int,
        "paths": _paths,
        "truncated": bool,
        "created_at": float,
        "kept_until": float,
        "recovered_at": optional(float),
    }

    def to_dict(self) -> dict[str, Any]:
        """The delta as the API and the CLI answer it (stable keys); ``paths`` at most the first 100."""
        out = record_dict(self, without={"paths", "delta_workspace_id"})
        out["paths"] = list(self.paths[:100])
        out["truncated"] = self.truncated or len(self.paths) > 100
        return out


class PreservedDeltas:
    """The ``preserved_deltas`` table of one store."""

    def __init__(self, store: Store) -> None:
        self.db = store.db

    def record(
        self,
        delta_id: str,
        *,
        project_id: str,
        workspace_id: str,
        generation: int,
        lineage: int | None,
        pod_id: str | None,
        host: str | None,
        folder: str | None,
        delta_workspace_id: str,
        snapshot_id: str,
        paths: list[str],
        files: int,
        size: int,
        keep_s: float,
        reason: str | None = None,
    ) -> bool:
        """Record a delta once (``True`` when this call recorded it; a retry after a crash changes nothing)."""
        params = {
            "id": delta_id,
            "p": project_id,
            "w": workspace_id,
            "g": int(generation),
            "lin": lineage,
            "pod": pod_id,
            "host": host,
            "folder": folder,
            "dw": delta_workspace_id,
            "s": snapshot_id,
            "files": int(files),
            "bytes": int(size),
            "paths": json.dumps(paths[:MAX_PATHS]),
            "truncated": 1 if len(paths) > MAX_PATHS else 0,
            "reason": reason,
            "keep": float(keep_s),
        }
        with self.db.transaction() as tx:
            return tx.count("preserved_delta_insert", params) == 1

    def find(self, delta_id: str) -> PreservedDelta | None:
        with self.db.transaction(write=False) as tx:
            row = tx.one("preserved_delta_by_id", {"id": delta_id})
        return None if row is None else PreservedDelta.from_row(row)

    def get(self, delta_id: str) -> PreservedDelta:
        found = self.find(delta_id)
        if found is None:
            raise NotFoundError(
                f"no preserved delta {delta_id}",
                code="mount-not-found",
                mount=delta_id,
                hint="GET /api/v1/projects/TENANT/NAME lists a project's preserved deltas",
            )
        return found

    def of_project(self, project_id: str, limit: int = 20) -> list[PreservedDelta]:
        """The project's deltas still in their recovery window, newest first."""
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("preserved_deltas_of_project", {"p": project_id, "limit": max(0, int(limit))})
        return [PreservedDelta.from_row(r) for r in rows]

    def in_window(self, limit: int = 1000) -> list[PreservedDelta]:
        """Every delta still in its recovery window (at most ``limit``), newest first."""
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("preserved_deltas_in_window", {"limit": max(0, int(limit))})
        return [PreservedDelta.from_row(r) for r in rows]

    def count(self) -> int:
        """Deltas in their recovery window and not recovered yet, across the cluster."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("preserved_deltas_count", {})
        return 0 if row is None else int(row["n"])

    def past_window(self, limit: int = 100) -> list[PreservedDelta]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("preserved_deltas_past_window", {"limit": max(0, int(limit))})
        return [PreservedDelta.from_row(r) for r in rows]

    def recovered(self, delta_id: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("preserved_delta_recovered", {"id": delta_id})

    def delete(self, delta_id: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("preserved_delta_delete", {"id": delta_id})
