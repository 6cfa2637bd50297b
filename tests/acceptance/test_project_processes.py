"""Project ownership with real processes, on SQLite and PostgreSQL.

* exactly one winner when 8 processes claim one fresh project at once (P-32);
* a pod paused with SIGSTOP past its lease is fenced on every write (P-14, P-34);
* a holder killed with SIGKILL keeps its lease until the TTL, then loses it,
  and a restart with the same node name is not its predecessor (P-19..P-22);
* pod liveness and lease validity are two questions with two clocks (P-25, P-26).

Lease TTLs are sub-second or a few seconds; expiry is waited for by polling
the store clock, never by sleeping.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.procs import spawn
from tests.support.trees import describe

CLAIMERS = 8
ROUNDS = 10


def poll(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.01) -> Any:
    """Poll ``check`` until it returns something truthy, with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout}s")
        time.sleep(every)


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def finish(proc: subprocess.Popen[str], timeout: float = 60.0) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, (proc.returncode, err)
    return out, err


@pytest.fixture
def store(store_url: str) -> Iterator[Any]:
    from tenure.store import open_store

    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test started; any still alive at the end are resumed and killed (by pid)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def start_pod(
    procs: list[subprocess.Popen[str]],
    store_url: str,
    tmp_path: Any,
    name: str,
    ref: str,
    ttl: float,
    heartbeat: float = 0.0,
    **env: str,
) -> tuple[subprocess.Popen[str], dict[str, Any], str]:
    """Start a pod worker that brings ``ref``; wait for its ready file. Returns (proc, ready info, cmd file)."""
    ready, cmd = str(tmp_path / f"{name}.ready"), str(tmp_path / f"{name}.cmd")
    args = [
        "-m",
        "tests.acceptance.workers.pod",
        store_url,
        str(tmp_path / "objects"),
        str(tmp_path / f"data-{name}"),
        ref,
        str(ttl),
        ready,
        cmd,
    ]
    if heartbeat:
        args.append(str(heartbeat))
    proc = spawn(args, **env)
    procs.append(proc)
    deadline = time.monotonic() + 60
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise AssertionError(f"pod {name} died before it was ready: {proc.stderr.read() if proc.stderr else ''}")
        assert time.monotonic() < deadline, f"pod {name} never became ready"
        time.sleep(0.005)
    return proc, read_json(ready), cmd


def sigkill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


# ---------------------------------------------------------------------------- P-32


def round_results(folder: str, i: int) -> list[dict[str, Any]]:
    """Wait (polling, with a deadline) for every claimer's result file of round ``i``; read them."""

    def complete() -> list[str] | None:
        names = [n for n in os.listdir(folder) if n.startswith(f"out.{i}.") and not n.endswith(".tmp")]
        return names if len(names) == CLAIMERS else None

    return [read_json(os.path.join(folder, n)) for n in poll(f"round {i}: {CLAIMERS} results", complete)]


def test_p32_exactly_one_winner(store: Any, store_url: str, tmp_path, procs) -> None:  # type: ignore[no-untyped-def]
    """8 processes claim one fresh project at the same instant, 10 rounds: one row back, 7 empty results."""
    from tenure.projects import Ownership, ProjectStore

    projects = ProjectStore(store)
    refs = [f"race/p{i}" for i in range(ROUNDS)]
    rows = [projects.create(*ref.split("/")) for ref in refs]
    go, out = str(tmp_path / "go."), str(tmp_path / "out.")
    for _ in range(CLAIMERS):
        procs.append(spawn(["-m", "tests.acceptance.workers.claimer", store_url, "60", go, out, "raw", *refs]))

    for i, row in enumerate(rows):
        open(f"{go}{i}", "w").close()  # the shared start signal for round i
        got = round_results(str(tmp_path), i)
        winners = [r for r in got if r["got"]]
        assert len(winners) == 1, f"round {i}: {len(winners)} winners: {winners}"
        winner = winners[0]["pod_id"]
        assert len({r["pod_id"] for r in got}) == CLAIMERS, "every process is its own pod"
        for r in got:
            assert r["owner_after"]["pod_id"] == winner and r["owner_after"]["live"], (i, r)
            if r["pod_id"] != winner:
                assert r["generation"] is None and row.id not in r["mine"], (i, r)
        assert winners[0]["generation"] == 1 and row.id in winners[0]["mine"]
        owner = Ownership(store).owner(row.id, 60)
        assert (owner.pod_id, owner.live) == (winner, True)
        leases = store.workspaces.leases(row.workspace_id)
        assert [(lease.generation, lease.holder, lease.state.value) for lease in leases] == [(1, winner, "ACTIVE")]
        assert projects.get(*refs[i].split("/")).status.value == "INIT", "a claim changes no status"
    for proc in procs:
        finish(proc)


