"""Intake hostile-input benchmark: judging each class of the hostile corpus vs listing it with zipfile.

Run ``python -m benchmarks.intake_hostile [--repeat N] [--only TEXT] [--large]`` from the repository root.
Prints a table and writes ``benchmarks/results/intake_hostile.json``.

Each class of ``tests/integration/intake/hostile_corpus.py`` (and each benign twin) is written to a file once and
judged with ``tenure.intake.read_package`` under the corpus limits. The baseline, measured in the same run on the same
file, is ``zipfile.ZipFile(path).infolist()``: what it costs just to list the archive, without any of the checks.
Per class: the outcome (the rejection code, or ``ACCEPTED``), the median time of ``--repeat`` runs and the peak
traced memory (``tracemalloc``, in one separate run, so tracing does not slow the timed runs) of both, and the ratios
tenure / baseline. ``--large`` adds one row: an archive whose directory really lists 4,000,000 entries, judged under
the default limits (no baseline: listing it with zipfile takes minutes and gigabytes).

``--limits`` polls inputs at the default limits, each alone in a fresh intake and a fresh interpreter (after one
warm-up poll of a small package), and reports what that one poll cost: CPU seconds (user + system, so a loaded
machine does not inflate it) and the process's peak RSS. The budget is under 1 s and 100 MiB per input: 10,000
files; 10,000 files whose central headers carry 1 KiB names, extra fields and comments; 20,000 such headers
(refused); manifests of 1 MiB made of 500,000 zeros, of 350,000 empty objects, of 17,000 lists nested 30 deep,
and of 60,000 keys.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
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
from tenure.intake.pack import new_manifest  # noqa: E402
from tests.integration.intake.hostile_corpus import (  # noqa: E402
    BENIGN,
    CORPUS,
    CORPUS_CONFIG,
    Member,
    assemble,
    end_record,
    write_many_entries,
)

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


# --------------------------------------------------------------------------- at the limits

_MiB = 1024 * 1024
_LONG_EXTRA = struct.pack("<HH", 0xCAFE, 1020) + b"e" * 1020

_POLL_ONE = """
import json, resource, sys, time
from pathlib import Path
from tenure.intake import InboxProcessor, Workspace
from tenure.intake.pack import new_manifest, write_package
warm = Workspace(Path(sys.argv[2]))
write_package(warm.inbox / "warm.zip", new_manifest("warm", "warm"), {"a.txt": b"a"})
InboxProcessor(warm).poll()
base = resource.getrusage(resource.RUSAGE_SELF)
results = InboxProcessor(Workspace(Path(sys.argv[1]))).poll()
done = resource.getrusage(resource.RUSAGE_SELF)
cpu = done.ru_utime - base.ru_utime + done.ru_stime - base.ru_stime
print(json.dumps({"results": [[r.kind.value, r.code] for r in results], "cpu_s": round(cpu, 3),
                  "peak_mib": round(done.ru_maxrss / 1024, 1), "warm_mib": round(base.ru_maxrss / 1024, 1)}))
