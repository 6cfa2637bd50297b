-- The PostgreSQL object store's table (the object store's own schema; its URL
-- may name another database than the control-plane store's).
-- IF NOT EXISTS: object stores opened before this schema had migrations
-- created the same table on open.

CREATE TABLE IF NOT EXISTS tenure_objects (
    oid        TEXT PRIMARY KEY,
    payload    BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
