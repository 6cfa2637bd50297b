"""Storage benchmarks for tenure: ``python benchmarks/run.py [--quick] [--only NAME]``.

Generates the seeded trees of ``trees.py``, runs the scenarios of
``storage_bench.py`` (tenure's CLI against ``tar | zstd`` and restic, in the
same run), prints the results table and writes it as JSON. See
benchmarks/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import storage_bench as sb  # noqa: E402
import trees  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
SPECS = {"mixed": trees.mixed_spec, "small": trees.small_spec}
FULL_SCALE, QUICK_SCALE = 1.0, 0.1
SMALL_FACTOR = 0.1  # the second tree size for the memory rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="trees about 10x smaller")
    parser.add_argument("--only", choices=sorted(SPECS), help="run one tree only")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="runs of each full backup and restore; the median is reported (default 3)",
    )
    parser.add_argument("--no-restic", action="store_true", help="skip the restic rows")
    parser.add_argument(
        "--no-encryption",
        action="store_true",
        help="skip the encrypted full checkpoint and restore (the cost-of-encryption rows)",
    )
    parser.add_argument("--workdir", help="scratch folder (default: a new temporary folder, removed afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--out", help="JSON output path (default benchmarks/results/storage[-quick][-NAME].json)")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- environment


def ensure_restic() -> str | None:
    """The restic binary; installed with apt-get when missing and running as root."""
    found = shutil.which("restic")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print("skip: restic is not installed (install it with `apt-get install restic`); restic rows omitted")
        return None
    print("restic not found; installing it with apt-get ...", flush=True)
    done = subprocess.run(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq restic",
        shell=True,
        capture_output=True,
        text=True,
    )
    found = shutil.which("restic")
    if done.returncode != 0 or not found:
        print(f"skip: installing restic failed (exit {done.returncode}); restic rows omitted")
        return None
    return found


def tool_version(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else ""


def git_revision() -> str:
    done = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def environment(restic: str | None) -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "tenure_revision": git_revision(),
        "tenure_cli": " ".join(sb.tenure_command()),
        "tar": tool_version(["tar", "--version"]),
        "zstd": tool_version(["zstd", "--version"]),
        "restic": tool_version([restic, "version"]) if restic else "not installed",
    }


# --------------------------------------------------------------------------- running


def bench_tree(
    name: str, scale: float, workdir: str, restic: str | None, repeat: int, encryption: bool = True
) -> dict[str, Any]:
    """Generate one tree (and its 1/10 twin), run every measurement, return its JSON section."""
    spec = SPECS[name](scale)
    started = time.perf_counter()
    tree = trees.generate(spec, os.path.join(workdir, name, "tree"))
    print(
        f"[{name}] generated {tree.file_count} files, {tree.total_bytes / 1e6:.1f} MB "
        f"in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    scenario = sb.run_scenario(tree, os.path.join(workdir, name), restic, repeat, encryption=encryption)
    small_label, small_rss, small_tree = rss_at_smaller_size(name, scale, workdir)
    rows = sb.rows_for(scenario, small_rss, small_label)
    sb.remove(os.path.join(workdir, name))
    return {
        "spec": {"files": tree.file_count, "bytes": tree.total_bytes, "scale": scale, "seed": spec.seed},
        "smaller_tree": {"files": small_tree.file_count, "bytes": small_tree.total_bytes},
        "change": scenario.facts.get("change"),
        "steps": {k: v.to_dict() for k, v in scenario.steps.items()},
        "repeats_seconds": scenario.samples,
        "smaller_tree_steps": {k: v.to_dict() for k, v in small_rss.items()},
        "facts": {k: v for k, v in scenario.facts.items() if k != "change"},
        "rows": [r.to_dict() for r in rows],
        "_rows": rows,
    }


def rss_at_smaller_size(name: str, scale: float, workdir: str) -> tuple[str, dict[str, sb.Measured], trees.Tree]:
    """Peak RSS of checkpoint and restore on the same kind of tree at 1/10 the size."""
    spec = SPECS[name](scale * SMALL_FACTOR)
    base = os.path.join(workdir, f"{name}-smaller")
    tree = trees.generate(spec, os.path.join(base, "tree"))
    print(f"[{name}] peak memory at 1/10 size ({tree.file_count} files, {tree.total_bytes / 1e6:.1f} MB)", flush=True)
    measured = sb.peak_rss_run(tree, base)
    for what, done in measured.items():
        state = "ok" if done.ok else f"FAILED {done.error()}"
        label = f"tenure {what} (1/10 size)"
        print(f"  {label:<35} {done.seconds:8.2f} s  {done.peak_rss_kib / 1024:7.1f} MiB  {state}", flush=True)
    sb.remove(base)
    return f"1/10 tree ({tree.file_count} files)", measured, tree


# --------------------------------------------------------------------------- output


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    return f"{value / 1e6:.2f} MB"


def fmt_ratio(row: sb.Row) -> str:
    ratio = row.ratio
    if ratio is None:
        return "-"
    close = row.aim is not None and abs(ratio - row.aim) < 0.005  # show the digit that decides met / not met
    if row.aim_label.endswith("%"):
        return f"{ratio * 100:.{2 if close else 1}f}%"
    return f"{ratio:.{3 if close else 2}f}×"


def fmt_met(row: sb.Row) -> str:
    if row.note:
        return "error" if "failed" in row.note or "differs" in row.note else "-"
    return {True: "met", False: "NOT met", None: "-"}[row.met]


def table_lines(rows: Sequence[sb.Row]) -> list[str]:
    header = ["tree", "measure", "tenure", "baseline", "vs", "ratio", "aim", "result"]
    body = [
        [
            r.tree,
            r.measure,
            fmt_value(r.tenure, r.unit),
            fmt_value(r.baseline, r.unit),
            r.baseline_label.replace("|", "\\|"),
            fmt_ratio(r),
            r.aim_label,
            fmt_met(r),
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(cells) for cells in body]
    return out + note_lines(rows)


def note_lines(rows: Sequence[sb.Row]) -> list[str]:
    """Each distinct note once, with the rows it applies to."""
    notes: dict[str, list[str]] = {}
    for r in rows:
        if r.note:
            notes.setdefault(r.note, []).append(f"{r.tree}: {r.measure}")
    return [f"note [{'; '.join(where)}]: {note}" for note, where in notes.items()]


def output_path(args: argparse.Namespace) -> str:
    if args.out:
        return str(args.out)
    suffix = ("-quick" if args.quick else "") + (f"-{args.only}" if args.only else "")
    return os.path.join(RESULTS, f"storage{suffix}.json")


def write_json(path: str, document: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    scale = QUICK_SCALE if args.quick else FULL_SCALE
    restic = None if args.no_restic else ensure_restic()
    workdir = args.workdir or tempfile.mkdtemp(prefix="tenure-bench-")
    os.makedirs(workdir, exist_ok=True)
    env = environment(restic)
    startup = sb.run_measured([*sb.tenure_command(), "--version"])
    print(
        f"tenure CLI start-up (`tenure --version`): {startup.seconds:.2f} s, included in every tenure time", flush=True
    )
    started = time.perf_counter()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    sections: dict[str, dict[str, Any]] = {}
    try:
        for name in [args.only] if args.only else list(SPECS):
            sections[name] = bench_tree(name, scale, workdir, restic, max(1, args.repeat), not args.no_encryption)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = [row for section in sections.values() for row in section.pop("_rows")]
    lines = table_lines(rows)
    print()
    print("\n".join(lines))
    document = {
        "mode": "quick" if args.quick else "full",
        "scale": scale,
        "repeat": max(1, args.repeat),
        "environment": env,
        "method": {
            "runner": "tenure CLI in a child process, fresh --data folder per tree",
            "cache": "sync, then every input read once before each timed step",
            "encryption": "off (--no-encryption)"
            if args.no_encryption
            else "full checkpoint and restore also run encrypted at rest, under a key file (no scrypt)",
            "peak_rss": sb.rss_method(),
        },
        "tenure_cli_startup_s": round(startup.seconds, 4),
        "elapsed_s": round(time.perf_counter() - started, 1),
        "load_average": {"start": load_at_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "table": lines,
        "trees": sections,
    }
    path = output_path(args)
    write_json(path, document)
    print(
        f"\nload average (1, 5, 15 min) at start {load_at_start}, at end {document['load_average']['end']}"
        " (other work on the machine adds noise)"
    )
    print(f"wrote {os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
