-- The needing-owner index again, for a query that passes the statuses and
-- lifecycle types as parameters (docs/adr/0009-named-queries.md):
-- * the status list is spelled as equalities: SQLite matches a bound parameter
--   against a constant of a partial index's predicate in a comparison, but
--   not inside an IN list;
-- * the predicate's columns follow the key: SQLite re-checks those terms for
--   every entry it scans (it drops them only when they are constants), and
--   can do so from the index without reading the row.
-- Same rows, same leading key, same range scan.

DROP INDEX IF EXISTS projects_needing_owner;
CREATE INDEX IF NOT EXISTS projects_needing_owner
    ON projects ((COALESCE(claimed_at, 0)), status, lifecycle_type, owner_required)
    WHERE (status = 'INIT' OR status = 'RECOVERING' OR status = 'RUNNING')
      AND (lifecycle_type = 'PERMANENT' OR (lifecycle_type = 'AUTO' AND owner_required = 1));
