"""The control-plane store: SQLite (embedded default) or PostgreSQL.

One :class:`Store` over one connector. Every statement is a named block of
``sql/queries.sql``, overridden per dialect where SQLite and PostgreSQL differ
(``sql/sqlite/queries.sql``, ``sql/postgres/queries.sql``); code passes the
name and the parameters (:mod:`tenure.store.queries`,
:mod:`tenure.store.connector`). Schema migrations (``sql/migrations/``) are
applied on first use.

Both backends pass one conformance suite (``tests/contract/``).
"""

from __future__ import annotations

from tenure.store.connector import Connector, StoreCorruptError, open_connector
from tenure.store.migrate import migrate
from tenure.store.records import CheckpointTicket, Snapshot, Workspace, WriterLease
from tenure.store.snapshots import SnapshotStore
from tenure.store.workspaces import LeaseHeldError, LeaseLostError, WorkspaceStore, validate_name

__all__ = [
    "Store",
    "open_store",
    "Workspace",
    "WriterLease",
    "Snapshot",
    "CheckpointTicket",
    "LeaseHeldError",
    "LeaseLostError",
    "validate_name",
]


class Store:
    """The store's parts, sharing one connector."""

    def __init__(self, db: Connector, *, auto_migrate: bool = True) -> None:
        self.db = db
        if auto_migrate:
            migrate(db)
        self.workspaces = WorkspaceStore(db)
        self.snapshots = SnapshotStore(db)

    @property
    def url(self) -> str:
        return self.db.url

    def identity(self) -> str:
        """This store's own identity (a UUID its migration 0011 wrote), recorded in the object store it binds."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("store_identity")
        if row is None:
            raise StoreCorruptError(
                "the store has no identity row in store_identity",
                hint="it was removed by hand; restore it from a backup (the object store it is bound to names it)",
            )
        return str(row["identity"])

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(url: str, *, auto_migrate: bool = True) -> Store:
    """Open the store at ``url`` (``sqlite:///path`` or ``postgresql://…``)."""
    return Store(open_connector(url), auto_migrate=auto_migrate)
