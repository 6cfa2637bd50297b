-- tenure control-plane schema, version 1 (portable subset of SQLite and PostgreSQL).
-- Times are seconds since the epoch (store clock), as double precision.
-- Every status column holds exactly one named state (values equal the enums in tenure.states).

CREATE TABLE IF NOT EXISTS workspaces (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL UNIQUE,
    state               TEXT NOT NULL CHECK (state IN ('CREATING', 'IDLE', 'MOUNTED', 'CHECKPOINTING',
                                                     'EXPIRING', 'DELETED', 'FAILED')),
    head_snapshot_id    TEXT,
    base_snapshot_id    TEXT,
    version             BIGINT NOT NULL DEFAULT 0,
    writer_generation   BIGINT NOT NULL DEFAULT 0,
    pending_snapshot_id TEXT,
    pending_key         TEXT,
    pending_version     BIGINT,
    expiring_since      DOUBLE PRECISION,
    error               TEXT,
    created_at          DOUBLE PRECISION NOT NULL,
    updated_at          DOUBLE PRECISION NOT NULL
);

CREATE TABLE IF NOT EXISTS writer_leases (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    generation    BIGINT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('ISSUED', 'ACTIVE', 'RELEASING', 'RELEASED', 'EXPIRED',
                                                'REVOKED')),
    holder        TEXT NOT NULL,
    issued_at     DOUBLE PRECISION NOT NULL,
    expires_at    DOUBLE PRECISION NOT NULL,
    updated_at    DOUBLE PRECISION NOT NULL,
    UNIQUE (workspace_id, generation)
);
CREATE INDEX IF NOT EXISTS writer_leases_live ON writer_leases (workspace_id, state);

CREATE TABLE IF NOT EXISTS snapshots (
    id               TEXT PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id),
    parent_id        TEXT,
    root_oid         TEXT,
    state            TEXT NOT NULL CHECK (state IN ('UPLOADING', 'VALIDATING', 'READY', 'FAILED', 'DELETING',
                                                   'DELETED', 'DEGRADED')),
    generation       BIGINT NOT NULL,
    idempotency_key  TEXT,
    files            BIGINT NOT NULL DEFAULT 0,
    bytes_read       BIGINT NOT NULL DEFAULT 0,
    bytes_new        BIGINT NOT NULL DEFAULT 0,
    skipped          TEXT NOT NULL DEFAULT '[]',
    error            TEXT,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    UNIQUE (workspace_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS snapshots_by_workspace ON snapshots (workspace_id, created_at);
CREATE INDEX IF NOT EXISTS snapshots_by_state ON snapshots (state);

-- Pins protect objects from GC for the duration of an upload or a restore
-- (kind 'upload' / 'restore', with an expiry) or for good (kind 'keep').
CREATE TABLE IF NOT EXISTS pins (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    snapshot_id  TEXT,
    holder       TEXT NOT NULL,
    created_at   DOUBLE PRECISION NOT NULL,
    expires_at   DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS pins_by_snapshot ON pins (snapshot_id);

CREATE TABLE IF NOT EXISTS pin_objects (
    pin_id  TEXT NOT NULL REFERENCES pins(id) ON DELETE CASCADE,
    oid     TEXT NOT NULL,
    PRIMARY KEY (pin_id, oid)
);

-- One row; pin creation locks it shared, GC sweeps lock it exclusively.
CREATE TABLE IF NOT EXISTS gc_lock (
    id         INTEGER PRIMARY KEY,
    last_sweep DOUBLE PRECISION
);
INSERT INTO gc_lock (id, last_sweep) VALUES (1, NULL) ON CONFLICT (id) DO NOTHING;
