-- The needing-owner index again, with its status list spelled as equalities.
-- Queries pass statuses as parameters (docs/adr/0009-named-queries.md); SQLite
-- matches a parameter against a constant of a partial index's predicate in a
-- comparison, but not inside an IN list. Same rows, same key, same scan.

DROP INDEX IF EXISTS projects_needing_owner;
CREATE INDEX IF NOT EXISTS projects_needing_owner ON projects ((COALESCE(claimed_at, 0)))
    WHERE (status = 'INIT' OR status = 'RECOVERING' OR status = 'RUNNING')
      AND (lifecycle_type = 'PERMANENT' OR (lifecycle_type = 'AUTO' AND owner_required = 1));
