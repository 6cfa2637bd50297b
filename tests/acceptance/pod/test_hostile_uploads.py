"""Uploads a hostile client stalls cost the pod one chunk each, not the file: a file upload is streamed to a
staged file under the data folder (outside every workspace folder) and moved into place once complete; a
client that goes away leaves nothing behind."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pods import Cluster, Pod, wait_for

T = "acme"
MIB = 1 << 20
STALLED = 8
SENT = 16 * MIB  # each stalled upload sends this much of its 64 MiB, then waits


def rss(pod: Pod) -> int:
    for line in Path(f"/proc/{pod.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[Pod]:
    data = tmp_path / "pod"
    cluster = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    try:
        yield cluster.start("pod", pull=False)
    finally:
        cluster.stop_all()


def test_stalled_uploads_hold_no_file_in_memory_and_leave_nothing_when_dropped(pod: Pod, tmp_path: Path) -> None:
    with pod.client() as c:
        assert c.post("/api/v1/projects", json={"tenant": T, "name": "web"}).status_code == 201
        assert c.post(f"/api/v1/projects/{T}/web/bring").status_code == 200
        assert c.put(f"/api/v1/projects/{T}/web/files/warm.txt", content=b"warm").status_code == 201
    host, port = pod.url.removeprefix("http://").split(":")
    before = rss(pod)
    conns = []
    try:
        for i in range(STALLED):
            s = socket.create_connection((host, int(port)))
            s.sendall(
                f"PUT /api/v1/projects/{T}/web/files/big{i}.bin HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Length: {64 * MIB}\r\n\r\n".encode()
            )
            s.sendall(b"z" * SENT)
            conns.append(s)
        uploads = tmp_path / "pod" / "uploads"
        wait_for(
            lambda: uploads.is_dir() and sum(f.stat().st_size for f in uploads.iterdir()) >= STALLED * SENT * 0.9,
            30,
            "the stalled uploads staged on disk",
        )
        grown = rss(pod) - before
        # buffered whole, the bodies alone would be 8 × 16 MiB = 128 MiB
        assert grown < 48 * MIB, f"pod memory grew by {grown / MIB:.0f} MiB for {STALLED} stalled uploads"
        workspace = next((tmp_path / "pod" / "workspaces").iterdir())
        assert not list(workspace.glob("big*")), "nothing of an incomplete upload is in the workspace folder"
    finally:
        for s in conns:
            s.close()
    wait_for(lambda: not any((tmp_path / "pod" / "uploads").iterdir()), 30, "dropped uploads removed")
    wait_for(lambda: pod.output().count("client went away") == STALLED, 10, "each dropped upload logged")
    assert "Traceback" not in pod.output(), "an abandoned upload is one warning line, not a traceback"
    with pod.client() as c:
        assert c.get("/healthz").status_code == 200
        assert c.get(f"/api/v1/projects/{T}/web/files/warm.txt").content == b"warm"
