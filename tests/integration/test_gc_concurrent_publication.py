"""GC never removes an object a snapshot published during the run references (S-20; docs/adr/0004-gc-pins.md).

The mark sees a DELETING snapshot A go DELETED, so A's objects are
candidates. Before the sweep, a checkpoint of the same folder publishes C:
it finds every object already stored (deduplication), uploads nothing, and
drops its upload pins when it finishes. Only C's root, published after the
mark, still protects those objects; the sweep must trace it. The checkpoint
runs at the named point ``gc.after_mark`` (:func:`tenure.faults.at`), so the
interleaving is exact, without sleeps.
"""

from __future__ import annotations

import os

from tenure import faults
from tenure.snapshots.gc import collect
from tenure.states import SnapshotState
from tenure.workspaces import WorkspaceService
from tests.support.trees import describe, make_tree


def test_s20_gc_spares_objects_of_a_snapshot_published_after_its_mark(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src_a, src_b = str(tmp_path / "a"), str(tmp_path / "b")
    make_tree(src_a, seed=1, files=12)
    make_tree(src_b, seed=2, files=12)
    service.create("w")
    a = service.checkpoint("w", src_a).snapshot
    service.checkpoint("w", src_b)
    service.store.snapshots.delete(a.id)
    published: list[str] = []

    def publish_a_again() -> None:
        result = service.checkpoint("w", src_a)
        assert not result.unchanged and result.snapshot.root_oid == a.root_oid, "the same tree, every object reused"
        published.append(result.snapshot.id)

    with faults.at("gc.after_mark", publish_a_again):
        gc = collect(service.store, service.objects, grace_s=0)
    assert published, "the checkpoint ran between the mark and the sweep"
    assert service.store.snapshots.get(a.id).state is SnapshotState.DELETED
    assert gc.candidates > 0, "A's objects were candidates at the mark"
    assert gc.removed == 0, "every candidate is referenced by the snapshot published since the mark"
    report = service.verify(published[0])
    assert report.ok and report.snapshot.state is SnapshotState.READY
    service.restore("w", str(tmp_path / "restored"))
    assert describe(str(tmp_path / "restored")) == describe(src_a)
    assert os.listdir(tmp_path / "restored")
