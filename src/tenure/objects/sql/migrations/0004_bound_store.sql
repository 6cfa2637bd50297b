-- The control-plane store this object store is bound to: one row, written by
-- the first store that binds it (that store's own identity, from its
-- store_identity, and its URL then, password redacted) and never changed. Any
-- other store is refused (object-store-taken): a store's GC deletes every object
-- its own snapshots do not reach, so two stores on one object store would delete
-- each other's.

CREATE TABLE tenure_objects_store (
    one      INTEGER PRIMARY KEY CHECK (one = 1),
    store    TEXT NOT NULL,
    url      TEXT NOT NULL,
    bound_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
