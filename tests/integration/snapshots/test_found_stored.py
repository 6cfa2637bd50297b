"""S-12: an object a build computes and finds already stored is read back before it is trusted. One that is
not what its id says (bit rot, a forged write, a foreign tool) is moved aside and stored again from the
build's own content, so the snapshot's closure is whole and content-addressed; objects that are sound are
left as they are. On the folder store and on PostgreSQL, plain and encrypted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tenure.objects import ObjectStore, open_object_store
from tenure.objects.codec import codec_of
from tenure.objects.crypto import KeySource, init_encryption
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree, known_trees, verify_tree


@pytest.fixture(params=["folder", "folder+encrypted", pytest.param("postgres", marks=pytest.mark.postgres)])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "postgres":
        from tests.conftest import new_pg_schema_url

        return open_object_store(new_pg_schema_url())
    store = LocalObjectStore(str(tmp_path / "objects"))
    if request.param == "folder+encrypted":
        key_file = tmp_path / "objects.key"
        key_file.write_bytes(os.urandom(32))
        init_encryption(store, KeySource(key_file=str(key_file)))
    return store


def small_files(root: Path, count: int = 40) -> Path:
    root.mkdir()
    for i in range(count):
        (root / f"f{i:03d}.txt").write_bytes(f"file {i} ".encode() * (i + 3))
    return root


def data_ids(src: Path, objects: ObjectStore) -> tuple[str, frozenset[str]]:
    """A first build of ``src``: its root id and the ids of the objects that hold the files' content (the
    rest of the closure is the tree layer: the root and the folder's record)."""
    first = build_tree(src, objects)
    codec = codec_of(objects)
    return first.root, frozenset(oid for oid in first.objects if b"file 0 " in codec.decode(oid, objects.get(oid)))


def test_s12_a_damaged_pack_found_stored_is_replaced_and_counted(objects: ObjectStore, tmp_path: Path) -> None:
    src = small_files(tmp_path / "src")
    root, data = data_ids(src, objects)
    assert len(data) == 1, "the small files share one pack"
    codec_payload = objects.get(next(iter(data)))
    assert objects.delete_many(data) == len(data)
    forged = bytearray(codec_payload)
    forged[len(forged) // 2] ^= 0xFF  # a sealed or compressed payload with one byte flipped
    assert objects.put_many([(oid, bytes(forged)) for oid in data]) == len(data)
    assert not verify_tree(root, objects).ok, "the store now holds damaged objects under the build's ids"

    again = build_tree(src, objects)
    assert again.root == root and again.replaced == len(data)
    assert verify_tree(root, objects).ok, "every object of the closure is what its id says"


def test_s12_sound_objects_found_stored_are_left_alone(objects: ObjectStore, tmp_path: Path) -> None:
    src = small_files(tmp_path / "src")
    root, data = data_ids(src, objects)
    before = {oid: objects.get(oid) for oid in data}
    again = build_tree(src, objects)  # no index: every object is computed again and found stored
    assert (again.root, again.replaced, again.bytes_new) == (root, 0, 0)
    assert {oid: objects.get(oid) for oid in data} == before


def test_s12_a_damaged_tree_found_stored_is_replaced(objects: ObjectStore, tmp_path: Path) -> None:
    src = small_files(tmp_path / "src")
    root, _ = data_ids(src, objects)
    payload = bytearray(objects.get(root))
    payload[len(payload) // 2] ^= 0xFF
    assert objects.delete_many([root]) == 1 and objects.put_many([(root, bytes(payload))]) == 1
    assert build_tree(src, objects).root == root
    assert verify_tree(root, objects).ok


def test_s12_the_tree_hint_vouches_for_the_last_builds_trees_only(objects: ObjectStore, tmp_path: Path) -> None:
    """An index's tree hint names the tree-layer objects its last build stored or checked (so the next build
    trusts those without a read); a damaged or foreign hint names nothing, and a damaged tree it does not
    name is read back, moved aside and stored again."""
    src = small_files(tmp_path / "src")
    (src / "sub").mkdir()
    (src / "sub" / "x.txt").write_text("x")
    index = str(tmp_path / "index")
    first = build_tree(src, objects, index_path=index)
    hinted = known_trees.load(index)
    assert first.root in hinted and hinted <= first.objects and len(hinted) >= 2, "the root and the sub-folder"
    Path(known_trees.hint_path(index)).write_bytes(b"not a hint")
    assert known_trees.load(index) == frozenset()
    payload = bytearray(objects.get(first.root))
    payload[len(payload) // 2] ^= 0xFF
    assert objects.delete_many([first.root]) == 1 and objects.put_many([(first.root, bytes(payload))]) == 1
    again = build_tree(src, objects, index_path=index)
    assert (again.root, again.replaced) == (first.root, 1)
    assert verify_tree(first.root, objects).ok
    assert known_trees.load(index) == hinted, "written again whole"
