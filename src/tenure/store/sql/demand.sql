-- Named queries of demand (tenure/projects/store.py, ADR 0046): what makes a project need an owner.
-- A project is *in demand* while it has a session, or a demand record that has not expired
-- (`expires_at` NULL or later than the store clock). owner_required is derived from that, written only
-- when it flips. Same rules as queries.sql: `:name` parameters, `{now}` the store clock.


-- name: project_demand_insert
-- A demand record from :s until it is removed (an existing one from the same source loses its end).
INSERT INTO project_demand (project_id, source, created_at, expires_at) VALUES (:p, :s, {now}, NULL)
ON CONFLICT (project_id, source) DO UPDATE SET expires_at = NULL;

-- name: project_demand_insert_until
-- A demand record from :s ending :e seconds from now (an existing one from the same source gets that end).
INSERT INTO project_demand (project_id, source, created_at, expires_at) VALUES (:p, :s, {now}, {now} + :e)
ON CONFLICT (project_id, source) DO UPDATE SET expires_at = excluded.expires_at;

-- name: project_demand_delete
-- The demand record from :s.
DELETE FROM project_demand WHERE project_id = :p AND source = :s;

-- name: project_demand_of
-- Project :p's demand records that have not expired, by source.
SELECT source, created_at, expires_at FROM project_demand
WHERE project_id = :p AND (expires_at IS NULL OR expires_at > {now})
ORDER BY source;

-- name: project_demand_expire
-- Every demand record whose end has passed.
DELETE FROM project_demand WHERE expires_at IS NOT NULL AND expires_at <= {now};

-- name: sessions_expire
-- Every unbound session not created, bound or unbound for :ttl seconds (bound ones never expire).
DELETE FROM sessions WHERE bound_connection_id IS NULL AND updated_at + :ttl <= {now};

-- name: session_delete
DELETE FROM sessions WHERE id = :id;

-- name: project_in_demand
-- 1 when project :p has a session or a demand record that has not expired.
SELECT (CASE WHEN EXISTS (SELECT 1 FROM sessions s WHERE s.project_id = :p)
              OR EXISTS (SELECT 1 FROM project_demand d WHERE d.project_id = :p
                         AND (d.expires_at IS NULL OR d.expires_at > {now})) THEN 1 ELSE 0 END) AS in_demand;

-- name: project_rederive_owner_required
-- owner_required of :t/:n from its sessions and live demand records, written only when it flips.
UPDATE projects SET owner_required = (CASE WHEN EXISTS (SELECT 1 FROM sessions s WHERE s.project_id = projects.id)
                                             OR EXISTS (SELECT 1 FROM project_demand d
                                                        WHERE d.project_id = projects.id
                                                          AND (d.expires_at IS NULL OR d.expires_at > {now}))
                                           THEN 1 ELSE 0 END),
    updated_at = {now}
WHERE tenant = :t AND name = :n
  AND owner_required <> (CASE WHEN EXISTS (SELECT 1 FROM sessions s WHERE s.project_id = projects.id)
                                OR EXISTS (SELECT 1 FROM project_demand d
                                           WHERE d.project_id = projects.id
                                             AND (d.expires_at IS NULL OR d.expires_at > {now}))
                              THEN 1 ELSE 0 END);

-- name: projects_rederive_owner_required
-- owner_required of every project from its sessions and live demand records, written only where it flips.
UPDATE projects SET owner_required = (CASE WHEN EXISTS (SELECT 1 FROM sessions s WHERE s.project_id = projects.id)
                                             OR EXISTS (SELECT 1 FROM project_demand d
                                                        WHERE d.project_id = projects.id
                                                          AND (d.expires_at IS NULL OR d.expires_at > {now}))
                                           THEN 1 ELSE 0 END),
    updated_at = {now}
WHERE owner_required <> (CASE WHEN EXISTS (SELECT 1 FROM sessions s WHERE s.project_id = projects.id)
                                OR EXISTS (SELECT 1 FROM project_demand d
                                           WHERE d.project_id = projects.id
                                             AND (d.expires_at IS NULL OR d.expires_at > {now}))
                              THEN 1 ELSE 0 END);
