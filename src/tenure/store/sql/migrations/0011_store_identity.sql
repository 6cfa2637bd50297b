-- This store's own identity: one row, a random UUID ({uuid}) written when this
-- migration runs, so a store created before it gets one too. The first store to
-- bind an object store records this identity in it (tenure-objects-store.json,
-- tenure_objects_store), and an object store bound to another store is refused
-- (object-store-taken, ADR 0040): two stores sharing one object store would each
-- delete, in GC, the other's objects.

CREATE TABLE store_identity (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    identity    TEXT NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL
);

INSERT INTO store_identity (one, identity, created_at) VALUES (1, {uuid}, {now});
