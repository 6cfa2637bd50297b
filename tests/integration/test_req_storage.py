"""Storage requirements whose rows had no test of their own: S-12, S-15, S-23, S-38, S-73.

Real stores and real folders: SQLite + a local object folder, and
PostgreSQL for store and objects. Objects are found by their content
(decoded with the codec), never through the tree reader under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tenure import faults
from tenure.errors import ConflictError, IntegrityError
from tenure.objects import decode, encode, open_object_store
from tenure.snapshots import build_tree, verify_tree
from tenure.states import SnapshotState, WorkspaceState
from tenure.workspaces import WorkspaceService
from tests.support.procs import ROOT, env
from tests.support.trees import describe

BIG = 2 << 20


def _folder(tmp_path, name: str = "src", seed: int = 1) -> tuple[str, bytes]:  # type: ignore[no-untyped-def]
    """A folder with one small file and one big file (chunked); returns it and the big file's bytes."""
    import random

    src = str(tmp_path / name)
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, "small.txt"), "wb") as fh:
        fh.write(b"small file %d" % seed)
    big = random.Random(seed).randbytes(BIG)
    with open(os.path.join(src, "big.bin"), "wb") as fh:
        fh.write(big)
    return src, big


def _chunks_of(service: WorkspaceService, content: bytes) -> list[str]:
    """The stored objects whose plain content is a piece of ``content`` (a big file's chunks)."""
    out = []
    for oid, _ in service.objects.list_ids():
        plain = decode(oid, service.objects.get(oid))
        if len(plain) > 1024 and content.find(plain) >= 0:
            out.append(oid)
    assert out, "the big file was stored in chunks"
    return out


def _stored(service: WorkspaceService) -> set[str]:
    return {oid for oid, _ in service.objects.list_ids()}


# --------------------------------------------------------------------------- S-15, S-12


