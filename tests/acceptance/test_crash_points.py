"""Crash at every step (kill -9 at named points): the next call completes, nothing published is lost."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.acceptance.helpers import cli_json, describe, make_tree
from tests.integration.procs import tenure

CHECKPOINT_POINTS = [
    "checkpoint.after_begin",
    "build.after_objects_written",
    "build.after_index_saved",
    "checkpoint.after_validating",
    "publish.after_head_update",
    "publish.after_commit",
]


def test_every_registered_point_is_exercised() -> None:
    import tenure.snapshots  # noqa: F401 - registers the engine's points
    import tenure.snapshots.gc  # noqa: F401
    import tenure.store  # noqa: F401
    from tenure.faults import POINTS

    covered = set(CHECKPOINT_POINTS) | {"restore.after_materialize", "restore.after_rename",
                                        "gc.after_mark", "gc.mid_sweep"}
    storage_points = {p for p in POINTS if p.split(".")[0] in ("checkpoint", "build", "publish", "restore", "gc")}
    assert storage_points <= covered, f"points without a crash test: {storage_points - covered}"


@pytest.mark.parametrize("point", CHECKPOINT_POINTS)
def test_crash_during_checkpoint(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    cli_json(data, "workspace", "create", "w")
    first = cli_json(data, "workspace", "checkpoint", "w", "--from", src)["snapshot"]
    v1 = describe(src)
    with open(os.path.join(src, "d1", "e1", "f1.txt"), "ab") as fh:
        fh.write(b"second version")
    with open(os.path.join(src, "new.txt"), "w") as fh:
        fh.write("new file")
    v2 = describe(src)

    crashed = tenure(["--data", data, "workspace", "checkpoint", "w", "--from", src], TENURE_CRASH_AT=point)
    assert crashed.returncode == -9, crashed.stderr

    head = [w for w in cli_json(data, "workspace", "list") if w["name"] == "w"][0]["head_snapshot_id"]
    expected_after_crash = v2 if point == "publish.after_commit" else v1
    if point != "publish.after_commit":
        assert head == first["id"], "nothing is published before the publish transaction commits"
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "after-crash"))
    assert describe(str(tmp_path / "after-crash")) == expected_after_crash

    again = cli_json(data, "workspace", "checkpoint", "w", "--from", src)
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "final"))
    assert describe(str(tmp_path / "final")) == v2
    states = {s["id"]: s["state"] for s in cli_json(data, "snapshot", "list", "w")}
    assert states[first["id"]] == "READY" and states[again["snapshot"]["id"]] == "READY"
    assert not {"UPLOADING", "VALIDATING"} & set(states.values()), states
    verify = cli_json(data, "snapshot", "verify", again["snapshot"]["id"])
    assert verify["ok"]


@pytest.mark.parametrize("point", ["restore.after_materialize", "restore.after_rename"])
def test_crash_during_restore(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src, dest = str(tmp_path / "data"), str(tmp_path / "src"), str(tmp_path / "dest")
    make_tree(src)
    cli_json(data, "workspace", "create", "w")
    cli_json(data, "workspace", "checkpoint", "w", "--from", src)
    crashed = tenure(["--data", data, "workspace", "restore", "w", "--to", dest], TENURE_CRASH_AT=point)
    assert crashed.returncode == -9, crashed.stderr
    if point == "restore.after_materialize":
        assert not os.path.exists(dest) or not os.listdir(dest), "no half-restored folder that looks complete"
    else:
        assert describe(dest) == describe(src)
        shutil.rmtree(dest)
    cli_json(data, "workspace", "restore", "w", "--to", dest)
    assert describe(dest) == describe(src)


@pytest.mark.parametrize("point", ["gc.after_mark", "gc.mid_sweep"])
def test_crash_during_gc(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    cli_json(data, "workspace", "create", "w")
    snaps = []
    for i in range(3):
        with open(os.path.join(src, "big.bin"), "wb") as fh:
            fh.write(os.urandom(2_000_000))
        snaps.append(cli_json(data, "workspace", "checkpoint", "w", "--from", src)["snapshot"]["id"])
    keep = describe(src)
    cli_json(data, "snapshot", "delete", snaps[0])
    cli_json(data, "snapshot", "delete", snaps[1])
    crashed = tenure(["--data", data, "gc", "--grace", "0"], TENURE_CRASH_AT=point)
    assert crashed.returncode == -9, crashed.stderr
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "mid"))
    assert describe(str(tmp_path / "mid")) == keep
    result = cli_json(data, "gc", "--grace", "0")
    assert cli_json(data, "gc", "--grace", "0")["removed"] == 0, "the second run found nothing left"
    assert result["removed"] >= 0
    states = {s["id"]: s["state"] for s in cli_json(data, "snapshot", "list", "w")}
    assert states[snaps[0]] == states[snaps[1]] == "DELETED" and states[snaps[2]] == "READY"
    assert cli_json(data, "snapshot", "verify", snaps[2])["ok"]
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "end"))
    assert describe(str(tmp_path / "end")) == keep
