-- SQLite forms of the named queries that differ per dialect (they replace the
-- portable block of the same name in ../queries.sql).

-- name: migrations_table_exists
-- A row when the bookkeeping table of applied migrations exists.
SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations';

-- name: gc_lock_exclusive
-- Hold the GC lock row exclusively: BEGIN IMMEDIATE already holds the write lock; touch the row for clarity.
UPDATE gc_lock SET last_sweep = last_sweep WHERE id = 1;
