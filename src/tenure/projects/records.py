"""Project, pod and session records (ownership columns are not here: ask the ownership module).

Enum values equal the database values; ``tests/unit/test_schema_enums.py``
checks them against the schema's CHECK lists.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from tenure.errors import NotFoundError
from tenure.states import ProjectStatus
from tenure.store.records import Record, optional


class Kind(str, enum.Enum):
    USER = "USER"
    SYSTEM = "SYSTEM"


class LifecycleType(str, enum.Enum):
    HOMELESS = "HOMELESS"
    AUTO = "AUTO"
    EPHEMERAL = "EPHEMERAL"
    PERMANENT = "PERMANENT"


def project_not_found(tenant: str, name: str) -> NotFoundError:
    """``project-not-found`` for project ``tenant/name``, with the hint to list them."""
    return NotFoundError(
        f"no project {tenant}/{name}",
        code="project-not-found",
        project=f"{tenant}/{name}",
        hint="list projects with `tenure project list`",
    )


@dataclass(frozen=True)
class Project(Record):
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
    #: changes only when a bring cannot vouch for every write acknowledged under the previous lineage (ADR 0042)
    lineage: int = 1
    #: autosave policy in seconds: 0 off, ``None`` the pod's default (``tenure serve --autosave``)
    autosave: float | None = None

    conversions = {
        "status": ProjectStatus,
        "kind": Kind,
        "lifecycle_type": LifecycleType,
        "owner_required": bool,
        "generation": int,
        "placement_selector": json.loads,
        "placement_score": float,
        "lineage": int,
        "autosave": optional(float),
    }

    @property
    def ref(self) -> str:
        return f"{self.tenant}/{self.name}"


@dataclass(frozen=True)
class Pod(Record):
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
    #: why it claims nothing new (``disk-full: …``), None while it does (ADR 0051)
    refusing: str | None = None

    #: ``score`` and ``running`` are 0 when the row has them NULL or not at all
    conversions = {
        "labels": json.loads,
        "capacity": float,
        "score": lambda value: float(value or 0.0),
        "running": lambda value: int(value or 0),
    }


@dataclass(frozen=True)
class Session(Record):
    id: str
    project_id: str
    bound_connection_id: str | None
    bound_pod_id: str | None
