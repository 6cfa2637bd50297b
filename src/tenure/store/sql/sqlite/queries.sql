-- SQLite forms of the named queries that differ per dialect (they replace the
-- portable block of the same name in ../queries.sql).

-- name: gc_lock_exclusive
-- Hold the GC lock row exclusively: BEGIN IMMEDIATE already holds the write lock; touch the row for clarity.
UPDATE gc_lock SET last_sweep = last_sweep WHERE id = 1;

-- name: sessions_unbind
-- Unbind every bound session of the projects in list :ids (a JSON array).
UPDATE sessions SET bound_connection_id = NULL, bound_pod_id = NULL, updated_at = {now}
WHERE project_id IN (SELECT value FROM json_each(:ids)) AND bound_connection_id IS NOT NULL;
