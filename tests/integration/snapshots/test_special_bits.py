"""setuid, setgid and sticky bits: stored as they are, dropped on restore unless the caller keeps them.

A snapshot holds tenant content. Restored by a process running as root, a
stored ``0o4755`` would become a root-owned setuid program, so restore drops
``S_ISUID`` and ``S_ISGID`` (from files and folders) and the sticky bit from
files by default; the sticky bit stays on folders. ``keep_special_bits=True``
(``tenure workspace restore --keep-setuid``) restores every bit as stored.
"""

from __future__ import annotations

import os
import stat

import pytest

from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree, iter_tree, restore_tree
from tests.support.folders import random_bytes, set_tree_times, write_file
from tests.support.procs import tenure

STORED = {
    "setuid": 0o4755,
    "setgid": 0o2755,
    "both": 0o6711,
    "sticky-file": 0o1644,
    "plain": 0o640,
    "big-setuid": 0o4750,  # several chunks: its mode is set after the content
    "dir-setgid": 0o2775,
    "dir-sticky": 0o1777,
    "dir-all": 0o7755,
    "dir-plain": 0o750,
}
DROPPED = {
    "setuid": 0o755,
    "setgid": 0o755,
    "both": 0o711,
    "sticky-file": 0o644,
    "plain": 0o640,
    "big-setuid": 0o750,
    "dir-setgid": 0o775,
    "dir-sticky": 0o1777,
    "dir-all": 0o1755,
    "dir-plain": 0o750,
}


def _make(src: str) -> None:
    os.makedirs(src)
    for name, mode in STORED.items():
        path = os.path.join(src, name)
        if name.startswith("dir-"):
            os.mkdir(path)
            write_file(os.path.join(path, "inside"), b"x")
        else:
            write_file(path, random_bytes(3 << 20, 1) if name.startswith("big") else b"#!/bin/sh\n", mode=mode)
    os.link(os.path.join(src, "setuid"), os.path.join(src, "setuid-link"))
    set_tree_times(src)
    for name, mode in STORED.items():
        os.chmod(os.path.join(src, name), mode)  # after writing: a write clears setuid on some systems


def _modes(root: str) -> dict[str, int]:
    out = {}
    for name in [*STORED, "setuid-link"]:
        out[name] = stat.S_IMODE(os.lstat(os.path.join(root, name)).st_mode)
    return out


@pytest.fixture
def built(tmp_path):  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    _make(src)
    assert _modes(src) == {**STORED, "setuid-link": STORED["setuid"]}, "the file system keeps the bits"
    store = LocalObjectStore(str(tmp_path / "objects"))
    result = build_tree(src, store)
    listed = {e.path: e.mode for e in iter_tree(result.root, store)}
    assert {name: listed[name] for name in STORED} == STORED, "the tree stores every bit as it is"
    return store, result.root


def test_restore_drops_setuid_and_setgid_by_default(tmp_path, built) -> None:  # type: ignore[no-untyped-def]
    store, root = built
    dest = str(tmp_path / "dest")
    result = restore_tree(root, store, dest)
    assert _modes(dest) == {**DROPPED, "setuid-link": DROPPED["setuid"]}
    assert set(result.special_bits_dropped) == {
        "setuid",
        "setuid-link",
        "setgid",
        "both",
        "sticky-file",
        "big-setuid",
        "dir-setgid",
        "dir-all",
    }


def test_restore_keeps_special_bits_when_asked(tmp_path, built) -> None:  # type: ignore[no-untyped-def]
    store, root = built
    dest = str(tmp_path / "dest")
    result = restore_tree(root, store, dest, keep_special_bits=True)
    assert _modes(dest) == {**STORED, "setuid-link": STORED["setuid"]}
    assert result.special_bits_dropped == ()


def test_workspace_restore_keeps_setuid_only_with_the_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    _make(src)
    assert tenure(["--data", data, "workspace", "create", "w"]).returncode == 0
    out = tenure(["--data", data, "workspace", "checkpoint", "w", "--from", src])
    assert out.returncode == 0, out.stderr

    plain = tenure(["--data", data, "workspace", "restore", "w", "--to", str(tmp_path / "plain")])
    assert plain.returncode == 0, plain.stderr
    assert _modes(str(tmp_path / "plain")) == {**DROPPED, "setuid-link": DROPPED["setuid"]}
    assert "--keep-setuid" in plain.stdout, "the human output says bits were dropped and how to keep them"

    kept = tenure(
        ["--data", data, "--json", "workspace", "restore", "w", "--to", str(tmp_path / "kept"), "--keep-setuid"]
    )
    assert kept.returncode == 0, kept.stderr
    assert _modes(str(tmp_path / "kept")) == {**STORED, "setuid-link": STORED["setuid"]}
