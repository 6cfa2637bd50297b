-- Workspace expiry (ADR 0019): the expiry policy reads its candidates by index — IDLE workspaces by
-- the time their row last changed, EXPIRING ones by the time their expiry began — and the guards look
-- a workspace's project up by its workspace.

CREATE INDEX IF NOT EXISTS workspaces_by_state_updated ON workspaces (state, updated_at, id);
CREATE INDEX IF NOT EXISTS workspaces_by_state_expiring ON workspaces (state, expiring_since, id);
CREATE INDEX IF NOT EXISTS projects_by_workspace ON projects (workspace_id);
