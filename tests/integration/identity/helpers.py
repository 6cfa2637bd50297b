"""A store with its object store, and a second object store that is not its own, on both backends."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tenure.objects import ObjectStore, open_object_store
from tenure.store import Store, open_store


@dataclass
class Backend:
    kind: str
    store_url: str
    objects_url: str
    other_objects_url: str
    tmp: Path
    #: Another store of the same kind (not a copy: it has an identity of its own).
    other_store_url: str = ""

    def store(self, url: str | None = None) -> Store:
        return open_store(url or self.store_url)

    def drop_bound_store(self) -> None:
        """Make the object store look as one an earlier tenure bound: it names no store."""
        if self.kind == "folder":
            os.unlink(os.path.join(self.objects_url[len("file://") :], "tenure-objects-store.json"))
            return
        import psycopg

        with psycopg.connect(self.objects_url, autocommit=True) as conn:
            conn.execute("DELETE FROM tenure_objects_store")

    def objects(self, url: str | None = None) -> ObjectStore:
        return open_object_store(url or self.objects_url)

    def corrupt(self, oid: str) -> None:
        """Replace object ``oid``'s stored bytes with different bytes of the same length."""
        if self.kind == "folder":
            path = os.path.join(self.objects_url[len("file://") :], oid[:2], oid)
            data = bytearray(Path(path).read_bytes())
            os.chmod(path, 0o644)
            for i in range(len(data) // 2, len(data)):
                data[i] ^= 0x5A
            Path(path).write_bytes(bytes(data))
            return
        import psycopg

        with psycopg.connect(self.objects_url, autocommit=True) as conn:
            row = conn.execute("SELECT payload FROM tenure_objects WHERE oid = %s", (oid,)).fetchone()
            assert row is not None
            data = bytearray(row[0])
            for i in range(len(data) // 2, len(data)):
                data[i] ^= 0x5A
            conn.execute("UPDATE tenure_objects SET payload = %s WHERE oid = %s", (bytes(data), oid))
