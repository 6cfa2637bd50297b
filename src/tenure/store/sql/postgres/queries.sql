-- PostgreSQL forms of the named queries that differ per dialect (they replace
-- the portable block of the same name in ../queries.sql), and the ones only
-- PostgreSQL needs (SQLite's write transactions already serialize).

-- name: migrations_lock
-- Serialize concurrent migrators until the transaction ends.
SELECT pg_advisory_xact_lock(7346201118);

-- name: migrations_table_exists
-- A row when the bookkeeping table of applied migrations exists (on the search path).
SELECT 1 AS x WHERE to_regclass('schema_migrations') IS NOT NULL;

-- name: gc_lock_shared
-- Hold the GC lock row shared until the transaction ends (pins and new roots, ADR 0004).
SELECT id FROM gc_lock WHERE id = 1 FOR SHARE;

-- name: gc_lock_exclusive
-- Hold the GC lock row exclusively until the transaction ends (a GC mark or sweep batch).
SELECT id FROM gc_lock WHERE id = 1 FOR UPDATE;

-- name: project_holder_for_update
-- The holder of :t/:n now, the row locked until the transaction ends (a takeover bumps the former
-- holder's lost counter in the same transaction).
SELECT home_pod_id FROM projects WHERE tenant = :t AND name = :n FOR UPDATE;

-- name: workspace_for_update
-- A workspace by name or id, the row locked until the transaction ends (ADR 0012).
SELECT * FROM workspaces WHERE name = :r OR id = :r FOR UPDATE;

-- name: snapshot_for_update
-- Snapshot :id, the row locked until the transaction ends (ADR 0012).
SELECT id FROM snapshots WHERE id = :id FOR UPDATE;

-- name: workspace_insert_from_snapshot
-- A new workspace whose head and base is snapshot :b, only while that snapshot is READY; the
-- snapshot row is share-locked, so a concurrent delete waits and then sees the new head (ADR 0012).
WITH base AS (SELECT id FROM snapshots WHERE id = :b AND state = :ready FOR SHARE)
INSERT INTO workspaces (id, name, state, head_snapshot_id, base_snapshot_id, created_at, updated_at)
SELECT :id, :n, :s, base.id, base.id, {now}, {now} FROM base
RETURNING id;
