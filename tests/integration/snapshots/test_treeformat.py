"""The tree encoding: canonical, versioned, and a crafted tree can never write outside the restore folder."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenure.objects import encode
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import TreeFormatError, restore_tree
from tenure.snapshots import walk as walk_module
from tenure.snapshots.treeformat import (
    MAGIC,
    VERSION,
    ChunkRef,
    DirItem,
    FileItem,
    Root,
    SymlinkItem,
    Tree,
    decode_root,
    encode_record,
    encode_root,
    file_entry,
    folder_entry,
    iter_records,
    symlink_entry,
)

OID = "ab" * 32


def test_records_round_trip_and_are_canonical() -> None:
    items = [
        SymlinkItem(b"z-link", 0o777, 5, b"../target"),
        DirItem(b"sub"),
        FileItem(b"a file", 0o755, -3, 12, ((OID, 0, 5), (OID, 9, 7)), b""),
        FileItem(b"b", 0o644, 7, 0, (), b"sub/a"),
    ]
    data = encode_record(b"x/y", 0o700, 123, items)
    assert data == encode_record(b"x/y", 0o700, 123, reversed(items)), "order of input does not matter"
    [(path, tree)] = list(iter_records(data, strict=True))
    assert path == b"x/y"
    assert tree == Tree(0o700, 123, tuple(sorted(items, key=lambda i: i.name)))


def test_a_root_object_lists_its_chunks_and_carries_a_version() -> None:
    root = Root([ChunkRef(OID, 10, 0), ChunkRef("cd" * 32, 20, 0xFFFFFFFF)], ["ef" * 32, OID], [])
    data = encode_root(root)
    assert decode_root("r", data) == root
    chunked = Root([ChunkRef(OID, 10, 0)], [], [ChunkRef("cd" * 32, 64, 0xFFFFFFFF)])
    assert decode_root("r", encode_root(chunked)) == chunked
    with pytest.raises(TreeFormatError, match="version 9"):
        decode_root("r", data[:4] + bytes([9]) + data[5:])
    with pytest.raises(TreeFormatError):
        decode_root("r", b"NOPE" + data[4:])


def test_a_truncated_stream_is_an_error() -> None:
    data = encode_record(b"", 0o755, 1, [FileItem(b"f", 0o644, 1, 3, ((OID, 0, 3),), b"")])
    with pytest.raises(TreeFormatError):
        list(iter_records(data[:-5], strict=True))
    assert list(iter_records(data[:-5], strict=False)) == []


def store_tree(store: LocalObjectStore, *records: bytes) -> str:
    stream = b"".join(records)
    oid, payload = encode(stream)
    root, root_payload = encode(encode_root(Root([ChunkRef(oid, len(stream), 0)], [OID], [])))
    store.put_many([(oid, payload), (root, root_payload)])
    return root


@pytest.mark.parametrize(
    "records",
    [
        [encode_record(b"", 0o755, 1, [FileItem(b"..", 0o644, 1, 10, ((OID, 0, 10),), b"")])],
        [encode_record(b"", 0o755, 1, [FileItem(b"a/b", 0o644, 1, 10, ((OID, 0, 10),), b"")])],
        [encode_record(b"", 0o755, 1, [DirItem(b"d")]), encode_record(b"d/../..", 0o755, 1, [])],
        [encode_record(b"", 0o755, 1, [FileItem(b"f", 0o644, 1, 10, ((OID, 0, 10),), b"../../etc/passwd")])],
        [
            encode_record(b"", 0o755, 1, [SymlinkItem(b"x", 0o777, 1, b"/tmp")]),
            encode_record(b"x", 0o755, 1, [FileItem(b"through-the-link", 0o644, 1, 10, ((OID, 0, 10),), b"")]),
        ],
        [encode_record(b"", 0o755, 1, [FileItem(b"f", 0o644, 1, 11, ((OID, 0, 10),), b"")])],
        [encode_record(b"", 0o755, 1, []), encode_record(b"", 0o755, 1, [])],
    ],
    ids=["dot-dot", "slash", "record-path", "link-path", "through-symlink", "size-mismatch", "duplicate-root"],
)
def test_a_crafted_tree_is_refused_before_anything_is_written(tmp_path, records: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    store = LocalObjectStore(str(tmp_path / "objects"))
    root = store_tree(store, *records)
    with pytest.raises(TreeFormatError):
        restore_tree(root, store, str(tmp_path / "dest"))
    assert sorted(os.listdir(tmp_path)) == ["objects"]


SAMPLE_STREAM = b"".join(
    [
        encode_record(
            b"",
            0o755,
            1,
            [DirItem(b"d"), FileItem(b"f", 0o644, 2, 10, ((OID, 0, 10),), b""), SymlinkItem(b"s", 0o777, 3, b"target")],
        ),
        encode_record(b"d", 0o700, 4, [FileItem(b"g", 0o600, 5, 3, ((OID, 1, 1), (OID, 2, 2)), b"f")]),
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_bytes_give_a_tree_format_error_or_a_valid_parse(data: st.DataObject) -> None:
    stream = bytearray(SAMPLE_STREAM)
    for _ in range(data.draw(st.integers(1, 4))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(stream)))
    for strict in (True, False):
        try:
            records = list(iter_records(bytes(stream[:cut]), strict=strict))
        except TreeFormatError:
            continue
        for _, tree in records:
            for item in tree.items:
                assert item.name and b"/" not in item.name and item.name not in (b".", b"..")


# --------------------------------------------------------------------------- hostile tree objects

FILE = FileItem(b"f", 0o644, 1, 3, ((OID, 0, 3),), b"")


def _file_entry_named(name: bytes) -> bytes:
    return file_entry(name, 0o644, 1, 3, ((OID, 0, 3),), b"")


def _raw_record(path: bytes, entries: list[bytes], count: int | None = None) -> bytes:
    """A folder record with entries exactly as given (no sorting, no checks), and any entry count."""
    return b"".join(
        (
            struct.pack("<BI", ord("R"), len(path)),
            path,
            struct.pack("<IqI", 0o755, 1, len(entries) if count is None else count),
            *entries,
        )
    )


BAD_NAMES = {
    "empty": b"",
    "dot": b".",
    "dot-dot": b"..",
    "slash": b"a/b",
    "leading-slash": b"/etc",
    "nul": b"a\0b",
    "too-long": b"n" * 256,
}


@pytest.mark.parametrize("kind", ["file", "symlink", "folder"])
@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_tree_format_refuses_an_illegal_name_with_a_stable_problem(name: bytes, kind: str) -> None:
    entry = {
        "file": _file_entry_named(name),
        "symlink": symlink_entry(name, 0o777, 1, b"t"),
        "folder": folder_entry(name),
    }[kind]
    for entries in ([entry], [entry, _file_entry_named(b"zz")]):  # first entry, and before a later one
        for strict in (True, False):
            with pytest.raises(TreeFormatError) as caught:
                list(iter_records(_raw_record(b"", entries), strict=strict, root="r"))
            assert caught.value.code == "tree-format" and caught.value.context["problem"] == "bad-name"
            assert caught.value.context["oid"] == "r"


@pytest.mark.parametrize("kinds", [("file", "file"), ("folder", "file"), ("symlink", "folder")])
def test_tree_format_refuses_duplicate_names(kinds: tuple[str, str]) -> None:
    make = {
        "file": _file_entry_named(b"same"),
        "symlink": symlink_entry(b"same", 0o777, 1, b"t"),
        "folder": folder_entry(b"same"),
    }
    record_ = _raw_record(b"", [_file_entry_named(b"a"), make[kinds[0]], make[kinds[1]]])
    with pytest.raises(TreeFormatError) as caught:
        list(iter_records(record_, strict=True, root="r"))
    assert caught.value.context["problem"] == "duplicate-name"


def test_tree_format_refuses_unsorted_names() -> None:
    with pytest.raises(TreeFormatError) as caught:
        list(iter_records(_raw_record(b"", [_file_entry_named(b"b"), _file_entry_named(b"a")]), strict=True))
    assert caught.value.context["problem"] == "unsorted-names"


@pytest.mark.parametrize("path", [b"a//b", b"a/", b"/a", b"a/./b", b"a/../b", b"a\0b"])
def test_tree_format_refuses_an_unclean_record_or_link_path(path: bytes) -> None:
    for record_ in (_raw_record(path, []), _raw_record(b"", [file_entry(b"f", 0o644, 1, 3, ((OID, 0, 3),), path)])):
        with pytest.raises(TreeFormatError) as caught:
            list(iter_records(record_, strict=True))
        assert caught.value.context["problem"] == "bad-path"


@pytest.mark.parametrize("count", [2, 1000, 2**32 - 1])
def test_tree_format_refuses_an_entry_count_beyond_the_bytes_left(count: int) -> None:
    """A count no remaining bytes could hold is refused at once: no loop runs over it."""
    record_ = _raw_record(b"", [_file_entry_named(b"f")], count=count)
    with pytest.raises(TreeFormatError) as caught:
        list(iter_records(record_, strict=True, root="r"))
    assert caught.value.context["problem"] == "truncated"
    assert list(iter_records(record_, strict=False)) == [], "a record cut short is dropped when resyncing"


@pytest.mark.parametrize("field", ["path", "name", "link", "target", "refs", "root-chunks", "root-ids"])
def test_tree_format_refuses_a_length_beyond_the_bytes_left(field: str) -> None:
    huge = 2**32 - 1
    if field.startswith("root"):
        good = encode_root(Root([ChunkRef(OID, 10, 0)], [OID], []))
        bad = (
            good[:5] + struct.pack("<I", huge) + good[9:]
            if field == "root-chunks"
            else good[:49] + struct.pack("<I", huge) + good[53:]
        )
        with pytest.raises(TreeFormatError) as caught:
            decode_root("r", bad)
        assert caught.value.context["problem"] == "truncated"
        return
    if field == "path":
        data = struct.pack("<BI", ord("R"), huge) + b"x" * 40
    elif field == "name":
        data = _raw_record(b"", [struct.pack("<BH", ord("d"), 60000) + b"n"])
    elif field == "target":
        data = _raw_record(b"", [struct.pack("<BHIqI", ord("l"), 1, 0o777, 1, huge) + b"s" + b"t"])
    else:
        nrefs, link_len = (1, huge) if field == "link" else (huge, 0)
        data = _raw_record(b"", [struct.pack("<BHIqQII", ord("f"), 1, 0o644, 1, 3, nrefs, link_len) + b"f"])
    with pytest.raises(TreeFormatError) as caught:
        list(iter_records(data, strict=True))
    assert caught.value.context["problem"] == "truncated"


def test_a_folder_that_lists_itself_is_refused_not_walked_forever(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Defence in depth: even a listing that got past the decoder cannot make the walk loop."""
    appended = [0]

    class CountingDeque(walk_module.deque):  # type: ignore[misc,type-arg]
        def append(self, item: object) -> None:
            appended[0] += 1
            if appended[0] > 1000:
                raise RuntimeError("the walk over the folder records does not end")
            super().append(item)

    monkeypatch.setattr(walk_module, "deque", CountingDeque)
    records = {b"": Tree(0o755, 1, (DirItem(b""),))}
    listing = walk_module._empty("r")
    with pytest.raises(TreeFormatError) as caught:
        walk_module._expand(listing, records)
    assert caught.value.context["problem"] == "bad-name"


def test_a_stored_tree_with_an_empty_folder_name_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = LocalObjectStore(str(tmp_path / "objects"))
    root = store_tree(store, _raw_record(b"", [folder_entry(b"")]))
    with pytest.raises(TreeFormatError) as caught:
        restore_tree(root, store, str(tmp_path / "dest"))
    assert caught.value.context["problem"] == "bad-name"
    assert sorted(os.listdir(tmp_path)) == ["objects"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_anything_but_tree_format(data: bytes) -> None:
    for strict in (True, False):
        try:
            list(iter_records(data, strict=strict))
        except TreeFormatError as exc:
            assert exc.context["problem"]
    for blob in (data, MAGIC + bytes([VERSION]) + data):
        try:
            decode_root("r", blob)
        except TreeFormatError as exc:
            assert exc.context["problem"]
