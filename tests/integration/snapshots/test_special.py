"""Special files, unreadable files, symlinks that must not be followed, .tenureignore, restore targets."""

from __future__ import annotations

import ctypes
import json
import os
import socket
import stat
import subprocess
import sys

import pytest

from tenure.errors import InvalidInputError
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import (
    NotAFolderError,
    RestoreTargetNotEmptyError,
    UnreadableFileError,
    build_tree,
    iter_tree,
    restore_tree,
)
from tests.support.folders import describe, make_sample_tree, overrides_file_permissions, write_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def paths(root: str, store: LocalObjectStore) -> dict[str, str]:
    return {e.path: e.kind for e in iter_tree(root, store)}


def test_sockets_fifos_and_devices_are_skipped_and_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    (src / "plain.txt").write_text("kept")
    os.mkfifo(src / "pipe")  # opening it would block forever: it must never be opened
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()
    os.chdir(src)  # keep the socket path short (108 bytes at most)
    try:
        sock.bind("live.sock")
    finally:
        os.chdir(cwd)
    expected = [("live.sock", "socket"), ("pipe", "fifo")]
    if os.geteuid() == 0:
        os.mknod(src / "null-device", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        expected.insert(1, ("null-device", "device"))
    store = LocalObjectStore(str(tmp_path / "objects"))
    try:
        built = build_tree(str(src), store)
    finally:
        sock.close()
    assert sorted(built.skipped) == sorted(expected)
    assert paths(built.root, store) == {"": "dir", "plain.txt": "file"}
    restore_tree(built.root, store, str(tmp_path / "dest"))
    assert sorted(os.listdir(tmp_path / "dest")) == ["plain.txt"]


def _drop_file_permission_override() -> None:
    """In the child: give up root's power to read files regardless of their mode."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for cap in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run_without_file_permission_override(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` in a child that gave up root's power over file modes; it must succeed."""
    try:
        child = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            preexec_fn=_drop_file_permission_override,
            timeout=120,
        )
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop CAP_DAC_OVERRIDE in a child process here: {exc}")
    assert child.returncode == 0, child.stderr
    return child


BUILD_AND_REPORT = """
import json, sys
from tenure.errors import InvalidInputError, TenureError
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree
try:
    build_tree(sys.argv[1], LocalObjectStore(sys.argv[2]))
except TenureError as exc:
    print(json.dumps({"type": type(exc).__name__, "code": exc.code, "message": exc.message,
                      "path": exc.context.get("path"), "invalid_input": isinstance(exc, InvalidInputError)}))
else:
    print(json.dumps({"type": None}))
"""


@pytest.mark.parametrize("what", ["file", "folder"])
def test_an_unreadable_path_fails_the_build_naming_it(tmp_path, what: str) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "ok.txt").write_text("fine")
    secret = src / "sub" / ("secret file.txt" if what == "file" else "locked folder")
    if what == "file":
        secret.write_text("nobody may read this")
    else:
        secret.mkdir()
        (secret / "inside").write_text("x")
    secret.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(UnreadableFileError) as caught:
            build_tree(str(src), LocalObjectStore(str(tmp_path / "objects")))
        report = {
            "type": "UnreadableFileError",
            "code": caught.value.code,
            "message": caught.value.message,
            "path": caught.value.context["path"],
            "invalid_input": isinstance(caught.value, InvalidInputError),
        }
    else:
        # root reads anything through CAP_DAC_OVERRIDE: build in a child that dropped it
        child = _run_without_file_permission_override(BUILD_AND_REPORT, str(src), str(tmp_path / "objects"))
        report = json.loads(child.stdout)
    secret.chmod(0o700)
    assert report["type"] == "UnreadableFileError" and report["invalid_input"]
    assert report["code"] == "unreadable-file"
    rel = f"sub/{secret.name}"
    assert report["path"] == rel and rel in report["message"]


def test_symlinks_are_stored_as_links_and_never_followed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "folder" / "private.txt").write_text("must not be copied")
    os.mkfifo(outside / "pipe")
    src = tmp_path / "src"
    src.mkdir()
    os.symlink(outside / "folder", src / "to-folder")
    os.symlink(outside / "folder" / "private.txt", src / "to-file")
    os.symlink(outside / "pipe", src / "to-pipe")
    os.symlink("to-loop", src / "to-loop")
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store)
    assert built.files == 0 and built.bytes_read == 0
    assert set(paths(built.root, store).values()) == {"dir", "symlink"}
    dest = tmp_path / "dest"
    restore_tree(built.root, store, str(dest))
    assert describe(str(dest)) == describe(str(src))
    assert os.readlink(dest / "to-folder") == str(outside / "folder")


