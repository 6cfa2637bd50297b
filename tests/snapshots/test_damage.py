"""Missing and corrupt objects: restore refuses (naming lost paths), partial restore keeps the rest, verify reports."""

from __future__ import annotations

import os
import random

import pytest

from tenure.errors import IntegrityError
from tenure.objects import decode, encode
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import SnapshotDamagedError, build_tree, restore_tree, tree_closure, verify_tree
from tenure.snapshots import build as build_module
from tenure.snapshots.treeformat import decode_root
from tenure.snapshots.walk import load_listing
from tests.snapshots.helpers import PAST_NS, describe, make_sample_tree, random_bytes, write_file


def oid_of(store: LocalObjectStore, root: str, path: str) -> str:
    """The first data object holding ``path``'s content."""
    listing = load_listing(root, store)
    return next(item.refs[0][0] for rel, item in listing.files if os.fsdecode(rel) == path)


def users_of(store: LocalObjectStore, root: str, oid: str) -> set[str]:
    listing = load_listing(root, store)
    return {os.fsdecode(rel) for rel, item in listing.files if any(r[0] == oid for r in item.refs)}


def corrupt(store: LocalObjectStore, oid: str) -> None:
    """Replace an object's payload by valid zstd of other content (wrong hash)."""
    path = store._path(oid)
    os.chmod(path, 0o644)
    with open(path, "wb") as fh:
        fh.write(encode(b"not the original content")[1])


@pytest.fixture
def sample(tmp_path):  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    make_sample_tree(src)
    for i in range(20):
        write_file(os.path.join(src, f"other-{i}.txt"), b"other file %d" % i)
    store = LocalObjectStore(str(tmp_path / "objects"))
    return src, store, build_tree(src, store)


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_restore_of_a_damaged_tree_fails_naming_the_lost_paths(tmp_path, sample, damage: str) -> None:  # type: ignore[no-untyped-def]
    src, store, built = sample
    oid = oid_of(store, built.root, "src/main.py")
    lost = users_of(store, built.root, oid) | {"hard-main"}
    assert "src/main.py" in lost
    store.delete_many([oid]) if damage == "missing" else corrupt(store, oid)

    with pytest.raises(SnapshotDamagedError) as caught:
        restore_tree(built.root, store, str(tmp_path / "dest"))
    error = caught.value
    assert isinstance(error, IntegrityError) and error.code == "snapshot-damaged"
    assert set(error.context["lost_paths"]) == lost
    assert f"{len(lost)} paths" in error.message and repr(sorted(lost)[0]) in error.message
    assert error.context[damage] == [oid]
    assert not os.path.exists(tmp_path / "dest")
    assert not [n for n in os.listdir(tmp_path) if "tenure-restore" in n], "no temporary folder is left behind"


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_partial_restore_restores_every_intact_file(tmp_path, sample, damage: str) -> None:  # type: ignore[no-untyped-def]
    src, store, built = sample
    oid = oid_of(store, built.root, "big.bin")
    lost = users_of(store, built.root, oid)
    assert lost == {"big.bin"}
    store.delete_many([oid]) if damage == "missing" else corrupt(store, oid)

    dest = str(tmp_path / "dest")
    result = restore_tree(built.root, store, dest, partial=True)
    assert set(result.lost_paths) == lost and not result.complete
    assert (result.missing if damage == "missing" else result.corrupt) == {oid}
    want = {k: v for k, v in describe(src).entries.items() if os.fsdecode(k) not in lost}
    got = describe(dest).entries
    assert {k: v for k, v in got.items() if v[0] != "dir"} == {k: v for k, v in want.items() if v[0] != "dir"}
    assert not os.path.exists(os.path.join(dest, "big.bin")), "a file with a lost chunk is not left half-written"


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_verify_reports_missing_and_corrupt_objects_and_lost_paths(sample, damage: str) -> None:  # type: ignore[no-untyped-def]
    _, store, built = sample
    assert verify_tree(built.root, store).ok
    oid = oid_of(store, built.root, "src/pkg/data.txt")
    lost = users_of(store, built.root, oid)
    store.delete_many([oid]) if damage == "missing" else corrupt(store, oid)
    result = verify_tree(built.root, store)
    assert not result.ok
    assert (result.missing, result.corrupt) == (({oid}, set()) if damage == "missing" else (set(), {oid}))
    assert set(result.lost_paths) == lost
    assert result.checked == len(built.objects) - (1 if damage == "missing" else 0)


def test_sampled_verify_reads_a_repeatable_fraction_but_always_sees_missing(sample) -> None:  # type: ignore[no-untyped-def]
    _, store, built = sample
    full = verify_tree(built.root, store)
    half = verify_tree(built.root, store, sample=0.3, seed=4)
    assert half.checked < full.checked
    assert half == verify_tree(built.root, store, sample=0.3, seed=4)
    oid = oid_of(store, built.root, "big.bin")
    store.delete_many([oid])
    assert oid in verify_tree(built.root, store, sample=0.0).missing


