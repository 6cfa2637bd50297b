"""Transactions over named queries: the protocols, parameter translation, ``open_connector``.

Code above the connector never writes SQL. It names a block of its package's
query files (:mod:`tenure.store.queries`) and passes parameters::

    tx.execute("workspace_by_ref", {"r": ref})

The transaction looks the name up for its dialect, translates the ``:name``
parameters, the ``{now}`` store-clock placeholder and the ``{uuid}``
placeholder (a fresh random UUID, as text) once per statement, and binds the
values. A list value is a list parameter: PostgreSQL receives an
array (``= ANY(:ids)``), SQLite a JSON array
(``IN (SELECT value FROM json_each(:ids))``).

The drivers live in :mod:`tenure.store.sqlite` and :mod:`tenure.store.postgres`,
the only modules that touch ``sqlite3`` or ``psycopg``; each maps every driver
and operating-system error at that boundary — opening and the connection
settings included — to one of tenure's errors: a busy or lost connection to
:class:`~tenure.errors.StoreError` (retryable), a unique or serialization
failure to :class:`~tenure.errors.VersionConflictError`, and the faults a user
must fix to the classes below (``store-corrupt``, ``store-read-only``,
``disk-full``) or to a :class:`~tenure.errors.ConfigurationError`
(``bad-store-url``, ``store-auth``, ``store-not-found``). No driver exception
leaves a connector (docs/errors.md).

SQL text as written runs only through :meth:`Connector.sql_transaction`
(``SqlTx.execute_sql``): the migrator uses it for migration files, tests and
benchmarks for probing the database. Nothing in the package calls it
otherwise (``tests/unit/test_queries.py``).

Every connector counts what it runs (:class:`Counts`): ``transactions``
entered and ``statements`` sent through them, so tests and benchmarks can
hold a path to its number of round trips (``tests/integration/test_bring_transactions.py``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

from tenure.errors import ConfigurationError, StoreError
from tenure.store.queries import STORE, Queries, load

if TYPE_CHECKING:
    from tenure.store.postgres import PostgresConnector
    from tenure.store.sqlite import SqliteConnector

Row = dict[str, Any]
_PARAM = re.compile(r"(?<!:):([a-zA-Z_][a-zA-Z0-9_]*)")

SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
POSTGRES_NOW = "extract(epoch from clock_timestamp())::double precision"
#: A fresh random UUID as text: 16 random bytes in the 8-4-4-4-12 form (SQLite has no UUID function).
SQLITE_UUID = "lower(" + " || '-' || ".join(f"hex(randomblob({n}))" for n in (4, 2, 2, 2, 6)) + ")"
POSTGRES_UUID = "gen_random_uuid()::text"


class StoreCorruptError(StoreError):
    """The store's file is not a database, or its pages are damaged."""

    code = "store-corrupt"
    retryable = False
    default_hint = (
        "restore the database file from a backup (`sqlite3 FILE 'PRAGMA integrity_check'` shows"
        " the damage); tenure does not repair it"
    )


class StoreReadOnlyError(StoreError):
    """The store refuses writes: a read-only file, folder, mount or database."""

    code = "store-read-only"
    retryable = False
    default_hint = (
        "give this user write access to the database file and its folder (SQLite creates FILE-wal"
        " and FILE-shm beside it), or use a writable copy"
    )


class StoreFullError(StoreError):
    """The disk (or quota, or file-size limit) under the store is full."""

    code = "disk-full"
    http_status = 507  # as every disk-full
    default_hint = (
        "free space on the file system that holds the store (or raise the quota or `ulimit -f` that"
        " stopped the write), then retry"
    )


