"""Restart reconciliation with real ``tenure serve`` processes, on SQLite and on PostgreSQL: the pod is killed
with SIGKILL at named points (``TENURE_CRASH_AT``) and restarted on the same data folder, and the outcome is
read through the API, the store and the host-local mount store (S-53, S-57, S-58, S-61, S-71, S-80).

* kill -9 while a project runs: the restarted pod runs it again at once, with its uncommitted files;
* killed inside a checkpoint after its key is recorded: the checkpoint is published once, under that key;
* killed inside a suspend: the project ends SUSPENDED with its files in the head;
* killed after a suspend's checkpoint, the mount UNMOUNTING or CLOSED: the restart finishes the cleanup;
* killed in the middle of reconciliation: the next start ends where an uninterrupted one does;
* the store unreachable at restart (a TCP proxy in front of PostgreSQL, cut): the pod refuses to start with
  one line and an exit code, and touches nothing in its data folder; healed, the next start converges.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tenure.mounts.store import MountStore
from tenure.objects.local import LocalObjectStore
from tenure.projects.store import ProjectStore
from tenure.store import Store, open_store
from tenure.verify.cluster import Proxy
from tenure.workspaces import WorkspaceService
from tests.support.pods import SRC, Cluster, Pod, create, free_port

T = "acme"
#: long enough that nothing runs out during a test: a project back at once was adopted, not expired
LONG_TTL = ("--lease-ttl", "30")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tenure.db"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def cluster(tmp_path: Path, db: str) -> Iterator[tuple[Cluster, Store]]:
    cluster = Cluster(tmp_path, db, f"file://{tmp_path}/objects")
    store = open_store(db)
    try:
        yield cluster, store
    finally:
        cluster.stop_all()
        store.close()


# ------------------------------------------------------------------------------------------ helpers


def start_crashing(cluster: Cluster, name: str, point: str, monkeypatch: pytest.MonkeyPatch, *extra: str) -> Pod:
    """A pod that dies with SIGKILL when it reaches ``point`` (set for this process only)."""
    monkeypatch.setenv("TENURE_CRASH_AT", point)
    try:
        return cluster.start(name, *extra, pull=False)
    finally:
        monkeypatch.delenv("TENURE_CRASH_AT")


def serve_again(pod: Pod, **env: str) -> subprocess.CompletedProcess[bytes]:
    """``tenure serve`` again on ``pod``'s data folder (a fresh port), for a start that ends before it is ready:
    waited for by its exit, not its readiness."""
    args = [str(a) for a in pod.proc.args]  # type: ignore[union-attr]
    args[args.index("--listen") + 1] = f"127.0.0.1:{free_port()}"
    environment = dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1", **env)
    return subprocess.run(args, env=environment, capture_output=True, timeout=90)


def boot_until_killed(pod: Pod, point: str, skip: int = 0) -> subprocess.CompletedProcess[bytes]:
    """Start again with a crash point that fires at boot, before the API is up; wait for the kill."""
    return serve_again(pod, TENURE_CRASH_AT=point, TENURE_CRASH_SKIP=str(skip))


def died(pod: Pod) -> None:
    assert pod.proc.wait(30) == -signal.SIGKILL, pod.output()


def running_here(pod: Pod, name: str) -> bool:
    with pod.client() as c:
        return bool(c.get(f"/api/v1/projects/{T}/{name}").json().get("running_here"))


def mounts(pod: Pod) -> list[Any]:
    records = MountStore(pod.data)
    try:
        return records.list()
    finally:
        records.close()


def only_mount(pod: Pod) -> Any:
    [mount] = mounts(pod)
    return mount


def head_files(cluster: Cluster, store: Store, name: str) -> dict[str, bytes]:
    """The files of the project's head snapshot, restored into a scratch folder."""
    project = ProjectStore(store).get(T, name)
    if store.workspaces.workspace(project.workspace_id).head_snapshot_id is None:
        return {}
    service = WorkspaceService(store, LocalObjectStore(str(cluster.tmp / "objects")), str(cluster.tmp / "reader"))
    dest = cluster.tmp / f"head-{name}-{os.urandom(4).hex()}"
    service.restore(project.workspace_id, str(dest))
    return tree(dest)


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.startswith(".tenure")
    }


