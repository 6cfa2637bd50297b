"""The cluster master (ADR 0023): tick time at scale, placement evenness, takeover after kill -9.

``python -m benchmarks.cluster_bench [--pg-sizes 10000,100000,1000000] [--sqlite-sizes 10000,100000]
[--repeat 5] [--takeover-projects 1000] [--only tick,evenness,takeover]``

* **Tick time** (PostgreSQL at 10k / 100k / 1M projects, SQLite at 10k / 100k): 99% of the projects are
  held by 5 live pods (RUNNING PERMANENT, pod-bound, claimed over the last hour; each pod registered,
  heartbeat and pod lease fresh, capacity enough for all), 1% are unowned RUNNING PERMANENT (never
  claimed). Loaded by set-based SQL through the store's own connection (``INSERT … SELECT`` over
  ``generate_series`` on PostgreSQL, a recursive CTE on SQLite), then ANALYZE. The master is a
  :class:`PodRuntime` started in this process (capacity 0, so it places nothing on itself) whose
  ``Master.transport`` records each placement request and brings nothing: the tick measures the master's
  own work (eligible pods, the needing-owner pages, the choice, the placement rows and timeline events,
  the stale-bind sweep, the demand). ``Master.tick()`` is timed with ``max_moves`` = every needing project
  and with the default 100; before each tick (untimed) the pods beat, the master renews its lease, and the
  previous tick's placements, timeline events and in-flight set are cleared, so every tick starts from
  the same state. Baseline, interleaved with the ticks: the bare needing-owner scan the tick reads,
  ``Ownership.find_projects_needing_owner(ttl, 500, skip)`` paged exactly as the tick pages it (one page
  of 500 for 100 moves). The parts of the tick are timed on their own too (eligible pods, sweep, demand).
* **Placement evenness**: 1,000 placements with seeded random scores (1-5) on 5 empty pods, equal
  capacities (5 × 800) and unequal ones (400…1200), placed one by one by
  :func:`tenure.cluster.placement.choose` against two baselines in the same run: a uniformly random pod
  with room, and round-robin over the pods with room. Reported: utilization max / min after placing. Then
  one real tick on SQLite (the same 1,000 projects, 5 registered pods with those capacities, a recording
  transport) checks that the tick makes the same choices.
* **Takeover after kill -9** (real ``tenure serve`` processes on PostgreSQL, a throw-away database per
  case): pod A (``--no-master --no-self-pull``) creates and brings ``--takeover-projects`` PERMANENT
  projects through its HTTP API (4 clients); pods B and C start; A is killed with SIGKILL and the store
  is polled every 20 ms for each project being RUNNING on another pod. All pods beat every 0.5 s with a 2 s
  lease TTL (liveness TTL 1.5 s) and capacity 5,000. Cases: B and C with ``--tick 1 --no-self-pull``
  (the master places) with the default ``--max-moves 100`` and with ``--max-moves`` = the project count;
  baseline B and C with ``--no-master --pull-every 0.2`` (self-pull only). Aim: p99 ≤ TTL + one tick + 2 s.
  A last case runs every pod at ``tenure serve``'s defaults (lease TTL 10 s, beat 2 s, tick 10 s; only the
  capacity is set): aim p99 ≤ 15 s (ADR 0050).

Prints the tables and writes every sample to ``benchmarks/results/cluster.json``. Takes about 6 minutes on
a 2-core VM (``--only`` runs a part).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import projects_bench as pb
from benchmarks import serve_bench as sb

from tenure.cluster.master import PAGE
from tenure.cluster.placement import PodLoad, choose
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects.ownership import Ownership
from tenure.projects.pods import PodIdentity, PodRegistry
from tenure.states import PodState
from tenure.store import Store

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "cluster.json")

LEASE_TTL = 60.0  # tenure serve's defaults
LIVENESS_TTL = 15.0
DEFAULT_MOVES = 100
PODS = 5
NEEDING_EVERY = 100  # 1% need an owner
CLAIM_SPREAD_S = 3600
TICK_AIM_S = 0.100  # at 1M on PostgreSQL with the default 100 moves

EVEN_PLACEMENTS = 1000
EQUAL_CAPS = (800.0,) * 5
UNEQUAL_CAPS = (400.0, 600.0, 800.0, 1000.0, 1200.0)
EVEN_SEED = 7

BEAT = 0.5
TTL = 2.0
LIVENESS = 1.5
TICK = 1.0
CAPACITY = 5000.0
POLL = 0.02
TAKEOVER_AIM = TTL + TICK + 2.0
#: at the defaults (ADR 0050): every project in demand RUNNING elsewhere within 15 s p99
DEFAULTS_AIM = 15.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The cluster master: tick time, placement evenness, takeover")
    parser.add_argument("--pg-sizes", default="10000,100000,1000000", help="projects on PostgreSQL, comma-separated")
    parser.add_argument("--sqlite-sizes", default="10000,100000", help="projects on SQLite, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="timed ticks of each kind per size (default 5)")
    parser.add_argument("--takeover-projects", type=int, default=1000, help="projects on the killed pod")
    parser.add_argument("--only", default="tick,evenness,takeover", help="parts to run, comma-separated")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("TENURE_BENCH_PG", pb.DEFAULT_PG),
        help=f"an administrative PostgreSQL URL (default {pb.DEFAULT_PG}, or $TENURE_BENCH_PG)",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output path (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)

    def sizes(text: str) -> list[int]:
        return [int(s.replace("_", "")) for s in text.split(",") if s.strip()]

    args.pg_sizes, args.sqlite_sizes = sizes(args.pg_sizes), sizes(args.sqlite_sizes)
    args.only = {p.strip() for p in args.only.split(",") if p.strip()}
    return args


def ms(seconds: float) -> str:
    v = seconds * 1e3
    return f"{v:.2f} ms" if v < 100 else f"{v:.0f} ms"


def secs(v: float) -> str:
    return f"{v:.2f} s"


def render(header: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths)) + " |" for cell in cells]
    return "\n".join(lines)


# --------------------------------------------------------------------------- loading, set-based


def series(dialect: str) -> tuple[str, str]:
    """(a WITH prefix, a FROM source) giving rows i = 0 … :n - 1, and the zero-padded text of i."""
    if dialect == "postgres":
        return "", "generate_series(0, :n - 1) AS s(i)"
    return "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :n) ", "s"


def padded(dialect: str) -> str:
    return "lpad(CAST(i AS TEXT), 7, '0')" if dialect == "postgres" else "printf('%07d', i)"


def load_projects(store: Store, n: int, pods: Sequence[str], now: float) -> None:
    """``n`` RUNNING PERMANENT projects: every NEEDING_EVERY-th unowned (never claimed, not bound), the rest
    held by ``pods`` in turn a block of NEEDING_EVERY at a time (so each holds the same score), pod-bound,
    claimed over the last hour."""
    d = store.db.dialect
    prefix, source = series(d)
    pid = padded(d)
    holder = f"CASE (i / {NEEDING_EVERY}) % :k " + " ".join(f"WHEN {j} THEN '{p}'" for j, p in enumerate(pods)) + " END"
    unowned = f"i % {NEEDING_EVERY} = 0"
    with store.db.sql_transaction() as tx:
        tx.count_sql(
            f"{prefix}INSERT INTO workspaces (id, name, state, created_at, updated_at)"
            f" SELECT 'w-' || {pid}, 'ws-' || {pid}, 'IDLE', :now, :now FROM {source}",
            {"n": n, "now": now},
        )
        tx.count_sql(
            f"{prefix}INSERT INTO projects (id, tenant, name, status, kind, lifecycle_type, owner_required,"
            " home_pod_id, home_node, claimed_at, generation, workspace_id, created_at, updated_at, pod_bound)"
            f" SELECT 'p-' || {pid}, 'acme', 'p' || {pid}, 'RUNNING', 'USER', 'PERMANENT', 0,"
            f" CASE WHEN {unowned} THEN NULL ELSE {holder} END,"
            f" CASE WHEN {unowned} THEN NULL ELSE 'node-bench' END,"
            f" CASE WHEN {unowned} THEN NULL ELSE :now - (i % {CLAIM_SPREAD_S}) END,"
            f" 1, 'w-' || {pid}, :now, :now, CASE WHEN {unowned} THEN 0 ELSE 1 END FROM {source}",
            {"n": n, "now": now, "k": len(pods)},
        )


def analyze(store: Store) -> None:
    if store.db.dialect != "postgres":
        pb.analyze(store)
        return
    import psycopg

    with psycopg.connect(store.db.url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def register_pods(store: Store, capacities: Sequence[float]) -> list[str]:
    """Pods as ``tenure serve`` leaves them once running: registered RUNNING, a heartbeat, a pod lease."""
    registry, own = PodRegistry(store), Ownership(store)
    ids = []
    for k, cap in enumerate(capacities):
        pod = f"pod-{k}-{uuid.uuid4().hex[:8]}"
        registry.register(PodIdentity(pod, f"node-{k}", endpoint=None), capacity=cap, status=PodState.RUNNING)
        registry.heartbeat(pod)
        assert own.renew_leases(pod) is not None
        ids.append(pod)
    return ids


def beat_pods(store: Store, pods: Sequence[str]) -> None:
    registry, own = PodRegistry(store), Ownership(store)
    for pod in pods:
        registry.heartbeat(pod)
        own.renew_leases(pod)


class Recorder:
    """A placement transport that records the request and brings nothing."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, int]] = []

    def __call__(self, target: PodLoad, tenant: str, name: str, epoch: int) -> bool:
        self.sent.append((target.pod_id, tenant, name, epoch))
        return True


