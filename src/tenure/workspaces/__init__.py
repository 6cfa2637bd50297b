"""Workspaces: checkpoint publication, restore, verification, retention and the folders on this host.

``Store`` and ``Workspace`` are re-exported so that layers above (the project
lifecycle) can name the store they hand to the workspace service, and the
workspace record a claim read, without reaching into the store package
themselves.
"""

from tenure.snapshots import Interval
from tenure.store import LeaseLostError, Store, Workspace
from tenure.workspaces.binding import ObjectStoreMismatchError, bind_object_store
from tenure.workspaces.folders import LocalFolders, Trash
from tenure.workspaces.service import CheckpointResult, VerifyReport, WorkspaceService, default_holder

__all__ = [
    "WorkspaceService",
    "CheckpointResult",
    "Interval",
    "LeaseLostError",
    "VerifyReport",
    "LocalFolders",
    "Trash",
    "Store",
    "Workspace",
    "default_holder",
    "bind_object_store",
    "ObjectStoreMismatchError",
]
