-- Losses recorded beside the pod, not on its row (ADR 0045): a takeover or a fence of a project adds one
-- row here for the former holder, in the taking transaction, instead of bumping pods.lost. The former
-- holder's renewal locks its own pods row, and it deletes here only rows committed before it ran; a new row
-- conflicts with neither, so a claim never waits on a pod paused between its renewal and its COMMIT.
-- * (pod_id, project_id, generation): pod_id lost project_id when the generation rose to `generation`;
-- * the former holder's renewal counts its rows into pods.lost and deletes them: its lost counter moves
--   as before, once per loss, at its next beat after the loss committed;
-- * the rows of a pod whose pods row was reaped are deleted with the next reaping.

CREATE TABLE IF NOT EXISTS pod_losses (
    pod_id      TEXT NOT NULL,
    project_id  TEXT NOT NULL,
    generation  BIGINT NOT NULL,
    lost_at     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (pod_id, project_id, generation)
);
