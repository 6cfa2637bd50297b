"""kill -9 at every named point of build and restore: the next call completes, the target is never half written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import tenure.snapshots  # noqa: F401 - registers the engine's crash points
from tenure.faults import POINTS
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree, clean_restore_leftovers, restore_tree, verify_tree
from tests.snapshots.helpers import describe, make_sample_tree, write_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_POINTS = ["build.after_objects_written", "build.after_index_saved"]
RESTORE_POINTS = ["restore.after_materialize", "restore.after_rename"]


def run_child(point: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TENURE_CRASH_AT": point}
    return subprocess.run(
        [sys.executable, "-m", "tests.snapshots.crash_worker", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_engine_crash_point_is_exercised() -> None:
    engine = {p for p in POINTS if p.split(".")[0] in ("build", "restore")}
    assert engine == set(BUILD_POINTS) | set(RESTORE_POINTS)
    assert all(POINTS[p] for p in engine), "each point says what has happened when it fires"


@pytest.mark.parametrize("point", BUILD_POINTS)
def test_crash_during_build_then_the_next_build_completes(tmp_path, point: str) -> None:  # type: ignore[no-untyped-def]
    src, objects, index = str(tmp_path / "src"), str(tmp_path / "objects"), str(tmp_path / "index")
    make_sample_tree(src)
    store = LocalObjectStore(objects)
    build_tree(src, store, index_path=index)
    with open(os.path.join(src, "big.bin"), "ab") as fh:
        fh.write(b"second version")
    write_file(os.path.join(src, "new.txt"), b"new file")

    crashed = run_child(point, "build", objects, src, index)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    after = build_tree(src, store, index_path=index)
    if point == "build.after_index_saved":
        assert after.bytes_read == 0, "the crashed build had saved its index"
    else:
        assert after.bytes_read > 0, "the index was not saved: changed files are read again"
    assert verify_tree(after.root, store).ok
    restore_tree(after.root, store, str(tmp_path / "dest"))
    assert describe(str(tmp_path / "dest")) == describe(src)


@pytest.mark.parametrize("existing", [False, True], ids=["new-target", "empty-target"])
@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_crash_during_restore_never_leaves_a_half_written_target(tmp_path, point: str, existing: bool) -> None:  # type: ignore[no-untyped-def]
    src, objects = str(tmp_path / "src"), str(tmp_path / "objects")
    make_sample_tree(src)
    store = LocalObjectStore(objects)
    root = build_tree(src, store).root
    parent = tmp_path / "restores"
    parent.mkdir()
    dest = parent / "dest"
    if existing:
        dest.mkdir()

    crashed = run_child(point, "restore", objects, root, str(dest), str(tmp_path / "index"))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    leftovers = [n for n in os.listdir(parent) if n != "dest"]
    if point == "restore.after_materialize":
        assert os.listdir(dest) == [] if existing else not os.path.lexists(dest), "the target is untouched"
        assert len(leftovers) == 1 and leftovers[0].startswith(".dest.tenure-restore-")
        assert describe(str(parent / leftovers[0])) == describe(src), "only the rename was missing"
        assert clean_restore_leftovers(str(parent), "other") == 0
        restore_tree(root, store, str(dest))  # the rerun removes the crashed restore's folder: its pid is dead
        assert sorted(os.listdir(parent)) == ["dest"], "a successful rerun left the crashed restore's folder"
    else:
        assert leftovers == []
    assert describe(str(dest)) == describe(src)


def test_a_restore_leftover_of_a_live_process_is_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    parent = tmp_path / "restores"
    live = parent / f".dest.tenure-restore-{os.getpid()}-{'a' * 32}"
    dead_pid = _a_dead_pid()
    dead = parent / f".dest.tenure-restore-{dead_pid}-{'b' * 32}"
    live.mkdir(parents=True)
    dead.mkdir()
    assert clean_restore_leftovers(str(parent), "dest", abandoned_only=True) == 1
    assert live.exists() and not dead.exists()


def _a_dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
