"""Project benchmarks for tenure: ``python benchmarks/projects_bench.py [--quick] [--backend sqlite|postgres|both]``.

Measures the project layer on SQLite and PostgreSQL, each against a baseline
measured in the same run on the same store:

* ownership claims (a fresh holder, which also issues a writer lease, and a
  renewal by the current holder) against a bare single-row conditional
  ``UPDATE`` in a transaction of the same connector;
* ``renew_leases`` with 1,000 / 10,000 / 100,000 projects held, with the
  statements it sends counted at the driver;
* ``find_projects_needing_owner`` at 100,000 and 1,000,000 projects, with
  its query plan;
* bring and suspend of an empty project and of a 50 MB / 5,000-file
  workspace, step by step, against the storage core's own checkpoint and
  restore of the same tree.

Prints a table and writes benchmarks/results/projects.json. See
benchmarks/README-projects.md for what each row means.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import random
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trees  # noqa: E402
from tenure.objects import open_object_store  # noqa: E402
from tenure.projects.lifecycle import LifecycleConfig, LifecycleService  # noqa: E402
from tenure.projects.ownership import Ownership  # noqa: E402
from tenure.projects.pods import PodIdentity  # noqa: E402
from tenure.projects.store import ProjectStore  # noqa: E402
from tenure.store import Store, open_store  # noqa: E402
from tenure.store import connector as connector_mod  # noqa: E402
from tenure.workspaces import WorkspaceService  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "projects.json")
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"

LEASE_TTL = 60.0
CLAIM_AIM = 1.5
LIFECYCLE_AIM = 1.10


@dataclass(frozen=True)
class Config:
    mode: str
    claim_projects: int  # projects in the claim benchmark; every round claims each once per kind
    claim_rounds: int
    claim_threads: int
    renew_sizes: tuple[int, ...]
    renew_beats: int
    find_sizes: tuple[int, ...]
    find_limit: int
    find_repeat: int
    tree_scale: float  # trees.mixed_spec scale: 0.25 = 5,000 files / 50 MB
    tree_reps: int
    empty_reps: int


FULL = Config(
    "full",
    claim_projects=400,
    claim_rounds=3,
    claim_threads=4,
    renew_sizes=(1_000, 10_000, 100_000),
    renew_beats=5,
    find_sizes=(100_000, 1_000_000),
    find_limit=100,
    find_repeat=7,
    tree_scale=0.25,
    tree_reps=5,
    empty_reps=10,
)
QUICK = Config(
    "quick",
    claim_projects=150,
    claim_rounds=2,
    claim_threads=4,
    renew_sizes=(1_000, 10_000, 100_000),
    renew_beats=3,
    find_sizes=(10_000, 100_000),
    find_limit=100,
    find_repeat=5,
    tree_scale=0.05,
    tree_reps=1,
    empty_reps=5,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller: needing-owner at 10k/100k, a 10 MB / 1,000-file tree, fewer repeats",
    )
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("TENURE_BENCH_PG", DEFAULT_PG),
        help="an administrative PostgreSQL URL; throw-away databases are created and dropped"
        f" (default {DEFAULT_PG}, or $TENURE_BENCH_PG)",
    )
    parser.add_argument("--workdir", help="scratch folder (default: a new temporary folder, removed afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--only", help="comma-separated sections to run: claims, renew, find, lifecycle")
    parser.add_argument(
        "--tree-reps", type=int, metavar="N", help="bring/suspend runs of the tree (default 5, quick 1)"
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output path (default {DEFAULT_OUT})")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- small helpers


def log(msg: str) -> None:
    print(msg, flush=True)


def pct(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(samples: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50": pct(samples, 0.5),
        "p95": pct(samples, 0.95),
        "mean": statistics.fmean(samples),
        "min": min(samples),
        "max": max(samples),
    }


def fmt_s(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def sync(settle: float = 0.0) -> None:
    """Write back dirty pages of earlier steps so they are not written during the next one."""
    os.sync()
    if settle:
        time.sleep(settle)
        os.sync()


def git_rev() -> str | None:
    try:
        rev = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", "src"], capture_output=True, text=True, check=True
        ).stdout.strip()
        return rev + ("+dirty-src" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


# --------------------------------------------------------------------------- backends


class Backend:
    name = ""

    def open(self, section: str) -> Store:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def server_version(self) -> str:
        raise NotImplementedError


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, workdir: str) -> None:
        self.root = os.path.join(workdir, "sqlite")
        os.makedirs(self.root, exist_ok=True)
        self.stores: list[Store] = []

    def open(self, section: str) -> Store:
        store = open_store(f"sqlite:///{os.path.join(self.root, section + '.db')}")
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def server_version(self) -> str:
        return sqlite3.sqlite_version


class PostgresBackend(Backend):
    """Throw-away databases ``tenure_bench_<random>_<section>``, dropped by :meth:`close`."""

    name = "postgres"

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.admin_url = admin_url
        self.admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
        self.prefix = f"tenure_bench_{secrets.token_hex(4)}"
        self.databases: list[str] = []
        self.stores: list[Store] = []

    def url_for(self, dbname: str) -> str:
        parts = urllib.parse.urlsplit(self.admin_url)
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))

    def open(self, section: str) -> Store:
        dbname = f"{self.prefix}_{section}"
        self.admin.execute(f'CREATE DATABASE "{dbname}"')
        self.databases.append(dbname)
        store = open_store(self.url_for(dbname))
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in self.stores:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - dropping the databases matters more
                pass
        for dbname in self.databases:
            self.admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        self.admin.close()

    def server_version(self) -> str:
        row = self.admin.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"


# --------------------------------------------------------------------------- statement counting


@contextmanager
def tx_counter() -> Iterator[list[str]]:
    """Every statement sent through a connector transaction (``Tx.execute / count / executemany`` by name,
    ``execute_sql / count_sql`` as written), recorded as its SQL text."""
    seen: list[str] = []
    patched: list[tuple[Any, str, Any]] = []
    cls: Any = connector_mod.BaseTx
    for meth, named in (
        ("execute", True),
        ("count", True),
        ("executemany", True),
        ("execute_sql", False),
        ("count_sql", False),
    ):
        original = cls.__dict__[meth]

        def wrapper(self: Any, query: str, *a: Any, _o: Any = original, _named: bool = named, **k: Any) -> Any:
            sql = self.statements.queries.sql(self.dialect, query) if _named else query
            seen.append(" ".join(sql.split()))
            return _o(self, query, *a, **k)

        setattr(cls, meth, wrapper)
        patched.append((cls, meth, original))
    try:
        yield seen
    finally:
        for owner, meth, original in patched:
            setattr(owner, meth, original)


@contextmanager
def driver_trace(store: Store) -> Iterator[dict[str, Any]]:
    """Statements as the driver sends them.

    SQLite: ``set_trace_callback`` on this thread's connection. PostgreSQL: a
    libpq protocol trace on every pooled connection; each statement ends in one
    ``CommandComplete`` message from the server, whose tag (``UPDATE 1000``)
    is recorded.
    """
    out: dict[str, Any] = {"statements": [], "transaction_control": []}
    db: Any = store.db
    if db.dialect == "sqlite":
        conn = db._conn()
        lines: list[str] = []
        conn.set_trace_callback(lines.append)
        try:
            yield out
        finally:
            conn.set_trace_callback(None)
            for line in lines:
                text = " ".join(line.split())
                (
                    out["transaction_control"]
                    if text.split(" ")[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK")
                    else out["statements"]
                ).append(text)
        return
    from psycopg import pq

    conns = [c for c in list(db.pool._pool)]
    files = []
    for c in conns:
        fh = tempfile.TemporaryFile()
        c.pgconn.trace(fh.fileno())
        c.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        files.append(fh)
    try:
        yield out
    finally:
        for c, fh in zip(conns, files):
            c.pgconn.untrace()
            fh.seek(0)
            for line in fh.read().decode("utf-8", "replace").splitlines():
                fields = line.split("\t")
                if len(fields) >= 4 and fields[0] == "B" and fields[2] == "CommandComplete":
                    tag = fields[3].strip().strip('"')
                    (
                        out["transaction_control"]
                        if tag.split(" ")[0] in ("BEGIN", "COMMIT", "ROLLBACK")
                        else out["statements"]
                    ).append(tag)
            fh.close()
        out["connections_traced"] = len(conns)


def single_connection(store: Store) -> Store:
    """A second store object on the same database with a one-connection pool (PostgreSQL), for tracing."""
    if store.db.dialect != "postgres":
        return store
    from tenure.store.postgres import PostgresConnector

    return Store(PostgresConnector(store.db.url, min_size=1, max_size=1), auto_migrate=False)


# --------------------------------------------------------------------------- bulk loading

WS_COLS = ("id", "name", "state", "created_at", "updated_at")
PRJ_COLS = (
    "id",
    "tenant",
    "name",
    "status",
    "kind",
    "lifecycle_type",
    "owner_required",
    "home_pod_id",
    "home_node",
    "claimed_at",
    "generation",
    "workspace_id",
    "created_at",
    "updated_at",
)


def bulk_insert(store: Store, rows: Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]], chunk: int = 50_000) -> int:
    """Insert (workspace row, project row) pairs with direct SQL: executemany on SQLite, COPY on PostgreSQL."""
    total = 0
    while True:
        batch = [r for _, r in zip(range(chunk), rows)]
        if not batch:
            return total
        with store.db.transaction() as tx:
            raw: Any = tx.conn  # type: ignore[attr-defined]
            if store.db.dialect == "sqlite":
                raw.executemany(
                    f"INSERT INTO workspaces ({', '.join(WS_COLS)}) VALUES ({', '.join('?' * len(WS_COLS))})",
                    [w for w, _ in batch],
                )
                raw.executemany(
                    f"INSERT INTO projects ({', '.join(PRJ_COLS)}) VALUES ({', '.join('?' * len(PRJ_COLS))})",
                    [p for _, p in batch],
                )
            else:
                with raw.cursor() as cur:
                    with cur.copy(f"COPY workspaces ({', '.join(WS_COLS)}) FROM STDIN") as cp:
                        for w, _ in batch:
                            cp.write_row(w)
                    with cur.copy(f"COPY projects ({', '.join(PRJ_COLS)}) FROM STDIN") as cp:
                        for _, p in batch:
                            cp.write_row(p)
        total += len(batch)


def row_pair(
    prefix: str,
    i: int,
    now: float,
    status: str,
    lifecycle: str,
    owner_required: int,
    pod: str | None,
    claimed_at: float | None,
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    wid = f"w-{prefix}{i:07d}"
    ws = (wid, f"{prefix}ws-{i:07d}", "IDLE", now, now)
    prj = (
        f"p-{prefix}{i:07d}",
        f"t{i % 97:02d}",
        f"{prefix}{i:07d}",
        status,
        "USER",
        lifecycle,
        owner_required,
        pod,
        "node-bench" if pod else None,
        claimed_at,
        1,
        wid,
        now,
        now,
    )
    return ws, prj


def analyze(store: Store) -> None:
    with store.db.sql_transaction() as tx:
        tx.execute_sql("ANALYZE")


def store_now(store: Store) -> float:
    return store.workspaces.now()


# --------------------------------------------------------------------------- 1. claims

BARE_UPDATE = (
    "UPDATE projects SET claimed_at = {now} WHERE id = :id AND (home_pod_id IS NULL OR home_pod_id = :pod"
    " OR claimed_at IS NULL OR claimed_at < {now} - :ttl)"
)


def bench_claims(store: Store, cfg: Config) -> dict[str, Any]:
    ps, own = ProjectStore(store), Ownership(store)
    names = [f"c{i:05d}" for i in range(cfg.claim_projects)]
    ids = {n: ps.create("bench", n).id for n in names}
    holder: dict[str, str] = {}

    def release_all() -> None:
        with store.db.sql_transaction() as tx:
            tx.execute_sql(
                "UPDATE projects SET home_pod_id = NULL, home_node = NULL, claimed_at = NULL WHERE tenant = 'bench'"
            )

    def fresh(n: str) -> None:
        pod = str(uuid.uuid4())
        assert own.claim("bench", n, pod, "node-bench", None, LEASE_TTL) is not None
        holder[n] = pod

    def renewal(n: str) -> None:
        assert own.claim("bench", n, holder[n], "node-bench", None, LEASE_TTL) is not None

    def bare(n: str) -> None:
        with store.db.sql_transaction() as tx:
            assert tx.count_sql(BARE_UPDATE, {"id": ids[n], "pod": holder[n], "ttl": LEASE_TTL}) == 1

    kinds: dict[str, Callable[[str], None]] = {"fresh": fresh, "renewal": renewal, "bare": bare}

    # warm-up (prepared statements on PostgreSQL, page cache, WAL) and statement counts
    release_all()
    for n in names[:30]:
        for fn in kinds.values():
            fn(n)
    statements: dict[str, list[str]] = {}
    for kind, fn in kinds.items():
        if kind == "fresh":
            release_all()
        with tx_counter() as seen:
            fn(names[0])
        statements[kind] = seen

    # latency: one caller, interleaved per project (fresh, renewal, bare) so drift hits all three alike
    lat: dict[str, list[float]] = defaultdict(list)
    for _ in range(cfg.claim_rounds):
        release_all()
        for n in names:
            for kind, fn in kinds.items():
                t0 = time.perf_counter()
                fn(n)
                lat[kind].append(time.perf_counter() - t0)

    # throughput: N threads, each on its own slice of the projects
    def run_threads(fn: Callable[[str], None]) -> float:
        slices = [names[i :: cfg.claim_threads] for i in range(cfg.claim_threads)]
        errors: list[BaseException] = []
        barrier = threading.Barrier(cfg.claim_threads + 1)

        def work(part: list[str]) -> None:
            barrier.wait()
            try:
                for n in part:
                    fn(n)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(s,)) for s in slices]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        if errors:
            raise errors[0]
        return len(names) / elapsed

    tput: dict[str, list[float]] = defaultdict(list)
    for _ in range(cfg.claim_rounds):
        release_all()
        for kind in ("fresh", "renewal", "bare"):
            tput[kind].append(run_threads(kinds[kind]))

    return {
        "projects": len(names),
        "rounds": cfg.claim_rounds,
        "threads": cfg.claim_threads,
        "latency_s": {k: summary(v) for k, v in lat.items()},
        "throughput_ops_s": {k: {"median": statistics.median(v), "runs": v} for k, v in tput.items()},
        "statements_per_call": {k: len(v) for k, v in statements.items()},
        "statements": statements,
    }


# --------------------------------------------------------------------------- 2. renew_leases


def bench_renew(store: Store, cfg: Config) -> dict[str, Any]:
    own = Ownership(store)
    now = store_now(store)
    rng = random.Random(11)
    base = 0
    pods = {}
    for size in cfg.renew_sizes:
        pod = f"pod-renew-{size}"
        pods[size] = pod

        def rows(start: int = base, count: int = size, pod: str = pod) -> Iterator[Any]:
            for i in range(start, start + count):
                yield row_pair("r", i, now, "RUNNING", "PERMANENT", 0, pod, now - rng.uniform(0, 30))

        t0 = time.perf_counter()
        bulk_insert(store, rows())
        log(f"  inserted {size:,} held projects in {time.perf_counter() - t0:.1f} s")
        base += size
    analyze(store)
    traced = single_connection(store)
    trace_own = Ownership(traced)
    out: dict[str, Any] = {"table_projects": base, "sizes": {}}
    wal = WalProbe(store)
    for size, pod in pods.items():
        own.renew_leases(pod)  # warm-up
        wal.start()
        with driver_trace(traced) as drv, tx_counter() as seen:
            matched = trace_own.renew_leases(pod)
        wal_bytes = wal.stop()
        times = []
        for _ in range(cfg.renew_beats):
            t0 = time.perf_counter()
            renewal = own.renew_leases(pod)
            times.append(time.perf_counter() - t0)
            assert renewal is not None and renewal.lost == 0, renewal  # ADR 0016: one row, a lost counter
        out["sizes"][str(size)] = {
            "lost": matched.lost if matched is not None else None,
            "beat_s": summary(times),
            "per_project_s": statistics.median(times) / size,
            "connector_statements": seen,
            "driver_statements": drv["statements"],
            "driver_transaction_control": drv["transaction_control"],
            "wal_bytes_per_beat": wal_bytes,
        }
    if traced is not store:
        traced.close()
    if store.db.dialect == "postgres":
        out["pg_update_stats"] = pg_update_stats(store, pods, cfg)
    return out


class WalProbe:
    """Bytes of write-ahead log one call produces (SQLite: WAL file growth after a truncating checkpoint)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.mark: Any = None

    def start(self) -> None:
        if self.store.db.dialect == "sqlite":
            conn = self.store.db._conn()  # type: ignore[attr-defined]
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.mark = 0
        else:
            with self.store.db.sql_transaction() as tx:
                self.mark = tx.execute_sql("SELECT pg_current_wal_insert_lsn()::text AS l")[0]["l"]

    def stop(self) -> int:
        if self.store.db.dialect == "sqlite":
            path = self.store.db.path + "-wal"  # type: ignore[attr-defined]
            return os.path.getsize(path) if os.path.exists(path) else 0
        with self.store.db.sql_transaction() as tx:
            row = tx.execute_sql(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), CAST(:m AS pg_lsn))::bigint AS d", {"m": self.mark}
            )[0]
        return int(row["d"])


