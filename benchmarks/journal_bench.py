"""A checkpoint after a small edit in a large folder: with the change journal, walking, and a bare walk.

``python -m benchmarks.journal_bench [--files 100000] [--edits 10] [--repeat 5]``

One folder of ``--files`` small files (the storage benchmark's ``small`` tree, ``benchmarks/trees.py``),
checked in once with a local index into a local object folder. Then ``--repeat`` rounds: ``--edits``
files get a few bytes overwritten in place (different files each round), and the same state is
checked in twice, from the same index:

* **journal**: :func:`build_tree` given the interval a :class:`ChangeJournal` of the folder saw
  (ADR 0028, ADR 0030) — it lists only the folders the journal names;
* **walk**: :func:`build_tree` without one (the incremental checkpoint every build did before):
  ``scandir`` and ``lstat`` of every entry, the index consulted for each file;
* **bare walk**: ``os.scandir`` recursively with an ``lstat`` of every entry and nothing else, the
  least any checkpoint that looks at the folder can cost.

Both builds run in this process (no CLI start-up in either) and must give the same tree: every path
with its kind, mode, mtime, size and link target (:func:`iter_tree`). Their roots may differ — a walk
and a journal build cut the re-read files into packs at different points, so the same content can sit
in different packs — and the table says whether they did. The medians
are reported, with journal / walk and journal / bare walk. ``take()`` of the journal is part of the
journal's time. Prints a table and writes ``benchmarks/results/journal.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import trees

from tenure.objects.local import LocalObjectStore
from tenure.snapshots import folders
from tenure.snapshots.build import JournalCursor, build_tree
from tenure.snapshots.journal import ChangeJournal
from tenure.snapshots.walk import iter_tree

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "journal.json")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Checkpoint after a small edit: change journal vs walk")
    parser.add_argument("--files", type=int, default=100_000, help="files in the folder (default 100000)")
    parser.add_argument("--edits", type=int, default=10, help="files edited per round (default 10)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5; medians reported)")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one, removed)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="where the JSON results go")
    return parser.parse_args(argv)


def bare_walk(root: str) -> int:
    seen = 0
    stack = [root]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                entry.stat(follow_symlinks=False)
                seen += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return seen


def edit(paths: list[str], count: int, rng: random.Random) -> None:
    for path in rng.sample(paths, count):
        with open(path, "r+b") as fh:
            fh.write(rng.randbytes(8))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="tenure-journal-bench-")
    os.makedirs(work, exist_ok=True)
    src, index = os.path.join(work, "src"), os.path.join(work, "index")
    spec = trees.small_spec(args.files / 100_000)
    print(f"generating {spec.files:,} files in {src} ...", flush=True)
    trees.generate(spec, src)
    paths = sorted(trees.walk_files(src))
    store = LocalObjectStore(os.path.join(work, "objects"))
    rng = random.Random(11)
    rows: dict[str, list[float]] = {"journal": [], "walk": [], "bare walk": []}
    listed: list[int] = []
    same_root: list[bool] = []
    try:
        with ChangeJournal(src) as journal:
            start = time.perf_counter()
            journal.start()
            started_s = time.perf_counter() - start
            cursor = JournalCursor(journal)
            start = time.perf_counter()
            first = build_tree(src, store, index_path=index, interval=cursor.take())
            print(
                f"full checkpoint {time.perf_counter() - start:.2f} s, {first.files:,} files; "
                f"journal started in {started_s:.2f} s with {journal.watches:,} watches",
                flush=True,
            )
            for n in range(args.repeat):
                edit(paths, args.edits, rng)
                saved = {p: p + ".saved" for p in (index, folders.cache_path(index))}
                for p, copy in saved.items():
                    shutil.copyfile(p, copy)
                start = time.perf_counter()
                walked = build_tree(src, store, index_path=index)
                rows["walk"].append(time.perf_counter() - start)
                for p, copy in saved.items():
                    shutil.copyfile(copy, p)
                start = time.perf_counter()
                journaled = build_tree(src, store, index_path=index, interval=cursor.take())
                rows["journal"].append(time.perf_counter() - start)
                start = time.perf_counter()
                bare_walk(src)
                rows["bare walk"].append(time.perf_counter() - start)
                if journaled.walked or list(iter_tree(journaled.root, store)) != list(iter_tree(walked.root, store)):
                    print(f"round {n}: the journal build walked or differs", file=sys.stderr)
                    return 1
                same_root.append(journaled.root == walked.root)
                listed.append(journaled.folders_listed)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    table = [
        ("checkpoint, change journal", med["journal"], "checkpoint, walking", med["walk"]),
        ("checkpoint, change journal", med["journal"], "bare walk (scandir + lstat)", med["bare walk"]),
        ("checkpoint, walking", med["walk"], "bare walk (scandir + lstat)", med["bare walk"]),
    ]
    print(
        f"\n{spec.files:,} files, {args.edits} edited per round, median of {args.repeat} rounds; "
        f"the journal build listed {statistics.median(listed):.0f} folders; same tree every round, "
        f"same root in {sum(same_root)} of {len(same_root)} (the rest: the re-read files packed differently)"
    )
    print(f"{'measure':<30} {'time':>9} {'vs':<30} {'baseline':>9} {'ratio':>7}")
    for name, t, base, b in table:
        print(f"{name:<30} {t:>8.3f}s {base:<30} {b:>8.3f}s {t / b:>6.2f}×")
    result: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "files": spec.files,
        "edits": args.edits,
        "repeat": args.repeat,
        "seconds": rows,
        "median": med,
        "folders_listed": listed,
        "same_root": same_root,
        "journal_start_s": started_s,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
