"""What one bring costs in store work: transactions, statements and milliseconds, over HTTP and in process.

``python -m benchmarks.bring_cost --src SRC [--brings 20] [--store sqlite|URL]`` measures the tenure source
tree at ``SRC`` (its ``src`` folder goes first on ``sys.path``) and prints one JSON document; the serve
benchmark (``benchmarks/serve_bench.py``, "Bring cost") runs it on this tree and on an earlier release
extracted with ``git archive``, in the same run, so the two columns are comparable.

Counted by wrapping the store's driver classes in this process (``transaction`` / ``sql_transaction`` of
both connectors and the three statement primitives of every transaction), so the count is the same for
any release whatever its own instrumentation: the control-plane store and the host-local mount store
(its own SQLite file) are told apart by the connector's path. Each case is a bring of a suspended project
with a head of 10 small files (claim, RECOVERING, restore, RUNNING), preceded by an untimed suspend; the
fresh case is the first bring of a project with no head. The pod's beat and master do not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="a tenure source tree (its src/ is imported)")
    ap.add_argument("--brings", type=int, default=20, help="brings of each kind (after 3 untimed)")
    return ap.parse_args(argv)


class Counter:
    """Transactions and statements per store, keyed ``control`` (tenure.db) and ``mounts`` (mounts.db)."""

    def __init__(self) -> None:
        self.tx = {"control": 0, "mounts": 0}
        self.statements = {"control": 0, "mounts": 0}

    def snapshot(self) -> dict[str, int]:
        return {
            "control_tx": self.tx["control"],
            "mounts_tx": self.tx["mounts"],
            "control_statements": self.statements["control"],
            "mounts_statements": self.statements["mounts"],
        }


def _which(connector: Any) -> str:
    path = str(getattr(connector, "path", "") or getattr(connector, "_path", "") or "")
    return "mounts" if path.endswith("mounts.db") else "control"


def install(counter: Counter) -> None:
    """Wrap the driver classes of the tenure now on ``sys.path`` (any release since the named-query layer)."""
    from tenure.store import sqlite

    def counting_tx(original: Callable[..., AbstractContextManager[Any]]) -> Callable[..., Any]:
        @contextmanager
        def entered(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            which = _which(self)
            counter.tx[which] += 1
            with original(self, *args, **kwargs) as tx:
                tx._bench_which = which
                yield tx

        return entered

    def counting_statement(original: Callable[..., Any]) -> Callable[..., Any]:
        def sent(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.statements[getattr(self, "_bench_which", "control")] += 1
            return original(self, *args, **kwargs)

        return sent

    for name in ("transaction", "sql_transaction"):
        setattr(sqlite.SqliteConnector, name, counting_tx(getattr(sqlite.SqliteConnector, name)))
    for name in ("_rows", "_rowcount", "_many"):
        setattr(sqlite.SqliteTx, name, counting_statement(getattr(sqlite.SqliteTx, name)))


def _pod_classes() -> tuple[Any, Any, Any]:
    try:
        from tenure.api.app import create_app
        from tenure.pod.runtime import PodRuntime, ServeConfig
    except ImportError:  # a release before the pod package
        from tenure.serve.api import create_app  # type: ignore[no-redef]
        from tenure.serve.node import Node as PodRuntime  # type: ignore[no-redef]
        from tenure.serve.node import ServeConfig  # type: ignore[no-redef]
    return PodRuntime, ServeConfig, create_app


FILES = {f"src/f{i}.txt": bytes([65 + i]) * (1024 * (1 + i % 8)) for i in range(10)}


def measure(brings: int) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from tenure.objects.local import LocalObjectStore
    from tenure.store import open_store

    counter = Counter()
    install(counter)
    PodRuntime, ServeConfig, create_app = _pod_classes()
    work = tempfile.mkdtemp(prefix="tenure-bring-cost-")
    store = open_store(f"sqlite:///{work}/tenure.db")
    config = ServeConfig(data_dir=f"{work}/data", self_pull=False, master=False)
    pod = PodRuntime(config, store, LocalObjectStore(f"{work}/objects"))
    pod.start()
    results: dict[str, Any] = {}
    try:
        with TestClient(create_app(pod), follow_redirects=False) as client:
            base = "/api/v1/projects/acme/"

            def http_bring(name: str) -> None:
                r = client.post(base + name + "/bring")
                assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text

            def in_process(name: str) -> None:
                assert pod.bring("acme", name).status.value == "RUNNING"

            for kind, bring in (("http", http_bring), ("in_process", in_process)):
                samples: list[dict[str, Any]] = []
                for i in range(brings + 3):
                    name = f"{kind}-{i}"
                    pod.projects.create("acme", name)
                    before, started = counter.snapshot(), time.perf_counter()
                    bring(name)
                    fresh = _delta(counter, before, started)
                    folder = pod.workspaces.folder_for(pod.projects.get("acme", name).id)
                    for path, data in FILES.items():
                        os.makedirs(os.path.dirname(os.path.join(folder, path)), exist_ok=True)
                        with open(os.path.join(folder, path), "wb") as fh:
                            fh.write(data)
                    pod.suspend("acme", name)
                    before, started = counter.snapshot(), time.perf_counter()
                    bring(name)
                    again = _delta(counter, before, started)
                    if i >= 3:
                        samples.append({"fresh": fresh, "with_head": again})
                results[kind] = samples
    finally:
        pod.stop()
        store.close()
    return results


def _delta(counter: Counter, before: dict[str, int], started: float) -> dict[str, Any]:
    now = counter.snapshot()
    out: dict[str, Any] = {k: now[k] - before[k] for k in now}
    out["ms"] = (time.perf_counter() - started) * 1e3
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.abspath(args.src), "src"))
    for name in [m for m in sys.modules if m == "tenure" or m.startswith("tenure.")]:
        del sys.modules[name]
    json.dump(measure(args.brings), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