def pg_update_stats(store: Store, pods: dict[int, str], cfg: Config) -> dict[str, Any]:
    """HOT vs non-HOT updates and index growth over some beats of the largest holder (server statistics)."""
    import psycopg

    def read(conn: Any) -> dict[str, Any]:
        time.sleep(1.2)  # a backend flushes its statistics at most once a second
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd, pg_relation_size('projects'),"
            " pg_indexes_size('projects') FROM pg_stat_user_tables WHERE relname = 'projects'"
        ).fetchone()
        return {"n_tup_upd": row[0], "n_tup_hot_upd": row[1], "table_bytes": row[2], "index_bytes": row[3]}

    size = max(pods)
    own = Ownership(store)
    with psycopg.connect(store.db.url, autocommit=True) as conn:
        before = read(conn)
        for _ in range(cfg.renew_beats):
            own.renew_leases(pods[size])
        time.sleep(1.2)  # let the pooled connections go idle and flush
        after = read(conn)
    upd = after["n_tup_upd"] - before["n_tup_upd"]
    hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
    return {
        "holder_size": size,
        "beats": cfg.renew_beats,
        "rows_updated": upd,
        "hot_updates": hot,
        "hot_fraction": hot / upd if upd else None,
        "before": before,
        "after": after,
    }


# --------------------------------------------------------------------------- 3. find_projects_needing_owner

