"""kill -9 at every named point of build and restore: the next call completes, the target is never half written.

The table runs on four object stores (the ``objects`` fixture): a folder, an S3 bucket (moto's server,
tests/support/s3_server.py), and each of them with encryption at rest (under a key file, so no scrypt per case).
Every build point and every restore point, into a new and into an empty target, runs on each: the whole
table, no subset (a fraction of a second a case).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import tenure.snapshots  # noqa: F401 - registers the engine's crash points
from tenure.faults import POINTS
from tenure.objects import ObjectStore, open_object_store
from tenure.objects.codec import reserved
from tenure.objects.crypto import KeySource, init_encryption
from tenure.snapshots import build_tree, clean_restore_leftovers, restore_tree, verify_tree
from tests.support.folders import describe, make_sample_tree, write_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD_POINTS = ["build.after_objects_written", "build.after_index_saved"]
RESTORE_POINTS = ["restore.after_materialize", "restore.after_rename"]


@dataclass
class Objects:
    """An opened object store, the URL a crash worker opens it by, and the environment that unlocks it."""

    store: ObjectStore
    url: str
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture(
    params=[
        "folder",
        pytest.param("s3", marks=pytest.mark.s3),
        "encrypted",
        pytest.param("s3-encrypted", marks=pytest.mark.s3),
    ]
)
def objects(request, tmp_path) -> Iterator[Objects]:  # type: ignore[no-untyped-def]
    env = {"TENURE_KEY_FILE": "", "TENURE_PASSPHRASE": ""}  # nothing from the host's environment
    if request.param.startswith("s3"):
        from tests.support.s3_server import new_s3_url

        url = new_s3_url(request.getfixturevalue("s3_endpoint"))
    else:
        url = f"file://{tmp_path}/objects"
    store = open_object_store(url)
    if request.param.endswith("encrypted"):
        key_file = tmp_path / "objects.key"
        key_file.write_bytes(os.urandom(32))
        init_encryption(store, KeySource(key_file=str(key_file)))
        env["TENURE_KEY_FILE"] = str(key_file)
    yield Objects(store, url, env)
    store.close()


def run_child(point: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {}), "TENURE_CRASH_AT": point}
    return subprocess.run(
        [sys.executable, "-m", "tests.acceptance.snapshots.crash_worker", *args],
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
def test_crash_during_build_then_the_next_build_completes(tmp_path, point: str, objects: Objects) -> None:  # type: ignore[no-untyped-def]
    src, index = str(tmp_path / "src"), str(tmp_path / "index")
    store = objects.store
    make_sample_tree(src)
    first = build_tree(src, store, index_path=index)
    with open(os.path.join(src, "big.bin"), "ab") as fh:
        fh.write(b"second version")
    write_file(os.path.join(src, "new.txt"), b"new file")

    crashed = run_child(point, "build", objects.url, src, index, env=objects.env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    stored = {oid for oid, _ in store.list_ids() if not reserved(oid)} - first.objects
    assert stored, "the crashed build had stored the new version's objects"

    after = build_tree(src, store, index_path=index)
    assert after.bytes_new == 0, "the objects the crashed build stored are found, not stored again"
    assert after.objects - first.objects <= stored
    if point == "build.after_index_saved":
        assert after.bytes_read == 0, "the crashed build had saved its index"
    else:
        assert after.bytes_read > 0, "the index was not saved: changed files are read again"
    assert verify_tree(after.root, store).ok
    restore_tree(after.root, store, str(tmp_path / "dest"))
    assert describe(str(tmp_path / "dest")) == describe(src)


@pytest.mark.parametrize("existing", [False, True], ids=["new-target", "empty-target"])
@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_crash_during_restore_never_leaves_a_half_written_target(
    tmp_path, point: str, existing: bool, objects: Objects
) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    store = objects.store
    make_sample_tree(src)
    root = build_tree(src, store).root
    parent = tmp_path / "restores"
    parent.mkdir()
    dest = parent / "dest"
    if existing:
        dest.mkdir()

    crashed = run_child(point, "restore", objects.url, root, str(dest), str(tmp_path / "index"), env=objects.env)
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
