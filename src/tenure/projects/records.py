"""Project, pod and session records (ownership columns are not here: ask the ownership module).

Enum values equal the database values; ``tests/unit/test_schema_enums.py``
checks them against the schema's CHECK lists.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from tenure.states import ProjectStatus


class Kind(str, enum.Enum):
    USER = "USER"
    SYSTEM = "SYSTEM"


class LifecycleType(str, enum.Enum):
    HOMELESS = "HOMELESS"
    AUTO = "AUTO"
    EPHEMERAL = "EPHEMERAL"
    PERMANENT = "PERMANENT"


@dataclass(frozen=True)
class Project:
    id: str
    tenant: str
    name: str
    project_group: str
    status: ProjectStatus
    kind: Kind
    lifecycle_type: LifecycleType
    owner_required: bool
    home_node: str | None
    generation: int
    placement_selector: dict[str, str]
    placement_score: float
    pending_since: float | None
    workspace_id: str
    error: str | None
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Project:
        return cls(
            id=row["id"],
            tenant=row["tenant"],
            name=row["name"],
            project_group=row["project_group"],
            status=ProjectStatus(row["status"]),
            kind=Kind(row["kind"]),
            lifecycle_type=LifecycleType(row["lifecycle_type"]),
            owner_required=bool(row["owner_required"]),
            home_node=row["home_node"],
            generation=int(row["generation"]),
            placement_selector=json.loads(row["placement_selector"]),
            placement_score=float(row["placement_score"]),
            pending_since=row["pending_since"],
            workspace_id=row["workspace_id"],
            error=row["error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    @property
    def ref(self) -> str:
        return f"{self.tenant}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "name": self.name,
            "project_group": self.project_group,
            "status": self.status.value,
            "kind": self.kind.value,
            "lifecycle_type": self.lifecycle_type.value,
            "owner_required": self.owner_required,
            "home_node": self.home_node,
            "generation": self.generation,
            "placement_selector": self.placement_selector,
            "placement_score": self.placement_score,
            "pending_since": self.pending_since,
            "workspace_id": self.workspace_id,
            "error": self.error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True)
class Pod:
    id: str
    node_name: str
    endpoint: str | None
    labels: dict[str, str]
    capacity: float
    status: str
    started_at: float
    heartbeat_at: float
    #: the load reported by its last beat (P-106): Σ placement scores held, projects running
    score: float = 0.0
    running: int = 0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Pod:
        return cls(
            id=row["id"],
            node_name=row["node_name"],
            endpoint=row["endpoint"],
            labels=json.loads(row["labels"]),
            capacity=float(row["capacity"]),
            status=row["status"],
            started_at=row["started_at"],
            heartbeat_at=row["heartbeat_at"],
            score=float(row.get("score") or 0.0),
            running=int(row.get("running") or 0),
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Session:
    id: str
    project_id: str
    bound_connection_id: str | None
    bound_pod_id: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Session:
        return cls(
            id=row["id"],
            project_id=row["project_id"],
            bound_connection_id=row["bound_connection_id"],
            bound_pod_id=row["bound_pod_id"],
        )
