"""A store with its object store, and a second object store that is not its own, on both backends."""

from __future__ import annotations

import os
import random
import time
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


def write_tree(root: Path) -> dict[str, bytes]:
    """A folder with small files (packed together) and one large file (chunked); returns its content."""
    files = {f"small/{i:02d}.txt": f"small file {i}\n".encode() * (i + 1) for i in range(12)}
    files["large.bin"] = random.Random(3).randbytes(3 << 20)  # fixed content: the same chunks every run
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (time.time() - 3600, time.time() - 3600))  # old enough for the index to trust
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
