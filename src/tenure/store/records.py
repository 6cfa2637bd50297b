"""Frozen value objects built from store rows with explicit ``from_row``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tenure.states import LeaseState, SnapshotState, WorkspaceState


@dataclass(frozen=True)
class Workspace:
    id: str
    name: str
    state: WorkspaceState
    head_snapshot_id: str | None
    base_snapshot_id: str | None
    version: int
    writer_generation: int
    pending_snapshot_id: str | None
    pending_key: str | None
    pending_version: int | None
    expiring_since: float | None
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Workspace:
        return cls(
            id=row["id"],
            name=row["name"],
            state=WorkspaceState(row["state"]),
            head_snapshot_id=row["head_snapshot_id"],
            base_snapshot_id=row["base_snapshot_id"],
            version=int(row["version"]),
            writer_generation=int(row["writer_generation"]),
            pending_snapshot_id=row["pending_snapshot_id"],
            pending_key=row["pending_key"],
            pending_version=None if row["pending_version"] is None else int(row["pending_version"]),
            expiring_since=row["expiring_since"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state.value,
            "head_snapshot_id": self.head_snapshot_id,
            "base_snapshot_id": self.base_snapshot_id,
            "version": self.version,
            "writer_generation": self.writer_generation,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True)
class WriterLease:
    id: str
    workspace_id: str
    generation: int
    state: LeaseState
    holder: str
    issued_at: float
    expires_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> WriterLease:
        return cls(
            id=row["id"],
            workspace_id=row["workspace_id"],
            generation=int(row["generation"]),
            state=LeaseState(row["state"]),
            holder=row["holder"],
            issued_at=row["issued_at"],
            expires_at=row["expires_at"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workspace_id": self.workspace_id,
            "generation": self.generation,
            "state": self.state.value,
            "holder": self.holder,
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True)
class Snapshot:
    id: str
    workspace_id: str
    parent_id: str | None
    root_oid: str | None
    state: SnapshotState
    generation: int
    idempotency_key: str | None
    files: int
    bytes_read: int
    bytes_new: int
    skipped: tuple[tuple[str, str], ...]
    error: str | None
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Snapshot:
        return cls(
            id=row["id"],
            workspace_id=row["workspace_id"],
            parent_id=row["parent_id"],
            root_oid=row["root_oid"],
            state=SnapshotState(row["state"]),
            generation=int(row["generation"]),
            idempotency_key=row["idempotency_key"],
            files=int(row["files"]),
            bytes_read=int(row["bytes_read"]),
            bytes_new=int(row["bytes_new"]),
            skipped=tuple(tuple(x) for x in json.loads(row["skipped"])),
            error=row["error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workspace_id": self.workspace_id,
            "parent_id": self.parent_id,
            "root_oid": self.root_oid,
            "state": self.state.value,
            "generation": self.generation,
            "idempotency_key": self.idempotency_key,
            "files": self.files,
            "bytes_read": self.bytes_read,
            "bytes_new": self.bytes_new,
            "skipped": [list(s) for s in self.skipped],
            "error": self.error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True)
class CheckpointTicket:
    """What a writer needs to finish (or resume) one checkpoint."""

    workspace_id: str
    snapshot_id: str
    idempotency_key: str
    expected_version: int
    parent_id: str | None
    generation: int
    resumed: bool
    already_published: Snapshot | None = None