def master_node(store: Store, folder: Path, **options: Any) -> tuple[PodRuntime, Recorder]:
    """A started pod in this process with capacity 0 (never a target) and a recording transport."""
    settings: dict[str, Any] = {"self_pull": False, "capacity": 0.0, "lease_ttl": LEASE_TTL}
    settings["liveness_ttl"] = LIVENESS_TTL
    settings["master_ttl"] = 3600.0  # no beat thread runs here to renew it during a long tick
    settings.update(options)
    node = PodRuntime(
        ServeConfig(data_dir=str(folder / "master"), listen="127.0.0.1:1", **settings),
        store,
        LocalObjectStore(str(folder / "objects")),
    )
    recorder = Recorder()
    node.master.transport = recorder
    node.start()
    return node, recorder


def stop_node(node: PodRuntime) -> None:
    node._stop.set()
    node.master._stop.set()
    try:
        node.stop()
    except Exception:  # noqa: BLE001 - the store is thrown away next
        pass


# --------------------------------------------------------------------------- 1. tick time


def reset(node: PodRuntime, store: Store, pods: Sequence[str], recorder: Recorder) -> None:
    """Untimed, before each tick: the pods beat, the master renews, the last tick's traces are cleared."""
    beat_pods(store, [*pods, node.pod.pod_id])
    node.master.beat()
    assert node.master.is_master
    node.master._in_flight.clear()
    recorder.sent.clear()
    with store.db.sql_transaction() as tx:
        tx.count_sql("DELETE FROM placements")
        tx.count_sql("DELETE FROM project_events")


