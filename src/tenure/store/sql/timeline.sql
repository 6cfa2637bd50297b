-- Named queries of the ownership timeline (tenure/projects/timeline.py): the append-only
-- project_events log. Same rules as queries.sql: `:name` parameters, `{now}` the store clock.
-- None of them names the lease columns: the timeline records what ownership decided, it never reads it.


-- name: project_event_insert
-- Append one event of project :p at the store clock.
INSERT INTO project_events (id, project_id, at, seq, kind, pod_id, generation, detail)
VALUES (:id, :p, {now}, :seq, :kind, :pod, :g, :detail);

-- name: project_events_newest
-- The newest :limit events of project :p, newest first (time, then the writer's tiebreak, then id).
SELECT id, project_id, at, seq, kind, pod_id, generation, detail
FROM project_events
WHERE project_id = :p
ORDER BY at DESC, seq DESC, id DESC
LIMIT :limit;

-- name: project_events_before
-- The newest :limit events of project :p written before store time :before, newest first.
SELECT id, project_id, at, seq, kind, pod_id, generation, detail
FROM project_events
WHERE project_id = :p AND at < :before
ORDER BY at DESC, seq DESC, id DESC
LIMIT :limit;

-- name: project_events_prune
-- Retention: delete the events older than :age seconds by the store clock, except the newest :keep
-- of each project. Only projects that have such old events are ranked.
DELETE FROM project_events
WHERE id IN (
    SELECT ranked.id FROM (
        SELECT id, at, ROW_NUMBER() OVER (PARTITION BY project_id ORDER BY at DESC, seq DESC, id DESC) AS n
        FROM project_events
        WHERE project_id IN (SELECT project_id FROM project_events WHERE at < {now} - :age)
    ) ranked
    WHERE ranked.n > :keep AND ranked.at < {now} - :age
);
