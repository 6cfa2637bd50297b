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
-- The holder of :t/:n now and its workspace, the row locked until the transaction ends (a takeover records
-- the former holder's loss in the same transaction).
SELECT home_pod_id, workspace_id FROM projects WHERE tenant = :t AND name = :n FOR UPDATE;

-- name: pod_renew_lease
-- One beat: renew pod :pod's own lease (every pod-bound project lease with it); a pod without a row gets
-- one. Its recorded losses (pod_losses, ADR 0045) are deleted and counted into its lost counter in this one
-- statement, so exactly the rows it counts go (a loss committed meanwhile waits for the next beat; no row
-- is deleted for a STOPPED pod). Returns its lost counter and status (pending: none left to delete);
-- nothing for a STOPPED pod. Locks the pods row and the counted rows only: a claim writes neither.
WITH folded AS (
    DELETE FROM pod_losses l
    WHERE l.pod_id = :pod AND NOT EXISTS (SELECT 1 FROM pods s WHERE s.id = :pod AND s.status = :stopped)
    RETURNING 1
)
INSERT INTO pods (id, node_name, endpoint, labels, capacity, status, started_at, heartbeat_at, lease_renewed_at,
                  lost)
VALUES (:pod, '', NULL, '{}', 0, :running, {now}, {now}, {now}, (SELECT COUNT(*) FROM folded))
ON CONFLICT (id) DO UPDATE SET lease_renewed_at = {now}, lost = pods.lost + (SELECT COUNT(*) FROM folded)
WHERE pods.status <> :stopped
RETURNING lost, status, 0 AS pending;

-- name: workspace_for_update
-- A workspace by name or id, the row locked until the transaction ends (ADR 0012).
SELECT * FROM workspaces WHERE name = :r OR id = :r FOR UPDATE;

-- name: snapshot_for_update
-- Snapshot :id, the row locked until the transaction ends (ADR 0012).
SELECT id FROM snapshots WHERE id = :id FOR UPDATE;

-- name: project_of_workspace_for_share
-- The project whose workspace is :w, with its status, share-locked until the transaction ends: a status
-- change waits for an expiry decision, or has committed before it (ADR 0019).
SELECT tenant, name, status FROM projects WHERE workspace_id = :w FOR SHARE;

-- name: snapshots_of_workspace_for_update
-- The published and failed snapshots of workspace :w, locked until the transaction ends: a fork of one
-- of them waits, or has committed and is seen by the deletion that follows (ADR 0012).
SELECT id FROM snapshots WHERE workspace_id = :w AND state IN (:ready, :degraded, :failed) FOR UPDATE;

-- name: workspace_insert_from_snapshot
-- A new workspace whose head and base is snapshot :b, only while that snapshot is READY; the
-- snapshot row is share-locked, so a concurrent delete waits and then sees the new head (ADR 0012).
WITH base AS (SELECT id FROM snapshots WHERE id = :b AND state = :ready FOR SHARE)
INSERT INTO workspaces (id, name, state, head_snapshot_id, base_snapshot_id, created_at, updated_at)
SELECT :id, :n, :s, base.id, base.id, {now}, {now} FROM base
RETURNING id;

-- name: projects_needing_owner_of_dead_pods
-- Pod-bound projects that need an owner whose pod's lease has run out, the longest-silent pod first.
-- LATERAL keeps the plan one projects_by_holder lookup per expired pod lease (pods_by_lease): the
-- planner would otherwise hash-join a whole projects table held by one live pod.
SELECT p.id, p.tenant, p.name, p.project_group, p.status, p.kind, p.lifecycle_type, p.owner_required, p.home_node,
    p.generation, p.placement_selector, p.placement_score, p.pending_since, p.workspace_id, p.error, p.created_at,
    p.updated_at, p.lineage, p.autosave
FROM pods q CROSS JOIN LATERAL (
    SELECT * FROM projects r
    WHERE r.home_pod_id = q.id AND r.pod_bound = 1
      AND (r.status = :init OR r.status = :recovering OR r.status = :running)
      AND (r.lifecycle_type = :permanent OR (r.lifecycle_type = :auto AND r.owner_required = 1))
      AND COALESCE(r.claimed_at, 0) < (SELECT {now}) - :ttl
    OFFSET 0
) p
WHERE q.lease_renewed_at < (SELECT {now}) - :ttl
ORDER BY q.lease_renewed_at, p.id LIMIT :limit OFFSET :skip;

-- name: projects_needing_owner_of_dead_pods_count
-- How many rows projects_needing_owner_of_dead_pods has in all (one lookup per expired pod lease).
SELECT COUNT(*) AS n
FROM pods q CROSS JOIN LATERAL (
    SELECT 1 AS one FROM projects r
    WHERE r.home_pod_id = q.id AND r.pod_bound = 1
      AND (r.status = :init OR r.status = :recovering OR r.status = :running)
      AND (r.lifecycle_type = :permanent OR (r.lifecycle_type = :auto AND r.owner_required = 1))
      AND COALESCE(r.claimed_at, 0) < (SELECT {now}) - :ttl
    OFFSET 0
) p
WHERE q.lease_renewed_at < (SELECT {now}) - :ttl;

-- name: projects_needing_owner_of_dead_pods_after
-- projects_needing_owner_of_dead_pods paged by key (P-83): the rows after key (:after_k, :after_id) in its
-- order (the pod's lease_renewed_at, the project's id), with that key as k; LATERAL as in that statement.
SELECT p.id, p.tenant, p.name, p.project_group, p.status, p.kind, p.lifecycle_type, p.owner_required, p.home_node,
    p.generation, p.placement_selector, p.placement_score, p.pending_since, p.workspace_id, p.error, p.created_at,
    p.updated_at, p.lineage, p.autosave, q.lease_renewed_at AS k
FROM pods q CROSS JOIN LATERAL (
    SELECT * FROM projects r
    WHERE r.home_pod_id = q.id AND r.pod_bound = 1
      AND (r.status = :init OR r.status = :recovering OR r.status = :running)
      AND (r.lifecycle_type = :permanent OR (r.lifecycle_type = :auto AND r.owner_required = 1))
      AND COALESCE(r.claimed_at, 0) < (SELECT {now}) - :ttl
    OFFSET 0
) p
WHERE q.lease_renewed_at < (SELECT {now}) - :ttl AND q.lease_renewed_at >= :after_k
  AND (q.lease_renewed_at, p.id) > (CAST(:after_k AS DOUBLE PRECISION), CAST(:after_id AS TEXT))
ORDER BY q.lease_renewed_at, p.id LIMIT :limit;
