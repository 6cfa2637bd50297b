"""One command, one document: every command that has an API route prints the same ``--json`` keys in-process
and with ``--url``, and those keys are the stored contract (tests/contract/golden/cli_json_keys.json).

The pod runs as a real ``tenure serve`` process on SQLite; the in-process commands use the same store and
data folder (``--data``), the ``--url`` ones run from a folder that holds no tenure data, so an answer
can only come from the pod.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.pod.test_cli_remote import cli
from tests.support.pods import Cluster

GOLDEN = Path(__file__).parents[1] / "contract" / "golden" / "cli_json_keys.json"


#: keys whose values are maps of the data's own names (labels, verdict counts, event details): not the shape
FREE_FORM = frozenset({"labels", "reconcile", "detail", "context", "placement_selector"})


def keys(doc: Any) -> Any:
    """The shape of a document: its keys (nested dicts too), a list's by its first element."""
    if isinstance(doc, dict):
        return {k: keys(v) if isinstance(v, dict) and k not in FREE_FORM else None for k, v in sorted(doc.items())}
    if isinstance(doc, list):
        return [keys(doc[0])] if doc else []
    return None


def run(mode: list[str], *args: str, cwd: Path) -> Any:
    result = cli(*mode, "--json", *args, cwd=cwd)
    assert result.returncode == 0, (mode, args, result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_each_command_prints_the_same_json_keys_in_both_modes(tmp_path: Path) -> None:
    data = tmp_path / "pod"
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    cluster = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    shapes: dict[str, dict[str, Any]] = {}
    try:
        pod = cluster.start("pod", pull=False)
        modes = {"local": ["--data", str(data)], "url": ["--url", pod.url]}
        for mode, flags in modes.items():
            ref = f"acme/{mode}"
            seen: dict[str, Any] = {}

            def record(command: str, *args: str, flags: list[str] = flags, seen: dict[str, Any] = seen) -> Any:
                doc = run(flags, *args, cwd=elsewhere if "--url" in flags else tmp_path)
                seen[command] = keys(doc)
                return doc

            record("project create", "project", "create", ref)
            record("project list", "project", "list")
            brought = record("project bring", "project", "bring", ref)
            assert brought["status"] == "RUNNING"
            record("project show", "project", "show", ref)
            record("project history", "project", "history", ref)
            record("project set-type", "project", "set-type", ref, "EPHEMERAL")
            record("project set-placement", "project", "set-placement", ref, "--score", "1")
            record("project set-autosave", "project", "set-autosave", ref, "30s")
            record("project demand", "project", "demand", ref, "--need", "--source", "cli", "--expires-in", "1h")
            made = record("session create", "session", "create", ref)
            record("session list", "session", "list", ref)
            record("session delete", "session", "delete", (made[0] if isinstance(made, list) else made)["id"])
            record("project suspend", "project", "suspend", ref)
            snapshots = record("snapshot list", "snapshot", "list", ref)
            record("snapshot show", "snapshot", "show", snapshots[0]["id"])
            record("snapshot verify", "snapshot", "verify", snapshots[0]["id"])
            pods = record("pods", "pods")
            record("pods show", "pods", "show", pods[0]["id"])
            record("pods prune", "pods", "prune")  # the default: only rows silent for an hour, none here
            record("mounts list", "mounts", "list")
            record("project close", "project", "close", ref, "--yes")
            shapes[mode] = seen
        assert shapes["local"] == shapes["url"]
        this = [p for p in run(modes["url"], "pods", cwd=elsewhere) if p["this"]]
        assert len(this) == 1 and this[0]["endpoint"] == pod.url
        drained = run(modes["url"], "pods", "drain", this[0]["id"], "--wait", "--timeout", "30", cwd=elsewhere)
        assert drained == {"pod": this[0]["id"], "status": "STOPPED"}
    finally:
        cluster.stop_all()
    if os.environ.get("TENURE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(shapes["url"], indent=1, sort_keys=True) + "\n")
    assert shapes["url"] == json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("command", [["pods"], ["mounts", "list"], ["project", "list"]])
def test_url_mode_never_reads_a_local_store(tmp_path: Path, command: list[str]) -> None:
    """``--url`` to a pod that is not there is ``pod-unreachable``, never an answer from the current folder."""
    result = cli("--url", "http://127.0.0.1:9", "--json", *command, cwd=tmp_path)
    assert result.returncode == 5, result.stderr
    assert json.loads(result.stderr)["error"]["code"] == "pod-unreachable"
    assert not (tmp_path / ".tenure").exists()


def test_suspend_if_lineage_is_refused_with_lineage_changed_in_both_modes_and_kept_otherwise(tmp_path: Path) -> None:
    """``project suspend --if-lineage N``: sent as ``Tenure-If-Lineage`` over ``--url``, checked in-process."""
    data = tmp_path / "pod"
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    cluster = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    try:
        pod = cluster.start("pod", pull=False)
        modes = {"local": ["--data", str(data)], "url": ["--url", pod.url]}
        for mode, flags in modes.items():
            ref = f"acme/{mode}"
            cwd = elsewhere if mode == "url" else tmp_path
            run(flags, "project", "create", ref, cwd=cwd)
            lineage = run(flags, "project", "bring", ref, cwd=cwd)["lineage"]
            refused = cli(*flags, "--json", "project", "suspend", ref, "--if-lineage", str(lineage + 1), cwd=cwd)
            assert refused.returncode != 0, (mode, refused.stdout)
            assert json.loads(refused.stderr)["error"]["code"] == "lineage-changed", (mode, refused.stderr)
            assert run(flags, "project", "show", ref, cwd=cwd)["status"] == "RUNNING"  # refused before anything
            done = run(flags, "project", "suspend", ref, "--if-lineage", str(lineage), cwd=cwd)
            assert done["status"] == "SUSPENDED", mode
            if mode == "url":  # a pod that runs on: its own suspend vouches for the folder (in-process, the
                assert done["lineage"] == lineage  # bring's short-lived pod let go without a checkpoint)
    finally:
        cluster.stop_all()
