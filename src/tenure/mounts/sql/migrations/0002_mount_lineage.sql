-- The project's lineage when the mount was opened (ADR 0042): what a preserved delta's writes were made
-- under. NULL for mounts opened before the column existed.

ALTER TABLE mounts ADD COLUMN lineage BIGINT;
