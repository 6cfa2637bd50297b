"""The beat of a ``tenure serve`` pod against per-row renewal (ADR 0016).

``python -m benchmarks.beat_bench [--sizes 1000,10000,100000] [--backends sqlite,postgres] [--repeat N]``

For each backend and each size N, one pod holds N projects (rows loaded in
bulk, as claims by a beating pod leave them: ``home_pod_id`` set,
``pod_bound = 1``, and the pod's row with ``lease_renewed_at``), and this
measures, in the same run on the same table:

* **tenure's beat**: what a beat does to the store,
  ``PodRegistry.heartbeat(pod, score=…, running=…)`` then
  ``Ownership.renew_leases(pod)`` (median and p95 of ``--repeat`` beats);
* **the baseline, per-row renewal**: the same heartbeat, then the renewal
  statement before ADR 0016 (:data:`PER_ROW_RENEWAL_SQL`, one transaction),
  which rewrites every held row;
* the drift check a beat makes only when the pod's ``lost`` counter moved
  (``Ownership.find_by_home_pod_id``), reported on its own;
* rows written per beat (SQLite ``total_changes``; PostgreSQL the server's
  command tags) and the plans of the beat's statements;
* table growth over 3 beats of each kind (PostgreSQL
  ``pg_total_relation_size('projects')``; SQLite the database file after a
  truncating checkpoint) and the write-ahead log each kind writes;
* ``find_projects_needing_owner`` (lease TTL 60 s, limit 100, as ``tenure
  serve``'s pull) with N held by the live pod plus 1,000 unheld projects that
  need an owner, against the same call on a store holding only those 1,000
  (nothing held), twice: on the freshly loaded table, whose held claims were
  made over the last hour, and after the per-row renewal has set every held
  ``claimed_at`` to the last seconds (claims younger than the TTL; the
  table is compacted first on PostgreSQL, ``VACUUM FULL``).

Prints two tables (ratios are tenure / baseline) and writes the raw numbers to
``benchmarks/results/beat.json``. Throw-away PostgreSQL databases are created
and dropped (``--pg-url``, default ``postgresql://postgres@127.0.0.1:5432/postgres``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from benchmarks import projects_bench as pb

from tenure.projects.ownership import Ownership
from tenure.projects.pods import PodIdentity, PodRegistry
from tenure.states import PodState, ProjectStatus
from tenure.store import Store
from tenure.store.queries import state_params

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "beat.json")

#: The baseline: lease renewal before ADR 0016, one multi-row UPDATE of every project row the pod holds.
PER_ROW_RENEWAL_SQL = "UPDATE projects SET claimed_at = {now} WHERE home_pod_id = :pod AND status <> :closed"

LEASE_TTL = 60.0  # tenure serve's default lease TTL
FIND_LIMIT = 100  # the page size of tenure serve's pull
UNHELD = 1_000  # unheld projects that need an owner, in the needing-owner case
GROWTH_BEATS = 3
CLAIM_SPREAD_S = 3600.0  # the loaded claims were made over the last hour (claimed_at is the time of the claim)
BEAT_AIM_S = 0.005
FIND_AIM = 1.5  # needing-owner with N held / with nothing held: a live pod's projects are not scanned
BEAT_STATEMENTS = ("pod_heartbeat", "pod_renew_lease", "projects_bind_to_pod")
CLOSED = state_params(ProjectStatus.CLOSED)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The beat of a tenure serve pod against per-row renewal")
    parser.add_argument("--sizes", default="1000,10000,100000", help="held projects, comma-separated")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both, comma-separated")
    parser.add_argument("--repeat", type=int, default=50, help="timed beats of each kind (default 50)")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("TENURE_BENCH_PG", pb.DEFAULT_PG),
        help=f"an administrative PostgreSQL URL (default {pb.DEFAULT_PG}, or $TENURE_BENCH_PG)",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output path (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in args.backends:
        if b not in ("sqlite", "postgres"):
            parser.error(f"unknown backend {b!r}")
    return args


def baseline_repeat(repeat: int, size: int) -> int:
    """Per-row renewal rewrites every held row: at most ~1M row rewrites in the timed runs, at least 5 runs."""
    return max(5, min(repeat, 1_000_000 // size))


def drift_repeat(repeat: int, size: int) -> int:
    return max(5, min(repeat, 200_000 // size))


def ms(seconds: float) -> str:
    v = seconds * 1e3
    return f"{v:.3f} ms" if v < 1 else f"{v:.2f} ms" if v < 100 else f"{v:.0f} ms"


def size_str(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if abs(n) >= 1e5 else f"{n / 1e3:.1f} kB"


# --------------------------------------------------------------------------- loading


@contextmanager
def pod_bound_column() -> Iterator[None]:
    """``projects_bench.bulk_insert`` takes its projects column list from ``PRJ_COLS``: add ``pod_bound``
    (each row then carries one more value) while this benchmark loads."""
    saved = pb.PRJ_COLS
    pb.PRJ_COLS = saved + ("pod_bound",)
    try:
        yield
    finally:
        pb.PRJ_COLS = saved


def load_held(store: Store, pod: str, size: int, now: float) -> None:
    """N projects held by ``pod`` as its claims leave them: RUNNING, PERMANENT, claimed over the last hour, bound."""
    rng = random.Random(size)

    def rows() -> Iterator[Any]:
        for i in range(size):
            ws, prj = pb.row_pair("h", i, now, "RUNNING", "PERMANENT", 0, pod, now - rng.uniform(0, CLAIM_SPREAD_S))
            yield ws, prj + (1,)

    with pod_bound_column():
        pb.bulk_insert(store, rows())


def load_unheld(store: Store, count: int, now: float) -> None:
    """Projects that need an owner and have none (never claimed, not bound)."""

    def rows() -> Iterator[Any]:
        for i in range(count):
            ws, prj = pb.row_pair("u", i, now, "RUNNING", "PERMANENT", 0, None, None)
            yield ws, prj + (0,)

    with pod_bound_column():
        pb.bulk_insert(store, rows())


def start_pod(store: Store) -> str:
    """A pod as ``tenure serve`` starts one: registered, then a heartbeat and a first renewal (its lease)."""
    pod = str(uuid.uuid4())
    registry = PodRegistry(store)
    registry.register(PodIdentity(pod, "node-bench"), status=PodState.RUNNING)
    registry.heartbeat(pod)
    assert Ownership(store).renew_leases(pod) is not None
    return pod


def vacuum(store: Store, full: bool = False) -> None:
    """PostgreSQL: VACUUM (ANALYZE) projects outside a transaction; SQLite: ANALYZE."""
    if store.db.dialect != "postgres":
        pb.analyze(store)
        return
    import psycopg

    with psycopg.connect(store.db.url, autocommit=True) as conn:
        conn.execute("VACUUM (FULL, ANALYZE) projects" if full else "VACUUM (ANALYZE) projects")
        conn.execute("VACUUM (ANALYZE) pods")


# --------------------------------------------------------------------------- the two beats


class Beats:
    def __init__(self, store: Store, pod: str, size: int) -> None:
        self.store = store
        self.pod = pod
        self.size = size
        self.registry = PodRegistry(store)
        self.own = Ownership(store)

    def heartbeat(self) -> None:
        assert self.registry.heartbeat(self.pod, score=float(self.size), running=self.size)

    def tenure_renewal(self) -> None:
        renewal = self.own.renew_leases(self.pod)
        assert renewal is not None and renewal.lost == 0 and renewal.status == PodState.RUNNING.value, renewal

    def baseline_renewal(self) -> None:
        with self.store.db.sql_transaction() as tx:
            n = tx.count_sql(PER_ROW_RENEWAL_SQL, {"pod": self.pod, **CLOSED})
        assert n == self.size, (n, self.size)

    def tenure(self) -> tuple[float, float]:
        """One beat: (heartbeat seconds, renewal seconds)."""
        t0 = time.perf_counter()
        self.heartbeat()
        t1 = time.perf_counter()
        self.tenure_renewal()
        return t1 - t0, time.perf_counter() - t1

    def baseline(self) -> tuple[float, float]:
        t0 = time.perf_counter()
        self.heartbeat()
        t1 = time.perf_counter()
        self.baseline_renewal()
        return t1 - t0, time.perf_counter() - t1


def timed(beat: Callable[[], tuple[float, float]], runs: int) -> dict[str, Any]:
    hb, rn, total = [], [], []
    for _ in range(runs):
        a, b = beat()
        hb.append(a)
        rn.append(b)
        total.append(a + b)
    return {"beat_s": pb.summary(total), "heartbeat_s": pb.summary(hb), "renewal_s": pb.summary(rn), "raw": total}


def count_rows(store: Store, kind: str, pod: str, size: int) -> dict[str, Any]:
    """Rows one beat writes: SQLite ``total_changes``; PostgreSQL the command tags the server sends back."""

    def run(on: Store) -> None:
        b = Beats(on, pod, size)
        b.tenure() if kind == "tenure" else b.baseline()

    if store.db.dialect == "sqlite":
        conn = store.db._conn()  # type: ignore[attr-defined]
        before = conn.total_changes
        with pb.driver_trace(store) as drv:
            run(store)
        return {"rows": conn.total_changes - before, "statements": drv["statements"]}
    traced = pb.single_connection(store)
    try:
        with pb.driver_trace(traced) as drv:
            run(traced)
    finally:
        traced.close()
    tags = drv["statements"]
    return {"rows": sum(int(t.split()[-1]) for t in tags if t.split()[-1].isdigit()), "command_tags": tags}


def plans(store: Store, pod: str, size: int) -> dict[str, list[str]]:
    """The plans of the beat's statements and of the baseline. PostgreSQL: the beat's statements with
    ANALYZE and BUFFERS (they run once more, as a beat would), the baseline without (it would rewrite N rows)."""
    params = {
        "pod_heartbeat": {"id": pod, "score": float(size), "running": size, **state_params(PodState.STOPPED)},
        "pod_renew_lease": {"pod": pod, **state_params(PodState.RUNNING, PodState.STOPPED)},
        "projects_bind_to_pod": {"pod": pod, **CLOSED},
        "baseline": {"pod": pod, **CLOSED},
    }
    pg = store.db.dialect == "postgres"
    out: dict[str, list[str]] = {}
    statements = [(name, store.db.queries.sql(store.db.dialect, name), params[name], pg) for name in BEAT_STATEMENTS]
    statements.append(("baseline: PER_ROW_RENEWAL_SQL", PER_ROW_RENEWAL_SQL, params["baseline"], False))
    for name, sql, values, run in statements:
        with store.db.sql_transaction() as tx:
            if pg:
                prefix = "EXPLAIN (ANALYZE, BUFFERS) " if run else "EXPLAIN "
                out[name] = [next(iter(r.values())) for r in tx.execute_sql(prefix + sql, values)]
            else:
                out[name] = [r["detail"] for r in tx.execute_sql("EXPLAIN QUERY PLAN " + sql, values)]
    return out


# --------------------------------------------------------------------------- growth


def relation_size(store: Store) -> dict[str, int]:
    if store.db.dialect == "postgres":
        with store.db.sql_transaction(write=False) as tx:
            row = tx.execute_sql(
                "SELECT pg_total_relation_size('projects') AS total, pg_relation_size('projects') AS heap,"
                " pg_indexes_size('projects') AS indexes"
            )[0]
        return {k: int(v) for k, v in row.items()}
    conn = store.db._conn()  # type: ignore[attr-defined]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"total": os.path.getsize(store.db.path)}  # type: ignore[attr-defined]


def growth(store: Store, beats: Beats) -> dict[str, Any]:
    """Size of projects before and after GROWTH_BEATS tenure beats, then GROWTH_BEATS baseline beats; WAL of each."""
    wal = pb.WalProbe(store)
    out: dict[str, Any] = {"beats": GROWTH_BEATS, "before": relation_size(store)}
    for kind, beat in (("tenure", beats.tenure), ("baseline", beats.baseline)):
        wal.start()
        for _ in range(GROWTH_BEATS):
            beat()
        out[f"wal_bytes_{kind}"] = wal.stop()
        out[f"after_{kind}"] = relation_size(store)
    return out


# --------------------------------------------------------------------------- needing owner


def find_times(own: Ownership, runs: int) -> tuple[list[float], int]:
    got = own.find_projects_needing_owner(LEASE_TTL, FIND_LIMIT)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        own.find_projects_needing_owner(LEASE_TTL, FIND_LIMIT)
        times.append(time.perf_counter() - t0)
    return times, len(got)


def bench_find(store: Store, empty: Store, runs: int) -> dict[str, Any]:
    """N held + UNHELD needing (``store``) against UNHELD needing and nothing held (``empty``), interleaved."""
    own, base = Ownership(store), Ownership(empty)
    held_t: list[float] = []
    empty_t: list[float] = []
    for _ in range(5):  # interleave in rounds so drift of the machine hits both alike
        t, n_held = find_times(own, max(1, runs // 5))
        held_t += t
        t, n_empty = find_times(base, max(1, runs // 5))
        empty_t += t
    assert n_held == n_empty == FIND_LIMIT, (n_held, n_empty)
    params = own.needing_owner_params(LEASE_TTL, FIND_LIMIT)
    plan: dict[str, list[str]] = {}
    for name, sql in (
        ("projects_needing_owner_of_dead_pods", own.needing_owner_of_dead_pods_sql()),
        ("projects_needing_owner", own.needing_owner_sql()),
    ):
        plan[name] = pb.explain(store, sql, params, analyze_run=store.db.dialect == "postgres")
    return {
        "limit": FIND_LIMIT,
        "lease_ttl": LEASE_TTL,
        "unheld_needing": UNHELD,
        "held_s": pb.summary(held_t),
        "nothing_held_s": pb.summary(empty_t),
        "plans_with_n_held": plan,
    }


# --------------------------------------------------------------------------- one size


def bench_size(store: Store, empty: Store, size: int, repeat: int) -> dict[str, Any]:
    now = pb.store_now(store)
    pod = start_pod(store)
    t0 = time.perf_counter()
    load_held(store, pod, size, now)
    load_s = time.perf_counter() - t0
    load_unheld(store, UNHELD, now)
    vacuum(store)
    pb.log(f"  {size:,} held projects loaded in {load_s:.1f} s")
    beats = Beats(store, pod, size)
    out: dict[str, Any] = {"held": size, "pod": pod, "load_s": load_s, "find": {}}

    # needing owner on the freshly loaded table: the held claims were made over the last CLAIM_SPREAD_S
    beats.tenure()  # the pod's lease is fresh: it is live
    out["find"]["claims_spread"] = bench_find(store, empty, repeat)

    for _ in range(3):  # warm-up (prepared statements, caches)
        beats.tenure()
    out["tenure"] = timed(beats.tenure, repeat)

    out["growth"] = growth(store, beats)
    vacuum(store)  # the baseline's dead rows of the growth beats are not left for the timed runs
    out["rows_written"] = {k: count_rows(store, k, pod, size) for k in ("tenure", "baseline")}
    out["plans"] = plans(store, pod, size)

    beats.baseline()  # warm-up
    k = baseline_repeat(repeat, size)
    out["baseline"] = timed(beats.baseline, k)
    pb.log(
        f"  beat p50 {ms(out['tenure']['beat_s']['p50'])} (tenure, {repeat} beats)"
        f" vs {ms(out['baseline']['beat_s']['p50'])} (per-row renewal, {k} beats)"
    )

    # needing owner again, now that the per-row renewal has set every held claimed_at to the last few
    # seconds (as if the pod had claimed all of them within the TTL); the baseline's dead rows removed first
    vacuum(store, full=True)
    beats.tenure()
    out["find"]["claims_within_ttl"] = bench_find(store, empty, repeat)

    drift = []
    n_drift = drift_repeat(repeat, size)
    beats.own.find_by_home_pod_id(pod)  # warm-up
    for _ in range(n_drift):
        t0 = time.perf_counter()
        held = beats.own.find_by_home_pod_id(pod)
        drift.append(time.perf_counter() - t0)
        assert len(held) == size
    out["drift_check_s"] = pb.summary(drift)
    return out


def bench_backend(backend: pb.Backend, sizes: Sequence[int], repeat: int) -> dict[str, Any]:
    res: dict[str, Any] = {"server_version": backend.server_version(), "sizes": {}}
    empty = backend.open("empty")  # the needing-owner baseline: UNHELD needing projects, nothing held
    start_pod(empty)
    load_unheld(empty, UNHELD, pb.store_now(empty))
    vacuum(empty)
    for size in sizes:
        load = os.getloadavg()
        pb.log(f"[{backend.name}] {size:,} held (load average {load[0]:.2f})")
        t0 = time.perf_counter()
        store = backend.open(f"n{size}")
        e = bench_size(store, empty, size, repeat)
        e["elapsed_s"] = time.perf_counter() - t0
        e["load_average"] = {"before": load, "after": os.getloadavg()}
        res["sizes"][str(size)] = e
        store.close()
        if isinstance(backend, pb.PostgresBackend):  # free the disk now rather than at the end
            backend.stores.remove(store)
            dbname = f"{backend.prefix}_n{size}"
            backend.admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            backend.databases.remove(dbname)
    return res


# --------------------------------------------------------------------------- tables


def render(header: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths)) + " |" for cell in cells]
    return "\n".join(lines)


def time_table(results: dict[str, Any]) -> str:
    header = ["backend", "held", "measure", "tenure p50", "tenure p95", "baseline p50", "baseline p95", "vs"]
    header += ["ratio", "aim", "result"]
    cells = []
    for backend, res in results.items():
        for size, e in res["sizes"].items():
            held = f"{int(size):,}"
            t, b = e["tenure"], e["baseline"]
            rb = t["beat_s"]["p50"] / b["beat_s"]["p50"]
            cells.append(
                [backend, held, "beat: heartbeat + renewal", ms(t["beat_s"]["p50"]), ms(t["beat_s"]["p95"])]
                + [ms(b["beat_s"]["p50"]), ms(b["beat_s"]["p95"]), "heartbeat + per-row UPDATE", f"{rb:.3f}×"]
                + ["< 5 ms", "met" if t["beat_s"]["p50"] < BEAT_AIM_S else "NOT met"]
            )
            rr = t["renewal_s"]["p50"] / b["renewal_s"]["p50"]
            cells.append(
                [backend, held, "renewal alone", ms(t["renewal_s"]["p50"]), ms(t["renewal_s"]["p95"])]
                + [ms(b["renewal_s"]["p50"]), ms(b["renewal_s"]["p95"]), "per-row UPDATE", f"{rr:.3f}×", "info", "-"]
            )
            rw = e["rows_written"]
            cells.append(
                [backend, held, "rows written per beat", str(rw["tenure"]["rows"]), "", str(rw["baseline"]["rows"])]
                + ["", "heartbeat + per-row UPDATE", f"{rw['tenure']['rows'] / rw['baseline']['rows']:.4f}×"]
                + ["independent of held", "met" if rw["tenure"]["rows"] <= 3 else "NOT met"]
            )
            d = e["drift_check_s"]
            cells.append(
                [backend, held, "drift check (only when lost moved)", ms(d["p50"]), ms(d["p95"]), "-", "-"]
                + ["(find_by_home_pod_id)", "-", "info", "-"]
            )
            for case, label in (("claims_spread", "claims over 1 h"), ("claims_within_ttl", "claims < TTL old")):
                f = e["find"][case]
                rf = f["held_s"]["p50"] / f["nothing_held_s"]["p50"]
                cells.append(
                    [backend, held, f"needing owner, {label}", ms(f["held_s"]["p50"]), ms(f["held_s"]["p95"])]
                    + [ms(f["nothing_held_s"]["p50"]), ms(f["nothing_held_s"]["p95"]), "nothing held"]
                    + [f"{rf:.2f}×", f"≤ {FIND_AIM}×", "met" if rf <= FIND_AIM else "NOT met"]
                )
    return render(header, cells)


def growth_table(results: dict[str, Any]) -> str:
    header = ["backend", "held", "what", "before", f"+ {GROWTH_BEATS} tenure beats", f"+ {GROWTH_BEATS} baseline"]
    header += ["WAL, tenure", "WAL, baseline", "WAL ratio"]
    cells = []
    for backend, res in results.items():
        what = "pg_total_relation_size" if backend == "postgres" else "database file"
        for size, e in res["sizes"].items():
            g = e["growth"]
            b, t, p = g["before"]["total"], g["after_tenure"]["total"], g["after_baseline"]["total"]
            wt, wb = g["wal_bytes_tenure"], g["wal_bytes_baseline"]
            cells.append(
                [backend, f"{int(size):,}", what, size_str(b), f"{size_str(t)} (+{size_str(t - b)})"]
                + [f"{size_str(p)} (+{size_str(p - t)})", size_str(wt), size_str(wb), f"{wt / wb:.4f}×"]
            )
    return render(header, cells)


def print_plans(results: dict[str, Any]) -> None:
    for backend, res in results.items():
        size = max(res["sizes"], key=int)
        e = res["sizes"][size]
        print(f"\n{backend}, {int(size):,} held: plans of the beat's statements")
        for name, lines in e["plans"].items():
            print(f"  {name}:")
            for line in lines:
                print("    " + line)
        print(f"  rows written per beat: tenure {e['rows_written']['tenure']}")
        for case, f in e["find"].items():
            print(f"  needing owner with {int(size):,} held ({case}) + {UNHELD:,} unheld:")
            for name, lines in f["plans_with_n_held"].items():
                print(f"  {name}:")
                for line in lines:
                    print("    " + line)


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    revision = pb.git_rev()
    workdir = tempfile.mkdtemp(prefix="tenure-beat-bench-")
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    try:
        for name in args.backends:
            backend: pb.Backend
            if name == "sqlite":
                backend = pb.SqliteBackend(workdir)
            else:
                try:
                    backend = pb.PostgresBackend(args.pg_url)
                except Exception as exc:  # noqa: BLE001
                    skipped[name] = f"PostgreSQL unreachable: {exc}"
                    pb.log(f"skip: PostgreSQL at {args.pg_url} is unreachable ({exc})")
                    continue
            try:
                results[name] = bench_backend(backend, args.sizes, args.repeat)
            finally:
                backend.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print_plans(results)
    times = time_table(results)
    sizes = growth_table(results)
    print("\n" + times + "\n\n" + sizes)
    elapsed = time.perf_counter() - started
    print(
        f"\n(one run, {elapsed:.0f} s; {args.repeat} tenure beats per size, per-row baseline"
        f" {', '.join(str(baseline_repeat(args.repeat, s)) for s in args.sizes)} beats;"
        f" load average {load_start[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} CPUs)"
    )
    import psycopg

    doc = {
        "args": {"sizes": args.sizes, "backends": args.backends, "repeat": args.repeat},
        "baseline_sql": PER_ROW_RENEWAL_SQL,
        "environment": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "sqlite": sqlite3.sqlite_version,
            "psycopg": psycopg.__version__,
            "git": revision,
            "postgres": results.get("postgres", {}).get("server_version"),
        },
        "skipped": skipped,
        "elapsed_s": elapsed,
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "tables": {"time": times, "growth": sizes},
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
