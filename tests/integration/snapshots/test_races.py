"""A folder changed under a running build: nothing from outside the checked-in folder may enter the tree.

The swaps happen through :data:`tenure.snapshots.scan.after_listing`, which
the scanner calls right after it lists a folder and before it reads anything
in it or opens its sub-folders: the race is replayed exactly, without sleeps.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tenure.objects import decode
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import FolderChangedError, build_tree, iter_tree, restore_tree
from tenure.snapshots import scan as scan_module
from tests.support.folders import describe, random_bytes, write_file

SECRET_SMALL = b"TOP-SECRET-" + b"s" * 53  # 64 bytes, like the file it impersonates
SECRET_LARGE = b"TOP-SECRET-" + random_bytes((2 << 20) - 11, 7)


def _stored_plain(store: LocalObjectStore) -> list[bytes]:
    """The plain content of every object in the store."""
    out = []
    for oid, _ in store.list_ids():
        out.append(decode(oid, store.get(oid)))
    return out


def _swap_for_symlink(folder: Path, target: Path) -> None:
    """Replace ``folder`` (and everything in it) by a symlink to ``target``."""
    shutil.rmtree(folder)
    os.symlink(target, folder)


def _once(rel: bytes, action: Callable[[], None]) -> Callable[[bytes], None]:
    done: list[bytes] = []

    def hook(listed: bytes) -> None:
        if listed == rel and not done:
            done.append(listed)
            action()

    return hook


@pytest.mark.parametrize("size", ["packed", "chunked"])
def test_a_folder_swapped_for_a_symlink_after_listing_leaks_nothing(tmp_path, monkeypatch, size: str) -> None:  # type: ignore[no-untyped-def]
    """``sub`` is listed, then replaced by a symlink to a folder outside holding a same-named secret file."""
    secret = SECRET_SMALL if size == "packed" else SECRET_LARGE
    outside = tmp_path / "outside"
    outside.mkdir()
    write_file(str(outside / "data.bin"), secret)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    write_file(str(src / "sub" / "data.bin"), b"x" * len(secret))
    write_file(str(src / "top.txt"), b"top")
    store = LocalObjectStore(str(tmp_path / "objects"))
    monkeypatch.setattr(scan_module, "after_listing", _once(b"sub", lambda: _swap_for_symlink(src / "sub", outside)))

    with pytest.raises(FolderChangedError) as caught:
        build_tree(str(src), store, workers=2)
    assert caught.value.code == "folder-changed" and caught.value.retryable
    assert caught.value.context["path"] in ("sub", "sub/data.bin")
    assert not any(secret[:64] in plain for plain in _stored_plain(store)), "the secret reached the object store"

    monkeypatch.setattr(scan_module, "after_listing", None)
    again = build_tree(str(src), store, workers=2)  # a retry stores the symlink as a symlink
    assert {e.path: e.kind for e in iter_tree(again.root, store)}["sub"] == "symlink"
    restore_tree(again.root, store, str(tmp_path / "dest"))
    assert describe(str(tmp_path / "dest")) == describe(str(src))
    assert not any(secret[:64] in plain for plain in _stored_plain(store))


def test_a_sub_folder_swapped_before_it_is_listed_leaks_nothing(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``a`` is listed (so ``a/b`` is known to be a folder), then ``a/b`` becomes a symlink to outside."""
    outside = tmp_path / "outside"
    (outside / "deeper").mkdir(parents=True)
    write_file(str(outside / "file.txt"), SECRET_SMALL)
    write_file(str(outside / "deeper" / "more.txt"), SECRET_SMALL[::-1])
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    write_file(str(src / "a" / "b" / "file.txt"), b"y" * len(SECRET_SMALL))
    store = LocalObjectStore(str(tmp_path / "objects"))
    monkeypatch.setattr(scan_module, "after_listing", _once(b"a", lambda: _swap_for_symlink(src / "a" / "b", outside)))

    with pytest.raises(FolderChangedError) as caught:
        build_tree(str(src), store, workers=2)
    assert caught.value.context["path"] == "a/b"
    assert not any(SECRET_SMALL in plain or SECRET_SMALL[::-1] in plain for plain in _stored_plain(store))


def test_the_checked_in_folder_itself_swapped_mid_build_leaks_nothing(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The build keeps the folder it opened: renaming it away and putting a symlink in its place changes nothing."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    write_file(str(outside / "sub" / "data.txt"), SECRET_SMALL)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    write_file(str(src / "sub" / "data.txt"), b"z" * len(SECRET_SMALL))
    store = LocalObjectStore(str(tmp_path / "objects"))

    def swap_root() -> None:
        os.rename(src, tmp_path / "moved")
        os.symlink(outside, src)

    monkeypatch.setattr(scan_module, "after_listing", _once(b"", swap_root))
    built = build_tree(str(src), store, workers=2)
    restore_tree(built.root, store, str(tmp_path / "dest"))
    assert (tmp_path / "dest" / "sub" / "data.txt").read_bytes() == b"z" * len(SECRET_SMALL)
    assert not any(SECRET_SMALL in plain for plain in _stored_plain(store))
