"""The PostgreSQL driver: a psycopg 3 pool, transactions and error mapping (the only user of ``psycopg``).

Connections run in autocommit mode and each transaction is an explicit
``BEGIN … COMMIT`` (``conn.transaction()``), so a transaction that returns
is committed. The control-plane store and the PostgreSQL object store each
open their own connector, over their own query files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from tenure.errors import InvalidInputError, StoreError, VersionConflictError
from tenure.store.connector import BaseTx, Row, Statements
from tenure.store.queries import STORE, Queries, load


class PostgresTx(BaseTx):
    dialect = "postgres"

    def __init__(self, conn: Any, statements: Statements) -> None:
        super().__init__(statements)
        self.conn = conn

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Row]:
        import psycopg

        try:
            cur = self.conn.execute(sql, params)
            if cur.description is None:
                return []
            names = [d.name for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc

    def _rowcount(self, sql: str, params: dict[str, Any]) -> int:
        import psycopg

        try:
            return int(self.conn.execute(sql, params).rowcount)
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc

    def _many(self, sql: str, rows: list[dict[str, Any]]) -> None:
        import psycopg

        try:
            with self.conn.cursor() as cur:
                cur.executemany(sql, rows)
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc


def _map_postgres(exc: Exception) -> Exception:
    import psycopg
    import psycopg.errors as pe

    if isinstance(exc, psycopg.DataError):
        return InvalidInputError(f"the store cannot hold this value: {exc}".strip(), code="invalid-input",
                            hint="names and values must be plain text without NUL characters")
    if isinstance(exc, (pe.UniqueViolation, pe.SerializationFailure, pe.DeadlockDetected)):
        return VersionConflictError(f"concurrent change: {exc}".strip())
    if isinstance(exc, pe.OperationalError):
        return StoreError(f"PostgreSQL is unreachable: {exc}".strip())
    return StoreError(f"PostgreSQL error: {exc}".strip(), code="store-error")


class PostgresConnector:
    """A psycopg 3 connection pool."""

    dialect = "postgres"

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8, queries: Queries | None = None) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self.queries = queries if queries is not None else load(STORE)
        self._statements = Statements(self.queries, self.dialect)
        try:
            self.pool = ConnectionPool(url, min_size=min_size, max_size=max_size, open=True,
                                       kwargs={"autocommit": True}, timeout=10)
            self.pool.wait(timeout=10)
        except (psycopg.Error, Exception) as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {_redact(url)}: {exc}",
                             code="store-unreachable") from exc

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[PostgresTx]:
        import psycopg

        try:
            with self.pool.connection() as conn:
                with conn.transaction():
                    yield PostgresTx(conn, self._statements)
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc

    def sql_transaction(self, *, write: bool = True) -> AbstractContextManager[PostgresTx]:
        """The same transaction; typed to also run SQL text as written (see :mod:`tenure.store.connector`)."""
        return self.transaction(write=write)

    def close(self) -> None:
        self.pool.close()


def _redact(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)