FIND_TTL = 3600.0  # generous, so that no "live" row expires while a million rows are loaded


def population(start: int, stop: int, now: float, seed: int) -> Iterator[Any]:
    """A mix: 55% SUSPENDED, 25% AUTO running without demand, 18% needing an owner with a live lease,
    1% needing one with an expired lease (a dead pod), 1% never claimed (INIT, PERMANENT)."""
    rng = random.Random(seed)
    for i in range(start, stop):
        x = rng.random()
        if x < 0.55:
            yield row_pair("f", i, now, "SUSPENDED", "AUTO", 0, None, None)
        elif x < 0.80:
            yield row_pair("f", i, now, "RUNNING", "AUTO", 0, f"pod-{i % 50}", now - rng.uniform(0, 600))
        elif x < 0.98:
            lt, req = ("PERMANENT", 0) if rng.random() < 0.5 else ("AUTO", 1)
            yield row_pair("f", i, now, "RUNNING", lt, req, f"pod-{i % 50}", now - rng.uniform(0, 600))
        elif x < 0.99:
            yield row_pair(
                "f", i, now, "RUNNING", "PERMANENT", 0, f"pod-dead-{i % 7}", now - FIND_TTL - rng.uniform(60, 86_400)
            )
        else:
            yield row_pair("f", i, now, "INIT", "PERMANENT", 0, None, None)