def snapshots_of(store: Store, name: str) -> list[Any]:
    project = ProjectStore(store).get(T, name)
    return [s for s in store.snapshots.list(project.workspace_id) if s.state.value == "READY"]


def reconciled(pod: Pod) -> dict[str, float]:
    """The pod's reconciliation counts per verdict, from ``/metrics``."""
    with pod.client() as c:
        text = c.get("/metrics").text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tenure_reconcile_verdicts_total{"):
            verdict = line.split('verdict="', 1)[1].split('"', 1)[0]
            counts[verdict] = float(line.rsplit(" ", 1)[1])
    return counts


def bring_with_file(pod: Pod, name: str, path: str, content: bytes) -> None:
    create(pod, name)
    with pod.client() as c:
        assert c.post(f"/api/v1/projects/{T}/{name}/bring").status_code == 200
        assert c.put(f"/api/v1/projects/{T}/{name}/files/{path}", content=content).status_code == 201


def post_until_killed(pod: Pod, path: str) -> None:
    """A request during which the pod kills itself: it gets no answer."""
    with pod.client() as c:
        try:
            answer = c.post(path)
        except httpx.TransportError:
            died(pod)
            return
    pytest.fail(f"the pod answered {answer.status_code} {answer.text!r} instead of dying: {pod.output()}")


# ------------------------------------------------------------------------------------------ (a) kill -9 while running


@pytest.mark.parametrize("checkpointed", [False, True], ids=["never-checkpointed", "after-a-checkpoint"])
def test_kill_9_while_running_then_restart_runs_the_project_again_at_once_with_its_files(
    cluster: tuple[Cluster, Store], checkpointed: bool
) -> None:
    c, store = cluster
    first = c.start("host", *LONG_TTL, pull=False)
    bring_with_file(first, "p", "work.txt", b"uncommitted")
    if checkpointed:
        with first.client() as client:
            assert client.post(f"/api/v1/projects/{T}/p/checkpoint").status_code == 200
            assert client.put(f"/api/v1/projects/{T}/p/files/later.txt", content=b"after it").status_code == 201
    generation = ProjectStore(store).get(T, "p").generation
    published = [s.id for s in snapshots_of(store, "p")]
    first.proc.kill()
    died(first)
    second = c.start("host", *LONG_TTL, pull=False)
    assert running_here(second, "p"), "running again as soon as the pod is ready, not after the 30 s lease"
    with second.client() as client:
        assert client.get(f"/api/v1/projects/{T}/p/files/work.txt").content == b"uncommitted"
        if checkpointed:
            assert client.get(f"/api/v1/projects/{T}/p/files/later.txt").content == b"after it"
    assert reconciled(second) == {"active-lease-valid": 1.0}
    mount = only_mount(second)
    after = ProjectStore(store).get(T, "p")
    assert after.generation > generation, "adopted under a new generation"
    assert (mount.state.value, mount.verdict, mount.generation) == ("MOUNTED", "active-lease-valid", after.generation)
    assert not os.path.exists(os.path.join(second.data, "preserved")), "the folder was adopted, not set aside"
    assert [s.id for s in snapshots_of(store, "p")] == published, "nothing was published on the way"


# ------------------------------------------------------------------------------------------ (b) inside a checkpoint


def test_killed_inside_a_checkpoint_after_its_key_is_recorded_publishes_it_once_at_restart(
    cluster: tuple[Cluster, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, store = cluster
    first = start_crashing(c, "host", "checkpoint_running.after_recorded", monkeypatch, *LONG_TTL)
    bring_with_file(first, "p", "result.txt", b"to publish")
    post_until_killed(first, f"/api/v1/projects/{T}/p/checkpoint")
    recorded = only_mount(first)
    assert recorded.state.value == "CHECKPOINTING" and recorded.checkpoint_key, recorded
    assert snapshots_of(store, "p") == [], "killed before anything was published"
    second = c.start("host", *LONG_TTL, pull=False)
    assert reconciled(second) == {"checkpoint-interrupted": 1.0}
    published = snapshots_of(store, "p")
    assert [s.idempotency_key for s in published] == [recorded.checkpoint_key], "published once, under its key"
    project = ProjectStore(store).get(T, "p")
    assert store.workspaces.workspace(project.workspace_id).head_snapshot_id == published[0].id
    assert head_files(c, store, "p") == {"result.txt": b"to publish"}
    mount = only_mount(second)
    assert (mount.state.value, mount.checkpoint_key, mount.base_snapshot) == ("MOUNTED", None, published[0].id)
    assert running_here(second, "p")
    with second.client() as client:  # the mount publishes again afterwards: nothing is left gated
        assert client.put(f"/api/v1/projects/{T}/p/files/more.txt", content=b"next").status_code == 201
        assert client.post(f"/api/v1/projects/{T}/p/checkpoint").status_code == 200
    assert len(snapshots_of(store, "p")) == 2


# ------------------------------------------------------------------------------------------ (c) inside a suspend

#: engines stopped, the final checkpoint not yet recorded; recorded, nothing uploaded; published, folder still there
SUSPEND_POINTS = ["suspend.after_engines_stop", "checkpoint.after_begin", "publish.after_commit"]


@pytest.mark.parametrize("point", SUSPEND_POINTS)
def test_killed_inside_a_suspend_ends_suspended_at_restart_with_its_files_in_the_head(
    cluster: tuple[Cluster, Store], monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    c, store = cluster
    first = start_crashing(c, "host", point, monkeypatch, *LONG_TTL)
    bring_with_file(first, "p", "kept.txt", b"suspended state")
    post_until_killed(first, f"/api/v1/projects/{T}/p/suspend")
    assert ProjectStore(store).get(T, "p").status.value == "SUSPENDING"
    second = c.start("host", *LONG_TTL, pull=False)
    project = ProjectStore(store).get(T, "p")
    assert project.status.value == "SUSPENDED"
    assert not running_here(second, "p")
    published = snapshots_of(store, "p")
    assert len(published) == 1, f"the final checkpoint published once: {[s.idempotency_key for s in published]}"
    assert published[0].idempotency_key.startswith("suspend:")
    assert head_files(c, store, "p") == {"kept.txt": b"suspended state"}
    assert [m.state.value for m in mounts(second)] in ([], ["CLOSED"]), "no live mount is left"
    assert not os.path.exists(os.path.join(second.data, "workspaces", project.id))
    with second.client() as client:  # and it comes back with its files
        assert client.post(f"/api/v1/projects/{T}/p/bring").json()["status"] == "RUNNING"
        assert client.get(f"/api/v1/projects/{T}/p/files/kept.txt").content == b"suspended state"


# ------------------------------------------------------------------------------------- (c') after a suspend's publish

#: the mount UNMOUNTING (the folder removed, not yet CLOSED); CLOSED (the project not yet SUSPENDED)
UNMOUNT_POINTS = [("mounts.after_unmounting", "cleanup-incomplete"), ("suspend.after_workspace", "safe-to-delete")]


@pytest.mark.parametrize(("point", "verdict"), UNMOUNT_POINTS, ids=[p for p, _ in UNMOUNT_POINTS])
def test_killed_after_a_suspends_checkpoint_the_restart_finishes_the_local_cleanup_and_loses_nothing(
    cluster: tuple[Cluster, Store], monkeypatch: pytest.MonkeyPatch, point: str, verdict: str
) -> None:
    """S-56, S-66: killed after the final checkpoint published and the folder was removed, with the mount left
    UNMOUNTING (or CLOSED). The restart classifies cleanup incomplete (or safe to delete), finishes the cleanup
    (the record closed and removed) and the project ends SUSPENDED with its files in the head."""
    c, store = cluster
    first = start_crashing(c, "host", point, monkeypatch, *LONG_TTL)
    bring_with_file(first, "p", "kept.txt", b"suspended state")
    post_until_killed(first, f"/api/v1/projects/{T}/p/suspend")
    left = only_mount(first)
    assert left.state.value == ("UNMOUNTING" if verdict == "cleanup-incomplete" else "CLOSED"), left
    assert left.checkpoint_key is None and not os.path.isdir(left.folder), "the checkpoint and the removal happened"
    assert ProjectStore(store).get(T, "p").status.value == "SUSPENDING"
    second = c.start("host", *LONG_TTL, pull=False)
    assert reconciled(second) == {verdict: 1.0}
    assert mounts(second) == [], "the cleanup finished: the record is closed and gone"
    project = ProjectStore(store).get(T, "p")
    assert project.status.value == "SUSPENDED"
    published = snapshots_of(store, "p")
    assert [s.idempotency_key.split(":")[0] for s in published] == ["suspend"], "published once"
    assert head_files(c, store, "p") == {"kept.txt": b"suspended state"}
    with second.client() as client:
        assert client.post(f"/api/v1/projects/{T}/p/bring").json()["status"] == "RUNNING"
        assert client.get(f"/api/v1/projects/{T}/p/files/kept.txt").content == b"suspended state"


# ------------------------------------------------------------------------------------------ (d) reconcile twice


def prepare_host(c: Cluster, store: Store, host: str, monkeypatch: pytest.MonkeyPatch) -> Pod:
    """A dead pod's leftovers with work for every kind of action: two running projects (one with a checkpoint
    interrupted when the pod was killed) and one closed elsewhere while the pod was down (stale, dirty)."""
    pod = start_crashing(c, host, "checkpoint_running.after_recorded", monkeypatch, *LONG_TTL)
    for name in ("run", "ckpt", "gone"):
        bring_with_file(pod, f"{host}-{name}", "f.txt", f"{name} uncommitted".encode())
    post_until_killed(pod, f"/api/v1/projects/{T}/{host}-ckpt/checkpoint")
    closed = subprocess.run(
        [sys.executable, "-m", "tenure.cli.main", "--data", str(c.tmp / f"cli-{host}"), "--db", c.db]
        + ["--objects", c.objects, "project", "close", f"{T}/{host}-gone", "--yes"],
        env=dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        timeout=60,
    )
    assert closed.returncode == 0, closed.stderr.decode()
    return pod


def final_state(c: Cluster, store: Store, pod: Pod, host: str) -> dict[str, Any]:
    """What reconciliation leaves, without what differs between two hosts by construction (ids, times, paths).

    A live mount's verdict column is left out: it names the last run's decision (an interrupted checkpoint
    finished by a killed run is an active lease at the next), not a state; its status, key and generation,
    the folder and the head are compared instead.
    """
    projects = ProjectStore(store)

    def text(root: Path) -> list[list[str]]:
        return [[path, content.decode()] for path, content in tree(root).items()]

    def short(ref: str | None) -> str | None:
        return None if ref is None else ref.split("/", 1)[1].removeprefix(f"{host}-")

    records = []
    for m in mounts(pod):
        project = projects.by_id(m.project_id) if m.project_id else None
        records.append(
            {
                "project": short(m.project_ref),
                "state": m.state.value,
                "verdict": None if m.live else m.verdict,
                "checkpoint_key": m.checkpoint_key,
                "pending_cleanup": m.pending_cleanup,
                "current_generation": project is not None and m.generation == project.generation,
                "folder_exists": os.path.isdir(m.folder),
                "preserved": text(Path(m.preserved_folder)) if m.preserved_folder else None,
            }
        )
    preserved_root = Path(pod.data, "preserved")
    preserved = sorted(text(d) for d in (preserved_root.iterdir() if preserved_root.is_dir() else []) if d.is_dir())
    statuses = {name: projects.get(T, f"{host}-{name}").status.value for name in ("run", "ckpt", "gone")}
    heads = {
        name: {k: v.decode() for k, v in head_files(c, store, f"{host}-{name}").items()} for name in ("run", "ckpt")
    }
    keys = {
        name: sorted((s.idempotency_key or "").split(":")[0] for s in snapshots_of(store, f"{host}-{name}"))
        for name in ("run", "ckpt")
    }
    running = {name: running_here(pod, f"{host}-{name}") for name in ("run", "ckpt")}
    state = {
        "mounts": sorted(records, key=json.dumps),
        "preserved": preserved,
        "statuses": statuses,
        "heads": heads,
        "keys": keys,
        "running": running,
    }
    return state


def test_reconcile_killed_in_the_middle_then_run_again_ends_where_an_uninterrupted_run_ends(
    cluster: tuple[Cluster, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, store = cluster
    prepare_host(c, store, "once", monkeypatch)
    twice = prepare_host(c, store, "twice", monkeypatch)
    assert len(mounts(twice)) == 3
    # the uninterrupted run
    done = c.start("once", *LONG_TTL, pull=False)
    expected = final_state(c, store, done, "once")
    # the interrupted one: killed after the first mount's action, then started again
    for skip in (0, 1):
        killed = boot_until_killed(twice, "reconcile.after_mount", skip=skip)
        assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    again = c.start("twice", *LONG_TTL, pull=False)
    assert final_state(c, store, again, "twice") == expected
    # what that state is
    assert expected["statuses"] == {"run": "RUNNING", "ckpt": "RUNNING", "gone": "CLOSED"}
    assert expected["running"] == {"run": True, "ckpt": True}
    assert expected["keys"] == {"run": [], "ckpt": ["now"]}, "the interrupted checkpoint published once"
    assert expected["preserved"] == [[["f.txt", "gone uncommitted"]]], "the closed project's uncommitted file is kept"
    assert expected["heads"] == {"run": {}, "ckpt": {"f.txt": "ckpt uncommitted"}}
    assert sorted((m["project"], m["state"], m["verdict"]) for m in expected["mounts"]) == [
        ("ckpt", "MOUNTED", None),
        ("gone", "CLOSED", "preserved-delta"),
        ("run", "MOUNTED", None),
    ]
    assert all(m["current_generation"] and m["folder_exists"] for m in expected["mounts"] if m["state"] == "MOUNTED")
    assert reconciled(done) == {"active-lease-valid": 1.0, "checkpoint-interrupted": 1.0, "stale-generation": 1.0}
    # and a third start changes nothing
    again.proc.kill()
    died(again)
    third = c.start("twice", *LONG_TTL, pull=False)
    assert final_state(c, store, third, "twice") == expected


# ------------------------------------------------------------------------------------------ store unreachable


def fingerprint(root: str) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root``: size, mtime and content hash (a move, a deletion or a write shows)."""
    found: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest = ""
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
            found[os.path.relpath(path, root)] = (st.st_size if digest else 0, st.st_mtime_ns, digest)
    return found


@pytest.mark.postgres
def test_postgresql_unreachable_at_restart_stops_the_pod_with_one_line_and_touches_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    target = urlsplit(pg_url)
    proxy = Proxy((target.hostname or "127.0.0.1", target.port or 5432))
    c = Cluster(tmp_path, proxy.url(pg_url), f"file://{tmp_path}/objects")
    store = open_store(pg_url)  # the test's own view, past the proxy
    try:
        first = c.start("host", *LONG_TTL, pull=False)
        bring_with_file(first, "p", "work.txt", b"uncommitted")
        project = ProjectStore(store).get(T, "p")
        first.proc.kill()
        died(first)
        proxy.cut()
        records_before = [m.to_dict() for m in mounts(first)]
        files_before = fingerprint(first.data)

        refused = serve_again(first)
        err = refused.stderr.decode()
        lines = [line for line in err.splitlines() if line.strip()]
        assert refused.returncode == 5, err
        assert len(lines) == 1 and lines[0].startswith("error[store-unreachable]:"), err
        assert "Traceback" not in err
        assert f"127.0.0.1:{proxy.port}" in lines[0], "it names where it tried"
        assert [m.to_dict() for m in mounts(first)] == records_before, "the mount records are unchanged"
        assert fingerprint(first.data) == files_before, "nothing in the data folder was deleted, moved or written"
        assert snapshots_of(store, "p") == [], "nothing was published"
        assert ProjectStore(store).get(T, "p").generation == project.generation, "nothing was adopted"

        proxy.heal()
        second = c.start("host", *LONG_TTL, pull=False)
        assert running_here(second, "p")
        with second.client() as client:
            assert client.get(f"/api/v1/projects/{T}/p/files/work.txt").content == b"uncommitted"
        assert reconciled(second) == {"active-lease-valid": 1.0}
        assert only_mount(second).generation == ProjectStore(store).get(T, "p").generation > project.generation
    finally:
        c.stop_all()
        proxy.close()
        store.close()
