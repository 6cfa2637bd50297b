"""Connections a hostile client cannot hoard (tenure.pod.connections): 300 connections that send their request
headers and never finish them, against a pod limited to 256 descriptors, leave /healthz answering at once and
the log nearly still; a connection slower than the header deadline is closed."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.pods import Cluster, Pod, wait_for

SLOW = 300


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    data = tmp_path / "pod"
    made = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    try:
        yield made
    finally:
        made.stop_all()


def _hoard(pod: Pod, count: int) -> list[socket.socket]:
    host, port = pod.url.removeprefix("http://").split(":")
    held = []
    for _ in range(count):
        try:
            s = socket.create_connection((host, int(port)), timeout=2)
            s.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode())  # never finished
        except OSError:
            continue  # the pod closed it already: that is the point
        held.append(s)
    return held


def test_300_slow_connections_against_256_descriptors_leave_healthz_answering(cluster: Cluster) -> None:
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) is missing")
    pod = cluster.start("pod", pull=False, prefix=("prlimit", "--nofile=256:256"))
    log_before = pod.log.stat().st_size if pod.log.exists() else 0
    held = _hoard(pod, SLOW)
    try:
        slowest = 0.0
        for _ in range(20):
            started = time.monotonic()
            with httpx.Client(timeout=5.0) as c:
                assert c.get(pod.url + "/healthz").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            held += _hoard(pod, 10)  # and more keep coming
        assert slowest < 1.0, f"/healthz took {slowest:.2f} s with {SLOW} slow connections"
    finally:
        for s in held:
            s.close()
    grown = pod.log.stat().st_size - log_before
    assert grown < 64 * 1024, f"the log grew by {grown} bytes"
    assert pod.proc.poll() is None


def test_a_connection_slower_than_the_header_deadline_is_closed(cluster: Cluster) -> None:
    pod = cluster.start("pod", "--header-timeout", "0.5", pull=False)
    (slow,) = _hoard(pod, 1)
    slow.settimeout(10)
    started = time.monotonic()
    try:
        assert slow.recv(1024) == b"", "closed without an answer"
    finally:
        slow.close()
    assert time.monotonic() - started < 5.0
    with httpx.Client(timeout=5.0) as c:
        assert c.get(pod.url + "/healthz").status_code == 200
    wait_for(lambda: "request headers too slow" in pod.output(), 10, "the closure logged")
