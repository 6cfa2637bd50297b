"""The local index: unchanged files are not read, edits restore to the right version, little is re-uploaded."""

from __future__ import annotations

import os
import time

from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree, restore_tree
from tenure.snapshots.index import Index, load_index
from tenure.snapshots.walk import load_listing
from tests.support.folders import PAST_NS, describe, make_sample_tree, random_bytes, write_file

MiB = 1 << 20


class RecordingStore(LocalObjectStore):
    """The real folder backend, noting which calls were made in which order."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.calls: list[tuple[str, frozenset[str]]] = []

    def has_many(self, oids):  # type: ignore[no-untyped-def]
        oids = frozenset(oids)
        self.calls.append(("has_many", oids))
        return super().has_many(oids)

    def put_many(self, items):  # type: ignore[no-untyped-def]
        items = list(items)
        self.calls.append(("put_many", frozenset(oid for oid, _ in items)))
        return super().put_many(items)


def test_unchanged_folder_gives_same_root_and_reads_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, index = str(tmp_path / "src"), str(tmp_path / "index")
    make_sample_tree(src)
    store = RecordingStore(str(tmp_path / "objects"))
    first = build_tree(src, store, index_path=index)
    assert first.bytes_read > 3 * MiB and first.bytes_new > 0
    store.calls.clear()
    index_written = os.stat(index).st_mtime_ns
    pinned: list[frozenset[str]] = []
    second = build_tree(src, store, index_path=index, pin=pinned.append)
    assert second.root == first.root
    assert (second.bytes_read, second.bytes_new) == (0, 0)
    assert second.objects == first.objects
    assert pinned == [second.objects], "the whole closure is pinned once"
    assert store.calls == [("has_many", second.objects)], "one existence check, after the pin, nothing stored"
    assert os.stat(index).st_mtime_ns == index_written, "an index that did not change is not rewritten"


def test_edits_between_builds_restore_to_the_right_version(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, index = str(tmp_path / "src"), str(tmp_path / "index")
    make_sample_tree(src)
    store = LocalObjectStore(str(tmp_path / "objects"))
    v1 = build_tree(src, store, index_path=index)
    want_v1 = describe(src)

    write_file(os.path.join(src, "src", "main.py"), b"print('changed')\n", mode=0o755, mtime_ns=PAST_NS + 1)
    with open(os.path.join(src, "big.bin"), "ab") as fh:
        fh.write(b"appended tail")
    os.unlink(os.path.join(src, "src", "pkg", "data.txt"))
    write_file(os.path.join(src, "src", "pkg", "new.txt"), b"brand new")
    os.mkdir(os.path.join(src, "added-folder"))
    v2 = build_tree(src, store, index_path=index)
    want_v2 = describe(src)
    assert v2.root != v1.root
    assert v2.bytes_read < 3 * MiB + 100, "only the changed files are read"

    restore_tree(v1.root, store, str(tmp_path / "v1"))
    restore_tree(v2.root, store, str(tmp_path / "v2"))
    assert describe(str(tmp_path / "v1")) == want_v1
    assert describe(str(tmp_path / "v2")) == want_v2


def test_small_edits_to_a_big_file_store_little(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, index = tmp_path / "src", str(tmp_path / "index")
    src.mkdir()
    path = str(src / "big.bin")
    original = random_bytes(24 * MiB, 7)
    write_file(path, original)
    store = LocalObjectStore(str(tmp_path / "objects"))
    first = build_tree(str(src), store, index_path=index)
    assert first.bytes_new > 20 * MiB

    edits = {
        "overwrite": original[: 10 * MiB] + b"EDITED" + original[10 * MiB + 6 :],
        "insert": b"inserted at the front" + original,
        "append": original + b"appended at the end",
    }
    for kind, content in edits.items():
        write_file(path, content, mtime_ns=PAST_NS + len(kind))
        built = build_tree(str(src), store, index_path=index)
        assert built.bytes_read == len(content)
        assert built.bytes_new < 6 * MiB, f"{kind}: {built.bytes_new} bytes stored for a tiny change"
        dest = tmp_path / f"restored-{kind}"
        restore_tree(built.root, store, str(dest))
        assert (dest / "big.bin").read_bytes() == content


def test_restore_writes_an_index_so_the_next_build_reads_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    make_sample_tree(src)
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(src, store)
    dest, index = str(tmp_path / "dest"), str(tmp_path / "dest-index")
    restore_tree(built.root, store, dest, index_path=index)
    again = build_tree(dest, store, index_path=index)
    assert again.root == built.root
    assert (again.bytes_read, again.bytes_new) == (0, 0)


def test_a_racy_file_is_read_again_but_keeps_its_refs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A file whose mtime is not older than the index cannot be trusted by its metadata."""
    src, index = tmp_path / "src", str(tmp_path / "index")
    src.mkdir()
    future = time.time_ns() + 3600 * 10**9
    write_file(str(src / "racy.txt"), b"written in the same tick as the index", mtime_ns=future)
    write_file(str(src / "old.txt"), b"old and settled")
    os.utime(src, ns=(PAST_NS, PAST_NS))
    store = LocalObjectStore(str(tmp_path / "objects"))
    first = build_tree(str(src), store, index_path=index)
    second = build_tree(str(src), store, index_path=index)
    assert second.bytes_read == len(b"written in the same tick as the index"), "only the racy file is read"
    assert second.root == first.root and second.bytes_new == 0, "same content keeps the same refs"

    dest, dest_index = str(tmp_path / "dest"), str(tmp_path / "dest-index")
    restore_tree(first.root, store, dest, index_path=dest_index)
    after_restore = build_tree(dest, store, index_path=dest_index)
    assert after_restore.root == first.root and after_restore.bytes_new == 0, "restore recorded the racy digest"