def explain(store: Store, sql: str, params: dict[str, Any], *, analyze_run: bool = False) -> list[str]:
    with store.db.sql_transaction(write=False) as tx:
        if tx.dialect == "sqlite":
            rows = tx.execute_sql("EXPLAIN QUERY PLAN " + sql, params)
            return [r["detail"] for r in rows]
        prefix = "EXPLAIN (ANALYZE, BUFFERS) " if analyze_run else "EXPLAIN "
        return [next(iter(r.values())) for r in tx.execute_sql(prefix + sql, params)]


NEEDS_OWNER_WHERE = (
    "status IN ('INIT', 'RECOVERING', 'RUNNING') AND"
    " (lifecycle_type = 'PERMANENT' OR (lifecycle_type = 'AUTO' AND owner_required = 1))"
)
LONG_TTL = 10 * 86_400.0  # no lease in the population is older than this: only never-claimed rows match


def find_case(store: Store, own: Ownership, cfg: Config, ttl: float, skip: int) -> dict[str, Any]:
    sql = own.needing_owner_sql()
    params = own.needing_owner_params(ttl, cfg.find_limit, skip)
    plan = explain(store, sql, params)
    got = own.find_projects_needing_owner(ttl, cfg.find_limit, skip)  # warm-up
    times = []
    for _ in range(cfg.find_repeat):
        t0 = time.perf_counter()
        own.find_projects_needing_owner(ttl, cfg.find_limit, skip)
        times.append(time.perf_counter() - t0)
    info: dict[str, Any] = {
        "lease_ttl": ttl,
        "skip": skip,
        "returned": len(got),
        "time_s": summary(times),
        "plan": plan,
        "uses_index": any("projects_needing_owner" in line for line in plan),
    }
    if store.db.dialect == "postgres":
        info["plan_analyze"] = explain(store, sql, params, analyze_run=True)
    return info


def count_matching(store: Store, ttl: float) -> tuple[int, int]:
    with store.db.sql_transaction(write=False) as tx:
        matching = tx.execute_sql(
            f"SELECT COUNT(*) AS c FROM projects WHERE {NEEDS_OWNER_WHERE}"
            " AND (claimed_at IS NULL OR claimed_at < {now} - :ttl)",
            {"ttl": ttl},
        )[0]
        indexed = tx.execute_sql(f"SELECT COUNT(*) AS c FROM projects WHERE {NEEDS_OWNER_WHERE}")[0]
    return int(matching["c"]), int(indexed["c"])


