"""The PostgreSQL driver: a psycopg 3 pool, transactions, limits and error mapping (the only user of ``psycopg``).

Connections run in autocommit mode and each transaction is an explicit
``BEGIN … COMMIT`` sent by the connector, so a transaction that returns is
committed. The control-plane store and the PostgreSQL object store each open
their own connector, over their own query files.

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

**Limits** (ADR 0045, :class:`PgSettings`; ``TENURE_PG_*`` variables, and
whatever the URL sets itself wins). Every connection is opened with
``connect_timeout``, TCP keepalives and ``tcp_user_timeout`` (libpq), and
with ``statement_timeout``, ``lock_timeout``,
``idle_in_transaction_session_timeout`` and the server's own keepalives and
``tcp_user_timeout`` as startup options (``-c name=value`` in ``options``:
no statement, so the counts above still hold). A statement of
:data:`LONG_RUNNING` (GC, migrations, whole-table sweeps) raises the
statement and lock limits to ``long_statement_timeout`` for the rest of its
transaction (``SET LOCAL``); one of :data:`HELD_OPEN` (a GC batch, which
holds the GC lock while it deletes objects) raises the idle limit too.

The client does not trust the server to enforce them: a request the peer
has not answered within its limit — ``tcp_user_timeout`` for ``BEGIN`` and
``ROLLBACK``, the statement's ``statement_timeout`` plus that for a
statement or ``COMMIT`` — has its socket shut down (:class:`_Watchdog`), as
a peer that stopped answering (a partition, a paused host, a proxy that
stopped forwarding) would otherwise hold the caller forever. Every limit
reached surfaces as ``store-unavailable`` (retryable), never as a hang.

**Dead connections.** A pooled connection that turns out dead at ``BEGIN``
(the server restarted, a proxy or NAT dropped it, the server ended it) is
discarded with every idle one made before it, and the transaction begins
again once on a fresh connection — nothing has run yet, so any transaction
may. A read-only transaction (``write=False``) whose first statement finds
its connection dead runs it again the same way.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from tenure.errors import ConfigurationError, InvalidInputError, StoreError, TenureError, VersionConflictError
from tenure.faults import pause_if_triggered
from tenure.store.connector import BaseTx, Counted, Counts, Row, Statements
from tenure.store.queries import STORE, Queries, load

#: named statements after which a fault run may stop the process inside the open transaction
#: (``TENURE_PAUSE_AFTER_STATEMENT``, comma-separated; see :func:`tenure.faults.pause_if_triggered`)
_PAUSE_AFTER = frozenset(filter(None, os.environ.get("TENURE_PAUSE_AFTER_STATEMENT", "").split(",")))

R = TypeVar("R")

#: Seconds a connection attempt may take unless the URL or ``TENURE_PG_CONNECT_TIMEOUT`` says otherwise.
CONNECT_TIMEOUT_S = 10
#: Seconds a transaction waits for a pooled connection (every one busy, or the pool reconnecting).
CHECKOUT_TIMEOUT_S = 10.0
#: The same while the pool's last attempt to reach the server failed: a process cut off from its store
#: answers ``store-unavailable`` in about a second instead of holding every caller for the full wait.
UNREACHABLE_CHECKOUT_S = 1.0

#: Statements that legitimately run, or wait, long (query names of the store and of the PostgreSQL object
#: store): their transaction gets ``long_statement_timeout`` as its statement and lock limits from there on.
LONG_RUNNING = frozenset(
    {
        # GC (tenure.store.snapshots): the GC lock waits behind a sweep batch or the pins; mark reads every root
        "gc_lock_shared",
        "gc_lock_exclusive",
        "gc_mark_roots",
        "gc_roots_since",
        "pin_objects_live",
        "pin_objects_delete_expired",
        "pins_delete_expired",
        "snapshots_collect_deleting",
        # migrations (tenure.store.migrate): serialized behind another migrator, then DDL on whole tables
        "migrations_lock",
        "migrations_table_create",
        # sweeps over whole tables
        "project_events_prune",
        "projects_rederive_owner_required",
        # the PostgreSQL object store, for the GC: every object listed, a batch deleted
        "objects_all",
        "objects_delete",
    }
)
#: Statements after which the transaction is legitimately idle for long (a GC sweep batch holds the GC lock
#: while it deletes objects from the object store): ``long_statement_timeout`` is its idle limit too.
HELD_OPEN = frozenset({"gc_lock_exclusive"})

#: The prefix of the environment variables that set :class:`PgSettings`.
ENV_PREFIX = "TENURE_PG_"


@dataclass(frozen=True)
class PgSettings:
    """The limits of every PostgreSQL connection, in seconds (``keepalives_count`` a number); 0 turns one off.

    Each field is read from ``TENURE_PG_<FIELD>`` (:meth:`from_env`). A parameter the store URL sets
    itself wins: libpq's (``connect_timeout``, ``keepalives*``, ``tcp_user_timeout``) and a ``-c name=value``
    in its ``options`` (``statement_timeout``, ``lock_timeout``, ``idle_in_transaction_session_timeout``).
    The defaults find a dead peer within about five seconds, end a paused client's open transaction within
    half a lease TTL (10 s, ADR 0050), and leave ordinary statements, all in milliseconds, a wide margin.
    """

    #: libpq ``connect_timeout``: whole seconds, at least 2
    connect_timeout: float = float(CONNECT_TIMEOUT_S)
    #: server ``statement_timeout`` of every statement
    statement_timeout: float = 30.0
    #: statement and lock limit of :data:`LONG_RUNNING`, idle limit of :data:`HELD_OPEN`
    long_statement_timeout: float = 600.0
    #: server ``lock_timeout``: the longest wait for a row or table lock
    lock_timeout: float = 3.0
    #: server ``idle_in_transaction_session_timeout``: a client silent this long inside a transaction is
    #: disconnected and its locks released (keep it well below the lease TTL)
    idle_in_transaction_timeout: float = 5.0
    #: TCP keepalives, both ends: first probe after this much silence (whole seconds)
    keepalives_idle: float = 2.0
    #: … then one probe every this many seconds (whole seconds)
    keepalives_interval: float = 1.0
    #: … and the connection is dead after this many unanswered ones
    keepalives_count: int = 3
    #: TCP_USER_TIMEOUT, both ends: sent data unacknowledged this long ends the connection; also how long the
    #: client waits for the answer to BEGIN or ROLLBACK, and beyond statement_timeout for a statement
    tcp_user_timeout: float = 5.0
    #: send the server limits as startup ``options`` (off behind a pooler that refuses them: set them on the
    #: role instead, ``ALTER ROLE … SET``); the client-side limits apply either way
    session_options: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PgSettings:
        """The defaults, with every ``TENURE_PG_<FIELD>`` that is set; a bad value is ``configuration``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = ENV_PREFIX + f.name.upper()
            raw = env.get(name, "").strip()
            if raw:
                values[f.name] = _setting(name, raw, getattr(cls, f.name))
        return cls(**values)

    # ------------------------------------------------------------------ what they become

    def server_options(self) -> dict[str, int]:
        """The server settings these limits send (``-c name=value``): milliseconds or whole seconds."""
        return {
            "statement_timeout": _ms(self.statement_timeout),
            "lock_timeout": _ms(self.lock_timeout),
            "idle_in_transaction_session_timeout": _ms(self.idle_in_transaction_timeout),
            "tcp_keepalives_idle": _whole(self.keepalives_idle),
            "tcp_keepalives_interval": _whole(self.keepalives_interval),
            "tcp_keepalives_count": int(self.keepalives_count),
            "tcp_user_timeout": _ms(self.tcp_user_timeout),
        }

    def libpq_params(self) -> dict[str, int]:
        """The libpq connection parameters these limits set."""
        return {
            "connect_timeout": math.ceil(self.connect_timeout),
            "keepalives": 1,
            "keepalives_idle": _whole(self.keepalives_idle),
            "keepalives_interval": _whole(self.keepalives_interval),
            "keepalives_count": int(self.keepalives_count),
            "tcp_user_timeout": _ms(self.tcp_user_timeout),
        }

    def conninfo(self, url: str) -> tuple[str, PgSettings]:
        """The connection string for ``url`` under these limits, and the limits in effect (the URL's win).

        Raises psycopg's ``ProgrammingError`` for a malformed URL."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        given = conninfo_to_dict(url)
        effective = self
        extra: dict[str, Any] = {}
        for key, value in self.libpq_params().items():
            if key not in given:
                extra[key] = value
            elif key == "connect_timeout":
                effective = replace(effective, connect_timeout=_number(given[key], 1.0, effective.connect_timeout))
            elif key == "tcp_user_timeout":
                effective = replace(effective, tcp_user_timeout=_number(given[key], 1e-3, effective.tcp_user_timeout))
        if self.session_options:
            theirs = str(given.get("options") or os.environ.get("PGOPTIONS", "")).strip()
            ours = " ".join(f"-c {key}={value}" for key, value in self.server_options().items())
            extra["options"] = f"{ours} {theirs}".strip()  # a later -c wins: the URL's own settings
            effective = effective._with_options(theirs)
        return make_conninfo(url, **extra), effective

    def _with_options(self, options: str) -> PgSettings:
        """These limits as the ``-c`` settings of ``options`` change them."""
        named = {
            "statement_timeout": "statement_timeout",
            "lock_timeout": "lock_timeout",
            "idle_in_transaction_session_timeout": "idle_in_transaction_timeout",
        }
        changed: dict[str, Any] = {}
        for key, value in re.findall(r"(?:-c\s*|--)([a-z_]+)=(\S+)", options):
            if key in named:
                changed[named[key]] = _duration(value, getattr(self, named[key]))
        return replace(self, **changed)

    @property
    def answer_s(self) -> float | None:
        """How long the client waits for the answer to a request that takes the server no time (BEGIN)."""
        return self.tcp_user_timeout if self.tcp_user_timeout > 0 else None

    def deadline(self, statement_timeout: float, statements: int = 1) -> float | None:
        """How long the client waits for ``statements`` statements of that server limit before it gives up."""
        if statement_timeout <= 0:
            return None
        return statement_timeout * max(1, statements) + (self.answer_s or 1.0)


def _setting(name: str, raw: str, default: Any) -> Any:
    """``raw`` as the type of ``default``; a value that is not one is refused, naming the variable."""
    try:
        if isinstance(default, bool):
            lowered = raw.lower()
            if lowered in ("1", "on", "true", "yes"):
                return True
            if lowered in ("0", "off", "false", "no"):
                return False
            raise ValueError(raw)
        value = int(raw) if isinstance(default, int) else float(raw)
        if not math.isfinite(value) or value < 0:
            raise ValueError(raw)
        return value
    except ValueError:
        kind = "on or off" if isinstance(default, bool) else "a number of seconds (0: off)"
        if isinstance(default, int) and not isinstance(default, bool):
            kind = "a whole number"
        raise ConfigurationError(
            f"{name}={raw!r} is not {kind}",
            code="configuration",
            hint=f"unset {name} (default {default}) or set it to {kind}; see docs/operations.md",
        ) from None


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _whole(seconds: float) -> int:
    return 0 if seconds <= 0 else max(1, round(seconds))


def _number(value: Any, unit: float, fallback: float) -> float:
    try:
        return float(value) * unit
    except (TypeError, ValueError):
        return fallback


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(value: str, fallback: float) -> float:
    """A server time setting (``5000``, ``5s``, ``1min``; a bare number is milliseconds) in seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", value.strip("'\""))
    if found is None or found.group(2) not in ("", *_UNITS):
        return fallback
    return float(found.group(1)) * _UNITS.get(found.group(2) or "ms", 1e-3)


