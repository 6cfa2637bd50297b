-- Lost work, recorded where every pod sees it (ADR 0044): a preserved delta is the folder of a project
-- that a host found holding files no checkpoint of the project has, after it lost the project (a takeover
-- while it was paused or cut off, a fence, a close elsewhere, restart reconciliation). The host uploads
-- the folder as the head of a workspace of its own (outside the project's head line) and records it here:
-- * id: the host's mount record it was kept under (unique across hosts);
-- * project_id, workspace_id: the project and its workspace; generation and lineage: what the writes
--   were made under (a client holding that lineage lost them);
-- * pod_id, host: the pod and host that found it; folder: where the host keeps its copy;
-- * delta_workspace_id, snapshot_id: the delta's own workspace and its snapshot in the object store;
-- * files, bytes: the files that differ from the last checkpoint the host took or restored, and their
--   size; paths: their names (JSON list, at most 10,000; truncated says when there were more);
-- * kept_until: the end of the recovery window; recovered_at: the last recover of it, if any.

CREATE TABLE IF NOT EXISTS preserved_deltas (
    id                  TEXT PRIMARY KEY,
    project_id          TEXT NOT NULL,
    workspace_id        TEXT NOT NULL,
    generation          BIGINT NOT NULL,
    lineage             BIGINT,
    pod_id              TEXT,
    host                TEXT,
    folder              TEXT,
    delta_workspace_id  TEXT NOT NULL,
    snapshot_id         TEXT NOT NULL,
    files               BIGINT NOT NULL,
    bytes               BIGINT NOT NULL,
    paths               TEXT NOT NULL DEFAULT '[]',
    truncated           INTEGER NOT NULL DEFAULT 0,
    reason              TEXT,
    created_at          DOUBLE PRECISION NOT NULL,
    kept_until          DOUBLE PRECISION NOT NULL,
    recovered_at        DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS preserved_deltas_by_project ON preserved_deltas (project_id, created_at);
CREATE INDEX IF NOT EXISTS preserved_deltas_by_end ON preserved_deltas (kept_until);
