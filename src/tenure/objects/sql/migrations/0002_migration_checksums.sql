-- A checksum (SHA-256 of the migration file) for every applied migration of
-- the object store, as the control-plane store keeps (its migration 0004).

ALTER TABLE tenure_objects_migrations ADD COLUMN checksum TEXT;
