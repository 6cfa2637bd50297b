-- Projects, pods, sessions and demand records (the project lifecycle).
-- home_pod_id / claimed_at are read only by tenure/projects/ownership.py.

CREATE TABLE IF NOT EXISTS projects (
    id                  TEXT PRIMARY KEY,
    tenant              TEXT NOT NULL,
    name                TEXT NOT NULL,
    project_group       TEXT NOT NULL DEFAULT 'default',
    status              TEXT NOT NULL CHECK (status IN ('INIT', 'RECOVERING', 'RUNNING', 'SUSPENDING', 'SUSPENDED', 'CLOSED')),
    kind                TEXT NOT NULL CHECK (kind IN ('USER', 'SYSTEM')),
    lifecycle_type      TEXT NOT NULL CHECK (lifecycle_type IN ('HOMELESS', 'AUTO', 'EPHEMERAL', 'PERMANENT')),
    owner_required      INTEGER NOT NULL DEFAULT 0 CHECK (owner_required IN (0, 1)),
    home_pod_id         TEXT,
    home_node           TEXT,
    claimed_at          DOUBLE PRECISION,
    generation          BIGINT NOT NULL DEFAULT 0,
    placement_selector  TEXT NOT NULL DEFAULT '{}',
    placement_score     DOUBLE PRECISION NOT NULL DEFAULT 1,
    pending_since       DOUBLE PRECISION,
    workspace_id        TEXT NOT NULL REFERENCES workspaces(id),
    error               TEXT,
    created_at          DOUBLE PRECISION NOT NULL,
    updated_at          DOUBLE PRECISION NOT NULL,
    UNIQUE (tenant, name)
);
CREATE INDEX IF NOT EXISTS projects_by_holder ON projects (home_pod_id);
CREATE INDEX IF NOT EXISTS projects_needing_owner ON projects ((COALESCE(claimed_at, 0)))
    WHERE status IN ('INIT', 'RECOVERING', 'RUNNING')
      AND (lifecycle_type = 'PERMANENT' OR (lifecycle_type = 'AUTO' AND owner_required = 1));
CREATE INDEX IF NOT EXISTS projects_pending ON projects (pending_since) WHERE pending_since IS NOT NULL;

CREATE TABLE IF NOT EXISTS pods (
    id            TEXT PRIMARY KEY,
    node_name     TEXT NOT NULL,
    endpoint      TEXT,
    labels        TEXT NOT NULL DEFAULT '{}',
    capacity      DOUBLE PRECISION NOT NULL DEFAULT 100,
    status        TEXT NOT NULL CHECK (status IN ('STARTING', 'RUNNING', 'DRAINING', 'STOPPED')),
    started_at    DOUBLE PRECISION NOT NULL,
    heartbeat_at  DOUBLE PRECISION NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
    id                   TEXT PRIMARY KEY,
    project_id           TEXT NOT NULL REFERENCES projects(id),
    bound_connection_id  TEXT,
    bound_pod_id         TEXT,
    created_at           DOUBLE PRECISION NOT NULL,
    updated_at           DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_project ON sessions (project_id);

CREATE TABLE IF NOT EXISTS project_demand (
    project_id  TEXT NOT NULL REFERENCES projects(id),
    source      TEXT NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (project_id, source)
);