def test_s15_a_snapshot_whose_closure_check_fails_becomes_failed(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, _ = _folder(tmp_path)
    service.create("w")
    first = service.checkpoint("w", src).snapshot
    before = _stored(service)
    new_src, new_big = _folder(tmp_path, "v2", seed=2)

    def lose_a_chunk() -> None:  # the record is VALIDATING; the closure has not been checked yet
        lost = [oid for oid in _chunks_of(service, new_big) if oid not in before]
        assert service.objects.delete_many(lost[:1]) == 1

    with faults.at("checkpoint.after_validating", lose_a_chunk), pytest.raises(IntegrityError) as caught:
        service.checkpoint("w", new_src)
    assert caught.value.code == "closure-incomplete"
    ws = service.workspace("w")
    assert ws.head_snapshot_id == first.id, "the head never moves to a snapshot whose closure is incomplete"
    snaps = service.store.snapshots.list(ws.id)
    failed = [s for s in snaps if s.id != first.id]
    assert [s.state for s in failed] == [SnapshotState.FAILED]
    assert failed[0].error and "missing" in failed[0].error
    assert ws.state in (WorkspaceState.IDLE, WorkspaceState.MOUNTED)
    with pytest.raises(ConflictError) as refused:
        service.create("fork", from_snapshot=failed[0].id)
    assert refused.value.code == "snapshot-not-ready" and refused.value.context["state"] == "FAILED"


def test_s12_a_snapshot_is_ready_only_with_its_whole_closure_stored(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, big = _folder(tmp_path)
    service.create("w")
    before = _stored(service)
    snap = service.checkpoint("w", src).snapshot
    assert snap.state is SnapshotState.READY
    stored = _stored(service) - before
    assert set(_chunks_of(service, big)) <= stored and snap.root_oid in stored
    assert verify_tree(snap.root_oid or "", service.objects).ok, "every object of a READY snapshot is there"


def test_s12_a_snapshot_never_becomes_ready_over_an_object_whose_content_is_not_its_key(
    service: WorkspaceService, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    src, big = _folder(tmp_path)
    scratch = open_object_store(f"file://{tmp_path}/scratch")
    build_tree(src, scratch)  # the same folder into a scratch store: which chunk ids the checkpoint will need
    chunk_ids = [
        oid
        for oid, _ in scratch.list_ids()
        if big.find(decode(oid, scratch.get(oid))) >= 0 and len(decode(oid, scratch.get(oid))) > 1024
    ]
    assert chunk_ids
    forged = encode(b"other content under a chunk's id")[1]
    assert service.objects.put_many([(chunk_ids[0], forged)]) == 1  # a damaged object already in the store
    service.create("w")
    snap = service.checkpoint("w", src).snapshot  # the object found stored is read back, found wrong, replaced
    assert snap.state is SnapshotState.READY
    assert verify_tree(snap.root_oid or "", service.objects).ok, "READY over an object whose content is not its key"
    assert big.find(decode(chunk_ids[0], service.objects.get(chunk_ids[0]))) >= 0, "the build's own copy is stored"


# --------------------------------------------------------------------------- S-23


def test_s23_degraded_becomes_ready_after_repair_from_the_live_folder(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, big = _folder(tmp_path)
    service.create("w")
    snap = service.checkpoint("w", src).snapshot
    victim = _chunks_of(service, big)[0]
    assert service.objects.delete_many([victim]) == 1
    report = service.verify(snap.id)
    assert report.snapshot.state is SnapshotState.DEGRADED and report.lost_paths == ("big.bin",)

    service.checkpoint("w", src)  # the live folder still holds big.bin: its lost chunk is stored again
    assert victim in _stored(service)
    healed = service.verify(snap.id)
    assert healed.ok and healed.snapshot.state is SnapshotState.READY
    assert (healed.snapshot.id, healed.snapshot.root_oid) == (snap.id, snap.root_oid), "history is not rewritten"
    service.restore("w", str(tmp_path / "restored"), snapshot=snap.id)
    assert describe(str(tmp_path / "restored")) == describe(src)


# --------------------------------------------------------------------------- S-38


def test_s38_expiry_changes_the_record_and_never_touches_the_folder(service: WorkspaceService, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, _ = _folder(tmp_path)
    ws = service.create("w")
    service.checkpoint("w", src)
    folder = service.init_folder(ws.id, service.folder_for("project-key"))
    with open(os.path.join(folder, "uncommitted.txt"), "w") as fh:
        fh.write("written after the checkpoint, never published")
    materialized = describe(folder)
    workspaces = service.store.workspaces

    assert workspaces.expire("w").state is WorkspaceState.EXPIRING
    assert describe(folder) == materialized
    assert workspaces.undo_expiry("w", grace_s=3600).state is WorkspaceState.IDLE
    assert describe(folder) == materialized
    assert workspaces.expire("w").state is WorkspaceState.EXPIRING
    assert workspaces.delete_expired("w").state is WorkspaceState.DELETED
    assert describe(folder) == materialized, "retention is logical: the materialized folder stays as it was"


# --------------------------------------------------------------------------- S-73

UNPRIVILEGED = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]


def _mounts() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return sorted(line.split(" - ")[0].split(" ", 4)[4] for line in fh)


def test_s73_materialization_fencing_and_teardown_need_no_mounts_and_no_privileges(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The whole project lifecycle through the CLI with every capability dropped (root) or as is (not root)."""
    import json

    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv (util-linux): cannot drop capabilities")
        prefix = [setpriv, *UNPRIVILEGED]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    _folder(tmp_path)
    mounts_before = _mounts()

    def run(*args: str) -> dict[str, object]:
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "tenure.cli.main", "--data", data, "--json", *args],
            cwd=ROOT,
            env=env(),
            text=True,
            capture_output=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{args}: {done.stderr}"
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    if prefix:
        caps = subprocess.run([*prefix, "grep", "^CapEff", "/proc/self/status"], capture_output=True, text=True)
        assert caps.stdout.split()[-1] == "0000000000000000", caps.stdout

    run("workspace", "create", "w")
    run("workspace", "checkpoint", "w", "--from", src)
    run("workspace", "restore", "w", "--to", str(tmp_path / "copy"))
    assert describe(str(tmp_path / "copy")) == describe(src)

    run("project", "create", "acme/web")
    run("project", "bring", "acme/web")
    shown = run("project", "show", "acme/web")
    folder = str(shown["workspace_folder"])
    assert os.path.isdir(folder) and not os.path.islink(folder) and not os.path.ismount(folder)
    assert os.stat(folder).st_dev == os.stat(data).st_dev, "a plain folder on the data folder's file system"
    with open(os.path.join(folder, "work.txt"), "w") as fh:
        fh.write("engine output")
    run("project", "suspend", "acme/web")
    assert not os.path.exists(folder)
    run("project", "bring", "acme/web")
    with open(os.path.join(folder, "work.txt")) as fh:
        assert fh.read() == "engine output"
    run("project", "close", "acme/web", "--yes")  # fence (new generation), dispose, CLOSED
    assert not os.path.exists(folder)
    assert _mounts() == mounts_before, "nothing was mounted or unmounted"
