-- Named queries of the preserved deltas (tenure/projects/preserved.py): lost work recorded in the
-- control-plane store. Same rules as queries.sql: `:name` parameters, `{now}` the store clock.


-- name: preserved_delta_insert
-- Record one preserved delta, once: a host that records it again (a retry after a crash) changes nothing.
INSERT INTO preserved_deltas (id, project_id, workspace_id, generation, lineage, pod_id, host, folder,
                              delta_workspace_id, snapshot_id, files, bytes, paths, truncated, reason,
                              created_at, kept_until)
VALUES (:id, :p, :w, :g, :lin, :pod, :host, :folder, :dw, :s, :files, :bytes, :paths, :truncated, :reason,
        {now}, {now} + :keep)
ON CONFLICT (id) DO NOTHING;

-- name: preserved_delta_by_id
SELECT * FROM preserved_deltas WHERE id = :id;

-- name: preserved_deltas_of_project
-- The preserved deltas of project :p still in their recovery window, newest first.
SELECT * FROM preserved_deltas
WHERE project_id = :p AND kept_until > {now}
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: preserved_deltas_in_window
-- Every preserved delta still in its recovery window (at most :limit), newest first: project listings.
SELECT * FROM preserved_deltas WHERE kept_until > {now} ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: preserved_deltas_count
-- How many preserved deltas are in their recovery window and not recovered yet (the /metrics gauge).
SELECT COUNT(*) AS n FROM preserved_deltas WHERE kept_until > {now} AND recovered_at IS NULL;

-- name: preserved_deltas_past_window
-- The preserved deltas whose recovery window has ended (their workspace is disposed, then the row goes).
SELECT * FROM preserved_deltas WHERE kept_until <= {now} ORDER BY kept_until LIMIT :limit;

-- name: preserved_delta_recovered
UPDATE preserved_deltas SET recovered_at = {now} WHERE id = :id;

-- name: preserved_delta_delete
DELETE FROM preserved_deltas WHERE id = :id;