class Tx(Protocol):
    """One open transaction; every statement is named by its query."""

    dialect: str

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...

    def executemany(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None: ...

    def count(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Run a write statement and return how many rows it matched."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """A nested part of the transaction: an error inside undoes only what ran inside, then propagates
        (the transaction goes on once the caller catches it). Driver control, like ``BEGIN``: not a statement."""
        ...


class SqlTx(Tx, Protocol):
    """A transaction that also runs SQL text as written (migrations, tests)."""

    def execute_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...

    def count_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> int: ...


class Counts:
    """What a connector has run since it was opened (tests and benchmarks read it; thread-safe).

    ``transactions``: every ``transaction()`` / ``sql_transaction()`` entered, committed or rolled back
    (on PostgreSQL one ``BEGIN … COMMIT`` each, the server's own count; the pool runs no health-check
    queries of its own). ``statements``: every statement sent through one of them — a named query,
    SQL as written, or one ``executemany`` batch.
    """

    __slots__ = ("transactions", "statements", "_lock")

    def __init__(self) -> None:
        self.transactions = 0
        self.statements = 0
        self._lock = threading.Lock()

    def transaction(self) -> None:
        with self._lock:
            self.transactions += 1

    def statement(self) -> None:
        with self._lock:
            self.statements += 1


class Counted:
    """The two counters of a connector's :class:`Counts` as :class:`Connector` names them (the drivers' base)."""

    counts: Counts

    @property
    def transactions(self) -> int:
        return self.counts.transactions

    @property
    def statements(self) -> int:
        return self.counts.statements


class Connector(Protocol):
    url: str
    dialect: str
    queries: Queries
    counts: Counts

    @property
    def transactions(self) -> int:
        """Transactions entered so far (:class:`Counts`)."""
        ...

    @property
    def statements(self) -> int:
        """Statements sent so far (:class:`Counts`)."""
        ...

    def transaction(self, *, write: bool = True) -> AbstractContextManager[Tx]: ...

    def sql_transaction(self, *, write: bool = True) -> AbstractContextManager[SqlTx]: ...

    def close(self) -> None: ...


def translate(dialect: str, sql: str) -> str:
    """``:name`` parameters, ``{now}`` and ``{uuid}`` in the driver's form."""
    if dialect == "sqlite":
        return sql.replace("{now}", SQLITE_NOW).replace("{uuid}", SQLITE_UUID)
    if dialect == "postgres":
        return _PARAM.sub(
            r"%(\1)s", sql.replace("%", "%%").replace("{now}", POSTGRES_NOW).replace("{uuid}", POSTGRES_UUID)
        )
    raise ValueError(f"unknown SQL dialect {dialect!r}")


def bind(dialect: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Parameter values for the driver: lists become arrays (PostgreSQL) or JSON arrays (SQLite)."""
    out: dict[str, Any] = {}
    for key, value in (params or {}).items():
        if isinstance(value, (list, tuple, set, frozenset)):
            value = json.dumps(list(value)) if dialect == "sqlite" else list(value)
        out[key] = value
    return out


class Statements:
    """Query names → driver-ready SQL for one dialect, translated once."""

    def __init__(self, queries: Queries, dialect: str) -> None:
        self.queries = queries
        self.dialect = dialect
        self._cache: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        sql = self._cache.get(name)
        if sql is None:
            sql = self._cache[name] = translate(self.dialect, self.queries.sql(self.dialect, name))
        return sql


class BaseTx:
    """Named-query methods over three driver primitives (``_rows``, ``_rowcount``, ``_many``)."""

    dialect = ""

    def __init__(self, statements: Statements, counts: Counts | None = None) -> None:
        self.statements = statements
        self.counts = counts if counts is not None else Counts()

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self.counts.statement()
        return self._rows(self.statements(query), bind(self.dialect, params))

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        rows = self.execute(query, params)
        return rows[0] if rows else None

    def count(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        self.counts.statement()
        return self._rowcount(self.statements(query), bind(self.dialect, params))

    def executemany(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.counts.statement()
        self._many(self.statements(query), [bind(self.dialect, r) for r in rows])

    def execute_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self.counts.statement()
        return self._rows(translate(self.dialect, sql), bind(self.dialect, params))

    def count_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        self.counts.statement()
        return self._rowcount(translate(self.dialect, sql), bind(self.dialect, params))

    def savepoint(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Row]:
        raise NotImplementedError

    def _rowcount(self, sql: str, params: dict[str, Any]) -> int:
        raise NotImplementedError

    def _many(self, sql: str, rows: list[dict[str, Any]]) -> None:
        raise NotImplementedError


#: SQLite file names that are not files: each gives a throw-away database that vanishes on close.
_THROWAWAY = ("", ":memory:")


def _throwaway(path: str) -> bool:
    """Whether SQLite would open ``path`` as a database that is no file, one that vanishes on close.

    The plain names ``""`` and ``:memory:``, and every URI filename that
    means the same: SQLite reads a name that starts with ``file:`` as a URI
    whenever it was built to (``SQLITE_USE_URI``, as Python's usually is),
    whatever the caller asked, so ``file::memory:``, ``file:x?mode=memory``,
    ``file:x?vfs=memdb`` and ``file:`` (an empty name: a temporary file) are
    throw-away too. Percent-escapes are decoded first, as SQLite does.
    """
    if path.strip() in _THROWAWAY:
        return True
    if not path.startswith("file:"):
        return False
    name, _, query = path[len("file:") :].partition("#")[0].partition("?")
    if name.startswith("//"):  # an authority (empty or localhost), then the path
        _, slash, rest = name[2:].partition("/")
        name = slash + rest
    params = {tuple(unquote(part).lower() for part in pair.partition("=")[::2]) for pair in query.split("&")}
    return unquote(name).strip() in _THROWAWAY or bool(params & {("mode", "memory"), ("vfs", "memdb")})


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///PATH`` URL; a URL naming no file (a throw-away database) is refused.

    Refused too: every in-memory or temporary form a URI filename can take
    (see :func:`_throwaway`).
    """
    path = url[len("sqlite:///") :]
    if _throwaway(path):
        raise ConfigurationError(
            f"store URL {url!r} names no database file (SQLite would keep a throw-away database that vanishes"
            " when the command ends)",
            hint="name a file: sqlite:///relative/path.db or sqlite:////absolute/path.db",
            code="bad-store-url",
        )
    return path


def open_connector(url: str, queries: Queries | None = None) -> SqliteConnector | PostgresConnector:
    """A connector for ``url`` whose transactions run the named blocks of ``queries`` (default: the store's)."""
    chosen = queries if queries is not None else load(STORE)
    if url.startswith("sqlite:///"):
        from tenure.store.sqlite import SqliteConnector

        return SqliteConnector(sqlite_path(url), queries=chosen)
    if url.startswith(("postgresql://", "postgres://")):
        from tenure.store.postgres import PostgresConnector

        return PostgresConnector(url, queries=chosen)
    raise ConfigurationError(
        f"unsupported store URL {url!r}",
        hint="use sqlite:///path/to/tenure.db or postgresql://host/db",
        code="bad-store-url",
    )
