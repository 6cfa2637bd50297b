"""`prune && gc` says what it kept and why: referenced, pinned, younger than the grace period."""

from __future__ import annotations

import os
import shutil
import time

from tests.acceptance.newuser.helpers import ok, run
from tests.support.trees import make_tree

HOUR = 3600.0


def _object_files(data: str) -> dict[str, str]:
    root = os.path.join(data, "objects")
    if not os.path.isdir(root):
        return {}
    return {
        name: os.path.join(root, prefix, name)
        for prefix in os.listdir(root)
        if len(prefix) == 2
        for name in os.listdir(os.path.join(root, prefix))
    }


def _checkpoint_new_tree(data: str, src: str, seed: int, cwd: str) -> tuple[str, set[str]]:
    """Replace ``src`` by a tree sharing no content with the others; checkpoint it; return its id and new objects."""
    shutil.rmtree(src, ignore_errors=True)
    make_tree(src, seed=seed, files=12)
    before = set(_object_files(data))
    snap = ok(["--data", data, "workspace", "checkpoint", "w", "--from", src], cwd=cwd)["snapshot"]["id"]
    return snap, set(_object_files(data)) - before


def test_prune_then_gc_reports_what_it_kept_and_why_and_how_to_reclaim_now(tmp_path) -> None:  # type: ignore[no-untyped-def]
    here, data, src = str(tmp_path), str(tmp_path / "data"), str(tmp_path / "src")
    ok(["--data", data, "workspace", "create", "w"], cwd=here)
    first, objs0 = _checkpoint_new_tree(data, src, 21, here)
    second, objs1 = _checkpoint_new_tree(data, src, 22, here)
    third, objs2 = _checkpoint_new_tree(data, src, 23, here)
    head, objs3 = _checkpoint_new_tree(data, src, 24, here)
    ok(["--data", data, "snapshot", "pin", first], cwd=here)

    pruned = ok(["--data", data, "snapshot", "prune", "w", "--keep-last", "1"], cwd=here)
    assert sorted(pruned["deleted"]) == sorted([second, third]) and pruned["keep_last"] == 1
    assert pruned["kept"] == [{"id": first, "reasons": ["pinned"]}, {"id": head, "reasons": ["head", "newest"]}]

    gc = ok(["--data", data, "gc"], cwd=here)  # right away: everything unreferenced is younger than an hour
    assert gc["grace_s"] == HOUR and gc["removed"] == 0
    assert gc["young"] == len(objs1 | objs2)
    assert gc["referenced"] == len(objs0 | objs3) and gc["roots"] == 2
    assert 0 < gc["young_reclaimable_in"] <= HOUR

    human = run(["--data", data, "gc"], cwd=here)
    assert human.returncode == 0, human.stderr
    assert f"{len(objs1 | objs2)} unreferenced but younger than the grace period (1 h)" in human.stdout
    assert "tenure gc --grace 0" in human.stdout
    assert f"{len(objs0 | objs3)} referenced by the 2 snapshots" in human.stdout

    then = time.time() - 2 * HOUR  # objects an upload wrote two hours ago (no sleeping)
    for path in _object_files(data).values():
        os.utime(path, (then, then))
    later = ok(["--data", data, "gc"], cwd=here)
    assert later["removed"] == len(objs1 | objs2) and later["young"] == 0
    assert later["young_reclaimable_in"] is None
    assert set(_object_files(data)) == objs0 | objs3


def test_prune_says_gc_has_a_grace_period(tmp_path) -> None:  # type: ignore[no-untyped-def]
    here, data, src = str(tmp_path), str(tmp_path / "data"), str(tmp_path / "src")
    ok(["--data", data, "workspace", "create", "w"], cwd=here)
    old, _ = _checkpoint_new_tree(data, src, 31, here)
    head, _ = _checkpoint_new_tree(data, src, 32, here)
    result = run(["--data", data, "snapshot", "prune", "w", "--keep-last", "1"], cwd=here)
    assert result.returncode == 0, result.stderr
    assert f"1 snapshot marked DELETING: {old}" in result.stdout
    assert f"kept 1: {head} (head, newest)" in result.stdout
    assert "grace period" in result.stdout and "tenure gc --grace 0" in result.stdout
