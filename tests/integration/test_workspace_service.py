"""The workspace service over real stores: SQLite + folder, PostgreSQL + PostgreSQL objects."""

from __future__ import annotations

import os
import threading

from tenure.objects import open_object_store
from tenure.objects.local import LocalObjectStore
from tenure.states import SnapshotState
from tenure.store import open_store
from tenure.workspaces import WorkspaceService
from tests.support.trees import describe, make_tree


def test_round_trip_and_incremental_on_both_backends(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    make_tree(src)
    service.create("w")
    first = service.checkpoint("w", src)
    assert not first.unchanged and first.snapshot.state is SnapshotState.READY
    again = service.checkpoint("w", src)
    assert again.unchanged and again.snapshot.id == first.snapshot.id
    with open(os.path.join(src, "large.bin"), "wb") as fh:
        fh.write(os.urandom(20_000_000))
    second = service.checkpoint("w", src)
    with open(os.path.join(src, "large.bin"), "ab") as fh:
        fh.write(b"appended")
    third = service.checkpoint("w", src)
    assert third.snapshot.parent_id == second.snapshot.id
    assert third.snapshot.bytes_new < 5_000_000 < second.snapshot.bytes_new, "an append re-stores one chunk"
    service.restore("w", str(tmp_path / "v3"))
    service.restore("w", str(tmp_path / "v1"), snapshot=first.snapshot.id)
    assert describe(str(tmp_path / "v3")) == describe(src)
    assert describe(str(tmp_path / "v1")) != describe(src)
    assert service.verify(third.snapshot.id).ok


class CountingObjects(LocalObjectStore):
    """A real folder object store that also counts reads (for the restore-cost check)."""

    reads = 0

    def get(self, oid: str) -> bytes:
        self.reads += 1
        return super().get(oid)


def test_restore_cost_does_not_grow_with_other_snapshots(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    objects = CountingObjects(str(tmp_path / "objects"))
    svc = WorkspaceService(store, objects, str(tmp_path / "data"))
    src = str(tmp_path / "src")
    make_tree(src, files=20)
    svc.create("w")
    first = svc.checkpoint("w", src).snapshot
    objects.reads = 0
    svc.restore("w", str(tmp_path / "r0"), snapshot=first.id)
    baseline = objects.reads
    for i in range(30):
        with open(os.path.join(src, f"extra{i}.bin"), "wb") as fh:
            fh.write(os.urandom(200_000))
        svc.checkpoint("w", src)
    objects.reads = 0
    svc.restore("w", str(tmp_path / "r1"), snapshot=first.id)
    assert objects.reads == baseline
    store.close()


def test_gc_running_during_checkpoints_never_breaks_a_snapshot(store_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(store_url)
    objects = open_object_store(f"file://{tmp_path}/objects")
    svc = WorkspaceService(store, objects, str(tmp_path / "data"))
    src = str(tmp_path / "src")
    make_tree(src, files=30)
    svc.create("w")
    svc.checkpoint("w", src)
    stop = threading.Event()
    errors: list[BaseException] = []

    def collector() -> None:
        gc_store = open_store(store_url)
        gc_svc = WorkspaceService(gc_store, objects, str(tmp_path / "gcdata"))
        try:
            while not stop.is_set():
                gc_svc.gc(grace_s=0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            gc_store.close()

    thread = threading.Thread(target=collector)
    thread.start()
    ids = []
    try:
        for i in range(25):
            with open(os.path.join(src, f"d{i % 5}", "e0", f"f{i}.txt"), "wb") as fh:
                fh.write(os.urandom(5000 + i))
            snap = svc.checkpoint("w", src).snapshot
            ids.append(snap.id)
            if len(ids) > 2:
                store.snapshots.delete(ids[-3])
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    svc.gc(grace_s=0)
    for snap in store.snapshots.list(store.workspaces.workspace("w").id):
        if snap.state is SnapshotState.READY:
            assert svc.verify(snap.id).ok, snap.id
    svc.restore("w", str(tmp_path / "final"))
    assert describe(str(tmp_path / "final")) == describe(src)
    store.close()


def test_gc_skips_a_damaged_snapshot_reports_it_and_still_reclaims_the_rest(
    service: WorkspaceService, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from tenure.snapshots import tree_closure

    src = str(tmp_path / "src")
    os.makedirs(os.path.join(src, "sub"))
    with open(os.path.join(src, "sub", "a.txt"), "wb") as fh:
        fh.write(b"kept\n")
    service.create("damaged")
    damaged = service.checkpoint("damaged", src).snapshot
    assert damaged.root_oid is not None
    service.objects.delete_many([damaged.root_oid])  # its root tree object is lost: the closure is unknowable
    other = str(tmp_path / "other")
    os.makedirs(other)
    with open(os.path.join(other, "x.bin"), "wb") as fh:
        fh.write(os.urandom(4096))
    service.create("garbage")
    first = service.checkpoint("garbage", other).snapshot
    assert first.root_oid is not None
    garbage = tree_closure(first.root_oid, service.objects)
    with open(os.path.join(other, "x.bin"), "wb") as fh:
        fh.write(os.urandom(4096))
    head = service.checkpoint("garbage", other).snapshot
    service.store.snapshots.delete(first.id)
    result = service.gc(grace_s=0)
    assert result.damaged == (damaged.root_oid,)
    assert result.removed >= 1, "one damaged snapshot stopped the whole collection"
    assert not service.objects.has_many(garbage - tree_closure(head.root_oid or "", service.objects))
