"""`project close` disposes of the project's snapshots, but never of one that another workspace forked from."""

from __future__ import annotations

import os

from tests.acceptance.newuser.helpers import ok

REF = "acme/p"


def test_close_then_gc_keeps_the_head_of_a_fork_of_the_projects_snapshot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    here = str(tmp_path)
    ok(["project", "create", REF], cwd=here)
    brought = ok(["project", "bring", REF], cwd=here)
    with open(os.path.join(brought["workspace_folder"], "notes.txt"), "w") as fh:
        fh.write("kept by the fork")
    ok(["project", "suspend", REF], cwd=here)
    shown = ok(["project", "show", REF], cwd=here)
    [head] = [s for s in ok(["snapshot", "list", shown["workspace_id"]], cwd=here) if s["head"]]
    fork = ok(["workspace", "create", "fork", "--from-snapshot", head["id"]], cwd=here)
    assert fork["head_snapshot_id"] == head["id"]

    assert ok(["project", "close", REF, "--yes"], cwd=here)["status"] == "CLOSED"
    ok(["gc", "--grace", "0"], cwd=here)

    restored = ok(["workspace", "restore", "fork", "--to", "out"], cwd=here)
    assert restored["snapshot"]["id"] == head["id"] and restored["snapshot"]["state"] == "READY"
    with open(os.path.join(here, "out", "notes.txt")) as fh:
        assert fh.read() == "kept by the fork"
