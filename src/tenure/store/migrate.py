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

Before anything is applied, the recorded migrations are checked against the
code's, in a read-only transaction (so a store that is up to date is never
written to, and a read-only one can still be read):

* a recorded version newer than every migration this code knows is refused
  with ``schema-too-new`` — an older tenure must not write to a schema it
  does not understand;
* a recorded migration whose checksum (SHA-256 of its file, recorded in the
  ``checksum`` column) differs from the code's file of that version, or
  whose version the code no longer has, is refused with ``schema-mismatch``
  — an edited or renumbered migration is never applied a second time.
  Migrations applied before the checksum column existed are checked by name
  and get their checksum from the code's files (backfill).

Migration files are the one place where SQL text runs as written
(:meth:`~tenure.store.connector.SqlTx.execute_sql`); the bookkeeping uses
named queries like everything else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from tenure.errors import StoreError
from tenure.store.connector import Connector, Tx
from tenure.store.queries import STORE

#: What each schema is called in messages.
_SCHEMAS = {STORE: "the store", "tenure.objects": "the PostgreSQL object store"}


class SchemaTooNewError(StoreError):
    """The store records a migration newer than every migration this tenure knows."""

    code = "schema-too-new"
    retryable = False
    default_hint = (
        "upgrade tenure to the version that migrated this store (or newer); an older tenure"
        " never writes to a newer schema"
    )


class SchemaMismatchError(StoreError):
    """A recorded migration differs from the code's migration of that version (edited or renumbered)."""

    code = "schema-mismatch"
    retryable = False
    default_hint = (
        "run the tenure release that migrated this store, or restore the migration files as"
        " released; applied migrations are never edited or renumbered"
    )


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def checksum(self) -> str:
        """SHA-256 of the file's text (line endings normalized)."""
        return hashlib.sha256(self.sql.replace("\r\n", "\n").encode("utf-8")).hexdigest()

    def statements(self) -> list[str]:
        body = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        return [s.strip() for s in body.split(";") if s.strip()]


Recorded = Mapping[int, Mapping[str, Any]]


def migrations(package: str = STORE) -> list[Migration]:
    """The migrations of ``package`` (default: the control-plane store), by version."""
    folder = resources.files(package) / "sql" / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest[:-4], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


def recorded(connector: Connector) -> dict[int, dict[str, Any]]:
    """The bookkeeping rows by version (empty before the first migration), read without writing."""
    with connector.transaction(write=False) as tx:
        if tx.one("migrations_table_exists") is None:
            return {}
        return _rows(tx)


def applied(connector: Connector) -> set[int]:
    """The versions recorded as applied."""
    return set(recorded(connector))


def check(rows: Recorded, known: list[Migration], package: str = STORE) -> None:
    """Refuse a schema newer than ``known`` (``schema-too-new``) or one that differs from it (``schema-mismatch``)."""
    schema = _SCHEMAS.get(package, package)
    by_version = {m.version: m for m in known}
    by_checksum = {m.checksum: m for m in known}
    newest = max(by_version, default=0)
    too_new = sorted(v for v in rows if v > newest)
    if too_new:
        labels = [f"{v:04d}_{rows[v]['name']}" for v in too_new]
        raise SchemaTooNewError(
            f"{schema} has migration {', '.join(labels)} applied, newer than this tenure knows"
            f" (its newest is {newest:04d})",
            applied=labels,
            newest_known=newest,
        )
    for version in sorted(rows):
        row = rows[version]
        label = f"{version:04d}_{row['name']}"
        mine = by_version.get(version)
        checksum = row.get("checksum")
        if mine is None:
            moved = by_checksum.get(str(checksum)) if checksum else None
            detail = f"renumbered to {moved.label}" if moved is not None else "removed or renumbered"
            raise SchemaMismatchError(
                f"{schema} has migration {label} applied, which this tenure does not have at that number ({detail})",
                migration=label,
            )
        if checksum is not None and checksum != mine.checksum:
            moved = by_checksum.get(str(checksum))
            detail = (
                f"the applied one is now {moved.label}: renumbered"
                if moved is not None
                else "the file was edited after it was applied"
            )
            raise SchemaMismatchError(
                f"{schema} has migration {label} applied with another content than"
                f" this tenure's {mine.label} ({detail})",
                migration=label,
                recorded_checksum=checksum,
                code_checksum=mine.checksum,
            )
        if checksum is None and row["name"] != mine.name:
            raise SchemaMismatchError(
                f"{schema} has migration {label} applied where this tenure has {mine.label} (renumbered)",
                migration=label,
            )


def migrate(connector: Connector) -> list[Migration]:
    """Check the recorded migrations, apply every pending one; return those applied now."""
    package = connector.queries.package
    known = migrations(package)
    rows = recorded(connector)
    check(rows, known, package)
    pending = [m for m in known if m.version not in rows]
    if not pending and all(r.get("checksum", "") is not None for r in rows.values()):
        return []
    done: list[Migration] = []
    for migration in pending:
        with connector.sql_transaction() as tx:
            _lock(tx)
            tx.execute("migrations_table_create")
            current = _rows(tx)
            check(current, known, package)  # another migrator may have got here first
            if migration.version in current:
                continue
            for statement in migration.statements():
                tx.execute_sql(statement)
            tx.execute("migration_record", {"v": migration.version, "n": migration.name})
            done.append(migration)
    _backfill_checksums(connector, known, package)
    return done


def _backfill_checksums(connector: Connector, known: list[Migration], package: str) -> None:
    """Record the checksum of every applied migration that has none (applied before the column existed)."""
    by_version = {m.version: m for m in known}
    with connector.transaction() as tx:
        _lock(tx)
        current = _rows(tx)
        check(current, known, package)
        for version, row in current.items():
            if "checksum" in row and row["checksum"] is None:
                tx.execute("migration_set_checksum", {"v": version, "c": by_version[version].checksum})


def _lock(tx: Tx) -> None:
    if tx.dialect == "postgres":
        tx.execute("migrations_lock")


def _rows(tx: Tx) -> dict[int, dict[str, Any]]:
    return {int(r["version"]): r for r in tx.execute("migrations_applied")}
