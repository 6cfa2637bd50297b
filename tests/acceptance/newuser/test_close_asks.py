"""`project close` is terminal: it names what it disposes of and asks, or needs --yes without a terminal."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.acceptance.newuser.helpers import error_of, ok, run, run_on_terminal

REF = "acme/web"


def _running_with_two_snapshots(here: str) -> dict[str, Any]:
    """A RUNNING project whose folder is on this host and whose workspace has two published snapshots."""
    ok(["project", "create", REF], cwd=here)
    for i in range(2):
        brought = ok(["project", "bring", REF], cwd=here)
        with open(os.path.join(brought["workspace_folder"], f"notes{i}.txt"), "w") as fh:
            fh.write(f"version {i}")
        ok(["project", "suspend", REF], cwd=here)
    running = ok(["project", "bring", REF], cwd=here)
    assert running["status"] == "RUNNING" and os.path.isdir(running["workspace_folder"])
    return running


def _published(here: str, workspace_id: str) -> list[str]:
    from tenure.store import open_store

    store = open_store(f"sqlite:///{here}/.tenure/tenure.db")
    try:
        return sorted(s.state.value for s in store.snapshots.list(workspace_id))
    finally:
        store.close()


def test_close_without_a_terminal_needs_yes_and_changes_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    here = str(tmp_path)
    running = _running_with_two_snapshots(here)
    before = _published(here, running["workspace_id"])
    result = run(["--json", "project", "close", REF], cwd=here)
    assert result.returncode == 2 and result.stdout == ""
    error = error_of(result)
    assert error["code"] == "confirmation-required"
    assert "--yes" in error["hint"]
    assert running["workspace_folder"] in error["message"] and "2 snapshots" in error["message"]
    assert error["context"]["snapshots"] == 2
    after = ok(["project", "show", REF], cwd=here)
    assert (after["status"], after["generation"]) == ("RUNNING", running["generation"])
    assert os.path.isdir(running["workspace_folder"]) and _published(here, running["workspace_id"]) == before
    human = run(["project", "close", REF], cwd=here)
    assert human.returncode == 2 and human.stderr.startswith("error[confirmation-required]:")
    assert len(human.stderr.strip().splitlines()) == 1

    closed = ok(["project", "close", REF, "--yes"], cwd=here)
    assert closed["status"] == "CLOSED" and not os.path.exists(running["workspace_folder"])
    assert set(_published(here, running["workspace_id"])) <= {"DELETING", "DELETED"}


def test_close_on_a_terminal_shows_what_it_disposes_of_and_a_no_changes_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    here = str(tmp_path)
    running = _running_with_two_snapshots(here)
    pods = ok(["pods"], cwd=here)
    code, out, shown = run_on_terminal(["project", "close", REF], cwd=here, answer="n\n")
    assert code == 1 and out == ""
    assert running["workspace_folder"] in shown and "2 snapshots" in shown and "cannot be undone" in shown
    assert "not closed" in shown
    assert ok(["project", "show", REF], cwd=here)["status"] == "RUNNING"
    assert os.path.isdir(running["workspace_folder"])
    assert ok(["pods"], cwd=here) == pods, "declining started no short-lived pod"

    code, out, shown = run_on_terminal(["--json", "project", "close", REF], cwd=here, answer="y\n")
    assert code == 0, shown
    assert json.loads(out)["status"] == "CLOSED"
    assert not os.path.exists(running["workspace_folder"])


def test_close_of_a_closed_project_asks_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    here = str(tmp_path)
    ok(["project", "create", REF], cwd=here)
    ok(["project", "close", REF, "--yes"], cwd=here)
    again = ok(["project", "close", REF], cwd=here)
    assert again["status"] == "CLOSED", "close on CLOSED is a no-op: there is nothing to dispose of"
