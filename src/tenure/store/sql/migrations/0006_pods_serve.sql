-- What tenure serve needs of the store:
-- * the load a pod reports each beat (P-106): the sum of the scores it holds and the projects it runs;
-- * API bearer tokens, stored as SHA-256 hashes only (never the token), optionally scoped to a tenant.

ALTER TABLE pods ADD COLUMN score DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE pods ADD COLUMN running INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS api_tokens (
    id          TEXT PRIMARY KEY,
    token_hash  TEXT NOT NULL UNIQUE,
    tenant      TEXT,
    admin       INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
    cluster     INTEGER NOT NULL DEFAULT 0 CHECK (cluster IN (0, 1)),
    label       TEXT NOT NULL DEFAULT '',
    created_at  DOUBLE PRECISION NOT NULL,
    revoked_at  DOUBLE PRECISION
);
