"""Restart reconciliation at pod start with many mounts, against a bare walk of the same folders (S-53, S-71).

``python -m benchmarks.reconcile_bench [--mounts 1000] [--files 5] [--repeat 3]``

On SQLite (the embedded default: a store file and a local object folder in a scratch directory), one
in-process pod (:class:`tenure.pod.runtime.PodRuntime`, no self-pull) brings ``--mounts`` PERMANENT projects,
writes ``--files`` small files (1-4 KiB) into each folder and checkpoints it, so every folder has its
local index and base, as a running project's has. Then the pod "crashes" the way kill -9 leaves things
(the data-folder lock released, the leases and the host-local mount records as they were), and a second
pod starts on the same data folder: it registers, locks the folder, adopts the dead pod's leases (ADR
0020), and reconciles. Measured, in the same run:

* **reconcile**: ``Reconciler(node).run()`` of that restart (the first run, which sets the verdicts), then
  ``--repeat`` more runs on the same records (what a second restart does; the median is reported);
* **the baseline, a bare walk**: ``os.scandir`` recursively plus ``os.lstat`` of every entry of the same
  folders (``--repeat`` times, median), the least a check of every folder can cost.

Reported: the absolute seconds, reconcile / bare walk, the verdict counts and the ms per mount. The
start-up's own steps before reconciliation (registration, lock, adoption) are timed too, as context.
Prints a table and writes the numbers to ``benchmarks/results/reconcile.json``.
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
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import projects_bench as pb

from tenure.objects.local import LocalObjectStore
from tenure.pod.reconcile import Reconciler
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import LifecycleType, ProjectStore
from tenure.states import PodState
from tenure.store import Store, open_store

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "reconcile.json")
T = "bench"
AIM_S = 2.0  # reconcile of 1,000 mounts at pod start, on SQLite
LEASE_TTL = 3600.0  # nothing runs out while the benchmark sets up


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Restart reconciliation with many mounts against a bare walk")
    parser.add_argument("--mounts", type=int, default=1000, help="projects brought on the pod (default 1000)")
    parser.add_argument("--files", type=int, default=5, help="small files in each folder (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="further reconcile runs and bare walks (default 3)")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one, removed)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output path (default {DEFAULT_OUT})")
    return parser.parse_args(argv)


def node_on(work: Path, store: Store) -> PodRuntime:
    config = ServeConfig(data_dir=str(work / "host"), self_pull=False, lease_ttl=LEASE_TTL)
    return PodRuntime(config, store, LocalObjectStore(str(work / "objects")))


def crash(node: PodRuntime) -> None:
    """What kill -9 leaves: the lock released by the kernel, the leases and the records as they were."""
    node._stop.set()
    node._unlock_data_folder()


def set_up(work: Path, store: Store, mounts: int, files: int) -> list[str]:
    """``mounts`` projects brought on one pod, each folder with ``files`` small files, checkpointed."""
    rng = random.Random(mounts * 31 + files)
    projects = ProjectStore(store)
    node = node_on(work, store)
    node.start()
    folders: list[str] = []
    started = time.perf_counter()
    for i in range(mounts):
        name = f"p{i:05d}"
        projects.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
        project = node.bring(T, name)
        folder = node.lifecycle.folder(project)
        for j in range(files):
            Path(folder, f"f{j}.txt").write_bytes(rng.randbytes(rng.randint(1024, 4096)))
        node.checkpoint(T, name)
        folders.append(folder)
        if (i + 1) % 250 == 0:
            took = time.perf_counter() - started
            pb.log(f"  set-up: {i + 1}/{mounts} projects brought and checkpointed ({took:.0f} s)")
    crash(node)
    return folders


def restart_until_reconcile(work: Path, store: Store) -> tuple[PodRuntime, dict[str, float]]:
    """A second pod on the same data folder, through the start-up steps that come before reconciliation."""
    node = node_on(work, store)
    steps: dict[str, float] = {}
    t = time.perf_counter()
    node.pods.register(node.pod, labels={}, capacity=node.config.capacity, status=PodState.STARTING)
    node._lock_data_folder()
    node.pods.heartbeat(node.pod.pod_id)
    node.ownership.renew_leases(node.pod.pod_id)
    steps["register_lock_s"] = time.perf_counter() - t
    t = time.perf_counter()
    adopted = node.adopt_predecessor()
    steps["adopt_s"] = time.perf_counter() - t
    steps["adopted"] = float(len(adopted))
    return node, steps


def bare_walk(folders: Sequence[str]) -> int:
    """``os.scandir`` recursively and ``os.lstat`` of every entry: the floor of checking every folder."""
    seen = 0
    stack = list(folders)
    while stack:
        path = stack.pop()
        with os.scandir(path) as entries:
            for entry in entries:
                os.lstat(entry.path)
                seen += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return seen


def timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    load_start = os.getloadavg()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tenure-reconcile-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    store = open_store(f"sqlite:///{work}/tenure.db")
    try:
        pb.log(f"reconcile: {args.mounts} mounts of {args.files} files each on SQLite, in {work}")
        folders = set_up(work, store, args.mounts, args.files)
        setup_s = time.perf_counter() - started
        node, steps = restart_until_reconcile(work, store)
        walk_first_s, entries = timed(lambda: bare_walk(folders))
        first_s, report = timed(lambda: Reconciler(node).run())
        again = [timed(lambda: Reconciler(node).run())[0] for _ in range(args.repeat)]
        walks = [timed(lambda: bare_walk(folders))[0] for _ in range(args.repeat)]
        crash(node)
    finally:
        store.close()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    walk_s = statistics.median(walks) if walks else walk_first_s
    again_s = statistics.median(again) if again else first_s
    rows = [
        ("reconcile at restart (first run)", first_s, first_s / walk_s),
        (f"reconcile again (median of {len(again)})", again_s, again_s / walk_s),
        (f"bare walk (median of {len(walks)})", walk_s, 1.0),
    ]
    pb.log("")
    pb.log(f"| {args.mounts:,} mounts, {args.files} files each, SQLite | seconds | × bare walk | ms per mount |")
    pb.log("| --- | --- | --- | --- |")
    for label, seconds, ratio in rows:
        pb.log(f"| {label} | {seconds:.3f} | {ratio:.1f} | {seconds / args.mounts * 1e3:.2f} |")
    pb.log("")
    pb.log(
        f"verdicts {dict(report.counts)}; {entries:,} entries walked; start-up before reconcile:"
        f" register+lock {steps['register_lock_s']:.3f} s, adopt {int(steps['adopted'])} leases"
        f" {steps['adopt_s']:.3f} s; aim < {AIM_S:.0f} s: {'met' if first_s < AIM_S else 'NOT met'}"
    )
    elapsed = time.perf_counter() - started
    pb.log(
        f"set-up {setup_s:.0f} s, total {elapsed:.0f} s (load average {load_start[0]:.2f} at the start,"
        f" {os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} CPUs)"
    )
    doc = {
        "args": {"mounts": args.mounts, "files": args.files, "repeat": args.repeat},
        "environment": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "sqlite": sqlite3.sqlite_version,
            "git": pb.git_rev(),
        },
        "elapsed_s": elapsed,
        "setup_s": setup_s,
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "startup_steps": steps,
        "reconcile_first_s": first_s,
        "reconcile_again_s": again,
        "bare_walk_first_s": walk_first_s,
        "bare_walk_s": walks,
        "entries_walked": entries,
        "verdicts": dict(report.counts),
        "aim_s": AIM_S,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