def bench_find(store: Store, cfg: Config) -> dict[str, Any]:
    """Cases per size: the mix (first and last page); no expired lease (only never-claimed rows match);
    at the largest size also a healthy fleet (nothing needs an owner)."""
    own = Ownership(store)
    now = store_now(store)
    out: dict[str, Any] = {"limit": cfg.find_limit, "sizes": {}}
    loaded = 0
    for size in cfg.find_sizes:
        t0 = time.perf_counter()
        bulk_insert(store, population(loaded, size, now, seed=size))
        loaded = size
        analyze(store)
        log(f"  loaded {size:,} projects (+ANALYZE) in {time.perf_counter() - t0:.1f} s")
        matching, indexed = count_matching(store, FIND_TTL)
        only_null, _ = count_matching(store, LONG_TTL)
        entry: dict[str, Any] = {"projects": size, "index_entries": indexed, "cases": {}}
        entry["cases"]["first page"] = find_case(store, own, cfg, FIND_TTL, 0) | {"matching": matching}
        entry["cases"]["last page"] = find_case(store, own, cfg, FIND_TTL, max(0, matching - cfg.find_limit)) | {
            "matching": matching
        }
        entry["cases"]["no expired lease"] = find_case(store, own, cfg, LONG_TTL, 0) | {"matching": only_null}
        out["sizes"][str(size)] = entry
    # a healthy fleet: the never-claimed projects were brought and suspended, nothing needs an owner
    with store.db.sql_transaction() as tx:
        tx.execute_sql("UPDATE projects SET status = 'SUSPENDED' WHERE status = 'INIT'")
    analyze(store)
    none, _ = count_matching(store, LONG_TTL)
    out["sizes"][str(loaded)]["cases"]["none needing an owner"] = find_case(store, own, cfg, LONG_TTL, 0) | {
        "matching": none
    }
    return out


# --------------------------------------------------------------------------- 4. bring and suspend


