"""The columnar local index (version 2): it reads back exactly what was written, and anything else is empty."""

from __future__ import annotations

import gc
import itertools
import os
import struct
import threading

import blake3
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree
from tenure.snapshots.build import gc_paused
from tenure.snapshots.index import MAGIC, VERSION, Index, encode_body, load_index, save_index
from tests.support.folders import make_sample_tree

OIDS = [blake3.blake3(bytes([i])).hexdigest() for i in range(6)]

u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
refs = st.lists(st.tuples(st.sampled_from(OIDS), u64, u64), max_size=4).map(tuple)
rows = st.tuples(u64, i64, u64, i64, u64, st.sampled_from([b"", b"d" * 32, bytes(range(32))]), refs)
paths = st.binary(min_size=1, max_size=20).filter(lambda p: b"\0" not in p)
tables = st.dictionaries(paths, rows, max_size=30)


def _write(path: str, body: bytes, *, version: int = VERSION) -> None:
    frame = zstandard.ZstdCompressor().compress(body)
    with open(path, "wb") as fh:
        fh.write(MAGIC + bytes([version]) + blake3.blake3(frame).digest() + frame)


@settings(max_examples=150, deadline=None)
@given(entries=tables)
def test_an_index_reads_back_every_entry_exactly(tmp_path_factory, entries) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path_factory.mktemp("ix") / "index")
    save_index(path, entries)
    loaded = load_index(path)
    assert len(loaded) == len(entries)
    assert loaded.oids() == Index(dict(entries), 1).oids()
    for rel, raw in entries.items():
        entry = loaded.previous(rel)
        assert entry is not None and tuple(entry) == raw
        key = raw[:5]
        racy = key[1] >= loaded.written_ns
        assert (loaded.content(rel, key) is None) == racy
        assert (loaded.unchanged(rel, key) is None) == racy
        if not racy:
            assert loaded.content(rel, key) == (raw[5], raw[6])
            changed = (key[0] ^ 1, *key[1:])
            assert loaded.content(rel, changed) is None
    assert loaded.previous(b"\0not-there") is None
    assert loaded.same_as(entries) and loaded.same_body(encode_body(entries))
    assert encode_body(dict(reversed(list(entries.items())))) == encode_body(entries), "canonical bytes"


@settings(max_examples=60, deadline=None)
@given(entries=tables.filter(bool), data=st.data())
def test_a_different_entry_is_not_the_same_index(tmp_path_factory, entries, data) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path_factory.mktemp("ix") / "index")
    save_index(path, entries)
    loaded = load_index(path)
    rel = data.draw(st.sampled_from(sorted(entries)))
    other = dict(entries)
    field = data.draw(st.integers(0, 6))
    raw = list(other[rel])
    if field == 5:
        raw[5] = b"" if raw[5] else b"x" * 32
    elif field == 6:
        raw[6] = (*raw[6], (OIDS[0], 1, 2))
    else:
        raw[field] = 1 ^ raw[field]
    other[rel] = tuple(raw)
    assert not loaded.same_as(other)
    del other[rel]
    assert not loaded.same_as(other)


def test_damaged_truncated_foreign_and_inconsistent_indexes_are_empty(tmp_path) -> None:  # type: ignore[no-untyped-def]
    entries = {b"a": (1, 2, 3, 4, 0o100644, b"", ((OIDS[0], 0, 1),)), b"b/c": (5, 6, 7, 8, 0o100600, b"d" * 32, ())}
    path = str(tmp_path / "index")
    save_index(path, entries)
    good = open(path, "rb").read()
    assert len(load_index(path)) == 2
    cases = {
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "only magic": MAGIC,
        "flipped byte": good[:-3] + bytes([good[-3] ^ 1]) + good[-2:],
        "version 1": good[: len(MAGIC)] + b"\x01" + good[len(MAGIC) + 1 :],
        "another file": b"PK\x03\x04 not an index at all" * 10,
    }
    for name, data in cases.items():
        with open(path, "wb") as fh:
            fh.write(data)
        assert len(load_index(path)) == 0, name
    body = encode_body(entries)
    count = struct.unpack_from("<Q", body)[0]
    inconsistent = {
        "count too large": struct.pack("<Q", count + 1) + body[8:],
        "trailing bytes": body + b"\0",
        "body cut short": body[:-1],
        "ref beyond the oid table": body.replace(
            struct.pack("<I", 0) + struct.pack("<Q", 0), struct.pack("<I", 9) + struct.pack("<Q", 0), 1
        ),
        "header only": body[:40],
    }
    for name, data in inconsistent.items():
        _write(path, data)  # a well-formed frame with a good hash: the table itself must be checked
        assert len(load_index(path)) == 0, name
    _write(path, body)
    assert len(load_index(path)) == 2, "the same frame written by hand is accepted"


