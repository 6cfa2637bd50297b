"""Object store in a PostgreSQL table (``tenure_objects``).

``put_many`` inserts a batch with ``ON CONFLICT DO NOTHING`` in one
transaction and returns after COMMIT, so acknowledged objects are durable
(``synchronous_commit`` as configured on the server; the default, on, waits
for the WAL flush). Useful when a deployment has PostgreSQL but no shared
object storage; large fleets should prefer an S3-compatible store.

The object store talks SQL the way the control-plane store does: a
:class:`~tenure.store.postgres.PostgresConnector` over its own named queries
(``sql/postgres/queries.sql``) and its own migrations (``sql/migrations/``,
recorded in ``tenure_objects_migrations``), applied when it is opened. Its
URL may name another database than the store's (docs/adr/0010-object-store-schema.md).
Its connections carry the same limits as the store's (timeouts and keepalives,
``TENURE_PG_*``, docs/adr/0045-nothing-blocks-a-takeover.md); the GC's listing and
deletions (``objects_all``, ``objects_delete``) run under the long statement limit.

Its identity is the one row of ``tenure_objects_identity`` (migration 0003
writes it), the control-plane store it is bound to the one row of
``tenure_objects_store`` (migration 0004; written by the first store that
binds it); objects found corrupt are moved into ``tenure_objects_corrupt``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import NoReturn

from tenure.errors import ObjectStoreError, TenureError
from tenure.objects.base import BoundStore, ObjectMissingError
from tenure.objects.identity import write_once
from tenure.store.migrate import migrate
from tenure.store.postgres import PostgresConnector
from tenure.store.queries import load

#: The package whose ``sql/`` folder holds the object store's queries and migrations.
SCHEMA = "tenure.objects"


class PostgresObjectStore:
    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.db = PostgresConnector(url, min_size=1, max_size=4, queries=load(SCHEMA))
        except Exception as exc:
            raise ObjectStoreError(f"cannot open the PostgreSQL object store: {exc.__cause__ or exc}") from exc
        try:
            migrate(self.db)
        except Exception as exc:
            self.db.close()
            raise ObjectStoreError(f"cannot open the PostgreSQL object store: {exc.__cause__ or exc}") from exc

    @contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """Store failures become ObjectStoreError, naming what could not be done."""
        try:
            yield
        except ObjectMissingError:
            raise
        except TenureError as exc:
            raise ObjectStoreError(f"PostgreSQL object store: cannot {what}: {exc.__cause__ or exc}") from exc

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        batch = list({oid: payload for oid, payload in items}.items())
        if not batch:
            return 0
        with self._failing("write objects"), self.db.transaction() as tx:
            existing = {r["oid"] for r in tx.execute("objects_present", {"oids": [oid for oid, _ in batch]})}
            fresh = [(oid, payload) for oid, payload in batch if oid not in existing]
            tx.executemany("object_insert", [{"oid": oid, "payload": payload} for oid, payload in fresh])
        return len(fresh)

    def get(self, oid: str) -> bytes:
        with self._failing(f"read object {oid}"), self.db.transaction(write=False) as tx:
            row = tx.one("object_payload", {"oid": oid})
        if row is None:
            raise ObjectMissingError(f"object {oid} is missing from the PostgreSQL object store", oid=oid)
        return bytes(row["payload"])

    def has_many(self, oids: Iterable[str]) -> set[str]:
        wanted = list(set(oids))
        if not wanted:
            return set()
        with self._failing("check objects"), self.db.transaction(write=False) as tx:
            rows = tx.execute("objects_present", {"oids": wanted})
        return {r["oid"] for r in rows}

    def list_ids(self) -> Iterator[tuple[str, datetime]]:
        with self._failing("list objects"), self.db.transaction(write=False) as tx:
            rows = tx.execute("objects_all")
        for row in rows:
            yield row["oid"], row["created_at"]

    def delete_many(self, oids: Iterable[str]) -> int:
        wanted = list(set(oids))
        if not wanted:
            return 0
        with self._failing("delete objects"), self.db.transaction() as tx:
            return tx.count("objects_delete", {"oids": wanted})

    def sync(self) -> None:
        """Nothing to do: a committed row is durable."""

    def identity(self) -> str | None:
        """The row of ``tenure_objects_identity``, written by the migration that created the table."""
        with self._failing("read the object store's identity"), self.db.transaction(write=False) as tx:
            row = tx.one("object_store_identity")
        return None if row is None else str(row["identity"])

    def ensure_identity(self) -> str:
        """Every migrated PostgreSQL object store has its identity (see :meth:`identity`): none is written here."""
        return write_once(self.identity, self._identity_missing)

    def _identity_missing(self) -> NoReturn:
        raise ObjectStoreError(
            "the PostgreSQL object store has no identity row in tenure_objects_identity",
            hint="it was removed by hand; restore it from a backup",
        )

    def bound_store(self) -> BoundStore | None:
        """The row of ``tenure_objects_store``, if a store has bound this object store yet; never writes."""
        with self._failing("read the store the object store is bound to"), self.db.transaction(write=False) as tx:
            row = tx.one("object_store_bound_store")
        return None if row is None else BoundStore(str(row["store"]), str(row["url"]))

    def bind_store(self, store: BoundStore) -> BoundStore:
        """``store`` recorded unless a store has bound this object store already (:func:`write_once`: the
        insert keeps the first row)."""
        return write_once(self.bound_store, lambda: self._insert_bound_store(store))

    def _insert_bound_store(self, store: BoundStore) -> None:
        with self._failing("record the store the object store is bound to"), self.db.transaction() as tx:
            tx.count("object_store_bind_store", {"store": store.identity, "url": store.url})

    def set_aside(self, corrupt: Iterable[tuple[str, bytes]]) -> int:
        """Move each object whose row still holds exactly the given payload into ``tenure_objects_corrupt``."""
        moved = 0
        with self._failing("move corrupt objects aside"), self.db.transaction() as tx:
            for oid, payload in corrupt:
                moved += tx.count("object_set_aside", {"oid": oid, "payload": payload})
        return moved

    def close(self) -> None:
        self.db.close()