# ---------------------------------------------------------------------- the watchdog


class _Watchdog:
    """Shuts down the socket of a connection whose request outlived its deadline (one thread per process).

    A request is armed for the time it waits on the server (psycopg's ``Connection.wait``) and disarmed when
    it returns; the thread sleeps until the earliest deadline and wakes only when an earlier one is armed.
    Shutting the socket down wakes the waiting driver at once with a connection error, and the connection
    is then discarded: a peer that stopped answering can never hold a caller past the deadline.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, int]] = {}
        self._fired: set[int] = set()
        self._tokens = itertools.count()
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> int:
        token = next(self._tokens)
        deadline = time.monotonic() + seconds
        with self._cond:
            self._armed[token] = (deadline, fd)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tenure-pg-watchdog", daemon=True)
                self._thread.start()
            if deadline < self._wake_at:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Whether it fired: the connection was shut down because its request outlived its deadline."""
        with self._cond:
            self._armed.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
            return False

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token in [t for t, (deadline, _) in self._armed.items() if deadline <= now]:
                    _, fd = self._armed.pop(token)
                    self._fired.add(token)
                    _shutdown(fd)
                self._wake_at = min((deadline for deadline, _ in self._armed.values()), default=math.inf)
                self._cond.wait(None if self._wake_at == math.inf else max(0.0, self._wake_at - now))


