-- The cluster master (ADR 0023): one master lease row with an epoch of its own, and placements written
-- by the master under that epoch.
-- * cluster_master: exactly one row (id = 1). pod_id holds the role while renewed_at + ttl is after the
--   store clock; every change of holder raises epoch, so a deposed master's epoch is older for good.
-- * placements: the master's last decision for a project (project → pod, with the epoch it was made
--   under), written only by a statement whose predicate requires that epoch to be the live master's. A
--   pod asked to bring a project checks the row names it at that epoch. The claim compare-and-swap stays
--   the guarantee: a placement only says where the master wants a project, never who owns it.

CREATE TABLE IF NOT EXISTS cluster_master (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    pod_id      TEXT,
    epoch       BIGINT NOT NULL DEFAULT 0,
    renewed_at  DOUBLE PRECISION,
    ttl         DOUBLE PRECISION NOT NULL DEFAULT 0
);
INSERT INTO cluster_master (id, pod_id, epoch, renewed_at, ttl) VALUES (1, NULL, 0, NULL, 0);

CREATE TABLE IF NOT EXISTS placements (
    project_id  TEXT PRIMARY KEY,
    pod_id      TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    placed_at   DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS placements_by_pod ON placements (pod_id);
