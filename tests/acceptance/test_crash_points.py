"""Crash at every step (kill -9 at named points): the next call completes, nothing published is lost.

The whole table runs twice: on the embedded default (SQLite store, local
object folder) and on PostgreSQL (store and objects both in PostgreSQL),
through the real CLI.

GC (SPEC §4, "GC"; storage spec, "Snapshots"): a crash anywhere in a run
leaves every object a readable snapshot references intact, and the next run
removes every object no readable snapshot references. The GC test knows
which objects are unreachable without asking the GC code: its three
snapshots share no content, so the objects the first two checkpoints stored
are exactly the objects only the two deleted snapshots reference, and the
objects the third one stored are exactly the kept snapshot's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.procs import tenure
from tests.support.trees import cli_json, describe, make_tree

CHECKPOINT_POINTS = [
    "checkpoint.after_begin",
    "build.after_objects_written",
    "build.after_index_saved",
    "checkpoint.after_validating",
    "publish.after_head_update",
    "publish.after_commit",
]
RESTORE_POINTS = ["restore.after_materialize", "restore.after_rename"]
GC_POINTS = ["gc.after_mark", "gc.mid_sweep"]
#: The sweep batch the GC crash test runs with (TENURE_GC_BATCH, see tenure/snapshots/gc.py).
GC_BATCH = 2


@dataclass
class Backend:
    """One store + object store pair, as the CLI sees it (``TENURE_DB`` / ``TENURE_OBJECTS``)."""

    name: str
    data: str
    env: dict[str, str] = field(default_factory=dict)
    pg_url: str | None = None

    def cli(self, *args: str, **extra: str) -> Any:
        return cli_json(self.data, *args, **self.env, **extra)

    def crash(self, *args: str, point: str, **extra: str) -> None:
        result = tenure(["--data", self.data, *args], **self.env, TENURE_CRASH_AT=point, **extra)
        assert result.returncode == -9, f"{point} never fired: {result.returncode}\n{result.stderr}"

    def object_ids(self) -> set[str]:
        """The ids the object store holds, read from its folder or its table, not through tenure."""
        if self.pg_url is None:
            root = os.path.join(self.data, "objects")
            if not os.path.isdir(root):
                return set()  # created by the first write
            return {
                name
                for prefix in os.listdir(root)
                if len(prefix) == 2
                for name in os.listdir(os.path.join(root, prefix))
            }
        import psycopg

        with psycopg.connect(self.pg_url) as conn:
            return {row[0] for row in conn.execute("SELECT oid FROM tenure_objects")}


@pytest.fixture(params=["sqlite+folder", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request, tmp_path) -> Backend:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "data")
    if request.param == "sqlite+folder":
        return Backend(request.param, data)
    from tests.conftest import new_pg_schema_url

    url = new_pg_schema_url()
    return Backend(request.param, data, {"TENURE_DB": url, "TENURE_OBJECTS": url}, pg_url=url)


def test_every_registered_point_is_exercised() -> None:
    import tenure.snapshots  # noqa: F401 - registers the engine's points
    import tenure.snapshots.gc  # noqa: F401
    import tenure.store  # noqa: F401
    from tenure.faults import POINTS

    covered = set(CHECKPOINT_POINTS) | set(RESTORE_POINTS) | set(GC_POINTS)
    storage_points = {p for p in POINTS if p.split(".")[0] in ("checkpoint", "build", "publish", "restore", "gc")}
    assert storage_points <= covered, f"points without a crash test: {storage_points - covered}"
    assert covered <= set(POINTS), f"crash tests for points nobody registers: {covered - set(POINTS)}"


@pytest.mark.parametrize("point", CHECKPOINT_POINTS)
def test_crash_during_checkpoint(point: str, backend: Backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    make_tree(src)
    backend.cli("workspace", "create", "w")
    first = backend.cli("workspace", "checkpoint", "w", "--from", src)["snapshot"]
    v1 = describe(src)
    with open(os.path.join(src, "d1", "e1", "f1.txt"), "ab") as fh:
        fh.write(b"second version")
    with open(os.path.join(src, "new.txt"), "w") as fh:
        fh.write("new file")
    v2 = describe(src)

    backend.crash("workspace", "checkpoint", "w", "--from", src, point=point)

    head = [w for w in backend.cli("workspace", "list") if w["name"] == "w"][0]["head_snapshot_id"]
    expected_after_crash = v2 if point == "publish.after_commit" else v1
    if point != "publish.after_commit":
        assert head == first["id"], "nothing is published before the publish transaction commits"
    else:
        assert head != first["id"], "a committed publication survives the crash"
    backend.cli("workspace", "restore", "w", "--to", str(tmp_path / "after-crash"))
    assert describe(str(tmp_path / "after-crash")) == expected_after_crash

    again = backend.cli("workspace", "checkpoint", "w", "--from", src)
    backend.cli("workspace", "restore", "w", "--to", str(tmp_path / "final"))
    assert describe(str(tmp_path / "final")) == v2
    states = {s["id"]: s["state"] for s in backend.cli("snapshot", "list", "w")}
    assert states[first["id"]] == "READY" and states[again["snapshot"]["id"]] == "READY"
    assert not {"UPLOADING", "VALIDATING"} & set(states.values()), states
    verify = backend.cli("snapshot", "verify", again["snapshot"]["id"])
    assert verify["ok"]


@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_crash_during_restore(point: str, backend: Backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_tree(src)
    backend.cli("workspace", "create", "w")
    backend.cli("workspace", "checkpoint", "w", "--from", src)
    backend.crash("workspace", "restore", "w", "--to", dest, point=point)
    if point == "restore.after_materialize":
        assert not os.path.exists(dest) or not os.listdir(dest), "no half-restored folder that looks complete"
    else:
        assert describe(dest) == describe(src)
        shutil.rmtree(dest)
    backend.cli("workspace", "restore", "w", "--to", dest)
    assert describe(dest) == describe(src)


def _checkpoint_new_tree(backend: Backend, src: str, seed: int) -> tuple[str, set[str], dict[str, Any]]:
    """Replace ``src`` by a tree sharing no content with the others; checkpoint it; return what it stored."""
    shutil.rmtree(src, ignore_errors=True)
    make_tree(src, seed=seed)
    before = backend.object_ids()
    snap = backend.cli("workspace", "checkpoint", "w", "--from", src)["snapshot"]["id"]
    stored = backend.object_ids() - before
    assert stored, "every version stores objects of its own"
    return snap, stored, describe(src)


@pytest.mark.parametrize("point", GC_POINTS)
def test_crash_during_gc(point: str, backend: Backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    backend.cli("workspace", "create", "w")
    old0, stored0, _ = _checkpoint_new_tree(backend, src, seed=11)
    old1, stored1, _ = _checkpoint_new_tree(backend, src, seed=12)
    kept, kept_objects, keep = _checkpoint_new_tree(backend, src, seed=13)
    unreachable = stored0 | stored1
    assert not unreachable & kept_objects
    assert len(unreachable) > 2 * GC_BATCH, "enough unreachable objects for several sweep batches"
    backend.cli("snapshot", "delete", old0)
    backend.cli("snapshot", "delete", old1)

    backend.crash("gc", "--grace", "0", point=point, TENURE_GC_BATCH=str(GC_BATCH))

    after_crash = backend.object_ids()
    assert kept_objects <= after_crash, "a crash never costs a reachable object"
    assert after_crash <= unreachable | kept_objects
    left = after_crash & unreachable
    if point == "gc.after_mark":
        assert left == unreachable, "nothing is removed before the sweep"
    else:
        assert len(unreachable - left) == GC_BATCH, "the crash came after exactly one sweep batch"
        assert left, "the crash came before the sweep finished"
    states = {s["id"]: s["state"] for s in backend.cli("snapshot", "list", "w")}
    assert states == {old0: "DELETED", old1: "DELETED", kept: "READY"}, "the mark committed before the crash"
    backend.cli("workspace", "restore", "w", "--to", str(tmp_path / "mid"))
    assert describe(str(tmp_path / "mid")) == keep

    result = backend.cli("gc", "--grace", "0", TENURE_GC_BATCH=str(GC_BATCH))
    assert result["removed"] == len(left), result
    assert backend.object_ids() == kept_objects, "every unreachable object is gone, every reachable one is there"
    assert backend.cli("gc", "--grace", "0")["removed"] == 0, "the run after that finds nothing left"
    assert backend.object_ids() == kept_objects
    assert backend.cli("snapshot", "verify", kept)["ok"]
    backend.cli("workspace", "restore", "w", "--to", str(tmp_path / "end"))
    assert describe(str(tmp_path / "end")) == keep


def test_gc_batch_size_must_be_a_positive_integer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "data")
    cli_json(data, "workspace", "create", "w")
    for bad in ("0", "-3", "many"):
        result = tenure(["--data", data, "gc", "--grace", "0"], TENURE_GC_BATCH=bad)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error[bad-gc-batch]: ") and "TENURE_GC_BATCH" in result.stderr
