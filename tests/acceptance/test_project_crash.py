"""kill -9 at every step of bring, suspend and close (real CLI): the next call completes, nothing is lost.

Each test sets a project up through the CLI with real files in its workspace,
runs one lifecycle command with ``TENURE_CRASH_AT=<point>`` (the process dies
with SIGKILL there, its lease unreleased), then runs the call the crash table
names (P-68..P-71, P-74):

* right after the crash, with a 60 s lease policy, the dead pod still holds
  the lease: the next call is refused with ``claim-rejected`` naming it and
  changes nothing (P-20, P-41);
* with a sub-second lease policy the call is retried until the dead pod's
  lease has expired by the store clock, and then completes;
* a final bring restores exactly the content written before the crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest

from tests.support.procs import tenure
from tests.support.trees import describe, make_tree

REF = "acme/web"
SHORT_TTL = "0.8"  # lease policy for the calls that wait out the dead pod's lease
LONG_TTL = "60"  # lease policy under which the dead pod's lease is certainly still valid
EXPIRY_DEADLINE_S = 45.0

BRING_POINTS = [
    "bring.after_claim",
    "bring.after_unbind",
    "bring.after_recovering",
    "bring.after_workspace_init",
    "bring.after_engines_start",
    "bring.after_running",
]
SUSPEND_POINTS = [
    "suspend.after_suspending",
    "suspend.after_engines_stop",
    "suspend.after_workspace",
    "suspend.after_suspended",
]
CLOSE_POINTS = ["close.after_fence", "close.after_delta_recorded", "close.after_dispose", "close.after_closed"]

#: Status the row shows right after the crash.
STATUS_AFTER_CRASH = {
    "bring.after_claim": "SUSPENDED",
    "bring.after_unbind": "SUSPENDED",
    "bring.after_recovering": "RECOVERING",
    "bring.after_workspace_init": "RECOVERING",
    "bring.after_engines_start": "RECOVERING",
    "bring.after_running": "RUNNING",
    "suspend.after_suspending": "SUSPENDING",
    "suspend.after_engines_stop": "SUSPENDING",
    "suspend.after_workspace": "SUSPENDING",
    "suspend.after_suspended": "SUSPENDED",
    "close.after_fence": "RUNNING",
    "close.after_delta_recorded": "RUNNING",
    "close.after_dispose": "RUNNING",
    "close.after_closed": "CLOSED",
}


# ---------------------------------------------------------------------------- CLI helpers


def cli(data: str, *args: str, ttl: str = SHORT_TTL, **env: str) -> subprocess.CompletedProcess[str]:
    return tenure(["--data", data, "--json", "project", "--lease-ttl", ttl, *args], **env)


def ok(data: str, *args: str, ttl: str = SHORT_TTL) -> Any:
    result = cli(data, *args, ttl=ttl)
    assert result.returncode == 0, (args, result.returncode, result.stderr)
    return json.loads(result.stdout)


def mounts_cli(data: str, *args: str) -> Any:
    """``tenure mounts ...`` on this data folder, its JSON answer."""
    result = tenure(["--data", data, "--json", "mounts", *args])
    assert result.returncode == 0, (args, result.returncode, result.stderr)
    return json.loads(result.stdout)


def error_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(result.stderr)["error"]  # type: ignore[no-any-return]


def show(data: str) -> Any:
    """The row and its owner, judged under a 60 s lease policy (a fresh dead lease reads as live)."""
    return ok(data, "show", REF, ttl=LONG_TTL)


def until_lease_expires(data: str, *args: str) -> Any:
    """Repeat a lifecycle call under the short lease policy until the dead pod's lease has expired.

    Every refusal on the way must be claim-rejected (exit 4), nothing else.
    """
    deadline = time.monotonic() + EXPIRY_DEADLINE_S
    while True:
        result = cli(data, *args)
        if result.returncode == 0:
            return json.loads(result.stdout)
        assert result.returncode == 4, (args, result.returncode, result.stderr)
        assert error_of(result)["code"] == "claim-rejected", result.stderr
        assert time.monotonic() < deadline, f"{args}: the dead pod's lease never expired"


def crash(data: str, *args: str, point: str) -> None:
    result = cli(data, *args, TENURE_CRASH_AT=point)
    assert result.returncode == -9, (point, result.returncode, result.stderr)


def open_data_store(data: str) -> Any:
    from tenure.store import open_store

    return open_store(f"sqlite:///{data}/tenure.db")


def head_of(data: str, workspace_id: str) -> str | None:
    store = open_data_store(data)
    try:
        return store.workspaces.workspace(workspace_id).head_snapshot_id  # type: ignore[no-any-return]
    finally:
        store.close()


def change_tree(folder: str) -> None:
    """An edit of every kind: append, new file, delete, re-point a link, new empty folder."""
    with open(os.path.join(folder, "d1", "e1", "f1.txt"), "ab") as fh:
        fh.write(b"second version")
    with open(os.path.join(folder, "new.txt"), "w") as fh:
        fh.write("written after the first checkpoint")
    os.unlink(os.path.join(folder, "d2", "e2", "f2.txt"))
    os.unlink(os.path.join(folder, "link"))
    os.symlink("d3/e0/f3.txt", os.path.join(folder, "link"))
    os.makedirs(os.path.join(folder, "later", "empty"))


def assert_nothing_left_over(data: str) -> None:
    """Folders a crash orphaned are swept; nothing was moved aside as a preserved delta."""
    trash = os.path.join(data, "trash")
    assert not os.path.isdir(trash) or os.listdir(trash) == [], os.listdir(trash)
    assert not os.path.exists(os.path.join(data, "preserved")), "a folder was moved aside"


def assert_final_bring_restores(data: str, expected: dict[str, Any]) -> None:
    """Suspend if needed, then bring: the restored folder is byte-for-byte what was written."""
    if show(data)["status"] != "SUSPENDED":
        assert until_lease_expires(data, "suspend", REF)["status"] == "SUSPENDED"
    brought = until_lease_expires(data, "bring", REF)
    assert brought["status"] == "RUNNING"
    assert describe(brought["workspace_folder"]) == expected
    assert_nothing_left_over(data)


def assert_refused_while_dead_pod_holds(data: str, op: str, before: dict[str, Any]) -> None:
    """Under a 60 s policy the dead pod's lease is valid: claim-rejected naming it, row unchanged (P-41)."""
    refused = cli(data, op, REF, ttl=LONG_TTL)
    assert refused.returncode == 4, (refused.returncode, refused.stderr)
    err = error_of(refused)
    assert err["code"] == "claim-rejected"
    assert err["context"]["holder"] == before["owner"]["pod_id"]
    after = show(data)
    assert (after["status"], after["generation"], after["owner"]["pod_id"]) == (
        before["status"],
        before["generation"],
        before["owner"]["pod_id"],
    )


