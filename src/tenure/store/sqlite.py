"""The SQLite driver: connections, transactions and error mapping (the only user of ``sqlite3``).

Settings (see docs/adr/0002-sqlite-durability.md): WAL journal,
``synchronous=FULL`` so a committed transaction survives power loss,
``busy_timeout`` so writers queue instead of failing, and every write
transaction opened with ``BEGIN IMMEDIATE`` so two writers never deadlock on
a lock upgrade. The pragmas and transaction control below are driver
settings, not queries.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from tenure.errors import ConfigurationError, StoreError, VersionConflictError
from tenure.store.connector import BaseTx, Row, Statements
from tenure.store.queries import STORE, Queries, load


class SqliteTx(BaseTx):
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection, statements: Statements) -> None:
        super().__init__(statements)
        self.conn = conn

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Row]:
        try:
            cur = self.conn.execute(sql, params)
            rows = cur.fetchall()
        except sqlite3.Error as exc:
            raise _map_sqlite(exc) from exc
        if cur.description is None:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in rows]

    def _rowcount(self, sql: str, params: dict[str, Any]) -> int:
        try:
            return int(self.conn.execute(sql, params).rowcount)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc) from exc

    def _many(self, sql: str, rows: list[dict[str, Any]]) -> None:
        try:
            self.conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc) from exc


def _map_sqlite(exc: sqlite3.Error) -> Exception:
    if isinstance(exc, sqlite3.IntegrityError):
        return VersionConflictError(f"store constraint violated: {exc}")
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return StoreError(f"store is busy: {exc}")
    if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
        return ConfigurationError(f"cannot open the SQLite store: {exc}", code="store-unreachable")
    return StoreError(f"store error: {exc}", code="store-error")


class SqliteConnector:
    """One connection per thread to a SQLite file (WAL, synchronous=FULL)."""

    dialect = "sqlite"

    def __init__(self, path: str, *, busy_timeout_ms: int = 30000, queries: Queries | None = None) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.busy_timeout_ms = busy_timeout_ms
        self.queries = queries if queries is not None else load(STORE)
        self._statements = Statements(self.queries, self.dialect)
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                       timeout=self.busy_timeout_ms / 1000)
            except sqlite3.Error as exc:
                raise _map_sqlite(exc) from exc
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[SqliteTx]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise _map_sqlite(exc) from exc
        try:
            yield SqliteTx(conn, self._statements)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise _map_sqlite(exc) from exc

    def sql_transaction(self, *, write: bool = True) -> AbstractContextManager[SqliteTx]:
        """The same transaction; typed to also run SQL text as written (see :mod:`tenure.store.connector`)."""
        return self.transaction(write=write)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
