"""Restore streams an intact tree: bounded windows, compact index rows, hard links across the stream (ADR 0029)."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree, restore_tree, streaming
from tenure.snapshots.index import IndexEntry, Rows, encode_body, load_index, write_index
from tenure.snapshots.walk import load_listing
from tests.support.folders import describe, random_bytes, write_file

OID = [f"{i:064x}" for i in range(1, 6)]


def test_index_rows_load_as_the_index_module_writes_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = Rows()
    entries: dict[bytes, tuple[object, ...]] = {}
    samples = [
        (b"b0", ((OID[2], 0, 10),), b""),
        (b"b/x", ((OID[1], 5, 7), (OID[2], 10, 3)), b"d" * 32),
        (b"a", (), b""),
        (b"b/a-c", ((OID[3], 0, 1),), b""),
        (b"c", ((OID[1], 9, 2),), b"e" * 32),
    ]
    for n, (path, refs, digest) in enumerate(samples):
        key = (n + 1, 10**18 + n, 100 + n, 10**17 + n, 0o100644)
        rows.put(rows.add(path, (0, 0, 0, 0, 0), b"", refs), key, digest)  # the stat is known once written
        entries[path] = key + (digest, refs)
    rows.save(str(tmp_path / "rows"))
    write_index(str(tmp_path / "entries"), encode_body(entries))
    ours, theirs = load_index(str(tmp_path / "rows")), load_index(str(tmp_path / "entries"))
    assert len(ours) == len(theirs) == len(samples)
    for path, _, _ in samples:
        assert ours.previous(path) == theirs.previous(path) == IndexEntry._make(entries[path])


def test_empty_index_rows_encode_as_an_empty_index() -> None:
    assert Rows().body() == encode_body({})


def _tree(src: str, files: int) -> None:
    for i in range(files):
        folder = os.path.join(src, f"d{i % 7}", f"e{i % 3}")
        os.makedirs(folder, exist_ok=True)
        write_file(os.path.join(folder, f"f{i:05d}"), random_bytes(200 + i % 900, i, compressible=i % 2 == 0))


def test_windows_and_links_across_the_stream(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Tiny windows split packs between windows; a hard-link follower comes before its leader in pre-order."""
    src = str(tmp_path / "src")
    _tree(src, 600)
    os.makedirs(os.path.join(src, "a"))
    write_file(os.path.join(src, "a", "x"), b"linked content")
    os.link(os.path.join(src, "a", "x"), os.path.join(src, "a0"))  # "a/x" < "a0": the leader is listed later
    os.link(os.path.join(src, "a", "x"), os.path.join(src, "d1", "z"))
    write_file(os.path.join(src, "big"), random_bytes(3 << 20, 9))  # several objects
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(src, store)
    monkeypatch.setattr(streaming, "WINDOW_FILES", 16)
    fetched: list[str] = []
    real_get = store.get

    def counting_get(oid: str) -> bytes:
        fetched.append(oid)
        return real_get(oid)

    monkeypatch.setattr(store, "get", counting_get)
    dest = str(tmp_path / "dest")
    index_path = str(tmp_path / "index")
    result = restore_tree(built.root, store, dest, index_path=index_path)
    assert describe(dest) == describe(src)
    assert os.stat(os.path.join(dest, "a0")).st_ino == os.stat(os.path.join(dest, "a", "x")).st_ino
    assert os.stat(os.path.join(dest, "d1", "z")).st_nlink == 3
    assert result.files == 600 + 4
    index = load_index(index_path)
    assert len(index) == 604
    for rel in (b"a0", b"a/x", b"d1/z", b"big", b"d3/e1/f00010"):
        st = os.lstat(os.path.join(os.fsencode(dest), rel))
        assert index.previous(rel) is not None
        assert index.previous(rel)[:5] == (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)  # type: ignore[index]
    # each object is fetched once per window at most, and a pack spanning windows only once in a row
    trees = set(load_listing(built.root, store).trees)  # read twice: verified first, then streamed
    data = [oid for oid in fetched if oid not in trees]
    assert data and [a for a, b in zip(data, data[1:]) if a == b] == []


def _peak_restore(tmp_path, name: str, files: int) -> int:  # type: ignore[no-untyped-def]
    src = str(tmp_path / f"src-{name}")
    _tree(src, files)
    store = LocalObjectStore(str(tmp_path / f"objects-{name}"))
    built = build_tree(src, store)
    tracemalloc.start()
    try:
        restore_tree(built.root, store, str(tmp_path / f"dest-{name}"), index_path=str(tmp_path / f"index-{name}"))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_beyond_the_index_rows_does_not_grow_with_the_files(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """3× the files: the traced peak grows by the index rows (kept for the index), not by a listing.

    The listing path held 1.3–2 KiB per file (a tuple, a ``FileItem`` and a
    plan entry each); the index rows, with their sorting at the end, take
    under half of that.
    """
    monkeypatch.setattr(streaming, "WINDOW_FILES", 256)
    small = _peak_restore(tmp_path, "small", 3000)
    large = _peak_restore(tmp_path, "large", 9000)
    assert large - small < 6000 * 1024, (small, large)
