-- Named queries of the cluster master (ADR 0023): the master lease row and placements.
-- Same rules as queries.sql: `:name` parameters, `{now}` the store clock, states as parameters.


-- ==================================================================== the master lease

-- name: master_get
-- The master lease row: holder, epoch, and seconds until it runs out by the store clock.
SELECT pod_id, epoch, renewed_at, ttl, (renewed_at + ttl - {now}) AS expires_in FROM cluster_master WHERE id = 1;

-- name: master_take
-- Pod :me takes the master role when it is free or run out by the store clock; the epoch rises.
UPDATE cluster_master SET pod_id = :me, epoch = epoch + 1, renewed_at = {now}, ttl = :ttl
WHERE id = 1 AND (pod_id IS NULL OR renewed_at IS NULL OR renewed_at + ttl <= {now})
RETURNING epoch;

-- name: master_renew
-- Pod :me renews the role it holds at epoch :e, only while it has not run out.
UPDATE cluster_master SET renewed_at = {now}, ttl = :ttl
WHERE id = 1 AND pod_id = :me AND epoch = :e AND renewed_at + ttl > {now}
RETURNING epoch;

-- name: master_resign
-- Pod :me gives up the role it holds at epoch :e (drain, stop): another pod may take it at once.
UPDATE cluster_master SET renewed_at = NULL WHERE id = 1 AND pod_id = :me AND epoch = :e;


-- ==================================================================== placements

-- name: placement_put
-- The master :me places project :p on pod :pod under epoch :e: written only while :me holds the
-- master lease at :e by the store clock, and never over a placement of a newer epoch.
INSERT INTO placements (project_id, pod_id, epoch, placed_at)
SELECT :p, :pod, :e, {now}
WHERE EXISTS (
    SELECT 1 FROM cluster_master m
    WHERE m.id = 1 AND m.pod_id = :me AND m.epoch = :e AND m.renewed_at + m.ttl > {now}
)
ON CONFLICT (project_id) DO UPDATE SET pod_id = excluded.pod_id, epoch = excluded.epoch, placed_at = excluded.placed_at
WHERE placements.epoch <= excluded.epoch;

-- name: placement_get
-- The master's last placement of project :p.
SELECT project_id, pod_id, epoch, placed_at FROM placements WHERE project_id = :p;

-- name: placements_newest_epoch
-- The newest epoch any placement was made under.
SELECT COALESCE(MAX(epoch), 0) AS epoch FROM placements;


-- ==================================================================== the master's questions on leases
-- (run from tenure/projects/ownership.py only: they read the lease columns)

-- name: sessions_unbind_ownerless
-- The stale-bind sweep (P-51): unbind the sessions of projects that have no live owner under TTL :ttl
-- (no holder, or a lease that ran out: its own claim, or its pod's lease when pod-bound).
UPDATE sessions SET bound_connection_id = NULL, bound_pod_id = NULL, updated_at = {now}
WHERE bound_connection_id IS NOT NULL
  AND project_id IN (
    SELECT p.id FROM projects p LEFT JOIN pods q ON q.id = p.home_pod_id
    WHERE p.home_pod_id IS NULL OR p.claimed_at IS NULL
       OR (CASE WHEN p.pod_bound = 1 AND q.lease_renewed_at > p.claimed_at THEN q.lease_renewed_at
                ELSE p.claimed_at END) + :ttl <= {now}
  );

-- name: projects_pending_placement
-- Pending placement (P-89, P-108), the one statement behind the API, the gauges and find_pending_placement:
-- projects marked pending placement within :pending seconds that still need an owner and have none.
SELECT p.id, p.tenant, p.name, p.project_group, p.status, p.kind, p.lifecycle_type, p.owner_required, p.home_node,
    p.generation, p.placement_selector, p.placement_score, p.pending_since, p.workspace_id, p.error, p.created_at,
    p.updated_at, p.lineage, p.autosave
FROM projects p LEFT JOIN pods q ON q.id = p.home_pod_id
WHERE p.pending_since IS NOT NULL AND p.pending_since >= {now} - :pending
  AND (p.status = :init OR p.status = :recovering OR p.status = :running)
  AND (p.lifecycle_type = :permanent OR (p.lifecycle_type = :auto AND p.owner_required = 1))
  AND (p.home_pod_id IS NULL OR p.claimed_at IS NULL
       OR (CASE WHEN p.pod_bound = 1 AND q.lease_renewed_at > p.claimed_at THEN q.lease_renewed_at
                ELSE p.claimed_at END) + :ttl <= {now})
ORDER BY p.pending_since, p.id
LIMIT :limit;

-- name: pods_next_lease_expiry
-- Seconds until the first pod lease runs out under TTL :ttl (a live pod renews its lease long before;
-- a dead one's runs out then), or the first lease of its own (not pod-bound) a project holds: when the
-- master's next tick should run so that a takeover does not wait for a whole tick.
SELECT MIN(w) AS wait FROM (
    SELECT lease_renewed_at + :ttl - {now} AS w FROM pods
    WHERE lease_renewed_at IS NOT NULL AND lease_renewed_at + :ttl > {now}
    UNION ALL
    SELECT claimed_at + :ttl - {now} AS w FROM projects
    WHERE pod_bound = 0 AND home_pod_id IS NOT NULL AND claimed_at + :ttl > {now}
) leases;
