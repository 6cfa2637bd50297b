-- Named queries of the host-local mount store (a SQLite file under the data folder, ADR 0021): SQLite only.
-- Same conventions as tenure/store/sql/queries.sql: one statement per block, states as parameters.


-- ==================================================================== migrations

-- name: migrations_table_exists
-- A row when the bookkeeping table of the mount store's applied migrations exists.
SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = 'mount_migrations';

-- name: migrations_table_create
-- The bookkeeping table of the mount store's applied migrations.
CREATE TABLE IF NOT EXISTS mount_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL,
    checksum   TEXT
);

-- name: migrations_applied
-- Every applied migration: version, name, applied_at and checksum.
SELECT * FROM mount_migrations ORDER BY version;

-- name: migration_record
-- Record migration :v (:n) as applied.
INSERT INTO mount_migrations (version, name, applied_at) VALUES (:v, :n, {now});

-- name: migration_set_checksum
-- The checksum :c of applied migration :v, where none is recorded yet.
UPDATE mount_migrations SET checksum = :c WHERE version = :v AND checksum IS NULL;


-- ==================================================================== mounts

-- name: mount_insert
-- A new mount of workspace :w for project :p at generation :g and lineage :lin, in status :s; returns its row.
INSERT INTO mounts (id, workspace_id, project_id, project_ref, generation, folder, base_snapshot, state,
                    lineage, created_at, updated_at)
VALUES (:id, :w, :p, :ref, :g, :f, :b, :s, :lin, {now}, {now})
RETURNING *;

-- name: mount_by_id
-- Mount :id.
SELECT * FROM mounts WHERE id = :id;

-- name: mounts_all
-- Every mount, oldest first.
SELECT * FROM mounts ORDER BY created_at, id;

-- name: mount_live_for_workspace
-- The mount of workspace :w that is not CLOSED, if any.
SELECT * FROM mounts WHERE workspace_id = :w AND state <> :closed ORDER BY created_at DESC LIMIT 1;

-- name: mount_transition
-- Status :e → :t of mount :id, only from :e (the machine's check ran before); returns the row moved.
UPDATE mounts SET state = :t, updated_at = {now} WHERE id = :id AND state = :e
RETURNING *;

-- name: mount_force
-- The forced path (reconciliation and takeover only): mount :id to :t from whatever it is, with the reason;
-- returns the row.
UPDATE mounts SET state = :t, forced_reason = :why, updated_at = {now} WHERE id = :id
RETURNING *;

-- name: mount_set_generation
-- Mount :id now runs under generation :g (the claim or adoption that raised it).
UPDATE mounts SET generation = :g, updated_at = {now} WHERE id = :id;

-- name: mount_set_base
-- Mount :id's folder now holds snapshot :b.
UPDATE mounts SET base_snapshot = :b, updated_at = {now} WHERE id = :id;

-- name: mount_checkpoint_begin
-- Mount :id has a checkpoint in flight under idempotency key :k.
UPDATE mounts SET checkpoint_key = :k, pending_snapshot = NULL, updated_at = {now} WHERE id = :id;

-- name: mount_checkpoint_pending
-- The in-flight checkpoint of mount :id has its pending snapshot :s.
UPDATE mounts SET pending_snapshot = :s, updated_at = {now} WHERE id = :id AND checkpoint_key IS NOT NULL;

-- name: mount_checkpoint_end
-- The in-flight checkpoint of mount :id ended (published or abandoned).
UPDATE mounts SET checkpoint_key = NULL, pending_snapshot = NULL, updated_at = {now} WHERE id = :id;

-- name: mount_set_cleanup
-- Mount :id has local cleanup :c left to do (NULL: none).
UPDATE mounts SET pending_cleanup = :c, updated_at = {now} WHERE id = :id;

-- name: mount_set_verdict
-- The verdict reconciliation gave mount :id, and where its folder was preserved (if it was).
UPDATE mounts SET verdict = :v, preserved_at = COALESCE(:pa, preserved_at), preserved_folder = COALESCE(:pf, preserved_folder),
    updated_at = {now} WHERE id = :id;

-- name: mount_delete
-- Forget mount :id (its folder is gone).
DELETE FROM mounts WHERE id = :id;
