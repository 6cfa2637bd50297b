"""`tenure gc --expire-idle` and `tenure workspace undo-expiry` through the real CLI (ADR 0019)."""

from __future__ import annotations

import json

from tests.support.procs import tenure
from tests.support.trees import cli_json, make_tree


def test_gc_expires_only_when_asked_and_undo_expiry_brings_it_back_or_says_why_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    cli_json(data, "workspace", "create", "w")
    head = cli_json(data, "workspace", "checkpoint", "w", "--from", src)["snapshot"]["id"]

    assert "expiry" not in cli_json(data, "gc"), "expiry is off unless --expire-idle is given"
    assert cli_json(data, "workspace", "list")[0]["state"] == "IDLE"

    expiry = cli_json(data, "gc", "--expire-idle", "1ms")["expiry"]
    assert (expiry["expired"], expiry["deleted"], expiry["grace_s"]) == (["w"], [], 7 * 86400.0)
    back = cli_json(data, "workspace", "undo-expiry", "w")
    assert (back["state"], back["head_snapshot_id"]) == ("IDLE", head)

    cli_json(data, "gc", "--expire-idle", "1ms")
    late = tenure(["--data", data, "--json", "workspace", "undo-expiry", "w", "--expiry-grace", "0"])
    assert late.returncode == 4 and json.loads(late.stderr)["error"]["code"] == "expiry-grace-over"

    done = cli_json(data, "gc", "--expire-idle", "30d", "--expiry-grace", "0", "--grace", "0")
    assert (done["expiry"]["deleted"], done["expiry"]["snapshots_deleting"]) == (["w"], [head])
    assert done["removed"] > 0 and done["stored"] == done["removed"]
    gone = tenure(["--data", data, "--json", "workspace", "undo-expiry", "w"])
    assert gone.returncode == 4 and json.loads(gone.stderr)["error"]["code"] == "workspace-not-expiring"

    bad = tenure(["--data", data, "gc", "--expire-idle", "soon"])
    assert bad.returncode == 2 and "not a duration" in bad.stderr