def test_p32_exactly_one_winner_at_the_facade(store: Any, store_url: str, tmp_path, procs) -> None:  # type: ignore[no-untyped-def]
    """The same race through claim-or-raise: 7 claim-rejected errors, each naming the one winner."""
    from tenure.projects import ProjectStore

    projects = ProjectStore(store)
    refs = [f"race/f{i}" for i in range(3)]
    for ref in refs:
        projects.create(*ref.split("/"))
    go, out = str(tmp_path / "go."), str(tmp_path / "out.")
    for _ in range(CLAIMERS):
        procs.append(spawn(["-m", "tests.acceptance.workers.claimer", store_url, "60", go, out, "facade", *refs]))
    for i in range(len(refs)):
        open(f"{go}{i}", "w").close()
        got = round_results(str(tmp_path), i)
        winners = [r["pod_id"] for r in got if r["got"]]
        assert len(winners) == 1, got
        losers = [r for r in got if not r["got"]]
        assert {(r["code"], r["holder"]) for r in losers} == {("claim-rejected", winners[0])}
    for proc in procs:
        finish(proc)


# ---------------------------------------------------------------------------- P-34


def test_p34_sigstopped_pod_is_fenced_after_takeover(store: Any, store_url: str, tmp_path, procs) -> None:  # type: ignore[no-untyped-def]
    """A pauses past its lease; B brings, edits, suspends; A resumes: all of A's writes are refused."""
    from tenure.objects.local import LocalObjectStore
    from tenure.projects import LifecycleConfig, LifecycleService, Ownership, PodIdentity, ProjectStore

    ttl = 0.5
    projects = ProjectStore(store)
    created = projects.create("acme", "web")
    a, a_info, a_cmd = start_pod(procs, store_url, tmp_path, "a", "acme/web", ttl)
    assert a_info["generation"] == 1
    os.kill(a.pid, signal.SIGSTOP)
    try:
        ownership = Ownership(store)
        assert ownership.owner(created.id, 60).pod_id == a_info["pod_id"]
        poll("A's lease expires by the store clock", lambda: not ownership.owner(created.id, ttl).live)

        objects = LocalObjectStore(str(tmp_path / "objects"))
        b = LifecycleService(
            store, objects, str(tmp_path / "data-b"), PodIdentity.fresh("node-b"), config=LifecycleConfig(lease_ttl=ttl)
        )
        brought = b.bring("acme", "web")
        assert brought.status.value == "RUNNING" and brought.generation == 2
        folder_b = b.folder(brought)
        assert os.listdir(folder_b) == [], "A never checkpointed, so B starts from the empty head"
        with open(os.path.join(folder_b, "b.txt"), "w") as fh:
            fh.write("B's version")
        os.makedirs(os.path.join(folder_b, "sub"))
        expected = describe(folder_b)
        suspended = b.suspend("acme", "web")
        b.shutdown()
        assert suspended.status.value == "SUSPENDED"
        head_b = store.workspaces.workspace(created.workspace_id).head_snapshot_id
        assert head_b is not None
        snapshots_before = {s.id: s.state.value for s in store.snapshots.list(created.workspace_id)}
    finally:
        os.kill(a.pid, signal.SIGCONT)

    open(a_cmd, "w").close()
    out, err = finish(a)
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {
        "generation": 1,
        "checkpoint": "stale-generation",
        "transition": "stale-generation",
        "retransition": "stale-generation",
        "bind": "stale-generation",
        "held": 0,
        "lost": True,
    }, err

    after = projects.get("acme", "web")
    assert (after.status.value, after.generation) == ("SUSPENDED", 2)
    ws = store.workspaces.workspace(created.workspace_id)
    assert ws.head_snapshot_id == head_b, "B's snapshot stays the head"
    snapshots_after = {s.id: s.state.value for s in store.snapshots.list(created.workspace_id)}
    assert {k: v for k, v in snapshots_after.items() if v == "READY"} == {
        k: v for k, v in snapshots_before.items() if v == "READY"
    }, "A published nothing"
    restored = str(tmp_path / "restored")
    LifecycleService(
        store, LocalObjectStore(str(tmp_path / "objects")), str(tmp_path / "data-c"), PodIdentity.fresh("node-c")
    ).workspaces.restore(created.workspace_id, restored)
    assert describe(restored) == expected


