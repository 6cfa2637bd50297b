"""The SQLite driver: connections, transactions and error mapping (the only user of ``sqlite3``).

Settings (see docs/adr/0002-sqlite-durability.md): WAL journal,
``synchronous=FULL`` so a committed transaction survives power loss,
``busy_timeout`` so writers queue instead of failing, and every write
transaction opened with ``BEGIN IMMEDIATE`` so two writers never deadlock on
a lock upgrade. The pragmas and transaction control below are driver
settings, not queries.
"""

from __future__ import annotations

import os
import resource
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from tenure.errors import ConfigurationError, StoreError, VersionConflictError
from tenure.store.connector import (
    BaseTx,
    Counted,
    Counts,
    Row,
    Statements,
    StoreCorruptError,
    StoreFullError,
    StoreReadOnlyError,
)
from tenure.store.queries import STORE, Queries, load


class SqliteTx(BaseTx):
    dialect = "sqlite"

    def __init__(
        self, conn: sqlite3.Connection, statements: Statements, path: str = "", counts: Counts | None = None
    ) -> None:
        super().__init__(statements, counts)
        self.conn = conn
        self.path = path

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Row]:
        try:
            cur = self.conn.execute(sql, params)
            rows = cur.fetchall()
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path) from exc
        if cur.description is None:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in rows]

    def _rowcount(self, sql: str, params: dict[str, Any]) -> int:
        try:
            return int(self.conn.execute(sql, params).rowcount)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path) from exc

    def _many(self, sql: str, rows: list[dict[str, Any]]) -> None:
        try:
            self.conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path) from exc

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """``SAVEPOINT`` … ``RELEASE``; an error inside rolls back to the savepoint first (then propagates)."""
        self._control("SAVEPOINT tenure_part")
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:  # after a full disk or I/O error SQLite has rolled back everything
                try:
                    self.conn.execute("ROLLBACK TO tenure_part")
                    self.conn.execute("RELEASE tenure_part")
                except sqlite3.Error:
                    pass  # the error that got us here is the one to report
            raise
        self._control("RELEASE tenure_part")

    def _control(self, command: str) -> None:
        try:
            self.conn.execute(command)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path) from exc


#: SQLite's primary result codes that tenure tells apart (https://sqlite.org/rescode.html).
_BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 10, 11, 13, 14, 26


def _map_sqlite(exc: sqlite3.Error, path: str = "") -> Exception:
    """The one translation of a ``sqlite3`` error into tenure's errors (by SQLite's result code)."""
    primary = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    where = f" {path}" if path else ""
    if isinstance(exc, sqlite3.IntegrityError):
        return VersionConflictError(f"store constraint violated: {exc}")
    if primary in (_BUSY, _LOCKED):
        return StoreError(f"store is busy: {exc}")
    if primary in (_CORRUPT, _NOTADB):
        return StoreCorruptError(f"the SQLite store{where} is damaged or not a database: {exc}", path=path)
    if primary == _READONLY:
        return StoreReadOnlyError(f"the SQLite store{where} cannot be written: {exc}", path=path)
    if primary == _FULL:
        return StoreFullError(f"no space left for the SQLite store{where}: {exc}", path=path)
    full = _out_of_space(path) if primary == _IOERR else None
    if full:
        return StoreFullError(f"no space left for the SQLite store{where}: {exc} ({full})", path=path)
    if primary == _CANTOPEN:
        return ConfigurationError(
            f"cannot open the SQLite store{where}: {exc}{_why_unopenable(path)}",
            code="store-unreachable",
            path=path,
            hint="check --db / TENURE_DB and that the folder exists and is accessible",
        )
    return StoreError(f"store error: {exc}", code="store-error")


#: Less than this much room left counts as full (SQLite writes a page and its WAL frame at a time).
_SLACK = 64 * 1024


def _out_of_space(path: str) -> str | None:
    """Why a write failed for want of room, if it did (SQLite reports only ENOSPC as "full" itself).

    A quota (EDQUOT) or a file-size limit (EFBIG, ``ulimit -f``) reaches SQLite
    as a plain I/O error; tell those apart from a failing disk by looking.
    """
    if not path:
        return None
    try:
        fs = os.statvfs(os.path.dirname(os.path.abspath(path)))
        if fs.f_bavail * fs.f_frsize < _SLACK:
            return "the file system is full"
    except OSError:
        pass
    limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit != resource.RLIM_INFINITY:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                size = os.path.getsize(path + suffix)
            except OSError:
                continue
            if size + _SLACK >= limit:
                return f"the file-size limit of this process (ulimit -f) of {limit} bytes is reached"
    return None


def _why_unopenable(path: str) -> str:
    """What stands in the way of opening ``path`` (a missing or inaccessible folder), if it can be told."""
    if not path:
        return ""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f" (folder {folder} does not exist)"
    if not os.access(folder, os.R_OK | os.X_OK):
        return f" (folder {folder} is not readable by this user)"
    if os.path.isdir(path):
        return f" ({path} is a folder)"
    return ""


class SqliteConnector(Counted):
    """One connection per thread to a SQLite file (WAL, synchronous=FULL)."""

    dialect = "sqlite"

    def __init__(self, path: str, *, busy_timeout_ms: int = 30000, queries: Queries | None = None) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.busy_timeout_ms = busy_timeout_ms
        self.queries = queries if queries is not None else load(STORE)
        self._statements = Statements(self.queries, self.dialect)
        self._local = threading.local()
        #: transactions and statements run so far (tests and benchmarks; tenure.store.connector.Counts)
        self.counts = Counts()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        """A connection with tenure's settings; the settings fail like any statement (corrupt, read-only, full)."""
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout_ms / 1000
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise _map_sqlite(exc, self.path) from exc
        return conn

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[SqliteTx]:
        self.counts.transaction()
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path) from exc
        try:
            yield SqliteTx(conn, self._statements, self.path, self.counts)
        except BaseException:
            _rollback(conn)
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(conn)
                raise _map_sqlite(exc, self.path) from exc

    def sql_transaction(self, *, write: bool = True) -> AbstractContextManager[SqliteTx]:
        """The same transaction; typed to also run SQL text as written (see :mod:`tenure.store.connector`)."""
        return self.transaction(write=write)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is still open; SQLite has already rolled back after a full disk or I/O error."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the error that got us here is the one to report