def test_racy_rule_compares_mtime_with_the_index_write_time() -> None:
    entry = (10, 5_000, 1, 6_000, 0o100644, b"", ())
    index = Index({b"f": entry}, written_ns=5_001)
    assert index.unchanged(b"f", entry[:5]) is not None
    assert Index({b"f": entry}, written_ns=5_000).unchanged(b"f", entry[:5]) is None, "mtime == index time is racy"
    assert index.unchanged(b"f", (10, 5_000, 2, 6_000, 0o100644)) is None, "another inode"
    assert index.unchanged(b"f", (10, 5_000, 1, 6_001, 0o100644)) is None, "ctime moved"


def test_damaged_index_is_treated_as_empty(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, index = str(tmp_path / "src"), str(tmp_path / "index")
    make_sample_tree(src)
    store = LocalObjectStore(str(tmp_path / "objects"))
    first = build_tree(src, store, index_path=index)
    with open(index, "r+b") as fh:
        fh.seek(60)
        fh.write(b"garbage")
    assert len(load_index(index)) == 0
    again = build_tree(src, store, index_path=index)
    assert again.bytes_read == first.bytes_read and again.root == first.root


def test_objects_missing_behind_the_index_are_uploaded_again(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, index = str(tmp_path / "src"), str(tmp_path / "index")
    make_sample_tree(src)
    store = RecordingStore(str(tmp_path / "objects"))
    first = build_tree(src, store, index_path=index)
    data = {oid for oid, _ in store.list_ids()} - set(load_listing(first.root, store).trees)
    store.delete_many(data)
    store.calls.clear()

    second = build_tree(src, store, index_path=index, pin=lambda oids: store.calls.append(("pin", oids)))
    assert store.calls[:2] == [("pin", first.objects), ("has_many", first.objects)], (
        "the index's closure is pinned, then checked in one call, before anything is read"
    )
    assert [oids for call, oids in store.calls if call == "pin"][-1] == second.objects
    assert second.bytes_read == first.bytes_read, "every file behind a missing object is read again"
    assert store.has_many(second.objects) == set(second.objects)
    dest = str(tmp_path / "dest")
    restore_tree(second.root, store, dest)
    assert describe(dest) == describe(src)