def test_tenureignore_is_honoured_and_stored_itself(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    for folder in ("build/deep", "logs", "keep", "a/b/build"):
        (src / folder).mkdir(parents=True)
    files = [
        "build/deep/x.o",
        "logs/app.log",
        "logs/keep.log",
        "keep/app.log",
        "top.tmp",
        "sub.tmp",
        "a/b/build/y",
        "a/b/z.txt",
        "notes.txt",
    ]
    for name in files:
        (src / name).write_text(name)
    (src / ".tenureignore").write_text("# comment\nbuild/\n*.log\n!keep.log\n/top.tmp\n")
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store)
    stored = {p for p, kind in paths(built.root, store).items() if kind == "file"}
    assert stored == {".tenureignore", "logs/keep.log", "sub.tmp", "a/b/z.txt", "notes.txt"}
    assert "build" not in paths(built.root, store) and "a/b/build" not in paths(built.root, store)


def test_an_index_inside_the_folder_is_left_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store, index_path=str(src / ".index"))
    assert os.path.exists(src / ".index")
    again = build_tree(str(src), store, index_path=str(src / ".index"))
    assert set(paths(again.root, store)) == {"", "a.txt"} and again.bytes_read == 0
    assert built.files == again.files == 1


def test_building_something_that_is_not_a_folder_fails_clearly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "file").write_text("x")
    store = LocalObjectStore(str(tmp_path / "objects"))
    for target in (tmp_path / "file", tmp_path / "missing"):
        with pytest.raises(NotAFolderError) as caught:
            build_tree(str(target), store)
        assert caught.value.code == "not-a-folder" and str(target) in caught.value.message


def test_restore_never_overwrites_and_replaces_only_an_empty_folder(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    make_sample_tree(src, big=10)
    store = LocalObjectStore(str(tmp_path / "objects"))
    root = build_tree(src, store).root

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "precious.txt").write_text("uncommitted work")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for target in (busy, a_file):
        with pytest.raises(RestoreTargetNotEmptyError) as caught:
            restore_tree(root, store, str(target))
        assert caught.value.code == "restore-target-not-empty" and isinstance(caught.value, InvalidInputError)
    assert (busy / "precious.txt").read_text() == "uncommitted work"
    assert sorted(os.listdir(tmp_path)) == ["a-file", "busy", "objects", "src"], "no temporary folder left"

    empty = tmp_path / "empty"
    empty.mkdir()
    restore_tree(root, store, str(empty))
    assert describe(str(empty)) == describe(src)

    long_name = tmp_path / ("n" * 250)  # the temporary sibling's name must still fit NAME_MAX
    restore_tree(root, store, str(long_name))
    assert describe(str(long_name)) == describe(src)


def test_many_files_in_one_folder_and_progress_is_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3000):
        write_file(str(src / f"f{i:05d}"), b"%d" % i * 50)
    store = LocalObjectStore(str(tmp_path / "objects"))
    seen: list[tuple[int, int]] = []
    built = build_tree(str(src), store, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] == built.bytes_read
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    restored: list[tuple[int, int]] = []
    restore_tree(built.root, store, str(tmp_path / "dest"), progress=lambda d, t: restored.append((d, t)))
    assert restored[-1][0] == restored[-1][1] == built.bytes_read
    assert describe(str(tmp_path / "dest")) == describe(str(src))


RESTORE_AND_REPORT = """
import json, os, stat, sys
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import restore_tree
restore_tree(sys.argv[1], LocalObjectStore(sys.argv[2]), sys.argv[3])
print(json.dumps({"ok": True}))
"""


def test_a_tree_whose_folders_cannot_be_read_restores_without_root_powers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Folders of mode 0o311 and 0o000 (the top one included) restore durably, also for a user who is not root."""
    src = tmp_path / "src"
    (src / "locked").mkdir(parents=True)
    write_file(str(src / "top.txt"), b"top", mode=0o000)
    write_file(str(src / "locked" / "inner.txt"), b"inner")
    os.chmod(src / "locked", 0o000)
    os.chmod(src, 0o311)
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store) if overrides_file_permissions() else None
    os.chmod(src, 0o755)
    os.chmod(src / "locked", 0o755)
    if built is None:
        pytest.skip("only root with CAP_DAC_OVERRIDE can check in a folder it cannot read")
    dest = tmp_path / "dest"
    _run_without_file_permission_override(RESTORE_AND_REPORT, built.root, str(tmp_path / "objects"), str(dest))
    assert stat.S_IMODE(os.lstat(dest).st_mode) == 0o311
    assert stat.S_IMODE(os.lstat(dest / "locked").st_mode) == 0o000
    assert stat.S_IMODE(os.lstat(dest / "top.txt").st_mode) == 0o000
    assert (dest / "locked" / "inner.txt").read_bytes() == b"inner"
