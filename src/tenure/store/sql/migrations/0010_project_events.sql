-- The ownership timeline: an append-only event log per project, answering "why is it here, since
-- when, who had it before" (tenure/projects/timeline.py, `tenure project history`).
-- * at: when the event was written, by the store clock ({now}), so events of every pod compare;
-- * seq: a tiebreak for events of one project written within one tick of the store clock (a
--   monotonic number of the writing process, close to its wall clock in microseconds);
-- * kind: what happened (tenure.projects.timeline.EventKind; no CHECK list, so an older pod can read
--   the kinds a newer one writes); pod_id and generation: the pod and the fencing generation it
--   concerns, when it concerns one; detail: a JSON object (from, to, reason, error, ...).
-- Rows are only ever inserted, and deleted by retention (tenure serve --history-days): older than the
-- window, beyond the newest rows of their project.

CREATE TABLE IF NOT EXISTS project_events (
    id          TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL,
    at          DOUBLE PRECISION NOT NULL,
    seq         BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    pod_id      TEXT,
    generation  BIGINT,
    detail      TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS project_events_by_project ON project_events (project_id, at, id);
CREATE INDEX IF NOT EXISTS project_events_by_time ON project_events (at);
