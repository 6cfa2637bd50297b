"""One corrupt object must not poison later snapshots: a known-bad object is treated as missing.

Verify (or a restore) moves an object it finds corrupt out of the way, so
the object store no longer reports it; the next checkpoint of the intact
folder reads the files that use it again, although the local index says
they are unchanged, and stores it again; a verify of the old snapshot then
finds it whole and makes it READY; it restores. Both backends.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tenure.objects import ObjectStore
from tenure.objects.base import CORRUPT_FOLDER
from tenure.snapshots.errors import SnapshotDamagedError
from tenure.snapshots.walk import load_listing
from tenure.states import SnapshotState
from tenure.store import Snapshot, Store
from tenure.workspaces import WorkspaceService
from tests.integration.identity.helpers import Backend
from tests.support.trees import read_tree, write_tree


def _victim(objects: ObjectStore, root: str, kind: str) -> str:
    """A data object of the tree: the pack of the small files, or a chunk of the large file."""
    listing = load_listing(root, objects, None, with_ids=True)
    for rel, item in listing.files:
        if kind == "pack" and rel.startswith(b"small/"):
            return str(item.refs[0][0])
        if kind == "chunk" and rel == b"large.bin":
            return str(item.refs[-1][0])  # a chunk of the large file (its last one)
    raise AssertionError(kind)


def _checked_in_then_corrupted(
    backend: Backend, tmp_path: Path, kind: str
) -> tuple[Path, Store, ObjectStore, WorkspaceService, Snapshot, str]:
    """Workspace w checked in from a sample folder, then one stored object of ``kind`` (the victim) corrupted in
    place; returns the folder, the stores, the service, the snapshot and the victim."""
    src = tmp_path / "src"
    write_tree(src)
    store, objects = backend.store(), backend.objects()
    service = WorkspaceService(store, objects, str(tmp_path / "data"))
    service.create("w")
    snap = service.checkpoint("w", str(src)).snapshot
    assert snap.root_oid is not None
    victim = _victim(objects, snap.root_oid, kind)
    backend.corrupt(victim)
    return src, store, objects, service, snap, victim


@pytest.mark.parametrize("kind", ["pack", "chunk"])
def test_a_corrupt_object_is_set_aside_stored_again_by_the_next_checkpoint_and_the_old_snapshot_heals(
    backend: Backend, tmp_path: Path, kind: str
) -> None:
    src, store, objects, service, old, victim = _checked_in_then_corrupted(backend, tmp_path, kind)

    report = service.verify(old.id)
    assert victim in report.corrupt and report.set_aside == (victim,)
    assert report.snapshot.state is SnapshotState.DEGRADED
    assert objects.has_many([victim]) == set()  # moved aside: it counts as missing
    if backend.kind == "folder":
        aside = os.listdir(os.path.join(backend.objects_url[len("file://") :], CORRUPT_FOLDER))
        assert [name.split(".")[0] for name in aside] == [victim]

    # The folder is intact and the index says every file is unchanged: still not "unchanged".
    result = service.checkpoint("w", str(src))
    assert not result.unchanged and result.snapshot.id != old.id
    assert result.snapshot.state is SnapshotState.READY
    assert objects.has_many([victim]) == {victim}  # stored again, intact
    assert service.verify(result.snapshot.id).ok

    healed = service.verify(old.id)
    assert healed.ok and healed.snapshot.state is SnapshotState.READY
    service.restore("w", str(tmp_path / "out"), snapshot=old.id)
    assert read_tree(tmp_path / "out") == read_tree(src)
    store.close()


def test_a_corrupt_object_found_by_a_restore_is_set_aside_and_stored_again(backend: Backend, tmp_path: Path) -> None:
    src, store, objects, service, snap, victim = _checked_in_then_corrupted(backend, tmp_path, "pack")

    with pytest.raises(SnapshotDamagedError) as damaged:
        service.restore("w", str(tmp_path / "first"))
    assert victim in damaged.value.context["corrupt"]
    assert objects.has_many([victim]) == set()

    service.checkpoint("w", str(src))  # reads the small files again and stores their pack again
    assert objects.has_many([victim]) == {victim}
    assert service.verify(snap.id).ok
    service.restore("w", str(tmp_path / "out"), snapshot=snap.id)
    assert read_tree(tmp_path / "out") == read_tree(src)
    store.close()


def test_a_degraded_head_whose_corrupt_object_is_still_in_place_is_not_reused(backend: Backend, tmp_path: Path) -> None:
    """A head made DEGRADED while its corrupt object stayed (an older tenure): the checkpoint sets it aside first."""
    src, store, objects, service, old, victim = _checked_in_then_corrupted(backend, tmp_path, "pack")
    store.snapshots.move(old.id, SnapshotState.DEGRADED, expected=SnapshotState.READY, error="found by hand")
    assert objects.has_many([victim]) == {victim}

    result = service.checkpoint("w", str(src))
    assert not result.unchanged and result.snapshot.state is SnapshotState.READY
    assert service.verify(result.snapshot.id).ok
    assert service.verify(old.id).snapshot.state is SnapshotState.READY
    store.close()