"""


def _manifest(metadata: Any) -> bytes:
    return json.dumps(new_manifest("case-limits", "pkg", metadata=metadata), separators=(",", ":")).encode()


def _files(count: int, long_headers: bool) -> bytes:
    members = [Member(b"manifest.json", _manifest({}))]
    for i in range(count):
        if long_headers:
            name = f"d{i // 100:03d}/{i:06d}".encode() + b"n" * 1013
            members.append(Member(name, b"", method=0, central={"extra": _LONG_EXTRA, "comment": b"c" * 1024}))
        else:
            members.append(Member(f"e/{i:05d}".encode(), b"", method=0))
    return assemble(members)


def _headers_only(count: int) -> bytes:
    """``count`` central headers with 1 KiB names, extra fields and comments, and no records: refused."""
    records = []
    for i in range(count):
        name = f"{i:06d}".encode() + b"n" * 1018
        records.append(Member(name, b"", method=0, central={"extra": _LONG_EXTRA, "comment": b"c" * 1024}))
    directory = b"".join(member.central_record(30) for member in records)
    return b"PK\x03\x04" + bytes(26) + directory + end_record(count=count, size=len(directory), offset=30)


def _fill(item: str, size: int = _MiB) -> bytes:
    """A manifest of exactly ``size`` bytes: its metadata a list of ``item`` repeated, padded with spaces."""
    head = _manifest({"a": []})
    count = (size - len(head)) // (len(item) + 1)
    raw = head.replace(b'"a":[]', b'"a":[' + ",".join([item] * count).encode() + b"]")
    return raw[:-1] + b" " * (size - len(raw)) + raw[-1:]


def _with_manifest(raw: bytes) -> bytes:
    return assemble([Member(b"manifest.json", raw), Member(b"input/report.txt", b"a report")])


LIMITS: dict[str, Callable[[], bytes]] = {
    "10000-files": lambda: _files(10_000, long_headers=False),
    "10000-files-long-headers": lambda: _files(10_000, long_headers=True),
    "20000-long-central-headers": lambda: _headers_only(20_000),
    "manifest-1mib-zeros": lambda: _with_manifest(_fill("0")),
    "manifest-1mib-empty-objects": lambda: _with_manifest(_fill("{}")),
    "manifest-1mib-lists-30-deep": lambda: _with_manifest(_fill("[" * 30 + "]" * 30)),
    "manifest-60000-keys": lambda: _with_manifest(_manifest({f"k{i}": i for i in range(60_000)})),
}


def bench_limits(folder: Path, only: str) -> list[dict[str, Any]]:
    rows = []
    for name in LIMITS:
        if only not in name:
            continue
        root, warm = folder / name / "intake", folder / name / "warm"
        # built in a child of its own: a child's peak RSS counts its parent's at the fork
        built = subprocess.run(
            [sys.executable, "-m", "benchmarks.intake_hostile", "--build", name, str(root)], env=_env(), cwd=ROOT
        )
        if built.returncode != 0:
            raise SystemExit(f"{name}: could not build the input")
        size = (root / "inbox" / f"{name}.zip").stat().st_size
        done = subprocess.run(
            [sys.executable, "-c", _POLL_ONE, str(root), str(warm)], capture_output=True, text=True, env=_env()
        )
        if done.returncode != 0:
            raise SystemExit(f"{name}: {done.stderr}")
        found = json.loads(done.stdout)
        [(kind, code)] = found.pop("results")
        rows.append({"class": name, "bytes": size, "outcome": code or kind, **found})
    return rows


def build_limit_input(name: str, root: Path) -> None:
    """Write the input ``name`` of :data:`LIMITS` into the inbox of a new intake at ``root``."""
    from tenure.intake import Workspace

    workspace = Workspace(root)
    (workspace.inbox / f"{name}.zip").write_bytes(LIMITS[name]())


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def print_limits(rows: list[dict[str, Any]]) -> None:
    print(f"{'input at the limits':30} {'bytes':>10} {'outcome':18} {'cpu s':>7} {'peak MiB':>9} {'warm MiB':>9}")
    for row in rows:
        print(
            f"{row['class']:30} {row['bytes']:>10} {row['outcome'][:18]:18} {row['cpu_s']:>7} "
            f"{row['peak_mib']:>9} {row['warm_mib']:>9}"
        )


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
    parser.add_argument(
        "--limits", action="store_true", help="only poll inputs at the default limits, each in a fresh interpreter"
    )
    parser.add_argument("--build", nargs=2, metavar=("NAME", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build_limit_input(args.build[0], Path(args.build[1]))
        return
    rows: list[dict[str, Any]] = []
    limits: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="intake-hostile-bench-") as tmp:
        folder = Path(tmp)
        if args.limits:
            limits = bench_limits(folder, args.only)
        else:
            for group, members in (("hostile", CORPUS), ("benign", BENIGN)):
                for name, item in members.items():
                    if args.only in name:
                        rows.append(bench_class(folder, group, name, item.build(), max(1, args.repeat)))
            if args.large:
                rows.append(bench_large(folder))
    if limits:
        print_limits(limits)
        path = RESULTS.with_name("intake_limits.json")
        path.write_text(
            json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(), "results": limits}, indent=2) + "\n"
        )
        print(f"wrote {path}")
        return
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
