"""The real CLI, as a user runs it: outputs, JSON, one-line errors with codes, bad input."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.support.procs import ROOT, env, tenure
from tests.support.trees import cli_json, describe, make_tree


def test_checkpoint_restore_round_trip_and_human_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    assert tenure(["--data", data, "workspace", "create", "w"]).returncode == 0
    out = tenure(["--data", data, "workspace", "checkpoint", "w", "--from", src])
    assert out.returncode == 0, out.stderr
    assert "published: snapshot s-" in out.stdout and "new bytes stored" in out.stdout
    unchanged = cli_json(data, "workspace", "checkpoint", "w", "--from", src)
    assert unchanged["unchanged"] is True
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "copy"))
    assert describe(str(tmp_path / "copy")) == describe(src)


def test_data_dir_from_environment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "envdata")
    assert tenure(["workspace", "create", "w"], TENURE_DATA=data).returncode == 0
    assert os.path.exists(os.path.join(data, "tenure.db"))
    assert [w["name"] for w in cli_json(data, "workspace", "list")] == ["w"]


def test_errors_are_one_line_with_a_code_and_exit_code(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "data")
    result = tenure(["--data", data, "workspace", "checkpoint", "missing", "--from", str(tmp_path)])
    assert result.returncode == 3
    assert result.stderr.strip().startswith("error[workspace-not-found]:")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    debug = tenure(["--data", data, "--debug", "workspace", "checkpoint", "missing", "--from", str(tmp_path)])
    assert "Traceback" in debug.stderr
    as_json = tenure(["--data", data, "--json", "workspace", "create", "bad/name"])
    assert as_json.returncode == 2
    assert json.loads(as_json.stderr)["error"]["code"] == "invalid-name"


def test_fork_from_snapshot_shares_content(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    cli_json(data, "workspace", "create", "base")
    snap = cli_json(data, "workspace", "checkpoint", "base", "--from", src)["snapshot"]
    fork = cli_json(data, "workspace", "create", "fork", "--from-snapshot", snap["id"])
    assert fork["head_snapshot_id"] == snap["id"]
    cli_json(data, "workspace", "restore", "fork", "--to", str(tmp_path / "fork"))
    assert describe(str(tmp_path / "fork")) == describe(src)


def test_fifo_and_socket_are_skipped_and_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    os.mkfifo(os.path.join(src, "pipe"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(src, "sock"))
    try:
        cli_json(data, "workspace", "create", "w")
        result = cli_json(data, "workspace", "checkpoint", "w", "--from", src)
    finally:
        sock.close()
    assert sorted(result["skipped"]) == [["pipe", "fifo"], ["sock", "socket"]]
    cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "copy"))
    expected = {k: v for k, v in describe(src).items() if k not in ("pipe", "sock")}
    assert describe(str(tmp_path / "copy")) == expected


def _without_dac_override() -> list[str]:
    """As root, permission bits do not stop reads: drop the two capabilities that bypass them."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux): cannot make a file unreadable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


def test_unreadable_file_fails_with_its_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    secret = os.path.join(src, "secret.txt")
    with open(secret, "w") as fh:
        fh.write("x")
    os.chmod(secret, 0)
    cli_json(data, "workspace", "create", "w")
    cmd = [*_without_dac_override(), sys.executable, "-m", "tenure.cli.main", "--data", data]
    result = subprocess.run(
        [*cmd, "workspace", "checkpoint", "w", "--from", src],
        cwd=ROOT,
        env=env(),
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "secret.txt" in result.stderr and "error[unreadable-file]" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    ws = cli_json(data, "workspace", "list")[0]
    assert ws["head_snapshot_id"] is None and ws["state"] == "IDLE"


def _objects(data: str) -> list[str]:
    root = os.path.join(data, "objects")
    return [
        os.path.join(root, d, f) for d in os.listdir(root) if len(d) == 2 for f in os.listdir(os.path.join(root, d))
    ]


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_damaged_object_store_is_an_integrity_error(tmp_path, damage: str) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "big.bin"), "wb") as fh:
        fh.write(os.urandom(8_000_000))
    with open(os.path.join(src, "small.txt"), "w") as fh:
        fh.write("small")
    cli_json(data, "workspace", "create", "w")
    snap = cli_json(data, "workspace", "checkpoint", "w", "--from", src)["snapshot"]
    victim = max(_objects(data), key=os.path.getsize)  # a chunk of big.bin
    if damage == "missing":
        os.unlink(victim)
    else:
        os.chmod(victim, 0o644)
        with open(victim, "r+b") as fh:
            fh.seek(100)
            fh.write(b"\xff" * 16)
    result = tenure(["--data", data, "workspace", "restore", "w", "--to", str(tmp_path / "copy")])
    assert result.returncode == 6, result.stderr
    assert "big.bin" in result.stderr
    assert not os.path.exists(tmp_path / "copy") or not os.listdir(tmp_path / "copy")
    verify = tenure(["--data", data, "--json", "snapshot", "verify", snap["id"]])
    assert verify.returncode == 6
    report = json.loads(verify.stdout)
    assert report["ok"] is False and report["lost_paths"] == ["big.bin"]
    assert cli_json(data, "snapshot", "show", snap["id"])["state"] == "DEGRADED"
    partial = cli_json(data, "workspace", "restore", "w", "--to", str(tmp_path / "partial"), "--partial")
    assert partial["lost_paths"] == ["big.bin"]
    assert (tmp_path / "partial" / "small.txt").read_text() == "small"
    fork = tenure(["--data", data, "workspace", "create", "f", "--from-snapshot", snap["id"]])
    assert fork.returncode == 4 and "error[snapshot-not-ready]" in fork.stderr


def test_prune_and_gc_reclaim_space_but_keep_the_head(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    os.makedirs(src)
    ids = []
    cli_json(data, "workspace", "create", "w")
    for _ in range(4):
        with open(os.path.join(src, "blob.bin"), "wb") as fh:
            fh.write(os.urandom(1_500_000))
        ids.append(cli_json(data, "workspace", "checkpoint", "w", "--from", src)["snapshot"]["id"])
    cli_json(data, "snapshot", "pin", ids[0])
    pruned = cli_json(data, "snapshot", "prune", "w", "--keep-last", "1")
    assert sorted(pruned["deleted"]) == sorted(ids[1:3])
    before = len(_objects(data))
    result = cli_json(data, "gc", "--grace", "0")
    assert result["removed"] > 0 and len(_objects(data)) == before - result["removed"]
    for sid in (ids[0], ids[3]):
        assert cli_json(data, "snapshot", "verify", sid)["ok"]
    head = tenure(["--data", data, "snapshot", "delete", ids[3]])
    assert head.returncode == 4 and "error[snapshot-is-head]" in head.stderr
