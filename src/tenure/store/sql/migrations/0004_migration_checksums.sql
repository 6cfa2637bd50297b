-- A checksum (SHA-256 of the migration file) for every applied migration, so
-- an edited or renumbered migration is refused (schema-mismatch) instead of
-- being applied again. Rows applied before this column existed get theirs
-- from the migrator (tenure/store/migrate.py), which checks them by name first.

ALTER TABLE schema_migrations ADD COLUMN checksum TEXT;
