"""Missing and corrupt objects: restore refuses (naming lost paths), partial restore keeps the rest, verify reports.

The expected lost paths come from the tree each test built, never from the
reader under test: the test wrote every file, so it knows which content each
path holds, and docs/snapshots-format.md says where content goes (files under
1 MiB are packed whole into one pack until it reaches 4 MiB; bigger files are
cut into chunks; a lost folder record loses the folder with its subtree,
reported as its path ending in ``/``, the root as ``./``). A victim object is
found by its content (decoded with the codec, checked against its hash), not
by listing the tree.
"""

from __future__ import annotations

import os
import random
import stat
import struct
from dataclasses import dataclass

import pytest

from tenure.errors import IntegrityError
from tenure.objects import decode, encode
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import SnapshotDamagedError, build_tree, restore_tree, tree_closure, verify_tree
from tenure.snapshots import build as build_module
from tenure.snapshots.treeformat import decode_root
from tests.support.folders import PAST_NS, describe, make_sample_tree, random_bytes, write_file

MIB = 1 << 20


def file_contents(src: str) -> dict[str, bytes]:
    """Every regular file below ``src`` (hard links included, symlinks not): relative path → bytes."""
    out = {}
    for folder, _, names in os.walk(src):
        for name in names:
            path = os.path.join(folder, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, src)] = fh.read()
    return out


def stored_plain(store: LocalObjectStore) -> dict[str, bytes]:
    """Every stored object's plain content (decode checks it against its id)."""
    return {oid: decode(oid, store.get(oid)) for oid, _ in store.list_ids()}


@dataclass(frozen=True)
class Layout:
    """Where the sample tree's content went, found by content."""

    root: str
    pack: str
    big_chunks: tuple[str, ...]  # big.bin's chunks, in file order
    tree_chunks: frozenset[str]
    packed: frozenset[str]  # every path whose content is in the pack


def layout(store: LocalObjectStore, src: str) -> Layout:
    files = file_contents(src)
    small = {path: data for path, data in files.items() if 0 < len(data) < MIB}
    big = files["big.bin"]
    plain = stored_plain(store)
    roots = [oid for oid, p in plain.items() if p.startswith(b"TNTR")]
    packs = [oid for oid, p in plain.items() if all(data in p for data in small.values())]
    chunks = sorted((big.find(p), oid) for oid, p in plain.items() if len(p) > 1024 and big.find(p) >= 0)
    assert len(roots) == 1 and len(packs) == 1, "one root object, one pack holds every small file"
    assert b"".join(plain[oid] for _, oid in chunks) == big, "big.bin's chunks tile it"
    trees = set(plain) - set(roots) - set(packs) - {oid for _, oid in chunks}
    assert any(plain[t].startswith(_record_header("")) for t in trees), "the stream starts with the root's record"
    return Layout(roots[0], packs[0], tuple(oid for _, oid in chunks), frozenset(trees), frozenset(small))


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
    built = build_tree(src, store)
    found = layout(store, src)
    assert found.root == built.root
    return src, store, built, found


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_restore_of_a_damaged_tree_fails_naming_the_lost_paths(tmp_path, sample, damage: str) -> None:  # type: ignore[no-untyped-def]
    src, store, built, found = sample
    oid = found.pack
    lost = set(found.packed)
    assert {"src/main.py", "hard-main", "src/pkg/data.txt", "other-0.txt"} <= lost
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
    src, store, built, found = sample
    oid = found.big_chunks[0]
    lost = {"big.bin"}
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
    _, store, built, found = sample
    stored = {oid for oid, _ in store.list_ids()}
    assert verify_tree(built.root, store).ok
    oid = found.pack  # holds src/pkg/data.txt, with every other small file
    store.delete_many([oid]) if damage == "missing" else corrupt(store, oid)
    result = verify_tree(built.root, store)
    assert not result.ok
    assert (result.missing, result.corrupt) == (({oid}, set()) if damage == "missing" else (set(), {oid}))
    assert set(result.lost_paths) == set(found.packed)
    assert result.checked == len(stored) - (1 if damage == "missing" else 0)


def test_sampled_verify_reads_a_repeatable_fraction_but_always_sees_missing(sample) -> None:  # type: ignore[no-untyped-def]
    _, store, built, found = sample
    full = verify_tree(built.root, store)
    half = verify_tree(built.root, store, sample=0.3, seed=4)
    assert half.checked < full.checked
    assert half == verify_tree(built.root, store, sample=0.3, seed=4)
    oid = found.big_chunks[0]
    store.delete_many([oid])
    assert oid in verify_tree(built.root, store, sample=0.0).missing


def _record_header(folder: str) -> bytes:
    """The start of a folder's record in the tree stream (docs/snapshots-format.md: "R" path_len:u32 path)."""
    path = folder.encode()
    return b"R" + struct.pack("<I", len(path)) + path


