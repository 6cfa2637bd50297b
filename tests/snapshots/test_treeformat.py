"""The tree encoding: canonical, versioned, and a crafted tree can never write outside the restore folder."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenure.objects import encode
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import TreeFormatError, restore_tree
from tenure.snapshots.treeformat import (
    ChunkRef,
    DirItem,
    Root,
    FileItem,
    SymlinkItem,
    Tree,
    decode_root,
    encode_record,
    encode_root,
    iter_records,
)

OID = "ab" * 32


def test_records_round_trip_and_are_canonical() -> None:
    items = [SymlinkItem(b"z-link", 0o777, 5, b"../target"), DirItem(b"sub"),
             FileItem(b"a file", 0o755, -3, 12, ((OID, 0, 5), (OID, 9, 7)), b""),
             FileItem(b"b", 0o644, 7, 0, (), b"sub/a")]
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


@pytest.mark.parametrize("records", [
    [encode_record(b"", 0o755, 1, [FileItem(b"..", 0o644, 1, 10, ((OID, 0, 10),), b"")])],
    [encode_record(b"", 0o755, 1, [FileItem(b"a/b", 0o644, 1, 10, ((OID, 0, 10),), b"")])],
    [encode_record(b"", 0o755, 1, [DirItem(b"d")]), encode_record(b"d/../..", 0o755, 1, [])],
    [encode_record(b"", 0o755, 1, [FileItem(b"f", 0o644, 1, 10, ((OID, 0, 10),), b"../../etc/passwd")])],
    [encode_record(b"", 0o755, 1, [SymlinkItem(b"x", 0o777, 1, b"/tmp")]),
     encode_record(b"x", 0o755, 1, [FileItem(b"through-the-link", 0o644, 1, 10, ((OID, 0, 10),), b"")])],
    [encode_record(b"", 0o755, 1, [FileItem(b"f", 0o644, 1, 11, ((OID, 0, 10),), b"")])],
    [encode_record(b"", 0o755, 1, []), encode_record(b"", 0o755, 1, [])],
], ids=["dot-dot", "slash", "record-path", "link-path", "through-symlink", "size-mismatch", "duplicate-root"])
def test_a_crafted_tree_is_refused_before_anything_is_written(tmp_path, records: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    store = LocalObjectStore(str(tmp_path / "objects"))
    root = store_tree(store, *records)
    with pytest.raises(TreeFormatError):
        restore_tree(root, store, str(tmp_path / "dest"))
    assert sorted(os.listdir(tmp_path)) == ["objects"]


SAMPLE_STREAM = b"".join([
    encode_record(b"", 0o755, 1, [DirItem(b"d"), FileItem(b"f", 0o644, 2, 10, ((OID, 0, 10),), b""),
                                  SymlinkItem(b"s", 0o777, 3, b"target")]),
    encode_record(b"d", 0o700, 4, [FileItem(b"g", 0o600, 5, 3, ((OID, 1, 1), (OID, 2, 2)), b"f")]),
])


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
        for path, tree in records:
            for item in tree.items:
                assert item.name and b"/" not in item.name and item.name not in (b".", b"..")
