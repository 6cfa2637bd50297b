"""GC grace period (SPEC §4 "GC"): an unreferenced object younger than the grace period is kept, an older one removed.

The grace period protects uploads still in flight, which no snapshot
references yet. Nothing sleeps: an object's age is set back by hand, as the
mtime of its file (local folder) or its ``created_at`` (PostgreSQL objects
table). Both pairs run: SQLite store + local folder, PostgreSQL store +
PostgreSQL objects (each judges age by its own clock).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tenure.objects import ObjectStore, encode, open_object_store
from tenure.snapshots.gc import collect
from tenure.store import Store, open_store
from tenure.workspaces import WorkspaceService

GRACE_S = 3600.0


@dataclass
class Pair:
    store: Store
    objects: ObjectStore
    objects_url: str

    def age(self, oid: str, seconds: float) -> None:
        """Make object ``oid`` look ``seconds`` old, without touching its content."""
        if self.objects_url.startswith("file://"):
            path = os.path.join(self.objects_url[len("file://") :], oid[:2], oid)
            then = time.time() - seconds
            os.utime(path, (then, then))
            return
        import psycopg

        with psycopg.connect(self.objects_url, autocommit=True) as conn:
            updated = conn.execute(
                "UPDATE tenure_objects SET created_at = now() - make_interval(secs => %s) WHERE oid = %s",
                (seconds, oid),
            ).rowcount
        assert updated == 1

    def stored(self) -> set[str]:
        return {oid for oid, _ in self.objects.list_ids()}


@pytest.fixture(params=["sqlite+folder", pytest.param("postgres", marks=pytest.mark.postgres)])
def pair(request, tmp_path) -> Iterator[Pair]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite+folder":
        store_url, objects_url = f"sqlite:///{tmp_path}/tenure.db", f"file://{tmp_path}/objects"
    else:
        from tests.conftest import new_pg_schema_url

        store_url = objects_url = new_pg_schema_url()
    store, objects = open_store(store_url), open_object_store(objects_url)
    yield Pair(store, objects, objects_url)
    objects.close()
    store.close()


def _referenced(pair: Pair, tmp_path) -> set[str]:  # type: ignore[no-untyped-def]
    """Checkpoint a small folder; return the objects it stored (all referenced by the READY head)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"referenced content")
    (src / "b.bin").write_bytes(os.urandom(1 << 20))
    service = WorkspaceService(pair.store, pair.objects, str(tmp_path / "data"))
    service.create("w")
    before = pair.stored()
    service.checkpoint("w", str(src))
    referenced = pair.stored() - before
    assert referenced
    return referenced


def test_unreferenced_object_is_kept_within_the_grace_period_and_removed_after_it(pair: Pair, tmp_path) -> None:  # type: ignore[no-untyped-def]
    referenced = _referenced(pair, tmp_path)
    young, _ = encode(b"an upload still in flight: no snapshot references it yet")
    aging, _ = encode(b"uploaded 50 minutes ago, never referenced")
    old, _ = encode(b"uploaded 70 minutes ago, never referenced")
    pair.objects.put_many(
        [
            encode(b"an upload still in flight: no snapshot references it yet"),
            encode(b"uploaded 50 minutes ago, never referenced"),
            encode(b"uploaded 70 minutes ago, never referenced"),
        ]
    )
    pair.age(aging, GRACE_S - 600)
    pair.age(old, GRACE_S + 600)
    for oid in referenced:
        pair.age(oid, 10 * GRACE_S)  # referenced objects are kept however old they are

    result = collect(pair.store, pair.objects, grace_s=GRACE_S)
    assert pair.stored() == referenced | {young, aging}
    assert (result.candidates, result.removed) == (1, 1)

    again = collect(pair.store, pair.objects, grace_s=GRACE_S)
    assert (again.candidates, again.removed) == (0, 0), "the young ones stay until they are old enough"
    pair.age(young, GRACE_S + 1)
    pair.age(aging, GRACE_S + 1)
    later = collect(pair.store, pair.objects, grace_s=GRACE_S)
    assert later.removed == 2 and pair.stored() == referenced
