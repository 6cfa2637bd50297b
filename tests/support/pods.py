"""Real `tenure serve` processes for the tests: a cluster of pods, each a child process with its own data
folder and port, and what a test asks of them over HTTP and through the store."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tenure.projects.ownership import Ownership
from tenure.projects.store import ProjectStore
from tenure.store import Store

SRC = str(Path(__file__).resolve().parents[2] / "src")
BEAT = 0.1
TTL = 1.5
LIVENESS = 0.6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy (another process's state), or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Pod:
    proc: subprocess.Popen[bytes]
    url: str
    data: str
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10.0, follow_redirects=False)

    def pod_id(self) -> str:
        with self.client() as c:
            return next(p["id"] for p in c.get("/api/v1/pods").json()["pods"] if p.get("this"))

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Cluster:
    def __init__(self, tmp: Path, db: str, objects: str) -> None:
        self.tmp, self.db, self.objects = tmp, db, objects
        self.pods: list[Pod] = []

    def serve_command(self, data: str, port: int, *extra: str) -> list[str]:
        """``tenure serve`` on this cluster's store and objects, with its own data folder and port."""
        return [
            sys.executable,
            "-m",
            "tenure.cli.main",
            "--data",
            data,
            "--db",
            self.db,
            "--objects",
            self.objects,
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--beat",
            str(BEAT),
            "--lease-ttl",
            str(TTL),
            *extra,
        ]

    def start(self, name: str, *extra: str, pull: bool = True, prefix: tuple[str, ...] = ()) -> Pod:
        """A pod named ``name``, ready; ``prefix`` goes before its command (one that ends by exec-ing it, so the
        process started is the pod)."""
        port = free_port()
        data = str(self.tmp / name)
        log = self.tmp / f"{name}.log"
        args = self.serve_command(
            data,
            port,
            "--liveness-ttl",
            str(LIVENESS),
            "--log-format",
            "json",
            *(["--pull-every", "0.2"] if pull else ["--no-self-pull"]),
            *extra,
        )
        env = dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1")
        with open(log, "wb") as out:
            proc = subprocess.Popen([*prefix, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        pod = Pod(proc, f"http://127.0.0.1:{port}", data, log)
        self.pods.append(pod)

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"pod {name} exited {proc.returncode}:\n{pod.output()}")
            try:
                return httpx.get(pod.url + "/readyz", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, 30, f"pod {name} ready")
        return pod

    def stop_all(self) -> None:
        for pod in self.pods:
            if pod.proc.poll() is None:
                try:
                    os.kill(pod.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                pod.proc.kill()
                pod.proc.wait(10)


def owner_of(store: Store, tenant: str, name: str) -> tuple[str | None, bool]:
    project = ProjectStore(store).get(tenant, name)
    owner = Ownership(store).owner(project.id, TTL)
    return owner.pod_id, owner.live


def create(pod: Pod, name: str, lifecycle_type: str = "PERMANENT") -> None:
    with pod.client() as c:
        r = c.post("/api/v1/projects", json={"tenant": "acme", "name": name, "lifecycle_type": lifecycle_type})
        assert r.status_code == 201, r.text
