"""Versioned schema migrations: ``sql/migrations/NNNN_name.sql``, applied in order.

``tenure db migrate`` applies them, and every store applies them on first
use. Each migration runs in its own transaction and is recorded in
``schema_migrations``; concurrent migrators serialize (SQLite: the write
lock of ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped advisory lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from tenure.store.connector import Connector

_ADVISORY_KEY = 7_346_201_118


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        body = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        return [s.strip() for s in body.split(";") if s.strip()]


def migrations() -> list[Migration]:
    folder = resources.files("tenure.store") / "sql" / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest[:-4], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


def applied(connector: Connector) -> set[int]:
    with connector.transaction() as tx:
        _ensure_table(tx)
        return {int(r["version"]) for r in tx.execute("SELECT version FROM schema_migrations")}


def _ensure_table(tx: object) -> None:
    tx.execute(  # type: ignore[attr-defined]
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at DOUBLE PRECISION NOT NULL)"
    )


def migrate(connector: Connector) -> list[Migration]:
    """Apply every pending migration; return those applied now."""
    done: list[Migration] = []
    for migration in migrations():
        with connector.transaction() as tx:
            if tx.dialect == "postgres":
                tx.execute("SELECT pg_advisory_xact_lock(:k)", {"k": _ADVISORY_KEY})
            _ensure_table(tx)
            if tx.one("SELECT 1 AS x FROM schema_migrations WHERE version = :v", {"v": migration.version}):
                continue
            for statement in migration.statements():
                tx.execute(statement)
            tx.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (:v, :n, {now})",
                       {"v": migration.version, "n": migration.name})
            done.append(migration)
    return done
