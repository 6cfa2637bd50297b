"""``WorkspaceService.repair``: a DEGRADED snapshot's lost objects put back from a folder (S-23, S-84).

Real stores: SQLite + a local object folder, and PostgreSQL for both. Victim
objects are found by their content (decoded with the codec), never through
the repair or the tree reader under test. What is repairable follows
docs/snapshots-format.md ("Repairing lost objects from a folder"): a lost
chunk comes back from a file that still cuts to it; a lost pack only when
every byte of it belongs to a file this snapshot records, each unchanged in
the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import stat
from pathlib import Path

import pytest

from tenure.objects import decode
from tenure.snapshots import build as build_module
from tenure.states import SnapshotState
from tenure.store import Snapshot
from tenure.workspaces import WorkspaceService
from tests.support.cli import tenure
from tests.support.folders import PAST_NS, write_file
from tests.support.trees import describe

MIB = 1 << 20
SMALL = {"a.txt": b"alpha " * 300, "b.txt": b"bravo " * 500, "c.txt": b"charlie " * 400}


def _folder(root: Path, *, big: bool = True) -> bytes:
    """Small files a, b, c (one pack) and, with ``big``, a 3 MiB file (several chunks); returns its bytes."""
    os.makedirs(root / "sub", exist_ok=True)
    for name, data in SMALL.items():
        write_file(str(root / name), data)
    content = random.Random(7).randbytes(3 * MIB)
    if big:
        write_file(str(root / "sub" / "big.bin"), content)
    return content


def _checked_in(service: WorkspaceService, tmp_path: Path, *, big: bool = True) -> tuple[Path, bytes, Snapshot]:
    """Workspace w checked in from the sample folder ``src`` (see :func:`_folder`); returns the folder, the big
    file's bytes and the snapshot."""
    src = tmp_path / "src"
    content = _folder(src, big=big)
    service.create("w")
    return src, content, service.checkpoint("w", str(src)).snapshot


def _plain(service: WorkspaceService) -> dict[str, bytes]:
    return {oid: decode(oid, service.objects.get(oid)) for oid, _ in service.objects.list_ids()}


def _chunks_of(service: WorkspaceService, content: bytes) -> list[str]:
    """The stored objects that are pieces of ``content`` (a big file's chunks), in file order."""
    found = sorted((content.find(p), oid) for oid, p in _plain(service).items() if len(p) > 1024 and p in content)
    assert len(found) >= 2, "the big file was stored in several chunks"
    return [oid for _, oid in found]


def _pack_of(service: WorkspaceService, *contents: bytes) -> str:
    """The one stored object that holds every one of ``contents`` (a pack of small files)."""
    [pack] = [oid for oid, p in _plain(service).items() if len(p) < MIB and all(c in p for c in contents)]
    return pack


