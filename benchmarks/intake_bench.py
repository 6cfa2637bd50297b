"""Intake benchmarks: poll throughput and advance latency.

Run ``python benchmarks/intake_bench.py [--quick]``. Prints a table and
writes ``benchmarks/results/intake.json``. Every ratio compares against a
baseline measured in the same run:

* poll, small packages: admitting N small valid packages vs a baseline that
  only copies each inbox file, fsyncs it and renames it into place; with the
  default group commit (ADR 0109) and, in the same run, with one package per
  batch and one fsync per path (``batch_packages=1, syncfs_from=0``, the
  sync pattern before group commit), each with the syncs per package;
* poll, large packages: the same for packages of 20 MB (incompressible);
* advance latency on a case with a long checkpoint history vs a fresh case
  (warm process: generations validated once are cached in-process; the
  first, cold read of the long case is reported separately). Samples of
  the two cases alternate, so the disk's noise falls on both alike; the
  median and the mean (which includes the advances that close a span,
  ADR 0110) are reported, before and after a collection (``collect``) of
  the long case's unreferenced generations.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import tenure.intake.inbox as inbox_module  # noqa: E402
import tenure.intake.storage as storage_module  # noqa: E402
from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig, Workspace  # noqa: E402
from tenure.intake.pack import new_manifest, write_package  # noqa: E402
from tenure.intake.storage import _validated  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "intake.json"


def make_inputs(folder: Path, count: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        files = {"input/data.bin": os.urandom(size), "input/readme.txt": b"benchmark"}
        path = folder / f"pkg-{i:05d}.zip"
        write_package(path, new_manifest(f"case-{i}", "pkg"), files)
        paths.append(path)
    return paths


def baseline(inputs: list[Path], target: Path) -> float:
    """Copy each file, fsync it and rename it into place."""
    target.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for path in inputs:
        tmp = target / f".tmp-{path.name}"
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1024 * 1024)
            dst.flush()
            os.fsync(dst.fileno())
        os.rename(tmp, target / path.name)
    return time.perf_counter() - started


def poll_all(inputs: list[Path], root: Path, config: IntakeConfig | None = None) -> tuple[float, int]:
    """Seconds of one poll admitting ``inputs``, and the fsync and syncfs calls it made."""
    ws = Workspace(root, config)
    for path in inputs:
        shutil.copy(path, ws.inbox / path.name)
    processor = InboxProcessor(ws)
    syncs = [0]
    real_fsync, real_syncfs = os.fsync, storage_module.sync_filesystem

    def fsync(fd: int) -> None:
        syncs[0] += 1
        real_fsync(fd)

    def syncfs(path: Any) -> None:
        syncs[0] += 1
        real_syncfs(path)

    os.fsync = fsync
    inbox_module.sync_filesystem = storage_module.sync_filesystem = syncfs
    try:
        started = time.perf_counter()
        results = processor.poll(max_jobs=len(inputs))
        elapsed = time.perf_counter() - started
    finally:
        os.fsync = real_fsync
        inbox_module.sync_filesystem = storage_module.sync_filesystem = real_syncfs
    accepted = sum(r.kind.value == "ACCEPTED" for r in results)
    assert accepted == len(inputs), f"only {accepted} of {len(inputs)} admitted"
    return elapsed, syncs[0]


def bench_poll(tmp: Path, name: str, count: int, size: int, *, before: bool = False) -> list[dict[str, Any]]:
    inputs = make_inputs(tmp / f"{name}-src", count, size)
    base = baseline(inputs, tmp / f"{name}-baseline")
    configs = [("", None)]
    if before:
        configs.append((", one per batch (before)", IntakeConfig(batch_packages=1, syncfs_from=0)))
    rows = []
    for label, config in configs:
        poll, syncs = poll_all(inputs, tmp / f"{name}-ws{len(rows)}", config)
        rows.append(
            {
                "benchmark": f"poll {count} x {size // 1024} KiB{label}",
                "packages": count,
                "poll_s": round(poll, 3),
                "baseline_s": round(base, 3),
                "packages_per_s": round(count / poll, 1),
                "syncs_per_package": round(syncs / count, 2),
                "ratio": round(poll / base, 2),
                "aim": "ratio <= 3",
            }
        )
    return rows


def advance_latency(store: CheckpointStore, case: str, samples: int, prefix: str) -> list[float]:
    times = []
    for i in range(samples):
        started = time.perf_counter()
        store.advance(case, "pkg", "BUILDING_CASE", step_id=f"{prefix}-{i}")
        times.append(time.perf_counter() - started)
    return times


def alternating(store: CheckpointStore, samples: int, prefix: str) -> tuple[list[float], list[float]]:
    """Advance the fresh and the long case in turn; their times in two lists."""
    fresh: list[float] = []
    long: list[float] = []
    for i in range(samples):
        fresh += advance_latency(store, "fresh", 1, f"{prefix}-{i}")
        long += advance_latency(store, "long", 1, f"{prefix}-{i}")
    return fresh, long


def bench_advance(tmp: Path, history: int, samples: int) -> dict[str, Any]:
    ws = Workspace(tmp / "advance-ws")
    for case in ("fresh", "long"):
        write_package(ws.inbox / f"{case}.zip", new_manifest(case, "pkg"), {"a.txt": b"a"})
    InboxProcessor(ws).poll()
    store = CheckpointStore(ws)
    for case in ("fresh", "long"):
        store.advance(case, "pkg", "BUILDING_CASE", step_id="start")
    for i in range(history):
        store.advance("long", "pkg", "BUILDING_CASE", step_id=f"history-{i}")
    files_before = len(os.listdir(ws.case_dir("long", "pkg")))
    fresh_u, long_u = alternating(store, samples, "uncollected")
    store.collect()
    files_after = len(os.listdir(ws.case_dir("long", "pkg")))
    fresh, long = alternating(store, samples, "measure")
    _validated.clear()
    cold = advance_latency(CheckpointStore(Workspace(ws.root)), "long", 1, "cold")[0]
    fresh_ms, long_ms = statistics.median(fresh) * 1000, statistics.median(long) * 1000
    return {
        "benchmark": f"advance, {history + 2} checkpoints vs fresh",
        "fresh_ms": round(fresh_ms, 2),
        "long_history_ms": round(long_ms, 2),
        "ratio": round(long_ms / fresh_ms, 2),
        "ratio_mean": round(statistics.mean(long) / statistics.mean(fresh), 2),
        "ratio_uncollected": round(statistics.median(long_u) / statistics.median(fresh_u), 2),
        "ratio_uncollected_mean": round(statistics.mean(long_u) / statistics.mean(fresh_u), 2),
        "long_folder_files": {"before_collect": files_before, "after_collect": files_after},
        "cold_first_advance_ms": round(cold * 1000, 1),
        "aim": "ratio <= 1.2 (does not grow with history)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a smoke run")
    parser.add_argument("--only-advance", action="store_true", help="only the advance row")
    args = parser.parse_args()
    small_n, big_n, big_size, history, samples = (
        (100, 5, 20 * 1024 * 1024, 100, 10) if args.quick else (1000, 50, 20 * 1024 * 1024, 1000, 64)
    )
    with tempfile.TemporaryDirectory(prefix="intake-bench-") as folder:
        tmp = Path(folder)
        rows = [
            *([] if args.only_advance else bench_poll(tmp, "small", small_n, 1024, before=True)),
            *([] if args.only_advance else bench_poll(tmp, "large", big_n, big_size)),
            bench_advance(tmp, history, samples),
        ]
    print(f"{'benchmark':52} {'measured':>12} {'baseline':>12} {'ratio':>7}  aim")
    for row in rows:
        if "poll_s" in row:
            print(
                f"{row['benchmark']:52} {row['poll_s']:>11}s {row['baseline_s']:>11}s {row['ratio']:>7}  {row['aim']}"
                f" ({row['syncs_per_package']} syncs/package)"
            )
        else:
            print(
                f"{row['benchmark']:52} {row['long_history_ms']:>10}ms {row['fresh_ms']:>10}ms "
                f"{row['ratio']:>7}  {row['aim']} (mean {row['ratio_mean']}; before collect "
                f"{row['ratio_uncollected']}, mean {row['ratio_uncollected_mean']}; "
                f"cold first: {row['cold_first_advance_ms']} ms)"
            )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if args.only_advance and RESULTS.exists():  # keep the poll rows of the last full run
        rows = [r for r in json.loads(RESULTS.read_text())["results"] if "poll_s" in r] + rows
    RESULTS.write_text(
        json.dumps(
            {"quick": args.quick, "python": sys.version.split()[0], "cpus": os.cpu_count(), "results": rows}, indent=2
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
