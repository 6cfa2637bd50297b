-- The object store this store's snapshots live in. Every object store carries
-- an identity, written into it when it is created (a local folder's
-- tenure-objects.json, the PostgreSQL object store's tenure_objects_identity).
-- The store records it, with the object store's URL as then given (password
-- redacted), the first time the two are used together, and from then on
-- refuses every other object store (object-store-mismatch). One row at most.

CREATE TABLE object_store_binding (
    one       INTEGER PRIMARY KEY CHECK (one = 1),
    identity  TEXT NOT NULL,
    url       TEXT NOT NULL,
    bound_at  DOUBLE PRECISION NOT NULL
);
