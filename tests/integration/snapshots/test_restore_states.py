"""S-16: only READY snapshots restore without a word; DEGRADED and DELETING ones never silently.

SPEC §9 "DEGRADED heads": restoring a DEGRADED snapshot fails with an
integrity error naming the lost paths; ``partial`` restores the intact files
and lists the rest. A DELETING snapshot (S-19: still readable until GC) is
refused unless the caller asks for it explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tenure.errors import ConflictError, IntegrityError
from tenure.objects.local import LocalObjectStore
from tenure.states import SnapshotState
from tenure.store import open_store
from tenure.workspaces import WorkspaceService
from tests.support.folders import describe, random_bytes, write_file
from tests.support.procs import tenure


@pytest.fixture
def service(tmp_path) -> Iterator[WorkspaceService]:  # type: ignore[no-untyped-def]
    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    yield WorkspaceService(store, LocalObjectStore(str(tmp_path / "objects")), str(tmp_path / "data"))
    store.close()


def _src(tmp_path, version: int = 1) -> str:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    os.makedirs(src, exist_ok=True)
    write_file(os.path.join(src, "small.txt"), b"small %d" % version)
    write_file(os.path.join(src, "big.bin"), random_bytes(2 << 20, version))
    return src


def _chunk_of_big(service: WorkspaceService, root: str) -> str:
    from tenure.snapshots.walk import load_listing

    return next(item.refs[0][0] for rel, item in load_listing(root, service.objects).files if rel == b"big.bin")


def test_s16_restoring_a_degraded_snapshot_fails_naming_the_lost_paths(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = _src(tmp_path)
    service.create("w")
    snap = service.checkpoint("w", src).snapshot
    assert snap.root_oid is not None
    victim = _chunk_of_big(service, snap.root_oid)
    payload = service.objects.get(victim)
    service.objects.delete_many([victim])
    assert service.verify(snap.id).snapshot.state is SnapshotState.DEGRADED

    dest = tmp_path / "dest"
    with pytest.raises(IntegrityError) as caught:
        service.restore("w", str(dest))
    error = caught.value
    assert error.code == "snapshot-degraded" and error.context["lost_paths"] == ["big.bin"]
    assert "big.bin" in error.message and "--partial" in error.hint
    assert error.context["missing"] == [victim]
    assert not dest.exists() and not [n for n in os.listdir(tmp_path) if "tenure-restore" in n]

    snap_, partial = service.restore("w", str(tmp_path / "partial"), partial=True)
    assert snap_.state is SnapshotState.DEGRADED and partial.lost_paths == ("big.bin",)
    assert (tmp_path / "partial" / "small.txt").read_bytes() == b"small 1"

    service.objects.put_many([(victim, payload)])  # the object is back, but nobody verified the snapshot again
    with pytest.raises(IntegrityError) as caught:
        service.restore("w", str(tmp_path / "healed"))
    assert caught.value.code == "snapshot-degraded" and caught.value.context["lost_paths"] == []
    assert "snapshot verify" in caught.value.hint
    assert not (tmp_path / "healed").exists()
    assert service.verify(snap.id).snapshot.state is SnapshotState.READY
    service.restore("w", str(tmp_path / "healed"))
    assert describe(str(tmp_path / "healed")) == describe(src)


def test_s16_restoring_a_deleting_snapshot_needs_an_explicit_flag(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = _src(tmp_path, 1)
    service.create("w")
    old = service.checkpoint("w", src).snapshot
    old_content = describe(src)
    _src(tmp_path, 2)
    service.checkpoint("w", src)
    service.store.snapshots.delete(old.id)
    assert service.store.snapshots.get(old.id).state is SnapshotState.DELETING

    dest = tmp_path / "dest"
    with pytest.raises(ConflictError) as caught:
        service.restore("w", str(dest), snapshot=old.id)
    assert caught.value.code == "snapshot-deleting" and caught.value.context["snapshot"] == old.id
    assert not dest.exists()
    with pytest.raises(ConflictError):
        service.restore("w", str(dest), snapshot=old.id, partial=True)

    snap, result = service.restore("w", str(dest), snapshot=old.id, allow_deleting=True)
    assert snap.state is SnapshotState.DELETING and result.complete
    assert describe(str(dest)) == old_content


def test_s16_cli_restore_of_a_deleting_snapshot_needs_allow_deleting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "data")
    src = _src(tmp_path, 1)
    assert tenure(["--data", data, "workspace", "create", "w"]).returncode == 0
    first = tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", src])
    assert first.returncode == 0, first.stderr
    _src(tmp_path, 2)
    assert tenure(["--data", data, "workspace", "checkpoint", "w", "--from", src]).returncode == 0
    import json

    old = json.loads(first.stdout)["snapshot"]["id"]
    store = open_store(f"sqlite:///{data}/tenure.db")
    try:
        store.snapshots.delete(old)
    finally:
        store.close()
    refused = tenure(["--data", data, "workspace", "restore", "w", "--snapshot", old, "--to", str(tmp_path / "d")])
    assert refused.returncode == 4 and "error[snapshot-deleting]" in refused.stderr
    assert "--allow-deleting" in refused.stderr
    allowed = tenure(
        [
            "--data",
            data,
            "workspace",
            "restore",
            "w",
            "--snapshot",
            old,
            "--to",
            str(tmp_path / "d"),
            "--allow-deleting",
        ]
    )
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "d" / "small.txt").read_bytes() == b"small 1"
