"""Workspaces: checkpoint publication, restore, verification and retention."""

from tenure.workspaces.service import CheckpointResult, VerifyReport, WorkspaceService, default_holder

__all__ = ["WorkspaceService", "CheckpointResult", "VerifyReport", "default_holder"]
