"""S-33 through the real CLI: a checkpoint with --key, killed at any step, is completed by a retry under that key.

The retry runs in a new process (a new writer, a raised generation), builds
from the folder as it is now, reuses the objects already uploaded, publishes
once, and every later call with the key returns that result. So does a
retry after a retryable error (a full disk): the snapshot stays pending under
the key instead of FAILED, and a checkpoint under another key supersedes it.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support import cli as faults
from tests.support.procs import tenure
from tests.support.trees import cli_json, describe, make_tree

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


# --------------------------------------------------------------------------- a retryable error, not a crash

LIMIT = 2_621_440  # 2.5 MiB: the big file's chunks fit, a 4 MiB pack of incompressible small files does not


def _two_batches(src: str) -> None:
    """A first upload batch that fits under :data:`LIMIT` (the chunks of ``a/big.bin``), a second that does not."""
    rnd = random.Random(7)
    os.makedirs(os.path.join(src, "a"))
    os.makedirs(os.path.join(src, "z"))
    with open(os.path.join(src, "a", "big.bin"), "wb") as fh:
        fh.write(rnd.randbytes(5 << 20))
    for i in range(45):
        with open(os.path.join(src, "z", f"f{i:02d}.bin"), "wb") as fh:
            fh.write(rnd.randbytes(100_000))


def _objects(data: str) -> dict[str, int]:
    """Stored object files (not temp files) and their inodes."""
    root = os.path.join(data, "objects")
    found = {}
    for prefix in os.listdir(root):
        if len(prefix) == 2:
            for name in os.listdir(os.path.join(root, prefix)):
                found[name] = os.stat(os.path.join(root, prefix, name)).st_ino
    return found


def _full(data: str, src: str, *key: str) -> None:
    args = ["--data", data, "--json", "workspace", "checkpoint", "w", "--from", src, *key]
    failed = faults.tenure(args, preexec_fn=faults.file_size_limit(LIMIT))
    assert failed.returncode == 5, failed.stderr
    error = faults.error_of(failed)
    assert error["code"] == "disk-full" and error["retryable"] is True


def test_a_keyed_checkpoint_stopped_by_a_full_disk_is_completed_by_the_same_retry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``ulimit -f``, then the same command without it: one snapshot published, the objects stored before reused."""
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    _two_batches(src)
    cli_json(data, "workspace", "create", "w")
    _full(data, src, "--key", "k1")
    (pending,) = cli_json(data, "snapshot", "list", "w")
    assert pending["state"] == "UPLOADING" and pending["idempotency_key"] == "k1"
    (ws,) = cli_json(data, "workspace", "list")
    assert ws["state"] == "IDLE", "the failed checkpoint kept the workspace"
    stored = _objects(data)
    assert stored, "precondition: the first batch was stored before the limit stopped the second"

    retried = cli_json(data, "workspace", "checkpoint", "w", "--from", src, "--key", "k1")
    assert retried["resumed"] is True
    snapshot = retried["snapshot"]
    assert snapshot["id"] == pending["id"] and snapshot["state"] == "READY"
    after = _objects(data)
    assert all(after.get(oid) == ino for oid, ino in stored.items()), "objects stored before were written again"
    total = sum(os.path.getsize(os.path.join(data, "objects", oid[:2], oid)) for oid in after)
    assert snapshot["bytes_new"] < total
    assert (
        cli_json(data, "workspace", "checkpoint", "w", "--from", src, "--key", "k1")["snapshot"]["id"] == pending["id"]
    )
    assert [s["state"] for s in cli_json(data, "snapshot", "list", "w")] == ["READY"]
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "out"))
    assert describe(str(tmp_path / "out")) == describe(src)


def test_a_pending_checkpoint_left_by_a_full_disk_wedges_no_other_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Another key (or none) supersedes it: FAILED, and its key is refused from then on; a keyless failure is FAILED."""
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    _two_batches(src)
    cli_json(data, "workspace", "create", "w")
    _full(data, src, "--key", "k1")
    other = cli_json(data, "workspace", "checkpoint", "w", "--from", src, "--key", "k2")["snapshot"]
    states = {s["idempotency_key"]: s["state"] for s in cli_json(data, "snapshot", "list", "w")}
    assert states == {"k1": "FAILED", "k2": "READY"} and other["state"] == "READY"
    refused = faults.tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", src, "--key", "k1"])
    assert refused.returncode == 4 and faults.error_of(refused)["code"] == "idempotency-conflict"

    rnd = random.Random(8)
    for i in range(45):  # another pack too big for the limit
        with open(os.path.join(src, "z", f"new{i:02d}.bin"), "wb") as fh:
            fh.write(rnd.randbytes(100_000))
    _full(data, src)
    assert [s["state"] for s in cli_json(data, "snapshot", "list", "w")].count("FAILED") == 2
    assert cli_json(data, "workspace", "checkpoint", "w", "--from", src)["snapshot"]["state"] == "READY"
