"""Intake hostile-input benchmark: judging each class of the hostile corpus vs listing it with zipfile.

Run ``python -m benchmarks.intake_hostile [--repeat N] [--only TEXT] [--large]`` from the repository root.
Prints a table and writes ``benchmarks/results/intake_hostile.json``.

Each class of ``tests/intake/hostile_corpus.py`` (and each benign twin) is written to a file once and judged with
``tenure.intake.read_package`` under the corpus limits. The baseline, measured in the same run on the same file, is
``zipfile.ZipFile(path).infolist()``: what it costs just to list the archive, without any of the checks. Per class:
the outcome (the rejection code, or ``ACCEPTED``), the median time of ``--repeat`` runs and the peak traced memory
(``tracemalloc``, in one separate run, so tracing does not slow the timed runs) of both, and the ratios
tenure / baseline. ``--large`` adds one row: an archive whose directory really lists 4,000,000 entries, judged under
the default limits (no baseline: listing it with zipfile takes minutes and gigabytes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tenure.intake import IntakeConfig, read_package  # noqa: E402
from tenure.intake.errors import PackageRejectedError  # noqa: E402
from tests.intake.hostile_corpus import BENIGN, CORPUS, CORPUS_CONFIG, write_many_entries  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "intake_hostile.json"


def judge(path: Path, config: IntakeConfig) -> str:
    try:
        read_package(path, config)
    except PackageRejectedError as error:
        return str(error.code)
    except Exception as error:  # noqa: BLE001 - an unexpected failure is a result to report
        return f"raised {type(error).__name__}"
    return "ACCEPTED"


def baseline(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as zf:
            return f"{len(zf.infolist())} entries"
    except Exception as error:  # noqa: BLE001 - the baseline's own verdict
        return f"raised {type(error).__name__}"


def measure(action: Callable[[], str], repeat: int) -> tuple[str, float, int]:
    """(outcome, median seconds over ``repeat`` runs, peak traced bytes of one more run)."""
    times = []
    outcome = ""
    for _ in range(repeat):
        started = time.perf_counter()
        outcome = action()
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    try:
        action()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return outcome, statistics.median(times), peak


def bench_class(folder: Path, group: str, name: str, raw: bytes, repeat: int) -> dict[str, Any]:
    path = folder / "input.zip"
    path.write_bytes(raw)
    outcome, seconds, peak = measure(lambda: judge(path, CORPUS_CONFIG), repeat)
    base_outcome, base_seconds, base_peak = measure(lambda: baseline(path), repeat)
    return {
        "group": group,
        "class": name,
        "bytes": len(raw),
        "outcome": outcome,
        "tenure_us": round(seconds * 1e6, 1),
        "tenure_peak_kib": round(peak / 1024, 1),
        "baseline": base_outcome,
        "baseline_us": round(base_seconds * 1e6, 1),
        "baseline_peak_kib": round(base_peak / 1024, 1),
        "time_ratio": round(seconds / base_seconds, 2) if base_seconds else None,
        "memory_ratio": round(peak / base_peak, 2) if base_peak else None,
    }


def bench_large(folder: Path) -> dict[str, Any]:
    path = folder / "four-million.zip"
    size = write_many_entries(path)
    outcome, seconds, peak = measure(lambda: judge(path, IntakeConfig()), 1)
    path.unlink()
    return {
        "group": "large",
        "class": "directory-lists-4m",
        "bytes": size,
        "outcome": outcome,
        "tenure_us": round(seconds * 1e6, 1),
        "tenure_peak_kib": round(peak / 1024, 1),
        "baseline": None,
        "baseline_us": None,
        "baseline_peak_kib": None,
        "time_ratio": None,
        "memory_ratio": None,
    }


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'class':36} {'outcome':26} {'tenure us':>10} {'zipfile us':>10} {'time x':>7} "
        f"{'tenure KiB':>10} {'zipfile KiB':>11} {'mem x':>7}"
    )
    print(header)
    print("-" * len(header))
    group = None
    for row in rows:
        if row["group"] != group:
            group = row["group"]
            print(f"[{group}]")
        print(
            f"{row['class'][:36]:36} {row['outcome'][:26]:26} {_cell(row['tenure_us']):>10} "
            f"{_cell(row['baseline_us']):>10} {_cell(row['time_ratio']):>7} {_cell(row['tenure_peak_kib']):>10} "
            f"{_cell(row['baseline_peak_kib']):>11} {_cell(row['memory_ratio']):>7}"
        )
    timed = [r for r in rows if r["time_ratio"] is not None]
    if timed:
        print(
            f"median ratios over {len(timed)} classes: time {statistics.median(r['time_ratio'] for r in timed)}x, "
            f"memory {statistics.median(r['memory_ratio'] for r in timed if r['memory_ratio'] is not None)}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per class (median reported)")
    parser.add_argument("--only", default="", help="only classes whose name contains this text")
    parser.add_argument("--large", action="store_true", help="add the 4,000,000-entry directory (about 190 MB)")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="intake-hostile-bench-") as tmp:
        folder = Path(tmp)
        for group, members in (("hostile", CORPUS), ("benign", BENIGN)):
            for name, item in members.items():
                if args.only in name:
                    rows.append(bench_class(folder, group, name, item.build(), max(1, args.repeat)))
        if args.large:
            rows.append(bench_large(folder))
    print_table(rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "cpus": os.cpu_count(),
                "repeat": args.repeat,
                "limits": str(CORPUS_CONFIG.limits),
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
