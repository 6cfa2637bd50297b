-- Project leases bound to their pod's lease (ADR 0016): a beat writes one row whatever the number
-- of projects the pod holds.
-- * pods.lease_renewed_at: the pod's own lease, renewed by each beat (read by tenure/projects/ownership.py only);
-- * pods.lost: bumped in the transaction of every takeover or fence of a project the pod held, so a
--   beat re-reads its project set only when it moved (drift);
-- * projects.pod_bound: 1 while the project's lease lives as long as its holder's pod lease (a pod that
--   beats); 0 for a lease of its own that ends claimed_at + TTL (a short-lived pod that never beats).
-- The needing-owner index now holds only the projects that are not pod-bound (unheld, or held by a
-- lease of their own); projects of a dead pod are found from the pod (pods_by_lease, then projects_by_holder).

ALTER TABLE pods ADD COLUMN lease_renewed_at DOUBLE PRECISION;
ALTER TABLE pods ADD COLUMN lost BIGINT NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN pod_bound INTEGER NOT NULL DEFAULT 0 CHECK (pod_bound IN (0, 1));

CREATE INDEX IF NOT EXISTS pods_by_lease ON pods (lease_renewed_at) WHERE lease_renewed_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS projects_unbound_by_holder ON projects (home_pod_id) WHERE pod_bound = 0;

DROP INDEX IF EXISTS projects_needing_owner;
CREATE INDEX IF NOT EXISTS projects_needing_owner
    ON projects ((COALESCE(claimed_at, 0)), id, status, lifecycle_type, owner_required)
    WHERE pod_bound = 0
      AND (status = 'INIT' OR status = 'RECOVERING' OR status = 'RUNNING')
      AND (lifecycle_type = 'PERMANENT' OR (lifecycle_type = 'AUTO' AND owner_required = 1));
