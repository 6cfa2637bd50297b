-- Why each checkpoint was taken (ADR 0042): manual, autosave, durable, suspend, drain or reconcile.
-- NULL for the snapshots written before this column existed (the reason is not known).

ALTER TABLE snapshots ADD COLUMN reason TEXT;
