-- The cluster credential (ADR 0048): once API tokens exist, pods authenticate to each other (placement
-- requests) with a cluster-scoped token the first pod that needs one provisions here. Its secret is kept
-- so every pod can read it (anyone who can read this store can act as any pod anyway); it is never
-- printed, and `tenure token rotate-cluster` replaces it. One row at most.

CREATE TABLE IF NOT EXISTS cluster_credential (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    token_id    TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL
);
