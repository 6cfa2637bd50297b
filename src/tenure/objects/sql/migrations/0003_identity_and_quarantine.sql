-- The object store's identity: one row, written when the object store is
-- created (an object store created before identities gets its row when this
-- migration runs, so it is adopted). The control-plane store records it the
-- first time the two are used together and refuses any other
-- (object-store-mismatch). gen_random_uuid() is built in from PostgreSQL 13.

CREATE TABLE tenure_objects_identity (
    one        INTEGER PRIMARY KEY CHECK (one = 1),
    identity   TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO tenure_objects_identity (one, identity) VALUES (1, gen_random_uuid()::text);

-- Objects that verify or a restore found corrupt, moved out of tenure_objects
-- (so has_many no longer reports them and the next checkpoint that needs one
-- stores it afresh) and kept for inspection. Never read by tenure.

CREATE TABLE tenure_objects_corrupt (
    oid      TEXT NOT NULL,
    payload  BYTEA NOT NULL,
    found_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
