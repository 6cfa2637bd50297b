"""Versioned schema migrations: ``sql/migrations/NNNN_name.sql``, applied in order.

A schema belongs to a package: its migration files sit in the package's
``sql/migrations/`` folder, next to the query files the connector was opened
with, and those query files name the bookkeeping table (the store's
``schema_migrations``; the PostgreSQL object store's
``tenure_objects_migrations``, so both can share one database). So
``migrate(connector)`` applies the migrations of ``connector.queries.package``.

``tenure db migrate`` applies the store's, and every store applies them on
first use. Each migration runs in its own transaction and is recorded in the
bookkeeping table; concurrent migrators serialize (SQLite: the write lock of
``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped advisory lock,
``migrations_lock``).

Migration files are the one place where SQL text runs as written
(:meth:`~tenure.store.connector.SqlTx.execute_sql`); the bookkeeping uses
named queries like everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from tenure.store.connector import Connector
from tenure.store.queries import STORE


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        body = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        return [s.strip() for s in body.split(";") if s.strip()]


def migrations(package: str = STORE) -> list[Migration]:
    """The migrations of ``package`` (default: the control-plane store), by version."""
    folder = resources.files(package) / "sql" / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest[:-4], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


def applied(connector: Connector) -> set[int]:
    with connector.transaction() as tx:
        tx.execute("migrations_table_create")
        return {int(r["version"]) for r in tx.execute("migrations_applied")}


def migrate(connector: Connector) -> list[Migration]:
    """Apply every pending migration of the connector's package; return those applied now."""
    done: list[Migration] = []
    for migration in migrations(connector.queries.package):
        with connector.sql_transaction() as tx:
            if tx.dialect == "postgres":
                tx.execute("migrations_lock")
            tx.execute("migrations_table_create")
            if tx.one("migration_is_applied", {"v": migration.version}):
                continue
            for statement in migration.statements():
                tx.execute_sql(statement)
            tx.execute("migration_record", {"v": migration.version, "n": migration.name})
            done.append(migration)
    return done