def test_a_lost_tree_chunk_loses_only_the_folders_recorded_in_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    rng = random.Random(5)
    folders = [f"folder-{d:02d}" for d in range(40)]
    for name in folders:
        folder = src / name
        folder.mkdir(parents=True)
        for _ in range(50):
            file_name = rng.randbytes(60).hex()  # varied names, sizes and times: a stream with cut points
            write_file(
                str(folder / file_name), rng.randbytes(rng.randrange(300)), mtime_ns=PAST_NS + rng.randrange(10**15)
            )
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store)
    plain = stored_plain(store)
    holding = {name: [oid for oid, p in plain.items() if _record_header(name) in p] for name in folders}
    assert all(len(oids) == 1 for oids in holding.values()), "each folder record starts in one tree chunk"
    victim = holding["folder-20"][0]
    in_victim = [name for name in folders if holding[name] == [victim]]
    # a lost chunk loses the records that start in it, and the one that runs into it from the chunk before
    first = folders.index(in_victim[0])
    starts_clean = plain[victim].startswith(_record_header(in_victim[0]))
    lost_folders = {f"{name}/" for name in in_victim} | (set() if starts_clean else {f"{folders[first - 1]}/"})
    assert 0 < len(lost_folders) < 40 and first > 0
    store.delete_many([victim])

    closure = tree_closure(built.root, store)
    assert closure == built.objects and victim not in store.has_many(closure), "the closure check finds it"
    report = verify_tree(built.root, store)
    assert victim in report.missing
    assert {p for p in report.lost_paths if p.endswith("/")} == lost_folders
    assert set(report.lost_paths) == lost_folders
    with pytest.raises(SnapshotDamagedError) as caught:
        restore_tree(built.root, store, str(tmp_path / "refused"))
    assert set(caught.value.context["lost_paths"]) == lost_folders

    result = restore_tree(built.root, store, str(tmp_path / "dest"), partial=True)
    restored = set(os.listdir(tmp_path / "dest"))
    assert {f"{name}/" for name in restored} == {f"{name}/" for name in folders} - lost_folders
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
    stored = {oid for oid, _ in store.list_ids()}  # a fresh store holds exactly this tree's objects
    assert {c.oid for c in root.id_chunks} <= stored
    assert tree_closure(built.root, store) == built.objects == stored
    assert verify_tree(built.root, store).ok

    store.delete_many([root.id_chunks[0].oid])
    assert tree_closure(built.root, store) == built.objects, "damaged id chunks: the closure comes from the files"
    report = verify_tree(built.root, store)
    assert report.missing == {root.id_chunks[0].oid} and report.lost_paths == ()
    restore_tree(built.root, store, str(tmp_path / "dest"))
    assert describe(str(tmp_path / "dest")) == describe(str(src))


def test_a_missing_root_fails_every_reader(tmp_path, sample) -> None:  # type: ignore[no-untyped-def]
    _, store, built, _ = sample
    store.delete_many([built.root])
    for call in (
        lambda: tree_closure(built.root, store),
        lambda: restore_tree(built.root, store, str(tmp_path / "d1"), partial=True),
    ):
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


def _victims(found: Layout) -> dict[str, tuple[str, set[str]]]:
    """Each victim object with the paths it loses: a big.bin chunk, the pack, the (only) tree chunk, the root."""
    assert len(found.tree_chunks) == 1, "the sample's tree stream fits one chunk: losing it loses the root record"
    return {
        "data": (found.big_chunks[0], {"big.bin"}),
        "packed": (found.pack, set(found.packed)),
        "tree-chunk": (next(iter(found.tree_chunks)), {"./"}),
        "root": (found.root, {"./"}),
    }


@pytest.mark.parametrize("forgery", ["garbage", "zstd-frame"])
@pytest.mark.parametrize("victim", ["data", "packed", "tree-chunk", "root"])
def test_same_length_corruption_is_refused_by_restore_and_reported_by_verify(
    tmp_path, sample, victim: str, forgery: str
) -> None:  # type: ignore[no-untyped-def]
    _, store, built, found = sample
    oid, lost = _victims(found)[victim]
    payload = store.get(oid)
    forged = (
        _same_length_garbage(payload) if forgery == "garbage" else _same_length_frame(decode(oid, payload), payload)
    )
    _replace(store, oid, forged)

    with pytest.raises(SnapshotDamagedError) as caught:
        restore_tree(built.root, store, str(tmp_path / "dest"))
    assert isinstance(caught.value, IntegrityError) and oid in caught.value.context["corrupt"]
    assert set(caught.value.context["lost_paths"]) == lost
    assert not os.path.exists(tmp_path / "dest")
    assert not [n for n in os.listdir(tmp_path) if "tenure-restore" in n]

    report = verify_tree(built.root, store)
    assert not report.ok and oid in report.corrupt and not report.missing
    assert set(report.lost_paths) == lost