class Steps:
    """Exclusive time per label of wrapped calls (a nested wrapped call is charged to its own label only),
    and the store transactions each label opened (``count_transactions``)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.transactions: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # label -> [write, read-only]
        self._stack: list[float] = []
        self._labels: list[str] = []

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            self._stack.append(0.0)
            self._labels.append(label)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                elapsed = time.perf_counter() - t0
                self._labels.pop()
                children = self._stack.pop()
                self.totals[label] += elapsed - children
                if self._stack:
                    self._stack[-1] += elapsed

        return run

    def count_transactions(self, db: Any) -> None:
        original = db.transaction

        def transaction(*, write: bool = True) -> Any:
            self.transactions[self._labels[-1] if self._labels else "other (unwrapped)"][0 if write else 1] += 1
            return original(write=write)

        db.transaction = transaction

    def take(self) -> tuple[dict[str, float], dict[str, list[int]]]:
        taken, self.totals = dict(self.totals), defaultdict(float)
        txs, self.transactions = dict(self.transactions), defaultdict(lambda: [0, 0])
        return taken, txs


class NoopEngine:
    def start(self, event: Any, folder: str) -> None:
        pass

    def stop(self, event: Any, folder: str) -> None:
        pass


SETTLE = 0.5  # seconds of quiet (after a sync) before each timed step on the tree
CORE_LABELS = ("restore (storage core)", "checkpoint (storage core)")


def instrumented_service(store: Store, objects_url: str, data_dir: str, steps: Steps) -> LifecycleService:
    svc = LifecycleService(
        store,
        open_object_store(objects_url),
        data_dir,
        PodIdentity.fresh("node-bench"),
        config=LifecycleConfig(lease_ttl=LEASE_TTL),
        engines=[NoopEngine()],
    )
    s: Any = svc
    s.projects.get = steps.wrap("reads", svc.projects.get)
    s.ownership.holds = steps.wrap("reads", svc.ownership.holds)
    s.facade.claim_for_local_pod = steps.wrap("claim", svc.facade.claim_for_local_pod)
    s.projects.unbind_sessions = steps.wrap("unbind", svc.projects.unbind_sessions)
    s.projects.transition_status = steps.wrap("status writes", svc.projects.transition_status)
    s.workspaces.init_folder = steps.wrap("workspace init (rest)", svc.workspaces.init_folder)
    s.workspaces.restore = steps.wrap("restore (storage core)", svc.workspaces.restore)
    s._start_engines = steps.wrap("engines", svc._start_engines)
    s._stop_engines = steps.wrap("engines", svc._stop_engines)
    s.workspaces.suspend_folder = steps.wrap("workspace suspend (rest)", svc.workspaces.suspend_folder)
    s.workspaces.checkpoint = steps.wrap("checkpoint (storage core)", svc.workspaces.checkpoint)
    s.trash.discard = steps.wrap("folder removal", svc.trash.discard)
    s.ownership.release_lease = steps.wrap("release", svc.ownership.release_lease)
    return svc


def timed(fn: Callable[[], Any], settle: float = 0.0) -> float:
    sync(settle)
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def lifecycle_call(
    svc: LifecycleService, steps: Steps, op: str, tenant: str, name: str, settle: float = 0.0
) -> dict[str, Any]:
    sync(settle)
    steps.take()
    t0 = time.perf_counter()
    getattr(svc, op)(tenant, name)
    total = time.perf_counter() - t0
    parts, txs = steps.take()
    parts["other (unwrapped)"] = total - sum(parts.values())
    svc.trash.wait()
    core = sum(parts.get(k, 0.0) for k in CORE_LABELS)
    own = [sum(v[i] for k, v in txs.items() if k not in CORE_LABELS) for i in (0, 1)]
    inside = [sum(v[i] for k, v in txs.items() if k in CORE_LABELS) for i in (0, 1)]
    return {
        "total": total,
        "core_inside": core,
        "steps": parts,
        "transactions_by_step": txs,
        "transactions_own": own,
        "transactions_core": inside,
    }


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    labels = sorted({k for r in runs for k in r["steps"]})
    return {
        "total_s": statistics.median(r["total"] for r in runs),
        "core_inside_s": statistics.median(r["core_inside"] for r in runs),
        # the lifecycle's own work: per run, the call minus the storage core call inside it
        "own_s": statistics.median(r["total"] - r["core_inside"] for r in runs),
        "steps_s": {k: statistics.median(r["steps"].get(k, 0.0) for r in runs) for k in labels},
        "runs": len(runs),
        "totals": [r["total"] for r in runs],
        # [write, read-only] store transactions of the last run (the same every run)
        "transactions_own": runs[-1]["transactions_own"],
        "transactions_core": runs[-1]["transactions_core"],
        "transactions_by_step": runs[-1]["transactions_by_step"],
    }


def bench_lifecycle(store: Store, cfg: Config, workdir: str, opener: Callable[[str], Store]) -> dict[str, Any]:
    """Lifecycle steps against the storage core. Every object folder gets a store of its own (a store
    is bound to one object store), opened with ``opener``; every store's transactions are counted."""
    base = os.path.join(workdir, f"life-{store.db.dialect}")
    os.makedirs(base)
    steps = Steps()
    steps.count_transactions(store.db)

    def fresh(section: str) -> Store:
        opened = opener(section)
        steps.count_transactions(opened.db)
        return opened

    results: dict[str, Any] = {}

    # ---- empty project: every cycle on a new project (lifecycle) and a new workspace (core)
    svc = instrumented_service(store, f"file://{base}/objects-empty-life", f"{base}/data-empty-life", steps)
    core = WorkspaceService(
        fresh("lifecycle_core_empty"), open_object_store(f"file://{base}/objects-empty-core"), f"{base}/data-empty-core"
    )
    runs: dict[str, list[Any]] = defaultdict(list)
    for k in range(cfg.empty_reps + 1):  # the first cycle is a warm-up
        name = f"empty{k:03d}"
        ProjectStore(store).create("bench", name)
        cycle = {
            "bring (empty, first: no head)": lifecycle_call(svc, steps, "bring", "bench", name),
            "suspend (empty, first checkpoint)": lifecycle_call(svc, steps, "suspend", "bench", name),
            "bring (empty head)": lifecycle_call(svc, steps, "bring", "bench", name),
            "suspend (empty, unchanged)": lifecycle_call(svc, steps, "suspend", "bench", name),
        }
        ws = core.create(f"core-empty{k:03d}")
        src = os.path.join(base, f"core-empty-src{k}")
        dest = os.path.join(base, f"core-empty-dest{k}")
        os.makedirs(src)
        core_cycle = {
            "suspend (empty, first checkpoint)": timed(lambda: core.checkpoint(ws.id, src)),
            "bring (empty head)": timed(lambda: core.restore(ws.id, dest)),
            "suspend (empty, unchanged)": timed(lambda: core.checkpoint(ws.id, dest)),
        }
        if k == 0:
            continue
        for label, r in cycle.items():
            runs[label].append(r)
        for label, t in core_cycle.items():
            runs["core:" + label].append(t)
    for label in (
        "bring (empty, first: no head)",
        "suspend (empty, first checkpoint)",
        "bring (empty head)",
        "suspend (empty, unchanged)",
    ):
        entry = merge_runs(runs[label])
        if runs.get("core:" + label):
            entry["core_standalone_s"] = statistics.median(runs["core:" + label])
            entry["core_op"] = "checkpoint" if label.startswith("suspend") else "restore"
        results[label] = entry

    # ---- the tree: 5,000 files / 50 MB at full size
    spec = trees.mixed_spec(cfg.tree_scale, seed=5)
    source = os.path.join(base, "tree-src")
    tree = trees.generate(spec, source)
    log(f"  generated tree: {tree.file_count:,} files, {tree.total_bytes / 1e6:.1f} MB")
    truns: dict[str, list[Any]] = defaultdict(list)
    changed_bytes = 0
    for rep in range(cfg.tree_reps):
        life_steps: dict[str, Any] = {}
        core_times: dict[str, float] = {}

        def lifecycle_side() -> None:
            nonlocal changed_bytes
            lstore = fresh(f"lifecycle_life{rep}")
            lsvc = instrumented_service(lstore, f"file://{base}/objects-life{rep}", f"{base}/data-life{rep}", steps)
            name = f"tree{rep:02d}"
            ProjectStore(lstore).create("bench", name)
            lsvc.bring("bench", name)  # INIT → RUNNING with an empty folder
            folder = lsvc.folder(lsvc.projects.get("bench", name))
            os.rmdir(folder)
            shutil.copytree(source, folder)  # the user's files appear in the project folder
            life_steps["suspend (tree, first checkpoint)"] = lifecycle_call(
                lsvc, steps, "suspend", "bench", name, SETTLE
            )
            life_steps["bring (tree head)"] = lifecycle_call(lsvc, steps, "bring", "bench", name, SETTLE)
            _, change = trees.modify(trees.Tree(spec, folder, tree.entries))
            changed_bytes = change.bytes_changed
            life_steps["suspend (tree, 1% changed)"] = lifecycle_call(lsvc, steps, "suspend", "bench", name, SETTLE)

        def core_side() -> None:
            csvc = WorkspaceService(
                fresh(f"lifecycle_core{rep}"),
                open_object_store(f"file://{base}/objects-core{rep}"),
                f"{base}/data-core{rep}",
            )
            ws = csvc.create(f"core-tree{rep:02d}")
            first = os.path.join(base, f"core-tree-a{rep}")
            second = os.path.join(base, f"core-tree-b{rep}")
            shutil.copytree(source, first)
            core_times["suspend (tree, first checkpoint)"] = timed(lambda: csvc.checkpoint(ws.id, first), SETTLE)
            shutil.rmtree(first)  # as suspend removes the project folder before the next bring
            core_times["bring (tree head)"] = timed(lambda: csvc.restore(ws.id, second), SETTLE)
            trees.modify(trees.Tree(spec, second, tree.entries))
            core_times["suspend (tree, 1% changed)"] = timed(lambda: csvc.checkpoint(ws.id, second), SETTLE)
            shutil.rmtree(second)

        for side in (lifecycle_side, core_side) if rep % 2 == 0 else (core_side, lifecycle_side):
            side()
        for label, r in life_steps.items():
            truns[label].append(r)
            truns["core:" + label].append(core_times[label])
        log(
            f"  tree rep {rep + 1}/{cfg.tree_reps}: "
            + ", ".join(
                f"{label.split(' (')[0]} {fmt_s(r['total'])} vs core {fmt_s(core_times[label])}"
                for label, r in life_steps.items()
            )
        )
    for label in ("bring (tree head)", "suspend (tree, first checkpoint)", "suspend (tree, 1% changed)"):
        entry = merge_runs(truns[label])
        entry["core_standalone_s"] = statistics.median(truns["core:" + label])
        entry["core_op"] = "checkpoint" if label.startswith("suspend") else "restore"
        results[label] = entry
    shutil.rmtree(base, ignore_errors=True)
    return {
        "tree": {
            "files": tree.file_count,
            "bytes": tree.total_bytes,
            "scale": cfg.tree_scale,
            "bytes_changed_by_1pct_change": changed_bytes,
        },
        "empty_reps": cfg.empty_reps,
        "tree_reps": cfg.tree_reps,
        "scenarios": results,
    }


