-- PostgreSQL forms of the named queries that differ per dialect (they replace
-- the portable block of the same name in ../queries.sql), and the ones only
-- PostgreSQL needs (SQLite's write transactions already serialize).

-- name: migrations_lock
-- Serialize concurrent migrators until the transaction ends.
SELECT pg_advisory_xact_lock(7346201118);

-- name: gc_lock_shared
-- Hold the GC lock row shared until the transaction ends (pins and new roots, ADR 0004).
SELECT id FROM gc_lock WHERE id = 1 FOR SHARE;

-- name: gc_lock_exclusive
-- Hold the GC lock row exclusively until the transaction ends (a GC mark or sweep batch).
SELECT id FROM gc_lock WHERE id = 1 FOR UPDATE;

-- name: sessions_unbind
-- Unbind every bound session of the projects in list :ids (an array).
UPDATE sessions SET bound_connection_id = NULL, bound_pod_id = NULL, updated_at = {now}
WHERE project_id = ANY(:ids) AND bound_connection_id IS NOT NULL;
