"""Projects: ownership leases, the lifecycle service (bring / suspend / close), pods and sessions.

* :mod:`~tenure.projects.ownership` — the only reader of the lease columns;
* :mod:`~tenure.projects.store` — status, type, placement, demand, sessions;
* :mod:`~tenure.projects.lifecycle` — the orchestrator;
* :mod:`~tenure.projects.facade` — claim-or-raise, claim-or-redirect;
* :mod:`~tenure.projects.pods` — pod rows, heartbeats, endpoint resolution.
"""

from tenure.projects.facade import ClaimRejectedError, ClaimResult, OwnershipFacade
from tenure.projects.lifecycle import (
    ActivationRegistry,
    Engine,
    EngineFailedError,
    EnginesStartRequested,
    EnginesStopRequested,
    LifecycleConfig,
    LifecycleService,
)
from tenure.projects.ownership import Owner, Ownership, ProjectClosedError, ProjectHomelessError
from tenure.projects.pods import PodIdentity, PodRegistry
from tenure.projects.records import Kind, LifecycleType, Pod, Project, Session
from tenure.projects.store import AlreadyBoundError, ProjectStore, StatusConflictError, SystemProjectError

__all__ = [
    "ActivationRegistry",
    "AlreadyBoundError",
    "ClaimRejectedError",
    "ClaimResult",
    "Engine",
    "EngineFailedError",
    "EnginesStartRequested",
    "EnginesStopRequested",
    "Kind",
    "LifecycleConfig",
    "LifecycleService",
    "LifecycleType",
    "Owner",
    "Ownership",
    "OwnershipFacade",
    "Pod",
    "PodIdentity",
    "PodRegistry",
    "Project",
    "ProjectClosedError",
    "ProjectHomelessError",
    "ProjectStore",
    "Session",
    "StatusConflictError",
    "SystemProjectError",
]
