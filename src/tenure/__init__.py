"""tenure: durable, fenced, deduplicated workspaces for a fleet of worker processes.

The public API (names load on first use, so ``import tenure`` stays cheap):

* stores — :func:`open_store` (SQLite or PostgreSQL control plane),
  :func:`open_object_store` (folder or PostgreSQL objects);
* workspaces — :class:`WorkspaceService` (checkpoint, restore, verify, GC);
* projects — :class:`LifecycleService` (bring, suspend, close),
  :class:`Ownership`, :class:`ProjectStore`, :class:`PodIdentity`,
  :class:`PodRegistry`, :class:`OwnershipFacade`;
* intake — :mod:`tenure.intake` (``Workspace``, ``InboxProcessor``,
  ``CheckpointStore``, ``State``, ``LifecycleError``);
* errors — :class:`TenureError` and its families in :mod:`tenure.errors`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names type-check as what they are; at run time they load on first use
    from tenure.errors import TenureError
    from tenure.objects import open_object_store
    from tenure.projects import (
        LifecycleConfig,
        LifecycleService,
        Ownership,
        OwnershipFacade,
        PodIdentity,
        PodRegistry,
        ProjectStore,
    )
    from tenure.store import open_store
    from tenure.workspaces import WorkspaceService

__all__ = [
    "open_store",
    "open_object_store",
    "WorkspaceService",
    "LifecycleService",
    "LifecycleConfig",
    "Ownership",
    "OwnershipFacade",
    "ProjectStore",
    "PodIdentity",
    "PodRegistry",
    "TenureError",
]

_WHERE = {
    "open_store": "tenure.store",
    "open_object_store": "tenure.objects",
    "WorkspaceService": "tenure.workspaces",
    "LifecycleService": "tenure.projects",
    "LifecycleConfig": "tenure.projects",
    "Ownership": "tenure.projects",
    "OwnershipFacade": "tenure.projects",
    "ProjectStore": "tenure.projects",
    "PodIdentity": "tenure.projects",
    "PodRegistry": "tenure.projects",
    "TenureError": "tenure.errors",
}


def __getattr__(name: str) -> object:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'tenure' has no attribute {name!r}")
