"""Autosave cost: a pod's CPU with many running projects of which a few write, autosave on against off.

``python -m benchmarks.autosave_bench [--projects 1000] [--writers 10] [--autosave 3] [--window 15]``

One pod runtime in this process on the embedded default (SQLite and a local object folder), its beat thread
running every ``--beat`` seconds. ``--projects`` projects are brought and checkpointed once (each change
journal starts at its first checkpoint); ``--writers`` of them (1% by default) get a small file written
every ``--beat`` seconds by a writer thread for the whole run. Then alternating windows of ``--window``
seconds with autosave off and with autosave every ``--autosave`` seconds (the pod default; 30 s in
production is the same work per period, scaled down here so a window holds several periods); per window:
the process's CPU seconds (every thread: the beat, the writer, the autosaves), the autosave checkpoints
taken, and their mean duration.

The baseline is the same pod, same projects, same writes, with autosave off: the ratio is what autosave
adds. Unchanged projects should cost nothing (their journals say so); only the writers' folders are
checkpointed. Prints a table and writes every window to ``benchmarks/results/autosave.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "autosave.json")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--projects", type=int, default=1000)
    ap.add_argument("--writers", type=int, default=10, help="projects written to during the run (1%% of 1,000)")
    ap.add_argument("--autosave", type=float, default=3.0, help="autosave period, seconds")
    ap.add_argument("--window", type=float, default=15.0, help="seconds per measured window")
    ap.add_argument("--rounds", type=int, default=2, help="windows of each kind, alternated")
    ap.add_argument("--beat", type=float, default=0.5)
    ap.add_argument("--out", default=DEFAULT_OUT)
    return ap.parse_args(argv)


def _autosaves(pod: Any) -> tuple[float, float]:
    """(count, sum) of the autosave-duration histogram."""
    count = total = 0.0
    for metric in pod.metrics.autosave_seconds.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
    return count, total


def main(argv: Sequence[str] | None = None) -> int:
    from tenure.objects.local import LocalObjectStore
    from tenure.pod.runtime import PodRuntime, ServeConfig
    from tenure.projects import ProjectStore
    from tenure.store import open_store

    args = parse_args(argv)
    work = tempfile.mkdtemp(prefix="tenure-autosave-bench-")
    store = open_store(f"sqlite:///{work}/tenure.db")
    config = ServeConfig(data_dir=f"{work}/data", self_pull=False, beat_interval=args.beat, capacity=1e9)
    pod = PodRuntime(config, store, LocalObjectStore(f"{work}/objs"))
    pod.start()
    names = [f"p{i:04d}" for i in range(args.projects)]
    projects = ProjectStore(store)
    started = time.perf_counter()
    for i, name in enumerate(names):
        projects.create("acme", name)
        project = pod.bring("acme", name)
        with open(os.path.join(pod.workspaces.folder_for(project.id), "seed.txt"), "w") as f:
            f.write(name)
        pod.checkpoint("acme", name)
        if (i + 1) % 100 == 0:
            print(f"  {i + 1}/{args.projects} projects running ({time.perf_counter() - started:.0f} s)", flush=True)
    journals = len(pod.journals)
    writers = [pod.workspaces.folder_for(projects.get("acme", n).id) for n in names[: args.writers]]
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.wait(args.beat):
            n += 1
            for folder in writers:
                with open(os.path.join(folder, "edit.txt"), "w") as f:
                    f.write(str(n))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    pod.run_beats()
    rows: list[dict[str, Any]] = []
    try:
        for _ in range(args.rounds):
            for every in (0.0, args.autosave):
                pod.config = replace(pod.config, autosave=every)
                count0, sum0 = _autosaves(pod)
                cpu0, wall0 = time.process_time(), time.perf_counter()
                time.sleep(args.window)  # the measured window: the beat thread works meanwhile
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
                count1, sum1 = _autosaves(pod)
                saves = count1 - count0
                rows.append(
                    {
                        "autosave_s": every,
                        "cpu_s": cpu,
                        "wall_s": wall,
                        "cpu_share": cpu / wall,
                        "autosaves": saves,
                        "autosave_mean_s": (sum1 - sum0) / saves if saves else None,
                    }
                )
                print(
                    f"  window autosave={every:g}s: {cpu:.2f} CPU s in {wall:.1f} s, {saves:.0f} autosaves", flush=True
                )
    finally:
        stop.set()
        pod.stop()
        store.close()
        shutil.rmtree(work, ignore_errors=True)
    off = [r["cpu_s"] for r in rows if r["autosave_s"] == 0.0]
    on = [r["cpu_s"] for r in rows if r["autosave_s"] > 0.0]
    saves = [r["autosaves"] for r in rows if r["autosave_s"] > 0.0]
    means = [r["autosave_mean_s"] for r in rows if r["autosave_mean_s"] is not None]
    periods = args.window / args.autosave
    print()
    print(f"{args.projects} running projects ({journals} change journals), {args.writers} writing, beat {args.beat} s")
    print("| autosave | CPU s per window (median) | CPU share of one core | autosaves per window | mean autosave |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| off (baseline) | {statistics.median(off):.2f} | {statistics.median(off) / args.window:.1%} | 0 | — |")
    mean = f"{statistics.median(means) * 1000:.0f} ms" if means else "—"
    print(
        f"| every {args.autosave:g} s | {statistics.median(on):.2f} | {statistics.median(on) / args.window:.1%} |"
        f" {statistics.median(saves):.0f} (expected ≤ {args.writers * periods:.0f}) | {mean} |"
    )
    print(f"ratio on / off: {statistics.median(on) / max(statistics.median(off), 1e-9):.2f}×")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "journals": journals, "windows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
