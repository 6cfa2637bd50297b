"""Durable writes: what ``?durable=true`` costs, and how well concurrent durable writers share checkpoints.

``python -m benchmarks.durable_bench [--writes 100] [--writers 50] [--rounds 4]``

One pod runtime in this process on the embedded default (SQLite and a local object folder, on the same
disk), its API through ``TestClient`` (in process: the HTTP stack without a socket). A project holds 200
files of 4 KiB, checkpointed once, so each checkpoint is the incremental one a running project takes.

* **A 4 KiB PUT**, p50 and p99 over ``--writes`` each, alternated: a plain ``PUT`` (acknowledged, not yet
  saved), the baseline of a plain ``PUT`` followed by an fsync of the written file by the client (what a
  careful user of a plain file system would do), and a durable ``PUT`` (answered once a published
  checkpoint holds it).
* **Group commit**: ``--writers`` threads each make one durable 4 KiB write at the same moment, ``--rounds``
  times: checkpoints per second, and writes per checkpoint (the group-commit factor) — against the
  baseline of one checkpoint per write (factor 1).

Prints two tables and writes every sample to ``benchmarks/results/durable.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import projects_bench as pb

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "durable.json")
P = "/api/v1/projects/acme/web"
BODY = os.urandom(4096)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=100, help="timed PUTs of each kind")
    ap.add_argument("--writers", type=int, default=50, help="concurrent durable writers")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of concurrent durable writers")
    ap.add_argument("--out", default=DEFAULT_OUT)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from fastapi.testclient import TestClient

    from tenure.api.app import create_app
    from tenure.objects.local import LocalObjectStore
    from tenure.pod.runtime import PodRuntime, ServeConfig
    from tenure.store import open_store

    args = parse_args(argv)
    work = tempfile.mkdtemp(prefix="tenure-durable-bench-")
    store = open_store(f"sqlite:///{work}/tenure.db")
    pod = PodRuntime(ServeConfig(data_dir=f"{work}/data", self_pull=False), store, LocalObjectStore(f"{work}/objs"))
    pod.start()
    try:
        pod.projects.create("acme", "web")
        project = pod.bring("acme", "web")
        folder = pod.workspaces.folder_for(project.id)
        for i in range(200):
            with open(os.path.join(folder, f"base-{i}.bin"), "wb") as fh:
                fh.write(os.urandom(4096))
        pod.checkpoint("acme", "web")
        with TestClient(create_app(pod)) as client:
            latency = _latency(client, folder, args.writes)
            group = _group(pod, client, args.writers, args.rounds)
    finally:
        pod.stop()
        store.close()
        shutil.rmtree(work, ignore_errors=True)
    first, second = _latency_table(latency), _group_table(group, args.writers)
    print("\n" + first + "\n\n" + second)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"git": pb.git_rev(), "latency": latency, "group": group, "tables": [first, second]}, fh, indent=1)
    return 0


def _latency(client: Any, folder: str, writes: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"plain": [], "plain+fsync": [], "durable": []}

    def plain(i: int) -> None:
        assert client.put(f"{P}/files/p{i}.bin", content=BODY).status_code in (200, 201)

    def plain_fsync(i: int) -> None:
        plain(i)
        fd = os.open(os.path.join(folder, f"p{i}.bin"), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def durable(i: int) -> None:
        r = client.put(f"{P}/files/d{i}.bin?durable=true", content=BODY)
        assert r.status_code in (200, 201) and r.json()["snapshot"], r.text

    kinds = (("plain", plain), ("plain+fsync", plain_fsync), ("durable", durable))
    for i in range(writes + 3):
        for name, run in kinds if i % 2 == 0 else tuple(reversed(kinds)):
            started = time.perf_counter()
            run(i)
            if i >= 3:
                samples[name].append(time.perf_counter() - started)
    return samples


def _group(pod: Any, client: Any, writers: int, rounds: int) -> list[dict[str, float]]:
    results = []
    commit = pod.commits.of("acme", "web")
    for r in range(rounds):
        before_c, before_w = commit.checkpoints, commit.writers
        barrier = threading.Barrier(writers + 1)

        def write(i: int, r: int = r, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            resp = client.put(f"{P}/files/g{r}-{i}.bin?durable=true", content=BODY)
            assert resp.status_code in (200, 201), resp.text

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        barrier.wait()
        started = time.perf_counter()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
        checkpoints, covered = commit.checkpoints - before_c, commit.writers - before_w
        results.append({"seconds": seconds, "checkpoints": checkpoints, "writes": covered})
        pb.log(f"round {r}: {covered} durable writes in {checkpoints} checkpoints, {seconds:.2f} s")
    return results


def _render(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join(lines)


def _latency_table(samples: dict[str, list[float]]) -> str:
    base50, base99 = pb.pct(samples["plain"], 0.5), pb.pct(samples["plain"], 0.99)
    rows = []
    for name, label in (
        ("plain", "plain PUT (acknowledged, not saved)"),
        ("plain+fsync", "plain PUT + client fsync of the file"),
        ("durable", "durable PUT (in a published checkpoint)"),
    ):
        p50, p99 = pb.pct(samples[name], 0.5), pb.pct(samples[name], 0.99)
        rows.append([label, str(len(samples[name])), f"{p50 * 1e3:.1f} ms", f"{p99 * 1e3:.1f} ms"])
        rows[-1] += [f"{p50 / base50:.2f}×", f"{p99 / base99:.2f}×"]
    return _render(["4 KiB write", "n", "p50", "p99", "p50 vs plain", "p99 vs plain"], rows)


def _group_table(group: list[dict[str, float]], writers: int) -> str:
    writes = sum(g["writes"] for g in group)
    checkpoints = sum(g["checkpoints"] for g in group)
    seconds = sum(g["seconds"] for g in group)
    rows = [
        [
            f"{writers} concurrent durable writers × {len(group)} rounds",
            f"{checkpoints / seconds:.1f}/s",
            f"{writes / checkpoints:.1f}",
            "1.0 (one checkpoint a write)",
            f"{writes / checkpoints:.1f}×",
        ]
    ]
    return _render(["group commit", "checkpoints", "writes per checkpoint", "baseline", "factor"], rows)


if __name__ == "__main__":
    raise SystemExit(main())