# --------------------------------------------------------------------------- the table


@dataclass
class Row:
    backend: str
    measure: str
    value: str
    baseline: str
    vs: str
    ratio: str
    aim: str
    result: str
    raw: dict[str, Any] = field(default_factory=dict)


def verdict(ratio: float, aim: float) -> str:
    return "met" if ratio <= aim else "NOT met"


def table_rows(backend: str, res: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if "claims" in res:
        c = res["claims"]
        lat, tp, st = c["latency_s"], c["throughput_ops_s"], c["statements_per_call"]
        b = lat["bare"]["p50"]
        for kind, label in (
            ("fresh", "claim latency p50, fresh holder (+ writer lease)"),
            ("renewal", "claim latency p50, renewal"),
        ):
            r = lat[kind]["p50"] / b
            rows.append(
                Row(
                    backend,
                    label,
                    fmt_s(lat[kind]["p50"]),
                    fmt_s(b),
                    f"bare conditional UPDATE ({st[kind]} vs {st['bare']} stmt)",
                    f"{r:.2f}×",
                    f"≤ {CLAIM_AIM}×",
                    f"{verdict(r, CLAIM_AIM)} (+{fmt_s(lat[kind]['p50'] - b)})",
                )
            )
        bt = tp["bare"]["median"]
        for kind, label in (
            ("fresh", f"claim throughput, fresh holder ({c['threads']} threads)"),
            ("renewal", f"claim throughput, renewal ({c['threads']} threads)"),
        ):
            r = bt / tp[kind]["median"]
            rows.append(
                Row(
                    backend,
                    label,
                    f"{tp[kind]['median']:.0f}/s",
                    f"{bt:.0f}/s",
                    "bare conditional UPDATE",
                    f"{r:.2f}×",
                    f"≤ {CLAIM_AIM}×",
                    verdict(r, CLAIM_AIM),
                )
            )
    if "renew" in res:
        for size, e in res["renew"]["sizes"].items():
            n_stmt = len(e["driver_statements"])
            rows.append(
                Row(
                    backend,
                    f"renew_leases, {int(size):,} held",
                    fmt_s(e["beat_s"]["p50"]) + " per beat",
                    f"{e['per_project_s'] * 1e6:.2f} µs",
                    "per project",
                    "-",
                    "1 statement per beat",
                    f"{'met' if n_stmt == 1 else 'NOT met'} ({n_stmt} stmt)",
                )
            )
    if "find" in res:
        for size, e in res["find"]["sizes"].items():
            for case, p in e["cases"].items():
                where = f", skip {p['skip']:,}" if p["skip"] else ""
                rows.append(
                    Row(
                        backend,
                        f"needing owner, {int(size):,} projects, {case}{where}",
                        fmt_s(p["time_s"]["p50"]),
                        f"{p['returned']} rows",
                        f"of {p['matching']:,} matching",
                        "-",
                        "uses projects_needing_owner",
                        "met" if p["uses_index"] else "NOT met",
                    )
                )
    if "lifecycle" in res:
        for label, e in res["lifecycle"]["scenarios"].items():
            if "core_standalone_s" in e:
                r = e["total_s"] / e["core_standalone_s"]
                own_work = e["own_s"]
                adds = own_work / e["core_standalone_s"]
                rows.append(
                    Row(
                        backend,
                        label,
                        fmt_s(e["total_s"]),
                        fmt_s(e["core_standalone_s"]),
                        f"WorkspaceService.{e['core_op']}",
                        f"{r:.2f}×",
                        f"adds < {LIFECYCLE_AIM - 1:.0%}",
                        f"{'met' if adds < LIFECYCLE_AIM - 1 else 'NOT met'} (adds {fmt_s(own_work)}, {adds:.1%})",
                    )
                )
            else:
                rows.append(Row(backend, label, fmt_s(e["total_s"]), "-", "(no storage work)", "-", "info", "-"))
    return rows


def render(rows: list[Row]) -> str:
    header = ["backend", "measure", "tenure", "baseline", "vs", "ratio", "aim", "result"]
    cells = [[r.backend, r.measure, r.value, r.baseline, r.vs, r.ratio, r.aim, r.result] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths)) + " |" for cell in cells]
    return "\n".join(lines)


