-- Named queries of the PostgreSQL object store (tenure/objects/postgres.py).
-- Same format and loader as the control-plane store's (tenure/store/queries.py).
-- Its migrations are kept in their own table, so the object store may share a
-- database with the control-plane store.


-- ==================================================================== migrations

-- name: migrations_lock
-- Serialize concurrent migrators of the object store until the transaction ends.
SELECT pg_advisory_xact_lock(7346201119);

-- name: migrations_table_create
-- The bookkeeping table of the object store's applied migrations.
CREATE TABLE IF NOT EXISTS tenure_objects_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL
);

-- name: migrations_table_exists
-- A row when the bookkeeping table of the object store's applied migrations exists (on the search path).
SELECT 1 AS x WHERE to_regclass('tenure_objects_migrations') IS NOT NULL;

-- name: migrations_applied
-- Every applied migration: version, name, applied_at and (from migration 2 on) checksum.
SELECT * FROM tenure_objects_migrations ORDER BY version;

-- name: migration_record
-- Record migration :v (:n) as applied.
INSERT INTO tenure_objects_migrations (version, name, applied_at) VALUES (:v, :n, {now});

-- name: migration_set_checksum
-- The checksum :c of applied migration :v, where none is recorded yet.
UPDATE tenure_objects_migrations SET checksum = :c WHERE version = :v AND checksum IS NULL;


-- ==================================================================== objects

-- name: objects_present
-- Which of the oids in list :oids are stored.
SELECT oid FROM tenure_objects WHERE oid = ANY(:oids);

-- name: object_insert
-- Store one object; an oid already stored is left as it is (objects are immutable).
INSERT INTO tenure_objects (oid, payload) VALUES (:oid, :payload) ON CONFLICT (oid) DO NOTHING;

-- name: object_payload
-- The payload of object :oid.
SELECT payload FROM tenure_objects WHERE oid = :oid;

-- name: objects_all
-- Every object's oid and creation time, by oid.
SELECT oid, created_at FROM tenure_objects ORDER BY oid;

-- name: objects_delete
-- Remove the objects in list :oids.
DELETE FROM tenure_objects WHERE oid = ANY(:oids);


-- ==================================================================== identity and corrupt objects

-- name: object_store_identity
-- The identity written into this object store when it was created.
SELECT identity FROM tenure_objects_identity WHERE one = 1;

-- name: object_store_bound_store
-- The control-plane store this object store is bound to (its identity and URL), if one has bound it yet.
SELECT store, url FROM tenure_objects_store WHERE one = 1;

-- name: object_store_bind_store
-- Bind this object store to store :store (at :url), unless it is bound already (the first binding stays).
INSERT INTO tenure_objects_store (one, store, url) VALUES (1, :store, :url) ON CONFLICT (one) DO NOTHING;

-- name: object_set_aside
-- Move object :oid into tenure_objects_corrupt if its stored payload is still exactly :payload (a corrupt one).
WITH moved AS (DELETE FROM tenure_objects WHERE oid = :oid AND payload = :payload RETURNING oid, payload)
INSERT INTO tenure_objects_corrupt (oid, payload) SELECT oid, payload FROM moved;
