-- A project's lineage (ADR 0042): a number that changes only when a bring cannot vouch that the folder
-- it brings holds every write acknowledged under the previous lineage — a takeover from a holder that
-- left without a final checkpoint (its lease ran out, it was fenced, it let go without one), or a
-- restore from a snapshot other than the head. `vouched` is 1 while every acknowledged write is in the
-- head: a new project, and after a suspend or a drain's hand-over (a final checkpoint, then the lease
-- released); a claim by a new holder sets it to 0.

ALTER TABLE projects ADD COLUMN lineage INTEGER NOT NULL DEFAULT 1;
ALTER TABLE projects ADD COLUMN vouched INTEGER NOT NULL DEFAULT 1;
