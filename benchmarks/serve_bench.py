"""``tenure serve`` as a running process: takeover after kill -9, a bring through the HTTP API, request rate.

``python -m benchmarks.serve_bench [--runs 20] [--brings 30] [--seconds 3] [--clients 4]``

* **Takeover after kill -9** (PostgreSQL, a throw-away database dropped at the end): per run, pod A
  (``--no-self-pull``) creates and brings a PERMANENT project ``acme/p<i>`` holding 10 small files
  (checkpointed), then pod B starts with ``--pull-every 0.25``; both beat every 0.5 s with a 2 s lease TTL
  (liveness TTL 1.5 s). A is killed with SIGKILL; from the kill, the benchmark polls the store for the
  project's owner and B's ``GET /api/v1/projects/acme/p<i>`` for ``running_here`` every 10 ms. The project
  is then closed through B and B stopped (SIGTERM). Reported: min/median/p95/p99/max of both times, and
  p99 / (TTL + 2 beats), the bound a dead pod's project should be running again within.
* **A bring through the HTTP API vs in-process** (SQLite, the embedded default): the same project (10
  files, 1-8 KiB, the same bytes) on a ``tenure serve`` process and on a :class:`PodRuntime` started in this
  process, each on its own store and object folder. Each timed bring is preceded by an untimed suspend
  (checkpoint published, folder removed), so every bring claims and restores the head. ``POST
  /api/v1/projects/acme/small/bring`` through a kept-alive httpx client against ``PodRuntime.bring`` (what the
  route calls), alternated, ``--brings`` of each after 3 warm-up pairs. Reported: medians and the ms the
  API adds.
* **Request rate**: ``GET /api/v1/projects/acme/small`` on that ``tenure serve`` process against a
  hello-world FastAPI app (one sync route returning a small JSON) served by uvicorn with the daemon's own
  settings, in a child process of this module (``--hello PORT``); both driven by the same httpx loop, one
  client, then ``--clients`` threads each with its own client, for ``--seconds`` each. Client and servers
  share the machine's cores.

* **Bring cost, before and after** (SQLite): the store work of one bring — control-plane and mount-store
  transactions, statements, milliseconds — over HTTP and in process, of a project with no head and of one
  with a head to restore, measured by ``benchmarks/bring_cost.py`` on the release ``--before`` (extracted
  with ``git archive``) and on this tree, alternated, in the same run. ``--only-bring-cost`` runs just this.

Prints the tables and writes every sample to ``benchmarks/results/serve.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from benchmarks import projects_bench as pb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "serve.json")

BEAT = 0.5
TTL = 2.0
LIVENESS = 1.5
PULL_EVERY = 0.25
TAKEOVER_BOUND = TTL + 2 * BEAT  # the aim: p99 of kill -9 → running elsewhere within this
#: the release before the pod-face restructuring: the "before" column of the bring cost
BEFORE_REV = "c5fd6de"
#: the aims of one bring through the HTTP API (control-plane transactions: no head / a head to restore)
BRING_TX_AIM = {"fresh": 6, "with_head": 8}
MOUNT_TX_AIM = 3
BRING_AIM_MS = 10.0
POLL = 0.01
FILES = 10


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="tenure serve: takeover after kill -9, HTTP bring, request rate")
    parser.add_argument("--runs", type=int, default=20, help="kill -9 takeovers (default 20)")
    parser.add_argument("--brings", type=int, default=30, help="timed brings of each kind (default 30)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each request-rate run (default 3)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients in the request-rate runs")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("TENURE_BENCH_PG", pb.DEFAULT_PG),
        help=f"an administrative PostgreSQL URL (default {pb.DEFAULT_PG}, or $TENURE_BENCH_PG)",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output path (default {DEFAULT_OUT})")
    parser.add_argument(
        "--before",
        default=BEFORE_REV,
        help=f"the release the bring cost is compared with, extracted by git archive (default {BEFORE_REV})",
    )
    parser.add_argument(
        "--only-bring-cost", action="store_true", help="measure only the bring cost, before and after (~1 min)"
    )
    parser.add_argument("--hello", type=int, default=None, help=argparse.SUPPRESS)  # serve the baseline app
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` (another process's state) until it is truthy, or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(POLL)
    raise RuntimeError(f"timed out waiting for {what}")


@dataclass
class Proc:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, follow_redirects=False)

    def wait_ready(self, path: str, what: str) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{what} exited {self.proc.returncode}:\n{self.log.read_text(errors='replace')}")
            try:
                return httpx.get(self.url + path, timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, 60, f"{what} ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_pod(work: Path, name: str, db: str, objects: str, *options: str) -> Proc:
    port = free_port()
    log = work / f"{name}.log"
    args = [sys.executable, "-m", "tenure.cli.main", "--data", str(work / name), "--db", db, "--objects", objects]
    args += ["serve", "--listen", f"127.0.0.1:{port}", "--log-format", "json", *options]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    pod = Proc(proc, f"http://127.0.0.1:{port}", log)
    pod.wait_ready("/readyz", f"pod {name}")
    return pod


def start_hello(work: Path) -> Proc:
    port = free_port()
    log = work / "hello.log"
    args = [sys.executable, "-m", "benchmarks.serve_bench", "--hello", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    hello = Proc(proc, f"http://127.0.0.1:{port}", log)
    hello.wait_ready("/hello", "hello-world app")
    return hello


def serve_hello(port: int) -> None:
    """The baseline: one route returning a small JSON, served by uvicorn as ``tenure serve`` serves its API."""
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/hello")
    def hello() -> dict[str, Any]:
        return {"ok": True, "name": "hello", "status": "RUNNING"}

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", access_log=False)
    uvicorn.Server(config).run()


def pod_id(pod: Proc) -> str:
    with pod.client() as c:
        return str(next(p["id"] for p in c.get("/api/v1/pods").json()["pods"] if p.get("this")))


def small_files(seed: int = 7) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {f"src/f{i:02d}.txt": rng.randbytes(rng.randint(1024, 8192)) for i in range(FILES)}


def expect(response: httpx.Response, *statuses: int) -> httpx.Response:
    if response.status_code not in statuses:
        raise RuntimeError(f"{response.request.method} {response.request.url}: {response.status_code} {response.text}")
    return response


def create_with_files(pod: Proc, name: str, lifecycle_type: str) -> None:
    p = f"/api/v1/projects/acme/{name}"
    with pod.client() as c:
        body = {"tenant": "acme", "name": name, "lifecycle_type": lifecycle_type}
        expect(c.post("/api/v1/projects", json=body), 201)
        expect(c.post(p + "/bring"), 200)
        for path, data in small_files().items():
            expect(c.put(f"{p}/files/{path}", content=data), 201)
        expect(c.post(p + "/checkpoint"), 200)


# --------------------------------------------------------------------------- takeover


def bench_takeover(pg_url: str, runs: int, work: Path) -> dict[str, Any]:
    from tenure.projects.ownership import Ownership
    from tenure.projects.store import ProjectStore

    backend = pb.PostgresBackend(pg_url)
    samples: list[dict[str, Any]] = []
    try:
        store = backend.open("serve")
        db = backend.url_for(backend.databases[-1])
        objects = f"file://{work}/pg-objects"
        timing = ["--beat", str(BEAT), "--lease-ttl", str(TTL), "--liveness-ttl", str(LIVENESS)]
        ownership, projects = Ownership(store), ProjectStore(store)
        for i in range(runs):
            name = f"p{i}"
            a = start_pod(work, f"a{i}", db, objects, *timing, "--no-self-pull")
            b: Proc | None = None
            try:
                create_with_files(a, name, "PERMANENT")
                b = start_pod(work, f"b{i}", db, objects, *timing, "--pull-every", str(PULL_EVERY))
                a_id, b_id = pod_id(a), pod_id(b)
                project_id = projects.get("acme", name).id
                if ownership.owner(project_id, TTL).pod_id != a_id:
                    raise RuntimeError(f"acme/{name} is not held by pod a before the kill")
                claimed = running = None
                with b.client() as c:
                    killed = time.perf_counter()
                    os.kill(a.proc.pid, signal.SIGKILL)
                    deadline = killed + 30
                    while (claimed is None or running is None) and time.perf_counter() < deadline:
                        if claimed is None and ownership.owner(project_id, TTL).pod_id == b_id:
                            claimed = time.perf_counter() - killed
                        if running is None and c.get(f"/api/v1/projects/acme/{name}").json().get("running_here"):
                            running = time.perf_counter() - killed
                        time.sleep(POLL)
                    a.proc.wait(10)
                    if claimed is None or running is None:
                        raise RuntimeError(f"run {i}: acme/{name} not running on b 30 s after kill -9 of a")
                    expect(c.post(f"/api/v1/projects/acme/{name}/close"), 200)  # later pods never pull it
                samples.append({"claimed_s": claimed, "running_s": running})
                pb.log(f"takeover {i + 1}/{runs}: owner b after {claimed:.3f} s, running on b after {running:.3f} s")
            finally:
                if a.proc.poll() is None:
                    a.proc.kill()
                    a.proc.wait(10)
                if b is not None:
                    b.stop()
        version = backend.server_version()
    finally:
        backend.close()
    return {"samples": samples, "postgres": version, "ttl_s": TTL, "beat_s": BEAT, "pull_every_s": PULL_EVERY}


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "min": min(values),
        "p50": pb.pct(values, 0.5),
        "p95": pb.pct(values, 0.95),
        "p99": pb.pct(values, 0.99),
        "max": max(values),
    }


# --------------------------------------------------------------------------- bring, HTTP vs in-process


def in_process_node(work: Path) -> Any:
    from tenure.objects.local import LocalObjectStore
    from tenure.pod.runtime import PodRuntime, ServeConfig
    from tenure.store import open_store

    folder = work / "inproc"
    folder.mkdir()
    store = open_store(f"sqlite:///{folder}/tenure.db")
    config = ServeConfig(data_dir=str(folder / "data"), self_pull=False)
    node = PodRuntime(config, store, LocalObjectStore(f"{folder}/objects"))
    node.start()
    node.projects.create("acme", "small")
    project = node.bring("acme", "small")
    root = Path(node.workspaces.folder_for(project.id))
    for path, data in small_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    node.checkpoint("acme", "small")
    return node


def bench_bring(pod: Proc, node: Any, brings: int) -> dict[str, Any]:
    p = "/api/v1/projects/acme/small"
    http_s: list[float] = []
    inproc_s: list[float] = []
    with pod.client() as c:

        def over_http() -> float:
            expect(c.post(p + "/suspend"), 200)
            started = time.perf_counter()
            r = expect(c.post(p + "/bring"), 200)
            elapsed = time.perf_counter() - started
            if r.json()["status"] != "RUNNING" or not r.json()["running_here"]:
                raise RuntimeError(f"bring over HTTP: {r.text}")
            return elapsed

        def in_process() -> float:
            node.suspend("acme", "small")
            started = time.perf_counter()
            project = node.bring("acme", "small")
            elapsed = time.perf_counter() - started
            if project.status.value != "RUNNING":
                raise RuntimeError(f"bring in process: {project}")
            return elapsed

        for _ in range(3):  # warm-up
            over_http()
            in_process()
        for i in range(brings):
            first, second = (over_http, in_process) if i % 2 == 0 else (in_process, over_http)
            for run in (first, second):
                (http_s if run is over_http else inproc_s).append(run())
    folder = node.workspaces.folder_for(node.projects.get("acme", "small").id)
    files = sum(len(f) for _, _, f in os.walk(folder))
    return {"http_s": http_s, "in_process_s": inproc_s, "files": files}


# --------------------------------------------------------------------------- bring cost, before and after


def bench_bring_cost(before_rev: str, brings: int, work: Path) -> dict[str, Any]:
    """The bring cost probe (benchmarks/bring_cost.py) on ``before_rev`` and on this tree, alternated."""
    before = work / "before"
    before.mkdir()
    archive = subprocess.run(["git", "-C", ROOT, "archive", before_rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(2):
        for label, src in (("before", str(before)), ("after", ROOT)):
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.bring_cost", "--src", src, "--brings", str(brings)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": ROOT},
            )
            runs[label].append(json.loads(out.stdout))
    return {"before_rev": before_rev, "runs": runs}


def _cost(runs: list[dict[str, Any]], mode: str, case: str, key: str) -> float:
    values = [sample[case][key] for run in runs for sample in run[mode]]
    return pb.pct(values, 0.5)


def bring_cost_table(res: dict[str, Any]) -> str:
    header = ["bring", "measure", f"before ({res['before_rev']})", "after", "ratio", "aim", "result"]
    cells = []
    runs = res["runs"]
    for mode, case, label in (
        ("http", "fresh", "over HTTP, no head"),
        ("http", "with_head", "over HTTP, a head to restore"),
        ("in_process", "fresh", "in process, no head"),
        ("in_process", "with_head", "in process, a head to restore"),
    ):
        for key, what in (
            ("control_tx", "control-plane transactions"),
            ("mounts_tx", "mount-store transactions"),
            ("control_statements", "control-plane statements"),
            ("ms", "milliseconds (median)"),
        ):
            b, a = _cost(runs["before"], mode, case, key), _cost(runs["after"], mode, case, key)
            aim, result = "info", "-"
            if mode == "http" and key == "control_tx":
                aim, result = f"≤ {BRING_TX_AIM[case]}", "met" if a <= BRING_TX_AIM[case] else "NOT met"
            elif mode == "http" and key == "mounts_tx":
                aim, result = f"≤ {MOUNT_TX_AIM}", "met" if a <= MOUNT_TX_AIM else "NOT met"
            shown = (lambda v: f"{v:.1f}") if key == "ms" else (lambda v: f"{v:.0f}")
            cells.append([label, what, shown(b), shown(a), f"{a / b:.2f}×" if b else "-", aim, result])
    return render(header, cells)


# --------------------------------------------------------------------------- request rate


def rate(url: str, path: str, clients: int, seconds: float) -> dict[str, Any]:
    counts = [0] * clients
    errors: list[str] = []
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def loop(k: int) -> None:
        with httpx.Client(base_url=url, timeout=30.0) as c:
            for _ in range(50):  # warm-up: connection open, first requests
                c.get(path)
            start.wait()
            n = 0
            while time.perf_counter() < stop_at[0]:
                r = c.get(path)
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    break
                n += 1
            counts[k] = n

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + 3600
    start.wait()
    began = time.perf_counter()
    stop_at[0] = began + seconds
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{url}{path}: {errors[0]}")
    return {"clients": clients, "requests": sum(counts), "seconds": elapsed, "rps": sum(counts) / elapsed}


def bench_rate(pod: Proc, hello: Proc, clients: int, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in (1, clients):
        tenure = rate(pod.url, "/api/v1/projects/acme/small", k, seconds)
        baseline = rate(hello.url, "/hello", k, seconds)
        out[str(k)] = {"tenure": tenure, "baseline": baseline}
        pb.log(f"request rate, {k} client(s): tenure {tenure['rps']:.0f}/s, hello-world {baseline['rps']:.0f}/s")
    return out


# --------------------------------------------------------------------------- tables


def render(header: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths)) + " |" for cell in cells]
    return "\n".join(lines)


def secs(v: float) -> str:
    return f"{v:.2f} s"


def ms(v: float) -> str:
    return f"{v * 1e3:.1f} ms"


def takeover_table(res: dict[str, Any]) -> str:
    header = ["measure (kill -9 of the holder →)", "runs", "min", "median", "p95", "p99", "max", "vs"]
    header += ["ratio (p99)", "aim", "result"]
    cells = []
    for key, label in (("running_s", "running on the second pod"), ("claimed_s", "the second pod owns it (store)")):
        s = spread([x[key] for x in res["samples"]])
        ratio = s["p99"] / TAKEOVER_BOUND
        cells.append(
            [label, str(s["n"]), secs(s["min"]), secs(s["p50"]), secs(s["p95"]), secs(s["p99"]), secs(s["max"])]
            + [f"TTL + 2 beats = {TAKEOVER_BOUND:.1f} s", f"{ratio:.2f}×", "≤ 1", "met" if ratio <= 1 else "NOT met"]
        )
    return render(header, cells)


def api_table(bring: dict[str, Any], rates: dict[str, Any]) -> str:
    header = ["measure", "tenure serve", "baseline", "vs", "ratio", "added", "aim", "result"]
    h, i = pb.pct(bring["http_s"], 0.5), pb.pct(bring["in_process_s"], 0.5)
    added = (h - i) * 1e3
    cells = [
        [
            f"bring, {FILES} files restored (median of {len(bring['http_s'])})",
            ms(h),
            ms(i),
            "PodRuntime.bring in process",
        ]
        + [f"{h / i:.2f}×", f"{added:+.1f} ms", f"< {BRING_AIM_MS:.0f} ms added"]
        + ["met" if added < BRING_AIM_MS else "NOT met"]
    ]
    h95, i95 = pb.pct(bring["http_s"], 0.95), pb.pct(bring["in_process_s"], 0.95)
    cells.append(["bring, p95", ms(h95), ms(i95), "PodRuntime.bring in process", f"{h95 / i95:.2f}×"])
    cells[-1] += [f"{(h95 - i95) * 1e3:+.1f} ms", "info", "-"]
    for k, r in rates.items():
        t, b = r["tenure"]["rps"], r["baseline"]["rps"]
        who = "1 client" if k == "1" else f"{k} concurrent clients"
        cells.append(
            [f"GET project, {who}", f"{t:,.0f} req/s", f"{b:,.0f} req/s", "uvicorn + FastAPI hello world"]
            + [f"{t / b:.2f}×", f"{(1 / t - 1 / b) * 1e3 * int(k):+.2f} ms/req", "info", "-"]
        )
    return render(header, cells)


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.hello is not None:
        serve_hello(args.hello)
        return 0
    started = time.perf_counter()
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="tenure-serve-bench-"))
    try:
        cost = bench_bring_cost(args.before, max(5, args.brings // 2), work)
        cost_table = bring_cost_table(cost)
        if args.only_bring_cost:
            print("\n" + cost_table)
            return 0
        takeover = bench_takeover(args.pg_url, args.runs, work)
        db = f"sqlite:///{work}/serve/tenure.db"
        (work / "serve").mkdir()
        pod = start_pod(work, "serve/data", db, f"file://{work}/serve/objects", "--no-self-pull")
        node = None
        hello = None
        try:
            create_with_files(pod, "small", "AUTO")
            node = in_process_node(work)
            bring = bench_bring(pod, node, args.brings)
            pb.log(
                f"bring: over HTTP {pb.pct(bring['http_s'], 0.5) * 1e3:.1f} ms,"
                f" in process {pb.pct(bring['in_process_s'], 0.5) * 1e3:.1f} ms (medians)"
            )
            hello = start_hello(work)
            rates = bench_rate(pod, hello, args.clients, args.seconds)
        finally:
            if node is not None:
                node.stop()
                node.store.close()
            pod.stop()
            if hello is not None:
                hello.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    first, second = takeover_table(takeover), api_table(bring, rates)
    print("\n" + first + "\n\n" + second + "\n\n" + cost_table)
    elapsed = time.perf_counter() - started
    load_end = os.getloadavg()
    print(
        f"\n(one run, {elapsed:.0f} s; {args.runs} takeovers on PostgreSQL {takeover['postgres']},"
        f" {args.brings} brings of each kind on SQLite, {args.seconds:g} s per request-rate run;"
        f" load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end, {os.cpu_count()} CPUs)"
    )
    doc = {
        "args": {k: v for k, v in vars(args).items() if k not in ("pg_url", "out", "hello")},
        "environment": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "git": pb.git_rev(),
            "postgres": takeover["postgres"],
        },
        "elapsed_s": elapsed,
        "load_average": {"start": load_start, "end": load_end},
        "tables": {"takeover": first, "api": second, "bring_cost": cost_table},
        "results": {"takeover": takeover, "bring": bring, "rate": rates, "bring_cost": cost},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
