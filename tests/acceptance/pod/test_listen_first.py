"""``tenure serve`` binds its listen address before anything else: a taken port is one
``listen-address-in-use`` line and the configuration exit code, and the pod never registered, reconciled,
claimed or restored anything (before, it did all of that, then died with uvicorn's raw ``Errno 98``).

Real ``tenure serve`` processes, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tenure.errors import ConfigurationError, exit_code
from tenure.projects import LifecycleType, ProjectStore
from tenure.projects.ownership import Ownership
from tenure.projects.pods import PodRegistry
from tenure.store import Store, open_store
from tests.support.pods import SRC, Cluster, wait_for

#: the exit code of the configuration family (docs/errors.md, tenure.errors.FAMILIES)
CONFIGURATION_EXIT = exit_code(ConfigurationError("x"))


@pytest.fixture
def opened(store_url: str) -> Iterator[Store]:
    store = open_store(store_url)
    yield store
    store.close()


@pytest.fixture(params=["listening", "bound"])
def held_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A loopback port a socket of this test holds: listening on it, or only bound to it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if request.param == "listening":
            sock.listen()
        yield int(sock.getsockname()[1])


def run_serve(cluster: Cluster, data: Path, port: int) -> subprocess.CompletedProcess[str]:
    """``tenure serve`` on ``port`` with a boot self-pull: what it claims, it claims at start-up."""
    args = cluster.serve_command(str(data), port, "--liveness-ttl", "0.6")
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


def test_a_taken_port_is_one_error_line_and_the_configuration_exit_code_before_anything_is_claimed(
    tmp_path: Path, store_url: str, opened: Store, held_port: int
) -> None:
    projects = ProjectStore(opened)
    for i in range(3):  # eligible for the boot self-pull
        projects.create("acme", f"p{i}", lifecycle_type=LifecycleType.PERMANENT)
    cluster = Cluster(tmp_path, store_url, f"file://{tmp_path}/objects")
    done = run_serve(cluster, tmp_path / "pod", held_port)
    assert done.returncode == CONFIGURATION_EXIT == 2, (done.stdout, done.stderr)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert re.fullmatch(rf"error\[listen-address-in-use\]: --listen 127\.0\.0\.1:{held_port} is in use: .+", lines[0])
    assert "Traceback" not in done.stderr and "Errno" not in lines[0]
    assert PodRegistry(opened).list() == [], "no pod row registered"
    own = Ownership(opened)
    for project in projects.list():
        assert own.owner(project.id, 3600.0).pod_id is None, f"{project.ref} was claimed"
    assert not (tmp_path / "pod" / "pod.lock").exists(), "the data folder was not even locked"


def test_a_taken_port_in_json_mode_is_the_error_document(tmp_path: Path, held_port: int) -> None:
    data = tmp_path / "pod"
    cluster = Cluster(tmp_path, f"sqlite:///{tmp_path}/tenure.db", f"file://{tmp_path}/objects")
    args = cluster.serve_command(str(data), held_port)
    args.insert(args.index("serve"), "--json")
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == CONFIGURATION_EXIT, (done.stdout, done.stderr)
    error = json.loads(done.stderr)["error"]
    assert error["code"] == "listen-address-in-use" and error["context"] == {"listen": f"127.0.0.1:{held_port}"}


def test_port_zero_serves_on_the_port_the_system_chose_and_registers_it(tmp_path: Path) -> None:
    """Bound first, the pod knows its real port before it registers: its endpoint and its announcement name it."""
    data = tmp_path / "pod"
    cluster = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    args = cluster.serve_command(str(data), 0, "--no-self-pull")
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1")
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        found = wait_for(
            lambda: re.search(r"API at (http://127\.0\.0\.1:(\d+))", log.read_text(errors="replace")), 30, "announce"
        )
        url, port = found.group(1), int(found.group(2))
        assert port != 0
        assert httpx.get(url + "/readyz", timeout=5).status_code == 200
        pods = httpx.get(url + "/api/v1/pods", timeout=5).json()["pods"]
        assert [p["endpoint"] for p in pods if p["this"]] == [url]
    finally:
        proc.kill()
        proc.wait(10)