def render_steps(backend: str, scenarios: dict[str, Any]) -> str:
    labels = [
        "reads",
        "claim",
        "unbind",
        "status writes",
        "workspace init (rest)",
        "restore (storage core)",
        "engines",
        "checkpoint (storage core)",
        "workspace suspend (rest)",
        "folder removal",
        "release",
        "other (unwrapped)",
    ]
    names = list(scenarios)
    header = ["step (" + backend + ")"] + names
    cells = []
    for label in labels:
        vals = [scenarios[n]["steps_s"].get(label) for n in names]
        if all(v is None for v in vals):
            continue
        cells.append([label] + ["" if v is None else fmt_s(v) for v in vals])
    cells.append(
        ["store transactions, lifecycle's own (write+read)"]
        + ["{}+{}".format(*scenarios[n]["transactions_own"]) for n in names]
    )
    cells.append(
        ["store transactions, storage core (write+read)"]
        + ["{}+{}".format(*scenarios[n]["transactions_core"]) for n in names]
    )
    cells.append(["total"] + [fmt_s(scenarios[n]["total_s"]) for n in names])
    cells.append(["lifecycle minus storage core"] + [fmt_s(scenarios[n]["own_s"]) for n in names])
    cells.append(
        ["storage core standalone"] + [fmt_s(scenarios[n].get("core_standalone_s", float("nan"))) for n in names]
    )
    widths = [max(len(header[i]), *(len(c[i]) for c in cells)) for i in range(len(header))]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths)) + " |" for cell in cells]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def run_backend(backend: Backend, cfg: Config, workdir: str, only: set[str] | None) -> dict[str, Any]:
    res: dict[str, Any] = {"server_version": backend.server_version()}
    sections: list[tuple[str, Callable[[Store], Any]]] = [
        ("claims", lambda s: bench_claims(s, cfg)),
        ("renew", lambda s: bench_renew(s, cfg)),
        ("find", lambda s: bench_find(s, cfg)),
        ("lifecycle", lambda s: bench_lifecycle(s, cfg, workdir, backend.open)),
    ]
    for section, fn in sections:
        if only and section not in only:
            continue
        load_before = os.getloadavg()
        log(f"[{backend.name}] {section} ... (load average {load_before[0]:.2f})")
        t0 = time.perf_counter()
        store = backend.open(section)
        res[section] = fn(store)
        res[section]["elapsed_s"] = time.perf_counter() - t0
        res[section]["load_average"] = {"before": load_before, "after": os.getloadavg()}
        log(f"[{backend.name}] {section} done in {res[section]['elapsed_s']:.1f} s")
    return res


def print_details(backend: str, res: dict[str, Any]) -> None:
    if "renew" in res:
        print(f"\nrenew_leases ({backend}): statements the driver sent per beat (BEGIN/COMMIT listed apart)")
        for size, e in res["renew"]["sizes"].items():
            print(
                f"  {int(size):>7,} held: {e['driver_statements']}  + {e['driver_transaction_control']};"
                f" connector calls: {len(e['connector_statements'])}; WAL {e['wal_bytes_per_beat'] / 1e6:.2f} MB"
                f" per beat ({e['wal_bytes_per_beat'] / int(size):.0f} B per project)"
            )
        hot = res["renew"].get("pg_update_stats")
        if hot:
            print(
                f"  server statistics over {hot['beats']} beats of {hot['holder_size']:,} held:"
                f" {hot['rows_updated']:,} row updates, {hot['hot_updates']:,} HOT;"
                f" indexes {hot['before']['index_bytes'] / 1e6:.1f} → {hot['after']['index_bytes'] / 1e6:.1f} MB,"
                f" table {hot['before']['table_bytes'] / 1e6:.1f} → {hot['after']['table_bytes'] / 1e6:.1f} MB"
            )
    if "find" in res:
        for size, e in res["find"]["sizes"].items():
            print(
                f"\nfind_projects_needing_owner ({backend}, {int(size):,} projects, {e['index_entries']:,} in the"
                f" partial index, limit {res['find']['limit']})"
            )
            for case, p in e["cases"].items():
                print(f"  {case} (lease TTL {p['lease_ttl']:.0f} s, skip {p['skip']:,}, {p['matching']:,} matching):")
                for line in p.get("plan_analyze") or p["plan"]:
                    print("    " + line)
    if "lifecycle" in res:
        print(
            f"\nbring / suspend by step ({backend}; medians; 'rest' = the lifecycle's own work around the"
            " storage core call)"
        )
        print(render_steps(backend, res["lifecycle"]["scenarios"]))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if args.tree_reps:
        cfg = dataclasses.replace(cfg, tree_reps=args.tree_reps)
    only = {x.strip() for x in args.only.split(",")} if args.only else None
    started = time.perf_counter()
    revision = git_rev()
    workdir = args.workdir or tempfile.mkdtemp(prefix="tenure-projects-bench-")
    os.makedirs(workdir, exist_ok=True)
    wanted = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    try:
        for name in wanted:
            backend: Backend
            if name == "sqlite":
                backend = SqliteBackend(workdir)
            else:
                try:
                    backend = PostgresBackend(args.pg_url)
                except Exception as exc:  # noqa: BLE001
                    if args.backend == "postgres":
                        raise
                    skipped[name] = f"PostgreSQL unreachable: {exc}"
                    log(f"skip: PostgreSQL at {args.pg_url} is unreachable ({exc}); PostgreSQL rows omitted")
                    continue
            try:
                results[name] = run_backend(backend, cfg, workdir, only)
            finally:
                backend.close()
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    rows = [r for name, res in results.items() for r in table_rows(name, res)]
    for name, res in results.items():
        print_details(name, res)
    table = render(rows)
    print("\n" + table)
    elapsed = time.perf_counter() - started
    print(
        f"\n({cfg.mode} run, {elapsed:.0f} s; load average at the end {os.getloadavg()[0]:.2f}"
        f" on {os.cpu_count()} CPUs)"
    )
    import psycopg

    doc = {
        "mode": cfg.mode,
        "config": cfg.__dict__,
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
        "load_average_end": os.getloadavg(),
        "table": table,
        "rows": [{k: v for k, v in r.__dict__.items() if k != "raw"} for r in rows],
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
