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
from tenure.snapshots import build_tree
from tenure.snapshots.gc import collect
from tenure.states import SnapshotState
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


def test_objects_only_a_failed_snapshot_reaches_are_removed_without_waiting_for_the_grace_period(
    pair: Pair, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A FAILED snapshot is never read again: what only its tree reaches goes at once, unless a live pin names it."""
    referenced = _referenced(pair, tmp_path)
    (tmp_path / "src" / "c.bin").write_bytes(os.urandom(1 << 20))  # content only the failed upload stores
    ws_store = pair.store.workspaces
    lease = ws_store.acquire("w", "cli@test:1", 60.0)
    ticket = ws_store.begin_checkpoint(lease, "failed-after-its-root")
    built = build_tree(str(tmp_path / "src"), pair.objects)
    ws_store.mark_uploaded(ticket, built.root, built.files, built.bytes_read, built.bytes_new, [])
    ws_store.abandon_checkpoint(lease, ticket, error="publication failed")
    ws_store.release(lease)
    assert pair.store.snapshots.get(ticket.snapshot_id).state is SnapshotState.FAILED
    only_failed = set(built.objects) - referenced
    assert len(only_failed) >= 3  # c.bin's chunk, the new root and folder record at least
    needed, *_ = sorted(only_failed - {built.root})  # not the root: a kept root would trace the tree again
    pin = pair.store.snapshots.pin_objects("a live upload", [needed], 600.0)  # another upload relies on one
    stray, _ = encode(b"unreferenced, never part of any tree, young")
    pair.objects.put_many([(stray, _)])

    result = collect(pair.store, pair.objects, grace_s=GRACE_S)
    assert pair.stored() == referenced | {needed, stray}, "the failed upload's objects waited for the grace period"
    assert result.failed_uploads == len(only_failed) and result.removed == len(only_failed) - 1
    assert result.young == 1 and result.spared_by_pins == 1
    pair.store.snapshots.unpin(pin)
    later = collect(pair.store, pair.objects, grace_s=GRACE_S)  # the failed tree is gone: nothing traces it now
    assert (later.removed, later.young) == (0, 2), "the object the pin spared waits for the grace period"
