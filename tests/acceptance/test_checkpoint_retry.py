"""S-33 through the real CLI: a checkpoint with --key, killed at any step, is completed by a retry under that key.

The retry runs in a new process (a new writer, a raised generation), builds
from the folder as it is now, reuses the objects already uploaded, publishes
once, and every later call with the key returns that result.
"""

from __future__ import annotations

import os

import pytest

from tests.acceptance.helpers import cli_json, describe, make_tree
from tests.integration.procs import tenure

POINTS = [
    "checkpoint.after_begin",
    "build.after_objects_written",
    "checkpoint.after_validating",
    "publish.after_head_update",
]


@pytest.mark.parametrize("point", POINTS)
def test_s33_a_keyed_checkpoint_killed_at_a_step_is_completed_by_a_retry_with_the_key(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src, files=12)
    cli_json(data, "workspace", "create", "w")
    crashed = tenure(
        ["--data", data, "workspace", "checkpoint", "w", "--from", src, "--key", "nightly-1"], TENURE_CRASH_AT=point
    )
    assert crashed.returncode == -9, crashed.stderr
    pending = [s for s in cli_json(data, "snapshot", "list", "w") if s["state"] in ("UPLOADING", "VALIDATING")]
    with open(os.path.join(src, "after-the-crash.txt"), "w") as fh:
        fh.write("written between the crash and the retry")
    expected = describe(src)

    retried = cli_json(data, "workspace", "checkpoint", "w", "--from", src, "--key", "nightly-1")
    snapshot = retried["snapshot"]
    assert snapshot["state"] == "READY"
    if pending:
        assert snapshot["id"] == pending[0]["id"], "the retry started a second checkpoint instead of completing it"
    again = cli_json(data, "workspace", "checkpoint", "w", "--from", src, "--key", "nightly-1")
    assert again["snapshot"]["id"] == snapshot["id"]
    states = [s["state"] for s in cli_json(data, "snapshot", "list", "w")]
    assert states.count("READY") == 1 and "FAILED" not in states
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "out"))
    assert describe(str(tmp_path / "out")) == expected