def _shutdown(fd: int) -> None:
    """Shut the socket ``fd`` down in both directions (its owner keeps the descriptor)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


_WATCHDOG = _Watchdog()


@contextmanager
def _deadline(conn: Any, seconds: float | None) -> Iterator[None]:
    """Requests on ``conn`` inside the block wait at most ``seconds`` for their answer (None: no limit)."""
    before = getattr(conn, "tenure_deadline", None)
    conn.tenure_deadline = seconds
    try:
        yield
    finally:
        conn.tenure_deadline = before


def _lost(conn: Any) -> bool:
    """Whether ``conn`` can no longer be used (closed, or its connection broke)."""
    return bool(conn.closed)


# ---------------------------------------------------------------------- transactions


class PostgresTx(BaseTx):
    dialect = "postgres"

    def __init__(
        self,
        conn: Any,
        statements: Statements,
        counts: Counts | None = None,
        *,
        connector: PostgresConnector | None = None,
        retry: bool = False,
    ) -> None:
        super().__init__(statements, counts)
        self.conn = conn
        self._connector = connector
        #: a read-only transaction before its first statement: a dead connection is replaced, the statement run again
        self._retry = retry and connector is not None
        self._query: str | None = None
        #: the statement and lock limits are raised (LONG_RUNNING), the idle limit too (HELD_OPEN)
        self._long = False
        self._held = False

    # the named-query methods remember the name, for the statement's class (LONG_RUNNING, HELD_OPEN)

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self._query = query
        try:
            return super().execute(query, params)
        finally:
            self._query = None

    def count(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        self._query = query
        try:
            return super().count(query, params)
        finally:
            self._query = None

    def executemany(self, query: str, rows: Any) -> None:
        self._query = query
        try:
            super().executemany(query, rows)
        finally:
            self._query = None

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Row]:
        def run(conn: Any) -> list[Row]:
            cur = conn.execute(sql, params)
            if cur.description is None:
                return []
            names = [d.name for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

        return self._run(run)

    def _rowcount(self, sql: str, params: dict[str, Any]) -> int:
        return self._run(lambda conn: int(conn.execute(sql, params).rowcount))

    def _many(self, sql: str, rows: list[dict[str, Any]]) -> None:
        def run(conn: Any) -> None:
            with conn.cursor() as cur:
                cur.executemany(sql, rows)

        self._run(run, len(rows))

    def _run(self, work: Callable[[Any], R], statements: int = 1) -> R:
        """``work(conn)`` under the statement's limits; a read-only transaction's first one is run again on
        a fresh connection if its own turns out dead."""
        import psycopg

        name = self._query
        retry, self._retry = self._retry, False
        while True:
            try:
                self._limit(name)
                with _deadline(self.conn, self._statement_deadline(statements)):
                    done = work(self.conn)
                if name is not None and name in _PAUSE_AFTER:
                    pause_if_triggered()  # a fault run: stop here, inside this transaction (tenure.faults)
                return done
            except psycopg.Error as exc:
                if retry and self._connector is not None and _lost(self.conn):
                    retry = False
                    dead, self.conn = self.conn, None  # back in the pool whatever _replace does
                    self.conn = self._connector._replace(dead)
                    self._long = self._held = False
                    continue
                raise _map_postgres(exc, self.conn) from exc

    def _limit(self, name: str | None) -> None:
        """Raise this transaction's limits for a statement that legitimately runs (or idles) long."""
        if self._connector is None or name is None:
            return
        settings = self._connector.settings
        long_ms = _ms(settings.long_statement_timeout)
        sets = []
        if name in LONG_RUNNING and not self._long:
            sets += [f"SET LOCAL statement_timeout = {long_ms}", f"SET LOCAL lock_timeout = {long_ms}"]
        if name in HELD_OPEN and not self._held:
            sets.append(f"SET LOCAL idle_in_transaction_session_timeout = {long_ms}")
        if sets:
            with _deadline(self.conn, settings.answer_s):
                self.conn.execute("; ".join(sets))  # driver settings, like BEGIN: not a statement of the caller's
            self._long = self._long or name in LONG_RUNNING
            self._held = self._held or name in HELD_OPEN

    def _statement_deadline(self, statements: int = 1) -> float | None:
        if self._connector is None:
            return None
        settings = self._connector.settings
        limit = settings.long_statement_timeout if self._long else settings.statement_timeout
        return settings.deadline(limit, statements)

    @property
    def commit_deadline(self) -> float | None:
        return self._statement_deadline()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested ``conn.transaction()``: ``SAVEPOINT`` … ``RELEASE``, rolled back to on an error."""
        import psycopg

        self._retry = False
        try:
            with self.conn.transaction():
                yield
        except psycopg.Error as exc:
            raise _map_postgres(exc) from exc


def _map_postgres(exc: Exception, conn: Any = None) -> Exception:
    """The one translation of a psycopg error; ``conn``: the connection it came from, if known (an error that
    left it lost is ``store-unavailable`` whatever its SQLSTATE)."""
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
    if isinstance(exc, pe.LockNotAvailable):
        return StoreError(
            f"PostgreSQL gave up waiting for a lock another transaction holds (lock_timeout): {exc}".strip(),
            hint="retry; a transaction that holds it for long is ended by idle_in_transaction_session_timeout",
        )
    if isinstance(exc, pe.QueryCanceled):
        return StoreError(
            f"PostgreSQL canceled a statement (statement_timeout, or canceled by hand): {exc}".strip(),
            hint="retry; if it lasts, the server is overloaded or TENURE_PG_STATEMENT_TIMEOUT is too short",
        )
    no_answer = getattr(exc, "tenure_no_answer", None)
    if no_answer is not None:
        return StoreError(
            f"PostgreSQL sent no answer within {no_answer:g} s; the connection was dropped".strip(),
            hint="check the server and the network to it, then retry (TENURE_PG_* set the limits)",
        )
    if isinstance(exc, pe.IdleInTransactionSessionTimeout):
        return StoreError(
            f"PostgreSQL ended a transaction left idle past idle_in_transaction_session_timeout: {exc}".strip(),
            hint="retry; the transaction was rolled back",
        )
    if isinstance(exc, pe.OperationalError) or (conn is not None and _lost(conn)):
        return StoreError(f"PostgreSQL is unreachable: {exc}".strip())
    return StoreError(f"PostgreSQL error: {exc}".strip(), code="store-error")


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


def _probe(url: str, conninfo: str) -> None:
    """One direct connection, with the pool's settings: raises tenure's error for a URL that cannot work."""
    import psycopg

    try:
        psycopg.connect(conninfo, autocommit=True).close()
    except psycopg.Error as exc:
        raise _connect_error(exc, url) from exc


class PostgresConnector(Counted):
    """A psycopg 3 connection pool, every connection under :class:`PgSettings`."""

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        queries: Queries | None = None,
        settings: PgSettings | None = None,
    ) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self.queries = queries if queries is not None else load(STORE)
        self._statements = Statements(self.queries, self.dialect)
        #: transactions and statements run so far (tests and benchmarks; tenure.store.connector.Counts)
        self.counts = Counts()
        wanted = settings if settings is not None else PgSettings.from_env()
        try:
            conninfo, effective = wanted.conninfo(url)
        except psycopg.Error as exc:
            raise _connect_error(exc, url) from exc
        #: the limits in effect on every connection (the URL's own settings applied)
        self.settings = effective
        _probe(url, conninfo)
        #: False from a failed attempt to reach the server until the next one succeeds
        self.reachable = True
        connector = self

        class _Watched(psycopg.Connection[Any]):
            """A pooled connection: its every connection attempt tells the connector whether the server
            answered, and its every request waits for its answer at most ``tenure_deadline`` seconds."""

            tenure_deadline: float | None = effective.answer_s

            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
                try:
                    conn = super().connect(conninfo, **kwargs)
                except psycopg.Error:
                    connector.reachable = False
                    raise
                connector.reachable = True
                return conn

            def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
                seconds = self.tenure_deadline
                if seconds is None or self.closed:
                    return super().wait(gen, *args, **kwargs)
                token = _WATCHDOG.arm(self.pgconn.socket, seconds)
                try:
                    result = super().wait(gen, *args, **kwargs)
                except BaseException as exc:
                    if _WATCHDOG.disarm(token):
                        dropped = psycopg.OperationalError(f"no answer within {seconds:g} s: connection dropped")
                        dropped.tenure_no_answer = seconds  # type: ignore[attr-defined]
                        raise dropped from exc
                    raise
                _WATCHDOG.disarm(token)  # fired as the answer came: the next request finds the connection gone
                return result

        pool = None
        try:
            pool = ConnectionPool(
                conninfo,
                connection_class=_Watched,
                min_size=min_size,
                max_size=max_size,
                open=True,
                kwargs={"autocommit": True},
                timeout=CHECKOUT_TIMEOUT_S,
                name="tenure",
                # no health-check query per checkout (nor a configure or reset one): each transaction is
                # exactly one BEGIN … COMMIT on the server, as `counts` says; a connection that broke is
                # found by the BEGIN that uses it, replaced, and the transaction begun again (see _begin)
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
        tx = PostgresTx(self._begin(), self._statements, self.counts, connector=self, retry=not write)
        try:
            yield tx
        except BaseException as exc:
            self._end(tx.conn, commit=False)
            if isinstance(exc, psycopg.Error):
                raise _map_postgres(exc) from exc
            raise
        self._end(tx.conn, commit=True, deadline=tx.commit_deadline)

    def _begin(self) -> Any:
        """A pooled connection in a new transaction; one found dead is replaced and the BEGIN sent again."""
        import psycopg

        conn = self._checkout()
        try:
            with _deadline(conn, self.settings.answer_s):
                conn.execute("BEGIN")
            return conn
        except psycopg.Error as exc:
            if not _lost(conn):
                self._release(conn)
                raise _map_postgres(exc, conn) from exc
        return self._replace(conn)

    def _replace(self, dead: Any) -> Any:
        """A fresh connection in a new transaction instead of ``dead``: every idle connection made before it
        is dropped too (a restarted server or a dropped route ends them all), so none of them is used again."""
        import psycopg

        self._release(dead)
        drain = getattr(self.pool, "drain", None)  # psycopg_pool ≥ 3.2.2; check() tests each one otherwise
        if drain is not None:
            drain()
        else:
            self.pool.check()
        conn = self._checkout()
        try:
            with _deadline(conn, self.settings.answer_s):
                conn.execute("BEGIN")
            return conn
        except psycopg.Error as exc:
            self._release(conn)
            raise _map_postgres(exc, conn) from exc

    def _end(self, conn: Any, *, commit: bool, deadline: float | None = None) -> None:
        """COMMIT (waiting up to ``deadline``) or ROLLBACK the transaction on ``conn``; give ``conn`` back.
        ``conn`` is None when a dead connection could not be replaced (it is back in the pool already)."""
        import psycopg
        from psycopg.pq import TransactionStatus

        if conn is None:
            return
        try:
            if commit:
                with _deadline(conn, deadline):
                    conn.execute("COMMIT")
            elif not _lost(conn) and conn.pgconn.transaction_status != TransactionStatus.IDLE:
                with _deadline(conn, self.settings.answer_s):
                    conn.execute("ROLLBACK")
        except psycopg.Error as exc:
            if commit:
                raise _map_postgres(exc, conn) from exc
            # a rollback that failed: the error that got the caller here is the one to report
        finally:
            self._release(conn)

    def _release(self, conn: Any) -> None:
        """Give ``conn`` back to the pool, which replaces it if it is lost."""
        if _lost(conn):
            conn.close()
        self.pool.putconn(conn)

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