def test_a_lost_tree_chunk_loses_only_the_folders_recorded_in_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    rng = random.Random(5)
    for d in range(40):
        folder = src / f"folder-{d:02d}"
        folder.mkdir(parents=True)
        for _ in range(50):
            name = rng.randbytes(60).hex()  # varied names, sizes and times: a stream with cut points
            write_file(str(folder / name), rng.randbytes(rng.randrange(300)), mtime_ns=PAST_NS + rng.randrange(10**15))
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store)
    chunks = decode_root(built.root, decode(built.root, store.get(built.root))).chunks
    assert len(chunks) >= 3, "the tree stream spans several chunks"
    victim = chunks[1].oid
    store.delete_many([victim])

    closure = tree_closure(built.root, store)
    assert closure == built.objects and victim not in store.has_many(closure), "the closure check finds it"
    report = verify_tree(built.root, store)
    assert victim in report.missing
    lost_folders = {p for p in report.lost_paths if p.endswith("/")}
    assert lost_folders and len(lost_folders) < 40
    with pytest.raises(SnapshotDamagedError) as caught:
        restore_tree(built.root, store, str(tmp_path / "refused"))
    assert set(caught.value.context["lost_paths"]) == lost_folders

    result = restore_tree(built.root, store, str(tmp_path / "dest"), partial=True)
    restored = set(os.listdir(tmp_path / "dest"))
    assert {f"{name}/" for name in restored} | lost_folders == {f"folder-{d:02d}/" for d in range(40)}
    assert set(result.lost_paths) == lost_folders
    for name in restored:
        assert describe(str(tmp_path / "dest" / name)) == describe(str(src / name))


def test_many_data_objects_are_listed_in_id_chunks(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(build_module, "INLINE_IDS", 4)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(12):
        write_file(str(src / f"big-{i}"), random_bytes((1 << 20) + i, i))
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store)
    root = decode_root(built.root, decode(built.root, store.get(built.root)))
    assert root.ids == [] and root.id_chunks, "more ids than fit inline go to id chunks"
    listing = load_listing(built.root, store)
    parsed = {built.root} | set(listing.trees) | listing.data_oids() | {c.oid for c in root.id_chunks}
    assert tree_closure(built.root, store) == built.objects == parsed
    assert verify_tree(built.root, store).ok

    store.delete_many([root.id_chunks[0].oid])
    assert tree_closure(built.root, store) == built.objects, "damaged id chunks: the closure comes from the files"
    report = verify_tree(built.root, store)
    assert report.missing == {root.id_chunks[0].oid} and report.lost_paths == ()
    restore_tree(built.root, store, str(tmp_path / "dest"))
    assert describe(str(tmp_path / "dest")) == describe(str(src))


def test_a_missing_root_fails_every_reader(tmp_path, sample) -> None:  # type: ignore[no-untyped-def]
    _, store, built = sample
    store.delete_many([built.root])
    for call in (lambda: tree_closure(built.root, store),
                 lambda: restore_tree(built.root, store, str(tmp_path / "d1"), partial=True)):
        with pytest.raises(SnapshotDamagedError) as caught:
            call()
        assert caught.value.context["lost_paths"] == ["./"]
    assert verify_tree(built.root, store).lost_paths == ("./",)


# --------------------------------------------------------------------------- forgeries of the same length

def _replace(store: LocalObjectStore, oid: str, payload: bytes) -> None:
    path = store._path(oid)
    assert os.path.getsize(path) == len(payload), "the forgery has exactly the stored length"
    os.chmod(path, 0o644)
    with open(path, "wb") as fh:
        fh.write(payload)


def _same_length_garbage(payload: bytes) -> bytes:
    """Other bytes of the same length: every byte changed, so not even the zstd header survives."""
    return bytes(b ^ 0x5A for b in payload)


def _same_length_frame(plain: bytes, payload: bytes) -> bytes:
    """A valid zstd frame of other plain content (one byte changed) whose length equals ``payload``'s."""
    for position in range(len(plain) - 1, -1, -1):
        for delta in (1, 2, 3, 0x20, 0x80):
            forged = bytearray(plain)
            forged[position] ^= delta
            _, candidate = encode(bytes(forged))
            if len(candidate) == len(payload) and candidate != payload:
                assert decode(encode(bytes(forged))[0], candidate) == bytes(forged)
                return candidate
    raise AssertionError("no same-length frame found")


def _victims(store: LocalObjectStore, built) -> dict[str, str]:  # type: ignore[no-untyped-def]
    root = decode_root(built.root, decode(built.root, store.get(built.root)))
    return {"data": oid_of(store, built.root, "big.bin"), "packed": oid_of(store, built.root, "src/main.py"),
            "tree-chunk": root.chunks[0].oid, "root": built.root}


@pytest.mark.parametrize("forgery", ["garbage", "zstd-frame"])
@pytest.mark.parametrize("victim", ["data", "packed", "tree-chunk", "root"])
def test_same_length_corruption_is_refused_by_restore_and_reported_by_verify(tmp_path, sample, victim: str,
                                                                            forgery: str) -> None:  # type: ignore[no-untyped-def]
    _, store, built = sample
    oid = _victims(store, built)[victim]
    payload = store.get(oid)
    forged = _same_length_garbage(payload) if forgery == "garbage" \
        else _same_length_frame(decode(oid, payload), payload)
    _replace(store, oid, forged)

    with pytest.raises(SnapshotDamagedError) as caught:
        restore_tree(built.root, store, str(tmp_path / "dest"))
    assert isinstance(caught.value, IntegrityError) and oid in caught.value.context["corrupt"]
    assert caught.value.context["lost_paths"]
    if victim in ("tree-chunk", "root"):
        assert "./" in caught.value.context["lost_paths"]
    assert not os.path.exists(tmp_path / "dest")
    assert not [n for n in os.listdir(tmp_path) if "tenure-restore" in n]

    report = verify_tree(built.root, store)
    assert not report.ok and oid in report.corrupt and not report.missing
    assert set(report.lost_paths) == set(caught.value.context["lost_paths"])