# ---------------------------------------------------------------------------- P-19..P-22


def test_p20_killed_holder_keeps_lease_until_ttl_then_takeover(store: Any, store_url: str, tmp_path, procs) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the holder: another pod's claim fails before the TTL (naming it), succeeds after; bring works."""
    from tenure.objects.local import LocalObjectStore
    from tenure.projects import LifecycleConfig, LifecycleService, Ownership, PodIdentity, PodRegistry, ProjectStore

    ttl = 2.0
    projects = ProjectStore(store)
    created = projects.create("acme", "web")
    a, a_info, _ = start_pod(procs, store_url, tmp_path, "a", "acme/web", ttl, heartbeat=0.05)
    sigkill(a)
    ownership = Ownership(store)
    other = PodIdentity.fresh("node-c")
    PodRegistry(store).register(other)
    before = ownership.owner(created.id, ttl)
    assert (before.pod_id, before.live) == (a_info["pod_id"], True), "the lease outlives the process"
    assert ownership.claim("acme", "web", other.pod_id, other.node_name, None, ttl) is None
    assert ownership.owner(created.id, ttl).pod_id == a_info["pod_id"], "a refused claim writes nothing"
    assert projects.get("acme", "web").generation == a_info["generation"]

    poll("the dead holder's lease expires", lambda: not ownership.owner(created.id, ttl).live)
    assert ownership.owner(created.id, ttl).pod_id == a_info["pod_id"], "nobody cleaned the row up (P-78)"
    c = LifecycleService(
        store,
        LocalObjectStore(str(tmp_path / "objects")),
        str(tmp_path / "data-c"),
        other,
        config=LifecycleConfig(lease_ttl=ttl),
    )
    brought = c.bring("acme", "web")
    assert brought.status.value == "RUNNING" and brought.generation == a_info["generation"] + 1
    assert ownership.owner(created.id, ttl).pod_id == other.pod_id
    assert [p.id for p in ownership.find_by_home_pod_id(a_info["pod_id"])] == []
    c.shutdown()


