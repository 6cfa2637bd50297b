"""The documents every face of a pod answers with (docs/api.md), built in one place.

Light on purpose: the CLI's in-process mode builds the same documents without loading the pod runtime.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tenure.projects.records import LifecycleType

if TYPE_CHECKING:
    from tenure.projects.ownership import Owner
    from tenure.projects.records import Project, Session

__all__ = ["ProjectSpec", "demand_document", "project_document", "preserved_by_project", "session_dict"]


@dataclass(frozen=True)
class ProjectSpec:
    """A project to create."""

    tenant: str
    name: str
    lifecycle_type: LifecycleType = LifecycleType.AUTO
    group: str = "default"
    selector: dict[str, str] | None = None
    score: float | None = None


NOT_KNOWN_HERE: dict[str, float | None] = {"last_checkpoint_at": None, "unsaved_since": None}


def project_document(
    project: Project,
    owner: Owner,
    running_here: bool,
    saving: dict[str, float | None] | None = None,
    preserved: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A project as every face answers it: its record, its owner (pod, node, live, seconds left), whether it
    runs on the pod that answers, how saved it is there (``last_checkpoint_at``, ``unsaved_since``: Unix
    times the owner knows; ``None`` on any other pod), and ``preserved``: the lost work of it that hosts
    recorded in the store (ADR 0044), newest first."""
    return dict(
        project.to_dict(),
        owner=owner.to_dict(),
        running_here=running_here,
        **(saving or NOT_KNOWN_HERE),
        preserved=list(preserved or ()),
    )


def preserved_by_project(store: Any) -> dict[str, list[dict[str, Any]]]:
    """Every preserved delta in its recovery window, by project id (one read, for listings)."""
    from tenure.projects.preserved import PreservedDeltas

    out: dict[str, list[dict[str, Any]]] = {}
    for delta in PreservedDeltas(store).in_window():
        out.setdefault(delta.project_id, []).append(delta.to_dict())
    return out


def demand_document(projects: Any, project: Project) -> dict[str, Any]:
    """Why a project needs an owner (ADR 0046): its demand records that have not expired, how many sessions
    it has, and the derived ``owner_required``."""
    return {
        "project": project.ref,
        "lifecycle_type": project.lifecycle_type.value,
        "owner_required": project.owner_required,
        "sources": projects.demand(project),
        "sessions": len(projects.sessions(project)),
    }


def session_dict(session: Session) -> dict[str, Any]:
    """A session record as the API answers it."""
    return asdict(session)
