"""The PostgreSQL driver: a psycopg 3 pool, transactions and error mapping (the only user of ``psycopg``).

Connections run in autocommit mode and each transaction is an explicit
``BEGIN … COMMIT`` (``conn.transaction()``), so a transaction that returns
is committed. The control-plane store and the PostgreSQL object store each
open their own connector, over their own query files.

Opening checks the URL and makes one direct connection before the pool
starts, so a URL that can never work fails at once with the server's own
words instead of the pool retrying it until its timeout: a malformed URL is
``bad-store-url``, a missing database ``store-not-found``, an unknown role
or a refused login ``store-auth`` (all configuration, exit 2); a server that
cannot be reached is ``store-unreachable`` (exit 5, retryable). libpq
reports connection failures without a SQLSTATE, so they are told apart by
the server's (English) message; a server that answers in another language
still gets its message shown, under ``store-unreachable``.

The pool runs no statement of its own per checkout (no ``check``, ``configure``
or ``reset`` callback), so a transaction is one ``BEGIN … COMMIT`` on the
server and the connector's :class:`~tenure.store.connector.Counts` match the
server's ``pg_stat_database`` (``tests/integration/test_bring_transactions.py``).

Once open, a transaction waits for a pooled connection up to
:data:`CHECKOUT_TIMEOUT_S`, but only while the server answers: after an
attempt to connect failed (the pool reconnects in the background), it gives
up within about a second with ``store-unavailable`` (retryable), so a process
cut off from its store answers its own callers at once and recovers by itself
when the server is back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from tenure.errors import ConfigurationError, InvalidInputError, StoreError, TenureError, VersionConflictError
from tenure.store.connector import BaseTx, Counted, Counts, Row, Statements
from tenure.store.queries import STORE, Queries, load


class PostgresTx(BaseTx):
    dialect = "postgres"

    def __init__(self, conn: Any, statements: Statements, counts: Counts | None = None) -> None:
        super().__init__(statements, counts)
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

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested ``conn.transaction()``: ``SAVEPOINT`` … ``RELEASE``, rolled back to on an error."""
        import psycopg

        try:
            with self.conn.transaction():
                yield
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc


def _map_postgres(exc: Exception) -> Exception:
    import psycopg
    import psycopg.errors as pe

    if isinstance(exc, psycopg.DataError):
        return InvalidInputError(
            f"the store cannot hold this value: {exc}".strip(),
            code="invalid-input",
            hint="names and values must be plain text without NUL characters",
        )
    if isinstance(exc, (pe.UniqueViolation, pe.SerializationFailure, pe.DeadlockDetected)):
        return VersionConflictError(f"concurrent change: {exc}".strip())
    if isinstance(exc, pe.OperationalError):
        return StoreError(f"PostgreSQL is unreachable: {exc}".strip())
    return StoreError(f"PostgreSQL error: {exc}".strip(), code="store-error")


#: Seconds a connection attempt may take when the URL sets no ``connect_timeout``.
CONNECT_TIMEOUT_S = 10
#: Seconds a transaction waits for a pooled connection (every one busy, or the pool reconnecting).
CHECKOUT_TIMEOUT_S = 10.0
#: The same while the pool's last attempt to reach the server failed: a process cut off from its store
#: answers ``store-unavailable`` in about a second instead of holding every caller for the full wait.
UNREACHABLE_CHECKOUT_S = 1.0

_NOT_FOUND = re.compile(r'database "[^"]*" does not exist')
_AUTH = re.compile(
    r'role "[^"]*" does not exist|password authentication failed|authentication failed'
    r"|no pg_hba\.conf entry|no password supplied|permission denied for database"
    r"|is not permitted to log in"
)
_BAD_URL = re.compile(
    r"invalid (?:port number|integer value|connection option|sslmode value|URI)"
    r'|invalid value for parameter|unrecognized configuration parameter|missing "="'
)


def _connect_error(exc: Exception, url: str) -> TenureError:
    """A failed first connection → tenure's error, with the server's (or libpq's) own reason."""
    import psycopg

    reason = " ".join(str(exc).split())
    where = _redact(url)
    if isinstance(exc, psycopg.ProgrammingError) or _BAD_URL.search(reason):
        return ConfigurationError(
            f"invalid PostgreSQL URL {where}: {reason}",
            code="bad-store-url",
            hint="write it as postgresql://USER@HOST:PORT/DATABASE[?option=value…]",
        )
    if _NOT_FOUND.search(reason):
        return ConfigurationError(
            f"PostgreSQL at {where} has no such database: {reason}",
            code="store-not-found",
            hint="create the database (createdb NAME) or fix its name in the URL",
        )
    if _AUTH.search(reason):
        return ConfigurationError(
            f"PostgreSQL at {where} refused the login: {reason}",
            code="store-auth",
            hint="check the user and password in the URL (or PGPASSWORD, ~/.pgpass) and the server's pg_hba.conf",
        )
    return StoreError(
        f"cannot connect to PostgreSQL at {where}: {reason}",
        code="store-unreachable",
        hint="check that the server runs and accepts connections at that host and port, then retry",
    )