def scan(own: Ownership, moves: int) -> int:
    """The needing-owner pages the tick reads for ``moves`` placements (none pending, none in flight)."""
    skip = 0
    while True:
        page = own.find_projects_needing_owner(LEASE_TTL, PAGE, skip)
        skip += len(page)
        if not page or len(page) < PAGE or skip >= moves:
            return skip


def bench_tick_size(backend: pb.Backend, size: int, repeat: int, work: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    store = backend.open(f"tick{size}")
    needing = len(range(0, size, NEEDING_EVERY))
    held = size - needing
    node, recorder = master_node(store, work / f"{backend.name}-{size}")
    try:
        pods = register_pods(store, [float(held + needing)] * PODS)
        load_projects(store, size, pods, pb.store_now(store))
        analyze(store)
        load_s = time.perf_counter() - t0
        pb.log(f"  [{backend.name}] {size:,} projects ({needing:,} needing an owner) loaded in {load_s:.1f} s")
        own = Ownership(store)
        out: dict[str, Any] = {"projects": size, "needing": needing, "pods": PODS, "load_s": load_s, "moves": {}}
        cases = [("default", DEFAULT_MOVES)] + ([("all", needing)] if needing > DEFAULT_MOVES else [])
        for label, moves in cases:
            node.config.max_moves = moves
            expect = min(moves, needing)
            if label == "default":  # warm-up tick and scan (prepared statements, caches)
                reset(node, store, pods, recorder)
                node.master.tick()
                scan(own, moves)
            ticks: list[float] = []
            scans: list[float] = []
            # placing every needing project costs ~4 ms a placement: at most ~10,000 placements in all
            runs = repeat if label == "default" else max(1, min(repeat, 10_000 // needing))
            for _ in range(runs):
                reset(node, store, pods, recorder)
                started = time.perf_counter()
                report = node.master.tick()
                ticks.append(time.perf_counter() - started)
                assert report is not None and report.placed == expect and not report.deposed, (
                    report.placed,
                    report.deposed,
                )
                assert report.pending == 0 and len(recorder.sent) == expect, (report.pending, len(recorder.sent))
                started = time.perf_counter()
                read = scan(own, moves)
                scans.append(time.perf_counter() - started)
            spread = {}
            for pod_id, _, _, _ in recorder.sent:
                spread[pod_id] = spread.get(pod_id, 0) + 1
            out["moves"][label] = {
                "max_moves": moves,
                "placed": expect,
                "scanned_rows": read,
                "tick_s": pb.summary(ticks),
                "scan_s": pb.summary(scans),
                "raw_tick_s": ticks,
                "raw_scan_s": scans,
                "placements_per_pod": sorted(spread.values()),
            }
            pb.log(
                f"    max_moves {moves:,}: tick p50 {ms(pb.pct(ticks, 0.5))}, scan p50 {ms(pb.pct(scans, 0.5))}"
                f" ({runs} ticks)"
            )
        out["parts"] = tick_parts(node, store, pods, recorder, repeat)
        return out
    finally:
        stop_node(node)
        close_store(backend, store)


def tick_parts(node: PodRuntime, store: Store, pods: Sequence[str], recorder: Recorder, repeat: int) -> dict[str, Any]:
    """The tick's fixed parts on their own: the eligible pods (none in flight), the stale-bind sweep, the
    demand; then the eligible pods again with the placements of one default tick in flight."""

    def timed(fn: Callable[[], Any]) -> dict[str, float]:
        fn()
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        return pb.summary(samples)

    reset(node, store, pods, recorder)
    out = {
        "eligible_pods": timed(node.master.eligible_pods),
        "stale_bind_sweep": timed(lambda: node.ownership.unbind_ownerless_sessions(LEASE_TTL)),
        "demand": timed(node.master.publish_demand),
    }
    node.config.max_moves = DEFAULT_MOVES
    node.master.tick()  # its placements stay in flight: the transport brings nothing, so none is claimed
    in_flight = len(node.master._in_flight)
    out["eligible_pods_in_flight"] = timed(node.master.eligible_pods) | {"in_flight": in_flight}
    return out


def close_store(backend: pb.Backend, store: Store) -> None:
    store.close()
    if isinstance(backend, pb.PostgresBackend):  # free the disk now rather than at the end
        backend.stores.remove(store)
        dbname = backend.databases.pop()
        backend.admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def bench_ticks(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for name, sizes in (("postgres", args.pg_sizes), ("sqlite", args.sqlite_sizes)):
        if not sizes:
            continue
        backend: pb.Backend = pb.PostgresBackend(args.pg_url) if name == "postgres" else pb.SqliteBackend(str(work))
        try:
            res[name] = {"server_version": backend.server_version(), "sizes": {}}
            for size in sizes:
                res[name]["sizes"][str(size)] = bench_tick_size(backend, size, args.repeat, work)
        finally:
            backend.close()
    return res


def tick_table(res: dict[str, Any]) -> str:
    header = ["backend", "projects", "needing owner", "max_moves", "placed", "tick p50", "tick p95", "scan p50"]
    header += ["vs", "ratio (p50)", "aim", "result"]
    cells = []
    for backend, r in res.items():
        for size, e in r["sizes"].items():
            for label, m in e["moves"].items():
                t, s = m["tick_s"]["p50"], m["scan_s"]["p50"]
                aim, result = "info", "-"
                if backend == "postgres" and int(size) == 1_000_000 and label == "default":
                    aim, result = "< 100 ms", "met" if t < TICK_AIM_S else "NOT met"
                pages = max(1, -(-m["scanned_rows"] // PAGE))
                vs = f"needing-owner scan, {pages} page{'s' if pages > 1 else ''} of {PAGE}"
                cells.append(
                    [backend, f"{int(size):,}", f"{e['needing']:,}", f"{m['max_moves']:,}", f"{m['placed']:,}"]
                    + [ms(t), ms(m["tick_s"]["p95"]), ms(s), vs, f"{t / s:.1f}×", aim, result]
                )
    return render(header, cells)


def parts_table(res: dict[str, Any]) -> str:
    header = ["backend", "projects", "eligible pods", "eligible pods, 100 in flight", "stale-bind sweep"]
    header += ["demand", "per placement (rest of the tick)"]
    cells = []
    for backend, r in res.items():
        for size, e in r["sizes"].items():
            p = e["parts"]
            fixed = sum(p[k]["p50"] for k in ("eligible_pods", "stale_bind_sweep", "demand"))
            m = e["moves"].get("all", e["moves"]["default"])
            per = (m["tick_s"]["p50"] - fixed - m["scan_s"]["p50"]) / max(1, m["placed"])
            cells.append(
                [backend, f"{int(size):,}", ms(p["eligible_pods"]["p50"]), ms(p["eligible_pods_in_flight"]["p50"])]
                + [ms(p["stale_bind_sweep"]["p50"]), ms(p["demand"]["p50"]), ms(per)]
            )
    return render(header, cells)


# --------------------------------------------------------------------------- 2. evenness


def even_scores(seed: int = EVEN_SEED) -> list[float]:
    rng = random.Random(seed)
    return [float(rng.randint(1, 5)) for _ in range(EVEN_PLACEMENTS)]


def simulate(strategy: str, scores: Sequence[float], caps: Sequence[float], ids: Sequence[str]) -> dict[str, Any]:
    pods = [PodLoad(pid, None, {}, cap, 0.0) for pid, cap in zip(ids, caps)]
    rng = random.Random(EVEN_SEED + 1)
    nxt = 0
    unplaced = 0
    for score in scores:
        fitting = [p for p in pods if p.fits(score)]
        if not fitting:
            unplaced += 1
            continue
        if strategy == "choose":
            target = choose(score, {}, pods)
        elif strategy == "random":
            target = rng.choice(fitting)
        else:  # round-robin: the next pod in turn that has room
            for step in range(len(pods)):
                cand = pods[(nxt + step) % len(pods)]
                if cand.fits(score):
                    target, nxt = cand, (nxt + step + 1) % len(pods)
                    break
        assert target is not None
        target.take(score)
    return spread_of({p.pod_id: p.score for p in pods}, dict(zip(ids, caps))) | {"unplaced": unplaced}


def spread_of(load: dict[str, float], caps: dict[str, float]) -> dict[str, Any]:
    util = {pid: load.get(pid, 0.0) / caps[pid] for pid in caps}
    return {
        "load": [load.get(pid, 0.0) for pid in caps],
        "utilization": list(util.values()),
        "max_over_min": max(util.values()) / min(util.values()),
    }


def real_tick(scores: Sequence[float], caps: Sequence[float], work: Path) -> dict[str, Any]:
    """One tick on SQLite: the projects in the order the tick reads them (id), 5 pods with ``caps``."""
    backend = pb.SqliteBackend(str(work / f"even-{len(set(caps))}"))
    store = backend.open("even")
    node, recorder = master_node(store, work / f"even-{len(set(caps))}", max_moves=len(scores))
    try:
        ids = register_pods(store, caps)
        now = pb.store_now(store)
        with store.db.transaction() as tx:
            raw: Any = tx.conn  # type: ignore[attr-defined]
            raw.executemany(
                "INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'IDLE', ?, ?)",
                [(f"w-{i:07d}", f"ws-{i:07d}", now, now) for i in range(len(scores))],
            )
            raw.executemany(
                "INSERT INTO projects (id, tenant, name, status, kind, lifecycle_type, placement_score,"
                " workspace_id, created_at, updated_at) VALUES (?, 'acme', ?, 'RUNNING', 'USER', 'PERMANENT', ?,"
                " ?, ?, ?)",
                [(f"p-{i:07d}", f"p{i:07d}", s, f"w-{i:07d}", now, now) for i, s in enumerate(scores)],
            )
        pb.analyze(store)
        reset(node, store, ids, recorder)
        report = node.master.tick()
        assert report is not None
        by_name = {f"p{i:07d}": s for i, s in enumerate(scores)}
        load: dict[str, float] = {}
        for pod_id, _, name, _ in recorder.sent:
            load[pod_id] = load.get(pod_id, 0.0) + by_name[name]
        sim = simulate("choose", scores, caps, ids)
        got = spread_of(load, dict(zip(ids, caps)))
        return got | {
            "placed": report.placed,
            "pending": report.pending,
            "tick_s": report.seconds,
            "same_as_choose": got["load"] == sim["load"],
        }
    finally:
        stop_node(node)
        backend.close()


def bench_evenness(work: Path) -> dict[str, Any]:
    scores = even_scores()
    ids = [f"pod-{k}" for k in range(5)]
    out: dict[str, Any] = {"placements": len(scores), "total_score": sum(scores), "cases": {}}
    for label, caps in (("equal", EQUAL_CAPS), ("unequal", UNEQUAL_CAPS)):
        case = {s: simulate(s, scores, caps, ids) for s in ("choose", "random", "round-robin")}
        case["tick"] = real_tick(scores, caps, work)
        case["capacities"] = list(caps)
        out["cases"][label] = case
        pb.log(
            f"  evenness, {label} capacities: choose {case['choose']['max_over_min']:.3f}, random"
            f" {case['random']['max_over_min']:.3f}, round-robin {case['round-robin']['max_over_min']:.3f}, tick"
            f" {case['tick']['max_over_min']:.3f} (same as choose: {case['tick']['same_as_choose']})"
        )
    return out


def evenness_table(res: dict[str, Any]) -> str:
    header = ["capacities", "placed by", "utilization per pod", "max / min", "vs choose", "unplaced"]
    cells = []
    for label, case in res["cases"].items():
        caps = "5 × 800" if label == "equal" else "400/600/800/1000/1200"
        base = case["choose"]["max_over_min"]
        rows = (
            ("choose (score model)", case["choose"]),
            ("random pod with room", case["random"]),
            ("round-robin with room", case["round-robin"]),
            ("one tick on SQLite", case["tick"]),
        )
        for who, r in rows:
            util = " ".join(f"{u:.3f}" for u in r["utilization"])
            extra = (" (= choose)" if r["same_as_choose"] else " (differs)") if "same_as_choose" in r else ""
            cells.append(
                [caps, who + extra, util, f"{r['max_over_min']:.3f}", f"{r['max_over_min'] / base:.3f}×"]
                + [str(r.get("unplaced", r.get("pending", 0)))]
            )
    return render(header, cells)


# --------------------------------------------------------------------------- 3. takeover


def create_and_bring(pod: sb.Proc, count: int, clients: int = 4) -> None:
    errors: list[str] = []

    def work(k: int) -> None:
        try:
            with pod.client() as c:
                for i in range(k, count, clients):
                    name = f"t{i:04d}"
                    body = {"tenant": "acme", "name": name, "lifecycle_type": "PERMANENT"}
                    sb.expect(c.post("/api/v1/projects", json=body), 201)
                    sb.expect(c.post(f"/api/v1/projects/acme/{name}/bring"), 200)
        except Exception as exc:  # noqa: BLE001 - reported after the join
            errors.append(str(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])


def running_elsewhere(store: Store, former: str) -> list[dict[str, Any]]:
    with store.db.sql_transaction(write=False) as tx:
        return tx.execute_sql(
            "SELECT id, home_pod_id FROM projects WHERE tenant = 'acme' AND status = 'RUNNING'"
            " AND home_pod_id IS NOT NULL AND home_pod_id <> :a",
            {"a": former},
        )


def takeover_case(
    backend: pb.PostgresBackend, label: str, count: int, work: Path, others: list[str], *, defaults: bool = False
) -> dict[str, Any]:
    from tenure.cluster.store import ClusterStore

    store = backend.open(f"take_{label.replace('-', '_')}")
    db = backend.url_for(backend.databases[-1])
    folder = work / label
    folder.mkdir()
    objects = f"file://{folder}/objects"
    timing = [] if defaults else ["--beat", str(BEAT), "--lease-ttl", str(TTL), "--liveness-ttl", str(LIVENESS)]
    timing += ["--capacity", str(CAPACITY)]
    procs: list[sb.Proc] = []
    try:
        a = sb.start_pod(folder, "a", db, objects, *timing, "--no-master", "--no-self-pull")
        procs.append(a)
        t0 = time.perf_counter()
        create_and_bring(a, count)
        pb.log(f"  [{label}] {count:,} projects created and brought on pod a in {time.perf_counter() - t0:.1f} s")
        a_id = sb.pod_id(a)
        for name in ("b", "c"):
            procs.append(sb.start_pod(folder, name, db, objects, *timing, *others))
        survivors = {sb.pod_id(p) for p in procs[1:]}
        if "--no-master" not in others:
            sb.wait_for(lambda: ClusterStore(store).master().pod_id in survivors, 30, "a master among b and c")
        time.sleep(1.0)  # a few beats: the pods settle
        pids = [r["id"] for r in running_elsewhere(store, "")]
        if len(pids) != count:
            raise RuntimeError(f"{len(pids)} of {count} projects RUNNING before the kill")
        with store.db.sql_transaction(write=False) as tx:
            held = tx.execute_sql("SELECT COUNT(*) AS n FROM projects WHERE home_pod_id = :a", {"a": a_id})[0]["n"]
        if held != count:
            raise RuntimeError(f"pod a holds {held} of {count} projects before the kill")
        seen: dict[str, float] = {}
        where: dict[str, str] = {}
        killed = time.perf_counter()
        os.kill(a.proc.pid, signal.SIGKILL)
        deadline = killed + 180
        while len(seen) < count and time.perf_counter() < deadline:
            now = time.perf_counter() - killed
            for row in running_elsewhere(store, a_id):
                if row["id"] not in seen:
                    seen[row["id"]] = now
                    where[row["id"]] = row["home_pod_id"]
            time.sleep(POLL)
        a.proc.wait(10)
        if len(seen) < count:
            raise RuntimeError(f"[{label}] {len(seen)} of {count} running elsewhere 180 s after kill -9")
        per_pod: dict[str, int] = {}
        for pod in where.values():
            per_pod[pod] = per_pod.get(pod, 0) + 1
        times = sorted(seen.values())
        pb.log(
            f"  [{label}] all {count:,} running elsewhere after {times[-1]:.2f} s"
            f" (p50 {pb.pct(times, 0.5):.2f} s, p99 {pb.pct(times, 0.99):.2f} s), per pod {sorted(per_pod.values())}"
        )
        return {"options": others, "samples_s": times, "per_pod": sorted(per_pod.values())}
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait(10)
        close_store(backend, store)


def bench_takeover(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    count = args.takeover_projects
    backend = pb.PostgresBackend(args.pg_url)
    cases = {
        "master-100-moves": ["--tick", str(TICK), "--no-self-pull"],
        f"master-{count}-moves": ["--tick", str(TICK), "--no-self-pull", "--max-moves", str(count)],
        "self-pull-only": ["--no-master", "--pull-every", "0.2"],
        "defaults": [],
    }
    if count <= DEFAULT_MOVES:  # one tick places them all either way
        del cases[f"master-{count}-moves"]
    try:
        out: dict[str, Any] = {"projects": count, "postgres": backend.server_version(), "cases": {}}
        for label, others in cases.items():
            out["cases"][label] = takeover_case(backend, label, count, work, others, defaults=label == "defaults")
    finally:
        backend.close()
    return out


def takeover_table(res: dict[str, Any]) -> str:
    header = ["kill -9 of a pod holding N → each RUNNING elsewhere", "N", "per pod", "p50", "p99", "max"]
    header += ["vs", "ratio (p99)", "aim", "result"]
    cells = []
    base = res["cases"]["self-pull-only"]
    bp99 = pb.pct(base["samples_s"], 0.99)
    labels = {
        "master-100-moves": "master places (--tick 1, --max-moves 100)",
        "self-pull-only": "self-pull only (--no-master --pull-every 0.2)",
        "defaults": "every pod at the defaults (TTL 10 s, beat 2 s, tick 10 s)",
    }
    for key, c in res["cases"].items():
        s = c["samples_s"]
        p99 = pb.pct(s, 0.99)
        label = labels.get(key, f"master places (--tick 1, --max-moves {res['projects']})")
        vs, ratio = ("-", "-") if key == "self-pull-only" else ("self-pull only", f"{p99 / bp99:.2f}×")
        aim = DEFAULTS_AIM if key == "defaults" else TAKEOVER_AIM
        cells.append(
            [label, f"{len(s):,}", "/".join(str(n) for n in c["per_pod"]), secs(pb.pct(s, 0.5)), secs(p99)]
            + [secs(max(s)), vs, ratio, f"p99 ≤ {aim:.0f} s", "met" if p99 <= aim else "NOT met"]
        )
    return render(header, cells)


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("tenure").setLevel(logging.ERROR)  # the in-process pods' role changes on stop
    started = time.perf_counter()
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="tenure-cluster-bench-"))
    results: dict[str, Any] = {}
    try:
        if "tick" in args.only:
            pb.log("tick time")
            results["tick"] = bench_ticks(args, work)
        if "evenness" in args.only:
            pb.log("placement evenness")
            results["evenness"] = bench_evenness(work)
        if "takeover" in args.only:
            pb.log("takeover after kill -9")
            results["takeover"] = bench_takeover(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    tables: dict[str, str] = {}
    if "tick" in results:
        tables["tick"] = tick_table(results["tick"])
        tables["tick_parts"] = parts_table(results["tick"])
    if "evenness" in results:
        tables["evenness"] = evenness_table(results["evenness"])
    if "takeover" in results:
        tables["takeover"] = takeover_table(results["takeover"])
    print("\n" + "\n\n".join(tables.values()))
    elapsed = time.perf_counter() - started
    load_end = os.getloadavg()
    print(
        f"\n(one run, {elapsed:.0f} s; {args.repeat} ticks of each kind per size (fewer when every needing project"
        f" is placed); load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end,"
        f" {os.cpu_count()} CPUs)"
    )
    doc = {
        "args": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items() if k not in ("out",)},
        "environment": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "sqlite": sqlite3.sqlite_version,
            "git": pb.git_rev(),
        },
        "elapsed_s": elapsed,
        "load_average": {"start": load_start, "end": load_end},
        "tables": tables,
        "results": results,
    }
    doc["args"].pop("pg_url", None)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