def tree_digest(root: Path) -> str:
    """Every path below ``root`` with its kind, mode, size, mtime and content or link target (atime left out)."""
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            st = os.lstat(path)
            h.update(os.fsencode(os.path.relpath(path, root)) + b"\0")
            h.update(f"{st.st_mode:o} {st.st_size} {st.st_mtime_ns}".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def _stored_pack_of_a(objects: Path) -> str:
    """The object in the local object folder ``objects`` that holds a.txt, found by its content."""
    return next(
        oid
        for oid in (name for d in objects.iterdir() if len(d.name) == 2 for name in os.listdir(d))
        if SMALL["a.txt"] in decode(oid, (objects / oid[:2] / oid).read_bytes())
    )


def _damage(service: WorkspaceService, snap_id: str, oids: list[str]) -> None:
    assert service.objects.delete_many(oids) == len(oids)
    assert service.verify(snap_id).snapshot.state is SnapshotState.DEGRADED


def _reasons(report) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {u.path: u.reason for u in report.unrepairable}


# --------------------------------------------------------------------------- chunks


def test_s23_deleted_chunks_are_put_back_from_the_folder_and_the_snapshot_restores_byte_for_byte(
    service: WorkspaceService, tmp_path: Path
) -> None:
    src, big, snap = _checked_in(service, tmp_path)
    victims = _chunks_of(service, big)[:2]
    _damage(service, snap.id, victims)
    before = tree_digest(src)

    report = service.repair(snap.id, str(src))

    assert report.ok and report.snapshot.state is SnapshotState.READY
    assert set(report.repaired) == set(victims) and report.unrepairable == ()
    assert (report.snapshot.id, report.snapshot.root_oid) == (snap.id, snap.root_oid), "same id, same tree"
    assert service.objects.has_many(victims) == set(victims)
    assert tree_digest(src) == before, "the folder is only read"
    assert service.verify(snap.id).ok
    service.restore("w", str(tmp_path / "out"), snapshot=snap.id)
    assert describe(str(tmp_path / "out")) == describe(str(src))


def test_s23_a_file_changed_in_the_folder_since_the_snapshot_is_unrepairable(
    service: WorkspaceService, tmp_path: Path
) -> None:
    src, big, snap = _checked_in(service, tmp_path)
    victim = _chunks_of(service, big)[0]
    _damage(service, snap.id, [victim])
    write_file(str(src / "sub" / "big.bin"), random.Random(8).randbytes(len(big)))  # same size, other bytes
    before = tree_digest(src)

    report = service.repair(snap.id, str(src))

    assert not report.ok and report.snapshot.state is SnapshotState.DEGRADED
    assert report.repaired == () and _reasons(report) == {"sub/big.bin": "changed"}
    assert report.missing == (victim,) and report.lost_paths == ("sub/big.bin",)
    assert report.snapshot.root_oid == snap.root_oid
    assert tree_digest(src) == before


def test_s23_only_the_lost_chunks_a_changed_file_still_cuts_to_come_back(
    service: WorkspaceService, tmp_path: Path
) -> None:
    """Content-defined cuts: an edit near the end leaves the first chunk as it was; it is put back."""
    src, big, snap = _checked_in(service, tmp_path)
    chunks = _chunks_of(service, big)
    _damage(service, snap.id, [chunks[0], chunks[-1]])
    edited = big[:-100] + bytes(100)  # the last chunk changes, the first does not
    write_file(str(src / "sub" / "big.bin"), edited)

    report = service.repair(snap.id, str(src))

    assert report.repaired == (chunks[0],) and report.missing == (chunks[-1],)
    assert _reasons(report) == {"sub/big.bin": "changed"} and not report.ok


def test_s23_a_file_missing_from_the_folder_is_unrepairable(service: WorkspaceService, tmp_path: Path) -> None:
    src, big, snap = _checked_in(service, tmp_path)
    _damage(service, snap.id, _chunks_of(service, big)[:1])
    os.unlink(src / "sub" / "big.bin")

    report = service.repair(snap.id, str(src))

    assert not report.ok and _reasons(report) == {"sub/big.bin": "missing"}
    assert service.store.snapshots.get(snap.id).state is SnapshotState.DEGRADED


# --------------------------------------------------------------------------- packs


def test_s23_a_deleted_pack_of_a_from_scratch_snapshot_is_rebuilt_from_its_files(
    service: WorkspaceService, tmp_path: Path
) -> None:
    src, _, snap = _checked_in(service, tmp_path)
    pack = _pack_of(service, *SMALL.values())
    _damage(service, snap.id, [pack])
    before = tree_digest(src)

    report = service.repair(snap.id, str(src))

    assert report.ok and report.repaired == (pack,)
    assert tree_digest(src) == before
    service.restore("w", str(tmp_path / "out"), snapshot=snap.id)
    assert describe(str(tmp_path / "out")) == describe(str(src))


@pytest.mark.parametrize("same_size", [False, True])
def test_s23_a_pack_whose_member_changed_in_the_folder_is_unrepairable(
    service: WorkspaceService, tmp_path: Path, same_size: bool
) -> None:
    src, _, snap = _checked_in(service, tmp_path, big=False)
    pack = _pack_of(service, *SMALL.values())
    _damage(service, snap.id, [pack])
    changed = SMALL["b.txt"].upper() if same_size else b"bravo!"
    write_file(str(src / "b.txt"), changed)

    report = service.repair(snap.id, str(src))

    assert not report.ok and report.repaired == () and report.missing == (pack,)
    if same_size:  # nothing tells which file changed: the pack does not hash to its id
        assert _reasons(report) == {"a.txt": "pack-mismatch", "b.txt": "pack-mismatch", "c.txt": "pack-mismatch"}
    else:
        assert _reasons(report) == {
            "a.txt": "pack-member-unrepairable",
            "b.txt": "changed",
            "c.txt": "pack-member-unrepairable",
        }


def _incremental(service: WorkspaceService, src: Path, name: str, data: bytes) -> tuple[str, str, str]:
    """Snapshot 1 of a, b, c (one pack); rewrite ``name``; snapshot 2 keeps the others' refs into that pack."""
    _folder(src, big=False)
    service.create("w")
    first = service.checkpoint("w", str(src)).snapshot
    pack = _pack_of(service, *SMALL.values())
    plain = _plain(service)[pack]
    assert plain.find(SMALL["a.txt"]) < plain.find(SMALL["b.txt"]) < plain.find(SMALL["c.txt"]), "scan order"
    write_file(str(src / name), data, mtime_ns=PAST_NS + 10**9)
    second = service.checkpoint("w", str(src)).snapshot
    assert second.id != first.id
    _damage(service, second.id, [pack])
    return first.id, second.id, pack


@pytest.mark.parametrize(
    ("name", "reason"),
    [("b.txt", "pack-incomplete"), ("c.txt", "pack-mismatch")],
    ids=["gap-in-the-middle", "tail-beyond-the-last-slice"],
)
def test_s23_a_pack_shared_with_an_earlier_snapshot_whose_files_changed_since_is_unrepairable(
    service: WorkspaceService, tmp_path: Path, name: str, reason: str
) -> None:
    """The folder holds exactly the second snapshot's files, yet the pack held the old ``name`` too."""
    src = tmp_path / "src"
    _, second, pack = _incremental(service, src, name, b"rewritten after the first snapshot")
    before = tree_digest(src)

    report = service.repair(second, str(src))

    kept = sorted(set(SMALL) - {name})
    assert not report.ok and report.missing == (pack,)
    assert _reasons(report) == {path: reason for path in kept}
    assert tree_digest(src) == before


def test_s23_the_earlier_snapshot_rebuilds_a_shared_pack_from_a_folder_holding_its_files(
    service: WorkspaceService, tmp_path: Path
) -> None:
    """Every byte of the pack belongs to the first snapshot's files: it comes back, and heals the second one."""
    src = tmp_path / "src"
    first, second, pack = _incremental(service, src, "b.txt", b"rewritten after the first snapshot")
    old = tmp_path / "old"
    _folder(old, big=False)
    service.verify(first)

    report = service.repair(first, str(old))

    assert report.ok and report.repaired == (pack,)
    assert service.verify(second).snapshot.state is SnapshotState.READY


def test_s23_a_pack_shared_with_an_earlier_snapshot_is_rebuilt_when_all_its_files_are_still_recorded(
    service: WorkspaceService, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    _folder(src, big=False)
    service.create("w")
    service.checkpoint("w", str(src))
    pack = _pack_of(service, *SMALL.values())
    write_file(str(src / "d.txt"), b"added later")  # a pack of its own; a, b, c keep their refs
    second = service.checkpoint("w", str(src)).snapshot
    _damage(service, second.id, [pack])

    report = service.repair(second.id, str(src))

    assert report.ok and report.repaired == (pack,)


# --------------------------------------------------------------------------- idempotence, hostile folders


def test_s23_repair_is_idempotent(service: WorkspaceService, tmp_path: Path) -> None:
    src, big, snap = _checked_in(service, tmp_path)
    chunks = _chunks_of(service, big)
    _damage(service, snap.id, [chunks[0], _pack_of(service, *SMALL.values())])
    os.unlink(src / "a.txt")  # the pack cannot come back, the chunk can
    before = tree_digest(src)

    first = service.repair(snap.id, str(src))
    again = service.repair(snap.id, str(src))

    assert chunks[0] in first.repaired and not first.ok
    assert again.repaired == () and again.unrepairable == first.unrepairable and again.missing == first.missing
    write_file(str(src / "a.txt"), SMALL["a.txt"])
    healed = service.repair(snap.id, str(src))
    assert healed.ok and healed.snapshot.root_oid == snap.root_oid
    done = service.repair(snap.id, str(src))
    assert done.nothing_to_repair and done.ok and done.repaired == () and done.bytes_read == 0
    assert tree_digest(src) != before  # only a.txt, written back by the test


def test_s23_a_symlink_where_the_snapshot_records_a_file_is_not_followed(
    service: WorkspaceService, tmp_path: Path
) -> None:
    """The link points outside the folder at a file with exactly the lost content: still not read."""
    src, big, snap = _checked_in(service, tmp_path)
    _damage(service, snap.id, [_chunks_of(service, big)[0], _pack_of(service, *SMALL.values())])
    outside = tmp_path / "outside"
    _folder(outside)
    os.unlink(src / "sub" / "big.bin")
    os.symlink(outside / "sub" / "big.bin", src / "sub" / "big.bin")
    os.unlink(src / "a.txt")
    os.symlink(outside / "a.txt", src / "a.txt")
    before = tree_digest(src)

    report = service.repair(snap.id, str(src))

    assert not report.ok and report.repaired == ()
    assert _reasons(report) == {
        "a.txt": "not-a-file",
        "b.txt": "pack-member-unrepairable",
        "c.txt": "pack-member-unrepairable",
        "sub/big.bin": "not-a-file",
    }
    assert tree_digest(src) == before


def test_s23_a_symlinked_folder_on_the_way_is_not_followed(service: WorkspaceService, tmp_path: Path) -> None:
    src, big, snap = _checked_in(service, tmp_path)
    _damage(service, snap.id, _chunks_of(service, big)[:1])
    outside = tmp_path / "outside"
    _folder(outside)
    os.rename(src / "sub", tmp_path / "moved-sub")
    os.symlink(outside / "sub", src / "sub")

    report = service.repair(snap.id, str(src))

    assert _reasons(report) == {"sub/big.bin": "not-a-file"} and not report.ok


# --------------------------------------------------------------------------- what is not a data object


def test_s23_a_ready_snapshot_has_nothing_to_repair(service: WorkspaceService, tmp_path: Path) -> None:
    src, _, snap = _checked_in(service, tmp_path, big=False)
    report = service.repair(snap.id, str(tmp_path / "does-not-matter"))
    assert report.nothing_to_repair and report.ok and report.snapshot.state is SnapshotState.READY


def test_s23_a_lost_root_object_is_not_rebuilt(service: WorkspaceService, tmp_path: Path) -> None:
    src, _, snap = _checked_in(service, tmp_path, big=False)
    assert snap.root_oid is not None
    _damage(service, snap.id, [snap.root_oid])

    report = service.repair(snap.id, str(src))

    assert not report.ok and _reasons(report) == {"./": "tree-lost"} and report.missing == (snap.root_oid,)


def test_s23_lost_id_chunks_are_rebuilt_from_the_intact_records(
    service: WorkspaceService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root lists at most INLINE_IDS data ids itself; beyond, id chunks (a pure function of the ids)."""
    monkeypatch.setattr(build_module, "INLINE_IDS", 1)
    src, big, snap = _checked_in(service, tmp_path)
    data = set(_chunks_of(service, big)) | {_pack_of(service, *SMALL.values())}
    raw = {bytes.fromhex(oid) for oid in data}
    [id_chunk] = [
        oid
        for oid, p in _plain(service).items()
        if p and len(p) % 32 == 0 and {p[i : i + 32] for i in range(0, len(p), 32)} <= raw
    ]
    _damage(service, snap.id, [id_chunk])

    report = service.repair(snap.id, str(src))

    assert report.ok and report.repaired == (id_chunk,)


def test_s23_a_corrupt_object_still_in_place_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    """A DEGRADED snapshot whose corrupt object was never moved aside: repair's own verify finds it."""
    from tenure.objects import encode, open_object_store
    from tenure.store import open_store

    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    objects = open_object_store(f"file://{tmp_path}/objects")
    service = WorkspaceService(store, objects, str(tmp_path / "data"))
    src, big, snap = _checked_in(service, tmp_path)
    victim = _chunks_of(service, big)[1]
    store.snapshots.move(snap.id, SnapshotState.DEGRADED, expected=SnapshotState.READY)
    path = tmp_path / "objects" / victim[:2] / victim
    os.chmod(path, 0o644)
    path.write_bytes(encode(b"other content")[1])

    report = service.repair(snap.id, str(src))

    assert report.ok and report.set_aside == (victim,) and report.repaired == (victim,)
    assert service.verify(snap.id).ok
    store.close()


# --------------------------------------------------------------------------- CLI


def test_s23_cli_repair_exits_6_while_degraded_and_0_once_ready(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _folder(src)

    def cli(*args: str):  # type: ignore[no-untyped-def]
        return tenure(["--data", str(tmp_path / "data"), *args], cwd=str(tmp_path))

    assert cli("workspace", "create", "w").returncode == 0
    snap = json.loads(cli("--json", "workspace", "checkpoint", "w", "--from", str(src)).stdout)["snapshot"]
    objects = tmp_path / "data" / "objects"
    pack = _stored_pack_of_a(objects)
    os.unlink(objects / pack[:2] / pack)
    assert cli("snapshot", "verify", snap["id"]).returncode == 6
    moved = tmp_path / "a.txt"
    os.rename(src / "a.txt", moved)

    still = cli("snapshot", "repair", snap["id"], "--from", str(src))
    assert still.returncode == 6, still.stderr
    assert "repaired 0 objects" in still.stdout and "3 paths unrepairable" in still.stdout
    assert "a.txt: missing" in still.stdout and "b.txt: pack-member-unrepairable" in still.stdout

    os.rename(moved, src / "a.txt")
    done = cli("--json", "snapshot", "repair", snap["id"], "--from", str(src))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["repaired"] == [pack] and report["snapshot"]["state"] == "READY"
    again = cli("snapshot", "repair", snap["id"], "--from", str(src))
    assert again.returncode == 0 and "nothing to repair" in again.stdout


# --------------------------------------------------------------------------- damage found by a restore


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_s23_a_restore_that_finds_damage_marks_the_snapshot_degraded(tmp_path: Path, damage: str) -> None:
    """A restore that finds a corrupt (or missing) object fails with snapshot-damaged, as a verify would, and
    marks the snapshot DEGRADED the same guarded way: `snapshot list` says so, a fork from it is refused, and a
    repair from the folder makes it READY again."""
    from tenure.objects import encode

    src = tmp_path / "src"
    _folder(src, big=False)

    def cli(*args: str):  # type: ignore[no-untyped-def]
        return tenure(["--data", str(tmp_path / "data"), *args], cwd=str(tmp_path))

    def state(snap_id: str) -> str:
        listed = json.loads(cli("--json", "snapshot", "list", "w").stdout)
        [entry] = [s for s in listed if s["id"] == snap_id]
        return str(entry["state"])

    assert cli("workspace", "create", "w").returncode == 0
    snap = json.loads(cli("--json", "workspace", "checkpoint", "w", "--from", str(src)).stdout)["snapshot"]
    objects = tmp_path / "data" / "objects"
    pack = _stored_pack_of_a(objects)
    path = objects / pack[:2] / pack
    if damage == "corrupt":
        os.chmod(path, 0o644)
        path.write_bytes(encode(b"other content")[1])
    else:
        os.unlink(path)
    assert state(snap["id"]) == "READY"

    restored = cli("--json", "workspace", "restore", "w", "--to", str(tmp_path / "out"))
    assert restored.returncode == 6, restored.stderr
    assert json.loads(restored.stderr)["error"]["code"] == "snapshot-damaged"
    if damage == "corrupt":
        assert not path.exists() and any((objects / "corrupt").rglob(pack + "*")), "moved aside"
    assert state(snap["id"]) == "DEGRADED", "the restore marked what it found"
    fork = cli("--json", "workspace", "create", "fork", "--from-snapshot", snap["id"])
    assert fork.returncode != 0 and json.loads(fork.stderr)["error"]["code"] == "snapshot-not-ready", fork.stderr
    again = cli("--json", "workspace", "restore", "w", "--to", str(tmp_path / "again"))
    assert again.returncode == 6 and json.loads(again.stderr)["error"]["code"] == "snapshot-degraded"

    assert cli("snapshot", "repair", snap["id"], "--from", str(src)).returncode == 0
    assert state(snap["id"]) == "READY"
    assert cli("workspace", "create", "fork", "--from-snapshot", snap["id"]).returncode == 0


def test_s23_a_partial_restore_that_finds_damage_marks_the_snapshot_degraded(
    service: WorkspaceService, tmp_path: Path
) -> None:
    src, big, snap = _checked_in(service, tmp_path)
    assert service.objects.delete_many(_chunks_of(service, big)[:1]) == 1

    _, result = service.restore("w", str(tmp_path / "out"), partial=True)

    assert list(result.lost_paths) == ["sub/big.bin"]
    assert service.store.snapshots.get(snap.id).state is SnapshotState.DEGRADED
    assert (tmp_path / "out" / "a.txt").read_bytes() == SMALL["a.txt"]
