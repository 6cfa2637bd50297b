"""Object store in a PostgreSQL table (``tenure_objects``).

``put_many`` inserts a batch with ``ON CONFLICT DO NOTHING`` in one
transaction and returns after COMMIT, so acknowledged objects are durable
(``synchronous_commit`` as configured on the server; the default, on, waits
for the WAL flush). Useful when a deployment has PostgreSQL but no shared
object storage; large fleets should prefer an S3-compatible store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

from tenure.errors import ObjectStoreError
from tenure.objects.base import ObjectMissingError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenure_objects (
    oid        TEXT PRIMARY KEY,
    payload    BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


class PostgresObjectStore:
    def __init__(self, url: str) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        try:
            self.pool = ConnectionPool(url, min_size=1, max_size=4, open=True, timeout=10)
            with self.pool.connection() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(7346201119)")
                conn.execute(_SCHEMA)
        except (psycopg.Error, Exception) as exc:
            raise ObjectStoreError(f"cannot open the PostgreSQL object store: {exc}") from exc

    def _error(self, what: str, exc: Exception) -> ObjectStoreError:
        return ObjectStoreError(f"PostgreSQL object store: cannot {what}: {exc}")

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        import psycopg

        batch = list({oid: payload for oid, payload in items}.items())
        if not batch:
            return 0
        try:
            with self.pool.connection() as conn, conn.cursor() as cur:
                existing = {r[0] for r in cur.execute("SELECT oid FROM tenure_objects WHERE oid = ANY(%s)",
                                                      ([oid for oid, _ in batch],))}
                fresh = [(oid, payload) for oid, payload in batch if oid not in existing]
                cur.executemany("INSERT INTO tenure_objects (oid, payload) VALUES (%s, %s)"
                                " ON CONFLICT (oid) DO NOTHING", fresh)
            return len(fresh)
        except psycopg.Error as exc:
            raise self._error("write objects", exc) from exc

    def get(self, oid: str) -> bytes:
        import psycopg

        try:
            with self.pool.connection() as conn:
                row = conn.execute("SELECT payload FROM tenure_objects WHERE oid = %s", (oid,)).fetchone()
        except psycopg.Error as exc:
            raise self._error(f"read object {oid}", exc) from exc
        if row is None:
            raise ObjectMissingError(f"object {oid} is missing from the PostgreSQL object store", oid=oid)
        return bytes(row[0])

    def has_many(self, oids: Iterable[str]) -> set[str]:
        import psycopg

        wanted = list(set(oids))
        if not wanted:
            return set()
        try:
            with self.pool.connection() as conn:
                rows = conn.execute("SELECT oid FROM tenure_objects WHERE oid = ANY(%s)", (wanted,)).fetchall()
        except psycopg.Error as exc:
            raise self._error("check objects", exc) from exc
        return {r[0] for r in rows}

    def list_ids(self) -> Iterator[tuple[str, datetime]]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT oid, created_at FROM tenure_objects ORDER BY oid").fetchall()
        for oid, created in rows:
            yield oid, created

    def delete_many(self, oids: Iterable[str]) -> int:
        wanted = list(set(oids))
        if not wanted:
            return 0
        with self.pool.connection() as conn:
            cur = conn.execute("DELETE FROM tenure_objects WHERE oid = ANY(%s)", (wanted,))
            return cur.rowcount

    def close(self) -> None:
        self.pool.close()