def test_p22_restart_with_same_node_name_is_not_the_owner(store: Any, store_url: str, tmp_path, procs) -> None:  # type: ignore[no-untyped-def]
    """A pod restarted with a pinned node name gets a new pod id; its claim is rejected until expiry."""
    from tenure.projects import Ownership, ProjectStore

    ttl = 2.0
    projects = ProjectStore(store)
    created = projects.create("acme", "web")
    go, out = str(tmp_path / "go."), str(tmp_path / "out.")
    # the successor is started up front and waits; it takes its identity after the go signal
    successor = spawn(
        ["-m", "tests.acceptance.workers.claimer", store_url, str(ttl), go, out, "until", "acme/web"],
        TENURE_NODE_NAME="node-x",
    )
    procs.append(successor)
    a, a_info, _ = start_pod(
        procs, store_url, tmp_path, "a", "acme/web", ttl, heartbeat=0.05, TENURE_NODE_NAME="node-x"
    )
    assert a_info["node"] == "node-x"
    sigkill(a)
    open(f"{go}0", "w").close()
    finish(successor)
    [name] = [n for n in os.listdir(tmp_path) if n.startswith("out.0.") and not n.endswith(".tmp")]
    result = read_json(str(tmp_path / name))

    assert result["node"] == "node-x" and result["pod_id"] != a_info["pod_id"], "a fresh pod id per start (P-21)"
    first = result["first"]
    assert first["owner_before"]["live"], "the first attempt came while the predecessor's lease was valid"
    assert not first["got"], "the predecessor's lease is not read as the successor's own"
    assert first["owner_after"]["pod_id"] == a_info["pod_id"]
    assert first["mine"] == [], "find_by_home_pod_id(new pod id) is empty"
    assert result["tries"] > 1
    final = result["final"]
    # the read just before the winning claim saw the lease expired, or about to expire: the claim is a
    # separate statement, so under load the lease may run out between the two
    before = final["owner_before"]
    assert final["got"] and (before["live"] is False or (before["expires_in"] or 0.0) < ttl / 2), (
        "it got the lease only after expiry"
    )
    assert final["generation"] == a_info["generation"] + 1, "a takeover (new generation), not a renewal"
    assert final["mine"] == [created.id]
    assert Ownership(store).find_by_home_pod_id(a_info["pod_id"]) == []


# ---------------------------------------------------------------------------- P-25, P-26


def test_p26_dead_pod_not_live_while_its_lease_is_valid(store: Any, store_url: str, tmp_path, procs) -> None:  # type: ignore[no-untyped-def]
    """After SIGKILL: resolution says "not live" (short liveness TTL) while the lease is still valid."""
    from tenure.projects import Ownership, OwnershipFacade, PodIdentity, PodRegistry, ProjectStore

    lease_ttl, liveness_ttl = 30.0, 0.5
    created = ProjectStore(store).create("acme", "web")
    a, a_info, _ = start_pod(
        procs, store_url, tmp_path, "a", "acme/web", lease_ttl, heartbeat=0.05, TENURE_POD_ENDPOINT="10.0.0.7:8400"
    )
    registry, ownership = PodRegistry(store), Ownership(store)
    me = PodIdentity.fresh("node-b", "10.0.0.8:8400")
    registry.register(me)
    facade = OwnershipFacade(store, me, lease_ttl=lease_ttl, liveness_ttl=liveness_ttl)

    # while A beats: a redirect to its endpoint (judged with a lenient liveness TTL, so load cannot flake it)
    alive = OwnershipFacade(store, me, lease_ttl=lease_ttl, liveness_ttl=10.0).claim_or_redirect("acme", "web")
    assert (alive.project, alive.redirect) == (None, "10.0.0.7:8400"), "a live holder: redirect (P-54)"

    sigkill(a)
    poll("A's heartbeat goes stale", lambda: registry.resolve_endpoint(a_info["pod_id"], liveness_ttl) is None)
    owner = ownership.owner(created.id, lease_ttl)
    assert (owner.pod_id, owner.live) == (a_info["pod_id"], True), "the lease is still valid"
    assert registry.get(a_info["pod_id"]).status == "RUNNING", "its pods row still says RUNNING"
    dead = facade.claim_or_redirect("acme", "web")
    assert dead.project is None and dead.redirect is None, "no hop to a dead endpoint"
    assert dead.retry_after is not None and 0 < dead.retry_after <= lease_ttl
    assert ProjectStore(store).get("acme", "web").generation == a_info["generation"], "nothing was written"
