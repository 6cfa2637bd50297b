"""The CLI against a running pod (--url / TENURE_URL, --token / TENURE_TOKEN): the same commands and
error codes over HTTP, redirects followed with the token sent again to the owner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.pods import SRC, Cluster


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("TENURE_TOKEN", "TENURE_URL")}
    full.update(PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "tenure.cli.main", *args], capture_output=True, text=True, env=full, timeout=60, cwd=cwd
    )


def ok(*args: str, **kwargs: Any) -> Any:
    result = cli("--json", *args, **kwargs)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_project_session_and_snapshot_commands_over_the_api(tmp_path: Path) -> None:
    data = tmp_path / ".tenure"
    cluster = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    try:
        pod = cluster.start(".tenure", pull=False)
        url = ["--url", pod.url]
        created = ok(*url, "project", "create", "acme/web")
        assert created["status"] == "INIT"
        assert ok(*url, "project", "bring", "acme/web")["status"] == "RUNNING"
        shown = ok(*url, "project", "show", "acme/web")
        assert shown["running_here"] is True and shown["owner"]["live"] is True
        assert [p["name"] for p in ok(*url, "project", "list")] == ["web"]
        zoned = ok(*url, "project", "create", "acme/zoned", "--selector", "zone=b", "--score", "2")
        assert (zoned["placement_selector"], zoned["placement_score"]) == ({"zone": "b"}, 2.0)
        session = ok(*url, "session", "create", "acme/web")[0]
        assert ok(*url, "session", "bind", session["id"], "--connection", "c1")[0]["bound_connection_id"] == "c1"
        taken = cli(*url, "session", "bind", session["id"], "--connection", "c2")
        assert taken.returncode == 4 and "error[already-bound]" in taken.stderr, taken.stderr
        assert ok(*url, "project", "suspend", "acme/web")["status"] == "SUSPENDED"
        history = ok(*url, "project", "history", "acme/web", "--limit", "2")
        assert history["project"] == "acme/web" and [e["kind"] for e in history["events"]] == ["suspend", "bring"]
        snapshots = ok(*url, "snapshot", "list", "acme/web")
        assert len(snapshots) == 1 and snapshots[0]["state"] == "READY"
        assert ok(*url, "snapshot", "show", snapshots[0]["id"])["id"] == snapshots[0]["id"]
        missing = cli(*url, "project", "show", "acme/nope")
        assert missing.returncode == 3 and "error[project-not-found]" in missing.stderr
        assert "Traceback" not in missing.stderr
    finally:
        cluster.stop_all()


def test_a_token_is_needed_once_one_exists_and_an_unreachable_pod_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / ".tenure"
    cluster = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    try:
        pod = cluster.start(".tenure", pull=False)
        token = ok("--data", str(data), "token", "create", "--admin")
        secret = token.get("secret") or token.get("token")
        assert secret
        refused = cli("--url", pod.url, "project", "list")
        assert refused.returncode != 0 and "error[unauthorized]" in refused.stderr, refused.stderr
        assert ok("--url", pod.url, "project", "list", env={"TENURE_TOKEN": secret}) == []
    finally:
        cluster.stop_all()
    gone = cli("--url", pod.url, "project", "list")
    assert gone.returncode == 5 and "error[pod-unreachable]" in gone.stderr and len(gone.stderr.splitlines()) == 1


@pytest.mark.postgres
def test_a_redirect_to_the_owner_is_followed_with_the_token(tmp_path: Path, pg_url: str) -> None:
    cluster = Cluster(tmp_path, pg_url, f"file://{tmp_path}/objects")
    try:
        a = cluster.start("a", pull=False)
        b = cluster.start("b", pull=False)
        secret = ok("--db", pg_url, "--objects", f"file://{tmp_path}/objects", "token", "create", "--admin")
        secret = secret.get("secret") or secret.get("token")
        env = {"TENURE_TOKEN": secret}
        ok("--url", a.url, "project", "create", "acme/p", env=env)
        assert ok("--url", a.url, "project", "bring", "acme/p", env=env)["running_here"] is True
        # asked of b, which does not own it: the 307 to a is followed and the token sent again
        shown = ok("--url", b.url, "project", "bring", "acme/p", env=env)
        assert shown["status"] == "RUNNING" and shown["running_here"] is True
        pods = httpx.get(a.url + "/api/v1/pods", headers={"authorization": f"Bearer {secret}"}).json()["pods"]
        assert shown["owner"]["pod_id"] == next(p["id"] for p in pods if p.get("this"))
    finally:
        cluster.stop_all()


class _StandIn:
    """A stand-in HTTP server (a test double for a host outside the cluster, or a pod that redirects there):
    it records the Authorization header of every request and answers what ``answer`` says."""

    def __init__(self, answer: Any) -> None:
        import http.server
        import threading

        seen = self.seen = []  # type: list[tuple[str, str | None]]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
                seen.append((self.path, self.headers.get("Authorization")))
                status, headers, body = answer(self.path)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_token_follows_a_redirect_only_to_an_origin_the_cluster_vouches_for(tmp_path: Path) -> None:
    """A pod (here a stand-in) that redirects to a host no pod row names: the CLI stops with redirect-untrusted
    and the host receives nothing; named in TENURE_TRUSTED_ORIGINS, it gets the request with the token."""
    foreign = _StandIn(lambda path: (200, {"content-type": "application/json"}, b'{"name": "web"}'))

    def pod_answer(path: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/api/v1/pods":
            return (
                200,
                {"content-type": "application/json"},
                json.dumps({"pods": [{"endpoint": "http://127.0.0.1:9"}]}).encode(),
            )
        return 307, {"location": foreign.url + path}, b""

    pod = _StandIn(pod_answer)
    try:
        secret = ["--url", pod.url, "--token", "tnr_secret_admin_token"]
        refused = cli("--json", *secret, "project", "show", "acme/web")
        assert refused.returncode == 2, (refused.stdout, refused.stderr)
        assert json.loads(refused.stderr)["error"]["code"] == "redirect-untrusted"
        assert foreign.seen == [], "nothing reached the foreign host"
        assert ("/api/v1/projects/acme/web", "Bearer tnr_secret_admin_token") in pod.seen
        trusted = cli("--json", *secret, "project", "show", "acme/web", env={"TENURE_TRUSTED_ORIGINS": foreign.url})
        assert trusted.returncode == 0, trusted.stderr
        assert foreign.seen == [("/api/v1/projects/acme/web", "Bearer tnr_secret_admin_token")]
    finally:
        pod.close()
        foreign.close()