def _probe(url: str) -> None:
    """One direct connection: raises tenure's error for a URL that cannot work."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        options = conninfo_to_dict(url)
        timeout = {} if "connect_timeout" in options else {"connect_timeout": CONNECT_TIMEOUT_S}
        psycopg.connect(url, autocommit=True, **timeout).close()  # type: ignore[arg-type]
    except psycopg.Error as exc:
        raise _connect_error(exc, url) from exc


class PostgresConnector(Counted):
    """A psycopg 3 connection pool."""

    dialect = "postgres"

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8, queries: Queries | None = None) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self.queries = queries if queries is not None else load(STORE)
        self._statements = Statements(self.queries, self.dialect)
        #: transactions and statements run so far (tests and benchmarks; tenure.store.connector.Counts)
        self.counts = Counts()
        _probe(url)
        #: False from a failed attempt to reach the server until the next one succeeds
        self.reachable = True
        connector = self

        class _Watched(psycopg.Connection[Any]):
            """A pooled connection whose every connection attempt tells the connector whether the server answered."""

            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
                try:
                    conn = super().connect(conninfo, **kwargs)
                except psycopg.Error:
                    connector.reachable = False
                    raise
                connector.reachable = True
                return conn

        pool = None
        try:
            pool = ConnectionPool(
                url,
                connection_class=_Watched,
                min_size=min_size,
                max_size=max_size,
                open=True,
                kwargs={"autocommit": True},
                timeout=CHECKOUT_TIMEOUT_S,
                name="tenure",
                # no health-check query per checkout (nor a configure or reset one): each transaction is
                # exactly one BEGIN … COMMIT on the server, as `counts` says; a connection that broke is
                # found by the statement that uses it (store-unavailable, retryable) and the pool replaces it
                check=None,
                configure=None,
                reset=None,
            )
            pool.wait(timeout=10)
        except (psycopg.Error, Exception) as exc:
            if pool is not None:
                pool.close()
            raise StoreError(
                f"cannot connect to PostgreSQL at {_redact(url)}: {exc}", code="store-unreachable"
            ) from exc
        self.pool = pool

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[PostgresTx]:
        import psycopg

        self.counts.transaction()
        try:
            conn = self._checkout()
            try:
                with conn, conn.transaction():
                    yield PostgresTx(conn, self._statements, self.counts)
            finally:
                self.pool.putconn(conn)
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc

    def _checkout(self) -> Any:
        """A pooled connection, waited for up to :data:`CHECKOUT_TIMEOUT_S` — or only until an attempt to
        reach the server fails (:data:`UNREACHABLE_CHECKOUT_S` slices), so a cut-off process fails fast.
        Either way the caller gets ``store-unavailable`` (retryable), never the pool's own ``PoolTimeout``."""
        from psycopg_pool import PoolTimeout

        deadline = time.monotonic() + CHECKOUT_TIMEOUT_S
        while True:
            wait = max(0.05, min(UNREACHABLE_CHECKOUT_S, deadline - time.monotonic()))
            try:
                return self.pool.getconn(timeout=wait)
            except PoolTimeout:
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"no pooled connection to PostgreSQL at {_redact(self.url)} was free within"
                        f" {CHECKOUT_TIMEOUT_S:g} s: all {self.pool.max_size} are busy",
                        hint="retry; if it lasts, fewer requests at once (or a larger pool) are needed",
                    ) from None
                if not self.reachable:
                    raise StoreError(
                        f"PostgreSQL is unreachable: no connection is free and the last attempt to connect to"
                        f" {_redact(self.url)} failed (the pool keeps trying)"
                    ) from None

    def sql_transaction(self, *, write: bool = True) -> AbstractContextManager[PostgresTx]:
        """The same transaction; typed to also run SQL text as written (see :mod:`tenure.store.connector`)."""
        return self.transaction(write=write)

    def close(self) -> None:
        self.pool.close()


def _redact(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)
