-- The host-local mount store: one record per mount of a workspace on this host (ADR 0021).

CREATE TABLE IF NOT EXISTS mounts (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL,
    project_id        TEXT,
    project_ref       TEXT,
    generation        BIGINT NOT NULL,
    folder            TEXT NOT NULL,
    base_snapshot     TEXT,
    state             TEXT NOT NULL CHECK (state IN ('MOUNTING', 'MOUNTED', 'CHECKPOINTING', 'UNMOUNTING', 'CLOSED')),
    checkpoint_key    TEXT,
    pending_snapshot  TEXT,
    pending_cleanup   TEXT,
    verdict           TEXT,
    forced_reason     TEXT,
    preserved_folder  TEXT,
    preserved_at      DOUBLE PRECISION,
    created_at        DOUBLE PRECISION NOT NULL,
    updated_at        DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS mounts_by_workspace ON mounts (workspace_id, state);
