"""Drivers: the only code that touches sqlite3 or psycopg.

A connector hands out transactions. SQL is written once with ``:name``
parameters and a ``{now}`` placeholder for the store clock; the connector
translates both to its dialect. Driver errors are mapped at this boundary to
:class:`~tenure.errors.StoreError` (retryable) or
:class:`~tenure.errors.VersionConflictError` (a unique or serialization failure).

SQLite settings (see docs/adr/0002-sqlite-durability.md): WAL journal,
``synchronous=FULL`` so a committed transaction survives power loss,
``busy_timeout`` so writers queue instead of failing, and every write
transaction opened with ``BEGIN IMMEDIATE`` so two writers never deadlock on
a lock upgrade.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from tenure.errors import ConfigurationError, InvalidInputError, StoreError, VersionConflictError

Row = dict[str, Any]
_PARAM = re.compile(r"(?<!:):([a-zA-Z_][a-zA-Z0-9_]*)")

SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
POSTGRES_NOW = "extract(epoch from clock_timestamp())::double precision"


class Tx(Protocol):
    """One open transaction."""

    dialect: str

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Row | None: ...

    def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        """Run a write statement and return how many rows it matched."""
        ...


class Connector(Protocol):
    url: str
    dialect: str

    def transaction(self, *, write: bool = True) -> AbstractContextManager[Tx]: ...

    def close(self) -> None: ...


class _BaseTx:
    dialect = ""

    def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        raise NotImplementedError

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Row | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        raise NotImplementedError


class SqliteTx(_BaseTx):
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        try:
            cur = self.conn.execute(sql.replace("{now}", SQLITE_NOW), dict(params or {}))
            rows = cur.fetchall()
        except sqlite3.Error as exc:
            raise _map_sqlite(exc) from exc
        if cur.description is None:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in rows]

    def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        try:
            return int(self.conn.execute(sql.replace("{now}", SQLITE_NOW), dict(params or {})).rowcount)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc) from exc

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        try:
            self.conn.executemany(sql.replace("{now}", SQLITE_NOW), [dict(r) for r in rows])
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

    def __init__(self, path: str, *, busy_timeout_ms: int = 30000) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.busy_timeout_ms = busy_timeout_ms
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
            yield SqliteTx(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise _map_sqlite(exc) from exc

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class PostgresTx(_BaseTx):
    dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @staticmethod
    def _sql(sql: str) -> str:
        return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%").replace("{now}", POSTGRES_NOW))

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        import psycopg

        try:
            cur = self.conn.execute(self._sql(sql), dict(params or {}))
            if cur.description is None:
                return []
            names = [d.name for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc

    def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        import psycopg

        try:
            return int(self.conn.execute(self._sql(sql), dict(params or {})).rowcount)
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        import psycopg

        try:
            with self.conn.cursor() as cur:
                cur.executemany(self._sql(sql), [dict(r) for r in rows])
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

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
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
                    yield PostgresTx(conn)
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc

    def close(self) -> None:
        self.pool.close()


def _redact(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def open_connector(url: str) -> SqliteConnector | PostgresConnector:
    if url.startswith("sqlite:///"):
        return SqliteConnector(url[len("sqlite:///"):])
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresConnector(url)
    raise ConfigurationError(f"unsupported store URL {url!r}", hint="use sqlite:///path/to/tenure.db or postgresql://host/db",
                             code="bad-store-url")