def dead_pod_row(data: str, pod_id: str) -> dict[str, Any]:
    result = tenure(["--data", data, "--json", "pods"])
    assert result.returncode == 0, result.stderr
    rows = [p for p in json.loads(result.stdout) if p["id"] == pod_id]
    assert len(rows) == 1, rows
    return rows[0]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- setups


def suspended_with_checkpoint(data: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """INIT → bring → write a tree → suspend: SUSPENDED, its head snapshot holds the tree."""
    ok(data, "create", REF)
    brought = ok(data, "bring", REF)
    folder = brought["workspace_folder"]
    make_tree(folder, seed=11, files=12)
    written = describe(folder)
    suspended = ok(data, "suspend", REF)
    assert suspended["status"] == "SUSPENDED"
    assert not os.path.exists(folder), "suspend takes the folder off disk (P-58)"
    assert head_of(data, suspended["workspace_id"]) is not None
    return suspended, written, folder


def running_with_uncommitted_changes(data: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """…then bring again (folder restored from the head) and edit it: RUNNING with uncommitted changes."""
    suspended, first, _ = suspended_with_checkpoint(data)
    brought = ok(data, "bring", REF)
    folder = brought["workspace_folder"]
    assert describe(folder) == first, "bring restores the head (P-43, P-58)"
    change_tree(folder)
    second = describe(folder)
    assert second != first
    return brought, second, head_of(data, brought["workspace_id"]) or ""


# ---------------------------------------------------------------------------- the registry


def test_p74_every_lifecycle_crash_point_has_a_test() -> None:
    import tenure.projects.lifecycle  # noqa: F401 - registers the points
    from tenure.faults import POINTS

    lifecycle = {p for p in POINTS if p.split(".")[0] in ("bring", "suspend", "close")}
    assert lifecycle == set(BRING_POINTS) | set(SUSPEND_POINTS) | set(CLOSE_POINTS)


# ---------------------------------------------------------------------------- bring crashed


def _crash_bring(data: str, point: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    suspended, written, folder = suspended_with_checkpoint(data)
    crash(data, "bring", REF, point=point)
    after = show(data)
    assert after["status"] == STATUS_AFTER_CRASH[point]
    assert after["generation"] == suspended["generation"] + 1, "the dead pod's claim raised the generation"
    owner = after["owner"]
    assert owner["live"] and owner["pod_id"], "nobody released the dead pod's lease (no shutdown ran)"
    assert dead_pod_row(data, owner["pod_id"])["status"] == "RUNNING", "the dead pod's row was never stopped"
    if point in ("bring.after_workspace_init", "bring.after_engines_start", "bring.after_running"):
        assert describe(folder) == written, "the folder was restored before the crash"
    else:
        assert not os.path.exists(folder), "no folder before the workspace step"
    return after, written, folder


@pytest.mark.parametrize("point", BRING_POINTS)
def test_p68_p74_crash_during_bring_then_bring(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Crash at any bring step, bring again: RUNNING, the workspace equals the last checkpoint."""
    data = str(tmp_path / "data")
    after, written, _ = _crash_bring(data, point)
    assert_refused_while_dead_pod_holds(data, "bring", after)

    brought = until_lease_expires(data, "bring", REF)
    assert brought["status"] == "RUNNING"
    assert brought["generation"] > after["generation"], "a takeover, not a renewal of the dead pod's lease"
    assert describe(brought["workspace_folder"]) == written
    assert_final_bring_restores(data, written)


@pytest.mark.parametrize("point", BRING_POINTS)
def test_p69_crash_during_bring_then_suspend(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Crash at any bring step, then suspend: it completes (bringing first if RECOVERING) to SUSPENDED."""
    data = str(tmp_path / "data")
    after, written, folder = _crash_bring(data, point)
    if after["status"] == "SUSPENDED":
        # the crash came before RECOVERING: suspend on SUSPENDED is a no-op and needs no lease (P-59)
        same = ok(data, "suspend", REF, ttl=LONG_TTL)
        assert (same["status"], same["generation"]) == ("SUSPENDED", after["generation"])
    else:
        assert_refused_while_dead_pod_holds(data, "suspend", after)
    suspended = until_lease_expires(data, "suspend", REF)
    assert suspended["status"] == "SUSPENDED"
    assert not os.path.exists(folder), "no workspace folder left on disk (P-58)"
    final = show(data)
    if after["status"] != "SUSPENDED":
        assert final["owner"]["pod_id"] is None, "a completed suspend releases the lease"
    assert_final_bring_restores(data, written)


# ---------------------------------------------------------------------------- suspend crashed


def _crash_suspend(data: str, point: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    running, changed, first_head = running_with_uncommitted_changes(data)
    folder = running["workspace_folder"]
    crash(data, "suspend", REF, point=point)
    after = show(data)
    assert after["status"] == STATUS_AFTER_CRASH[point]
    head = head_of(data, running["workspace_id"])
    if point in ("suspend.after_suspending", "suspend.after_engines_stop"):
        assert describe(folder) == changed, "nothing touched the folder before the checkpoint step"
        assert head == first_head
    else:
        assert not os.path.exists(folder), "the checkpoint step moved the folder off disk"
        assert head != first_head, "the checkpoint was published before the crash"
    if point == "suspend.after_suspended":
        assert after["owner"]["pod_id"] is None, "the lease was released before the last crash point"
    else:
        assert after["owner"]["live"] and after["owner"]["pod_id"]
        assert dead_pod_row(data, after["owner"]["pod_id"])["status"] == "RUNNING"
    return after, changed, first_head


@pytest.mark.parametrize("point", SUSPEND_POINTS)
def test_p70_p74_crash_during_suspend_then_bring(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Crash at any suspend step, then bring: SUSPENDING → RECOVERING → RUNNING; no edit is lost."""
    data = str(tmp_path / "data")
    after, changed, _ = _crash_suspend(data, point)
    if after["owner"]["pod_id"] is not None:
        assert_refused_while_dead_pod_holds(data, "bring", after)
    brought = until_lease_expires(data, "bring", REF)
    assert brought["status"] == "RUNNING"
    # uncommitted edits are adopted, never overwritten (SPEC §3.7); published ones are restored
    assert describe(brought["workspace_folder"]) == changed
    assert_final_bring_restores(data, changed)


@pytest.mark.parametrize("point", SUSPEND_POINTS)
def test_p71_p74_crash_during_suspend_then_suspend(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Crash at any suspend step, then suspend: it continues to SUSPENDED with the edits checkpointed."""
    data = str(tmp_path / "data")
    after, changed, first_head = _crash_suspend(data, point)
    if after["owner"]["pod_id"] is not None:
        assert_refused_while_dead_pod_holds(data, "suspend", after)
    suspended = until_lease_expires(data, "suspend", REF)
    assert suspended["status"] == "SUSPENDED"
    assert show(data)["owner"]["pod_id"] is None
    assert head_of(data, suspended["workspace_id"]) != first_head, "the edits reached a new head snapshot"
    assert_final_bring_restores(data, changed)


# ---------------------------------------------------------------------------- close crashed


CLOSE_CASES = [
    "close.after_fence",
    "close.after_delta_recorded",
    "close.after_dispose",
    "close.after_closed",
]


@pytest.mark.parametrize("point", CLOSE_CASES)
def test_p12_p74_crash_during_close_then_close(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Crash at any close step, close again: CLOSED, snapshots gone, nothing leaves CLOSED — and the folder's
    uncommitted files kept once, as a preserved delta `tenure mounts recover` gives back byte for byte."""
    data = str(tmp_path / "data")
    running, uncommitted, _ = running_with_uncommitted_changes(data)
    folder = running["workspace_folder"]
    crash(data, "close", REF, "--yes", point=point)
    after = show(data)
    assert after["status"] == STATUS_AFTER_CRASH[point]
    assert after["generation"] > running["generation"], "close fenced first"
    if point not in ("close.after_fence", "close.after_delta_recorded"):
        assert not os.path.exists(folder), "the folder was moved aside"

    closed = ok(data, "close", REF, "--yes")
    assert (closed["status"], closed["project_group"]) == ("CLOSED", "closed")
    assert ok(data, "close", REF, "--yes")["status"] == "CLOSED", "close on CLOSED is an idempotent no-op"
    assert not os.path.exists(folder)
    trash = os.path.join(data, "trash")
    assert not os.path.isdir(trash) or os.listdir(trash) == [], os.listdir(trash)
    ours = [m for m in mounts_cli(data, "list") if m["workspace_id"] == running["workspace_id"]]
    [kept] = [m for m in ours if m["verdict"] == "preserved-delta"]
    assert {m["state"] for m in ours} == {"CLOSED"}, ours
    assert os.listdir(os.path.join(data, "preserved")) == [os.path.basename(kept["preserved_folder"])], "kept once"
    recovered = os.path.join(str(tmp_path), "recovered")
    mounts_cli(data, "recover", kept["id"], "--to", recovered)
    assert describe(recovered) == uncommitted, "the closed project's files come back as they were"

    store = open_data_store(data)
    try:
        ws = store.workspaces.workspace(running["workspace_id"])
        assert ws.state.value == "DELETED"
        states = {s.state.value for s in store.snapshots.list(ws.id)}
        assert states and states <= {"DELETING", "DELETED", "FAILED"}, states
    finally:
        store.close()

    for op in ("bring", "suspend", "claim"):
        refused = cli(data, op, REF)
        assert refused.returncode != 0, (op, refused.stdout)
        assert error_of(refused)["code"] in ("project-closed", "status-conflict"), refused.stderr
    final = show(data)
    assert (final["status"], final["generation"]) == ("CLOSED", closed["generation"]), "P-13: nothing leaves CLOSED"


# ---------------------------------------------------------------------------- inside init and suspendAll

INSIDE_SUSPEND = [
    "checkpoint.after_begin",
    "build.after_objects_written",
    "build.after_index_saved",
    "checkpoint.after_validating",
    "publish.after_commit",
]
INSIDE_BRING = ["restore.after_materialize", "restore.after_rename"]


@pytest.mark.parametrize("point", INSIDE_SUSPEND)
def test_p73_crash_inside_suspend_checkpoint_then_suspend(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """kill -9 inside suspendAll's checkpoint: the next suspend reaches SUSPENDED and the edits are kept."""
    data = str(tmp_path / "data")
    running, changed, first_head = running_with_uncommitted_changes(data)
    crash(data, "suspend", REF, point=point)
    after = show(data)
    assert after["status"] == "SUSPENDING"
    if point != "publish.after_commit":
        assert head_of(data, running["workspace_id"]) == first_head, "nothing is published before the commit"
        assert describe(running["workspace_folder"]) == changed, "the folder is untouched"
    assert_refused_while_dead_pod_holds(data, "suspend", after)
    suspended = until_lease_expires(data, "suspend", REF)
    assert suspended["status"] == "SUSPENDED"
    assert not os.path.exists(running["workspace_folder"])
    store = open_data_store(data)
    try:
        ws = store.workspaces.workspace(running["workspace_id"])
        assert ws.state.value != "CHECKPOINTING" and ws.pending_snapshot_id is None, ws
        assert ws.head_snapshot_id != first_head, "the edits reached a new head"
        states = {s.state.value for s in store.snapshots.list(ws.id)}
        assert not {"UPLOADING", "VALIDATING"} & states, states
    finally:
        store.close()
    assert_final_bring_restores(data, changed)


@pytest.mark.parametrize("point", INSIDE_BRING)
def test_p73_crash_inside_bring_restore_then_bring(point: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """kill -9 inside workspace init's restore: the next bring reaches RUNNING with the checkpoint's content."""
    data = str(tmp_path / "data")
    suspended, written, folder = suspended_with_checkpoint(data)
    crash(data, "bring", REF, point=point)
    after = show(data)
    assert after["status"] == "RECOVERING"
    assert_refused_while_dead_pod_holds(data, "bring", after)
    brought = until_lease_expires(data, "bring", REF)
    assert brought["status"] == "RUNNING" and brought["workspace_folder"] == folder
    assert describe(folder) == written
    preserved = os.path.join(data, "preserved")
    assert not os.path.isdir(preserved) or os.listdir(preserved) == [], (
        "a complete restore is adopted, not copied aside"
    )
    ok(data, "suspend", REF)
    brought = until_lease_expires(data, "bring", REF)
    assert describe(brought["workspace_folder"]) == written
    trash = os.path.join(data, "trash")
    assert not os.path.isdir(trash) or os.listdir(trash) == []