def test_an_index_of_the_previous_version_is_rebuilt(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import marshal

    src, path = str(tmp_path / "src"), str(tmp_path / "index")
    make_sample_tree(src)
    store = LocalObjectStore(str(tmp_path / "objects"))
    first = build_tree(src, store, index_path=path)
    old = {b"src/main.py": tuple(load_index(path).previous(b"src/main.py") or ())}
    frame = zstandard.ZstdCompressor(level=1).compress(marshal.dumps(old, 4))  # version 1: a marshalled dict
    with open(path, "wb") as fh:
        fh.write(MAGIC + b"\x01" + blake3.blake3(frame).digest() + frame)
    assert len(load_index(path)) == 0
    again = build_tree(src, store, index_path=path)
    assert again.root == first.root and again.bytes_read == first.bytes_read, "everything read again"
    assert len(load_index(path)) == first.files
    third = build_tree(src, store, index_path=path)
    assert third.root == first.root and third.bytes_read <= first.bytes_read


def test_an_unchanged_build_keeps_the_index_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, path = str(tmp_path / "src"), str(tmp_path / "index")
    make_sample_tree(src)
    store = LocalObjectStore(str(tmp_path / "objects"))
    build_tree(src, store, index_path=path)
    os.utime(path, ns=(1, 1))  # everything racy: each file is read again, found the same, the entries equal
    before = os.stat(path)
    build_tree(src, store, index_path=path)
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_builds_pause_the_cycle_collector_and_restore_it() -> None:
    assert gc.isenabled()
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with gc_paused():
        assert not gc.isenabled()
        thread.start()
        entered.wait(10)
    assert not gc.isenabled(), "still paused while the other build runs"
    leave.set()
    thread.join()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled(), "a collector that was off stays off"
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError
    assert gc.isenabled()


@settings(max_examples=80, deadline=None)
@given(
    rows=st.dictionaries(
        st.lists(st.sampled_from([b"a", b"b", b"a.b", b"c"]), min_size=1, max_size=3).map(b"/".join),
        st.tuples(st.integers(0, 3), st.booleans()),
        max_size=12,
    ),
    shuffle=st.randoms(use_true_random=False),
)
def test_rows_gathered_one_by_one_encode_and_save_as_encode_body(rows, shuffle) -> None:  # type: ignore[no-untyped-def]
    """index.Rows (a streaming build's index): in tree order or not, the same bytes and the same file as encode_body."""
    import tempfile

    from tenure.snapshots.index import Rows, tree_key

    entries = {
        p: (
            k,
            7,
            k + 1,
            9,
            0o100644,
            bytes([k]) * 32 if digest else b"",
            tuple((f"{j:02x}" * 32, j, 1) for j in range(k)),
        )
        for p, (k, digest) in rows.items()
    }
    for order in (sorted(entries, key=tree_key), shuffle.sample(sorted(entries), len(entries))):
        gathered = Rows()
        for p in order:
            gathered.add(p, entries[p][:5], entries[p][5], entries[p][6])  # type: ignore[arg-type]
        assert gathered.body() == encode_body(entries)
        assert gathered.matches(encode_body(entries))
        assert not gathered.matches(encode_body({**entries, b"zz": (1, 1, 1, 1, 0o100644, b"", ())}))
        by_folder = Rows()  # a build adds a folder's files at once
        for _, group in itertools.groupby(order, key=lambda p: p.rpartition(b"/")[0]):
            ps = list(group)
            by_folder.add_folder(
                ps,
                [entries[p][:5] for p in ps],
                [entries[p][5] for p in ps],
                [entries[p][6] for p in ps],  # type: ignore[misc]
            )
        assert by_folder.body() == encode_body(entries)
        with tempfile.TemporaryDirectory() as tmp:
            gathered.save(os.path.join(tmp, "index"))
            loaded = load_index(os.path.join(tmp, "index"))
            assert loaded.body() == encode_body(entries) and loaded.entries() == entries
