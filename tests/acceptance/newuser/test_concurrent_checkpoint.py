"""Two checkpoints of one workspace at once: the second is refused at once, naming the first, or waits."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from tests.acceptance.newuser.helpers import error_of, ok, run, start, user_env
from tests.support.procs import ROOT, wait_for
from tests.support.trees import describe, make_tree


def _paused_checkpoint(tmp_path, data: str, src: str) -> tuple[subprocess.Popen[str], str]:  # type: ignore[no-untyped-def]
    ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
    os.mkfifo(go)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.acceptance.newuser.paused_cli",
            ready,
            go,
            "--data",
            data,
            "--json",
            "workspace",
            "checkpoint",
            "w",
            "--from",
            src,
        ],
        cwd=ROOT,
        env=user_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(ready)
    return proc, go


def _release(go: str) -> None:
    with open(go, "w") as fh:
        fh.write("go\n")


def test_a_second_checkpoint_is_refused_at_once_naming_the_first_and_its_pid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    ok(["--data", data, "workspace", "create", "w"], cwd=str(tmp_path))
    first, go = _paused_checkpoint(tmp_path, data, src)
    try:
        objects_before = (
            sorted(os.listdir(os.path.join(data, "objects"))) if os.path.isdir(os.path.join(data, "objects")) else []
        )
        second = run(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", src], cwd=str(tmp_path))
        assert second.returncode == 4, second.stderr
        error = error_of(second)
        assert error["code"] == "lease-held" and error["retryable"] is True
        assert f"pid {first.pid}" in error["message"] and socket.gethostname() in error["message"]
        assert error["context"]["pid"] == first.pid
        assert "--wait" in error["hint"]
        objects_after = (
            sorted(os.listdir(os.path.join(data, "objects"))) if os.path.isdir(os.path.join(data, "objects")) else []
        )
        assert objects_after == objects_before, "the refused checkpoint read and stored nothing"
        human = run(["--data", data, "workspace", "checkpoint", "w", "--from", src], cwd=str(tmp_path))
        assert human.returncode == 4 and human.stderr.startswith("error[lease-held]: workspace 'w' is busy")
    finally:
        _release(go)
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    published = json.loads(out)
    assert published["unchanged"] is False
    ws = ok(["--data", data, "workspace", "list"], cwd=str(tmp_path))[0]
    assert ws["head_snapshot_id"] == published["snapshot"]["id"] and ws["state"] == "IDLE"


def test_with_wait_the_second_checkpoint_waits_for_the_first_then_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    ok(["--data", data, "workspace", "create", "w"], cwd=str(tmp_path))
    first, go = _paused_checkpoint(tmp_path, data, src)
    try:
        second = start(["--data", data, "workspace", "checkpoint", "w", "--from", src, "--wait"], cwd=str(tmp_path))
        assert second.stderr is not None
        notice = second.stderr.readline()  # printed once it found the workspace busy and began to wait
        assert notice.startswith("waiting: workspace 'w' is busy") and f"pid {first.pid}" in notice
    finally:
        _release(go)
        first.communicate(timeout=300)
    out, err = second.communicate(timeout=300)
    assert first.returncode == 0
    assert second.returncode == 0, err
    assert "unchanged, head kept: snapshot" in out, "it ran after the first had published the same folder"
    ok(["--data", data, "workspace", "restore", "w", "--to", str(tmp_path / "copy")], cwd=str(tmp_path))
    assert describe(str(tmp_path / "copy")) == describe(src)


def test_a_checkpoint_killed_mid_way_is_taken_over_at_once_by_the_next(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, src = str(tmp_path / "data"), str(tmp_path / "src")
    make_tree(src)
    ok(["--data", data, "workspace", "create", "w"], cwd=str(tmp_path))
    crashed = run(
        ["--data", data, "workspace", "checkpoint", "w", "--from", src, "--key", "k1"],
        cwd=str(tmp_path),
        TENURE_CRASH_AT="checkpoint.after_begin",
    )
    assert crashed.returncode == -9
    resumed = ok(["--data", data, "workspace", "checkpoint", "w", "--from", src, "--key", "k1"], cwd=str(tmp_path))
    assert resumed["unchanged"] is False
    ok(["--data", data, "workspace", "restore", "w", "--to", str(tmp_path / "copy")], cwd=str(tmp_path))
    assert describe(str(tmp_path / "copy")) == describe(src)
