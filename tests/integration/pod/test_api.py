"""The pod's HTTP API (docs/api.md) on a real node and a real store: projects, files, snapshots, sessions,
auth and tenants, redirects (P-50), 503 with Retry-After (P-26), 409 already-bound (P-56), probes, metrics."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tenure.api import app as api_module
from tenure.api.app import create_app
from tenure.errors import TenureError
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.pod.tokens import TokenStore
from tenure.projects import ProjectStore
from tenure.store import Store
from tests.support.runtime import stop_all

T = "acme"
P = f"/api/v1/projects/{T}/web"


@pytest.fixture
def make(store: Store, tmp_path: Path) -> Iterator[Callable[..., PodRuntime]]:
    made: list[PodRuntime] = []

    def build(name: str = "a", listen: str = "127.0.0.1:8470", **options: object) -> PodRuntime:
        settings: dict[str, object] = {"self_pull": False, "lease_ttl": 60.0}
        settings.update(options)
        config = ServeConfig(data_dir=str(tmp_path / name), listen=listen, **settings)  # type: ignore[arg-type]
        node = PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")))
        made.append(node)
        return node

    yield build
    stop_all(made)


@pytest.fixture
def node(make: Callable[..., PodRuntime]) -> PodRuntime:
    started = make()
    started.start()
    return started


def is_problem(response: object, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"].startswith("application/problem+json")  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) >= {"type", "title", "status", "detail", "code", "hint", "context"}
    assert body["status"] == status and body["code"] == code
    assert body["type"] == f"https://tenure.dev/errors/{code}"
    return body  # type: ignore[no-any-return]


def create(client: TestClient, name: str = "web", tenant: str = T, **headers: str) -> None:
    r = client.post("/api/v1/projects", json={"tenant": tenant, "name": name}, headers=headers)
    assert r.status_code == 201, r.text


# ---------------------------------------------------------------------- the project's life over HTTP


def test_create_bring_files_checkpoint_suspend_bring_keeps_files(client: TestClient, node: PodRuntime) -> None:
    create(client)
    assert [p["name"] for p in client.get("/api/v1/projects").json()["projects"]] == ["web"]
    shown = client.get(P).json()
    assert shown["status"] == "INIT" and shown["owner"]["pod_id"] is None and shown["generation"] == 0

    brought = client.post(f"{P}/bring")
    assert brought.status_code == 200, brought.text
    assert brought.json()["status"] == "RUNNING" and brought.json()["owner"]["pod_id"] == node.pod.pod_id
    assert brought.json()["owner"]["live"] is True

    assert client.put(f"{P}/files/notes/a.txt", content=b"hello").status_code == 201
    assert client.put(f"{P}/files/notes/a.txt", content=b"hello again").status_code == 200
    assert client.get(f"{P}/files/notes/a.txt").content == b"hello again"
    listed = client.get(f"{P}/files", params={"path": "notes"}).json()["entries"]
    assert [(e["name"], e["type"], e["size"]) for e in listed] == [("a.txt", "file", 11)]
    assert client.put(f"{P}/files/gone.txt", content=b"x").status_code == 201
    assert client.delete(f"{P}/files/gone.txt").status_code == 204
    is_problem(client.get(f"{P}/files/gone.txt"), 404, "file-not-found")

    checkpoint = client.post(f"{P}/checkpoint")
    assert checkpoint.status_code == 200, checkpoint.text
    snapshot_id = checkpoint.json()["snapshot"]["id"]
    assert client.post(f"{P}/suspend").json()["status"] == "SUSPENDED"
    assert client.post(f"{P}/suspend").json()["status"] == "SUSPENDED", "suspend is idempotent"

    assert client.post(f"{P}/bring").json()["status"] == "RUNNING"
    assert client.get(f"{P}/files/notes/a.txt").content == b"hello again"

    snapshots = client.get(f"{P}/snapshots").json()["snapshots"]
    assert snapshot_id in [s["id"] for s in snapshots] and sum(s["head"] for s in snapshots) == 1
    assert client.get(f"/api/v1/snapshots/{snapshot_id}").json()["state"] == "READY"
    verified = client.post(f"/api/v1/snapshots/{snapshot_id}/verify")
    assert verified.status_code == 200 and verified.json()["ok"] is True


def test_type_placement_sessions_and_close(client: TestClient) -> None:
    create(client)
    assert client.put(f"{P}/type", json={"lifecycle_type": "PERMANENT"}).json()["lifecycle_type"] == "PERMANENT"
    placed = client.put(f"{P}/placement", json={"selector": {"zone": "eu"}, "score": 2.5}).json()
    assert placed["placement_selector"] == {"zone": "eu"} and placed["placement_score"] == 2.5
    is_problem(client.put(f"{P}/placement", json={"selector": {"bad key": "x"}}), 400, "invalid-selector")
    is_problem(client.post(f"{P}/bring"), 503, "project-unavailable")  # no label zone=eu on this pod
    assert client.put(f"{P}/placement", json={"selector": {}, "score": 1}).status_code == 200
    session = client.post(f"{P}/sessions").json()
    assert [s["id"] for s in client.get(f"{P}/sessions").json()["sessions"]] == [session["id"]]
    closed = client.post(f"{P}/close")
    assert closed.status_code == 200 and closed.json()["status"] == "CLOSED"
    is_problem(client.post(f"{P}/bring"), 409, "project-closed")


def test_p92_sessions_outlive_a_suspend_and_workspace_requests_fail_until_an_explicit_bring(
    client: TestClient, node: PodRuntime
) -> None:
    """P-92: session records stay while the project is SUSPENDED, and an operation that needs the
    workspace fails (409 ``project-suspended``) instead of silently undoing the suspend."""
    create(client)
    assert client.post(f"{P}/bring").status_code == 200
    assert client.put(f"{P}/files/a.txt", content=b"kept").status_code == 201
    session = client.post(f"{P}/sessions").json()["id"]
    assert client.post(f"{P}/suspend").json()["status"] == "SUSPENDED"

    assert [s["id"] for s in client.get(f"{P}/sessions").json()["sessions"]] == [session]
    assert client.post(f"{P}/sessions").status_code == 201, "a session record needs no workspace"
    is_problem(client.get(f"{P}/files/a.txt"), 409, "project-suspended")
    is_problem(client.get(f"{P}/files"), 409, "project-suspended")
    is_problem(client.put(f"{P}/files/b.txt", content=b"x"), 409, "project-suspended")
    is_problem(client.delete(f"{P}/files/a.txt"), 409, "project-suspended")
    is_problem(client.post(f"{P}/checkpoint"), 409, "project-suspended")
    is_problem(client.post(f"/api/v1/sessions/{session}/bind", json={"connection_id": "c1"}), 409, "project-suspended")
    assert client.get(P).json()["status"] == "SUSPENDED", "no request above brought it back"
    assert node.registry.ids() == set()

    assert client.post(f"{P}/bring").json()["status"] == "RUNNING"
    assert client.get(f"{P}/files/a.txt").content == b"kept"
    assert client.post(f"/api/v1/sessions/{session}/bind", json={"connection_id": "c1"}).status_code == 200


def test_binding_a_session_bound_to_another_connection_is_409(client: TestClient, node: PodRuntime) -> None:
    create(client)
    session = client.post(f"{P}/sessions").json()["id"]
    bound = client.post(f"/api/v1/sessions/{session}/bind", json={"connection_id": "conn-1"})
    assert bound.status_code == 200, bound.text
    assert bound.json()["bound_connection_id"] == "conn-1" and bound.json()["bound_pod_id"] == node.pod.pod_id
    body = is_problem(
        client.post(f"/api/v1/sessions/{session}/bind", json={"connection_id": "conn-2"}), 409, "already-bound"
    )
    assert body["context"]["connection"] == "conn-1"
    is_problem(client.post("/api/v1/sessions/c-nope/bind", json={"connection_id": "x"}), 404, "session-not-found")


def test_a_client_releases_its_own_binding_and_only_its_own(client: TestClient, node: PodRuntime) -> None:
    """Unbind: the connection a session is bound to releases it (idempotently), another connection cannot, and
    once released another connection may bind it."""
    create(client)
    session = client.post(f"{P}/sessions").json()["id"]
    assert client.post(f"/api/v1/sessions/{session}/bind", json={"connection_id": "conn-1"}).status_code == 200
    body = is_problem(
        client.post(f"/api/v1/sessions/{session}/unbind", json={"connection_id": "conn-2"}), 409, "already-bound"
    )
    assert body["context"]["connection"] == "conn-1"
    released = client.post(f"/api/v1/sessions/{session}/unbind", json={"connection_id": "conn-1"})
    assert released.status_code == 200, released.text
    assert released.json()["bound_connection_id"] is None and released.json()["bound_pod_id"] is None
    again = client.post(f"/api/v1/sessions/{session}/unbind", json={"connection_id": "conn-1"})
    assert again.status_code == 200 and again.json()["bound_connection_id"] is None, "idempotent"
    rebound = client.post(f"/api/v1/sessions/{session}/bind", json={"connection_id": "conn-2"})
    assert rebound.status_code == 200 and rebound.json()["bound_connection_id"] == "conn-2"
    is_problem(client.post("/api/v1/sessions/c-nope/unbind", json={"connection_id": "x"}), 404, "session-not-found")


# ---------------------------------------------------------------------- paths


def test_paths_that_escape_the_workspace_folder_are_refused(
    client: TestClient, node: PodRuntime, tmp_path: Path
) -> None:
    create(client)
    client.post(f"{P}/bring")
    folder = Path(node.workspaces.folder_for(node.projects.get(T, "web").id))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("do not read")
    os.symlink(outside, folder / "out")
    os.symlink(outside / "secret", folder / "secret-link")

    refused = [
        client.get(f"{P}/files/..%2Fx"),
        client.get(f"{P}/files/%2Fetc%2Fpasswd"),
        client.get(f"{P}/files", params={"path": "../x"}),
        client.get(f"{P}/files", params={"path": "/etc"}),
        client.get(f"{P}/files/out/secret"),
        client.get(f"{P}/files/secret-link"),
        client.get(f"{P}/files", params={"path": "out"}),
        client.put(f"{P}/files/out/planted", content=b"x"),
        client.put(f"{P}/files/..%2Fplanted", content=b"x"),
        client.put(f"{P}/files/secret-link", content=b"overwritten"),
        client.delete(f"{P}/files/out/secret"),
        client.put(f"{P}/files/notes%2F" + "n" * 256, content=b"x"),  # longer than a file name may be
    ]
    for response in refused:
        is_problem(response, 400, "bad-path")
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_text() == "do not read"
    assert not (tmp_path / "a" / "planted").exists()
    links = {e["name"]: e for e in client.get(f"{P}/files").json()["entries"]}
    assert links["out"]["type"] == "symlink" and links["out"]["target"] == str(outside), "listed, not followed"
    assert client.delete(f"{P}/files/secret-link").status_code == 204, "a link is deleted, never its target"
    assert (outside / "secret").exists()


def test_a_fifo_in_the_workspace_is_refused_as_not_a_file_without_holding_the_request(
    client: TestClient, node: PodRuntime
) -> None:
    """Opening a FIFO for reading waits for a writer: a read of one must be refused at once (``not-a-file``),
    not hold an API thread until somebody writes (a few dozen such requests would stop the API)."""
    create(client)
    client.post(f"{P}/bring")
    fifo = Path(node.workspaces.folder_for(node.projects.get(T, "web").id)) / "fifo"
    os.mkfifo(fifo)
    answers: list[object] = []
    reading = threading.Thread(target=lambda: answers.append(client.get(f"{P}/files/fifo")), daemon=True)
    reading.start()
    reading.join(20)
    if reading.is_alive():  # the open waits for a writer: give it one so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reading.join(20)
        pytest.fail("reading a FIFO through the API waited for a writer")
    is_problem(answers[0], 400, "not-a-file")
    entries = {e["name"]: e for e in client.get(f"{P}/files").json()["entries"]}
    assert entries["fifo"]["type"] == "other" and entries["fifo"]["size"] is None
    is_problem(client.get(f"{P}/files", params={"path": "fifo"}), 400, "bad-path")
    is_problem(client.put(f"{P}/files/fifo", content=b"x"), 400, "not-a-file")
    assert client.delete(f"{P}/files/fifo").status_code == 204 and not fifo.exists()


def test_a_unix_socket_in_the_workspace_is_refused_as_not_a_file(client: TestClient, node: PodRuntime) -> None:
    """Opening a UNIX socket fails with ENXIO: a read (or a write over it) answers 400 not-a-file, not 500."""
    import socket

    create(client)
    client.post(f"{P}/bring")
    path = Path(node.workspaces.folder_for(node.projects.get(T, "web").id)) / "agent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.getcwd()
    try:
        os.chdir(path.parent)  # a socket path is limited to 108 bytes: bind it by its relative name
        listener.bind(path.name)
        os.chdir(here)
        is_problem(client.get(f"{P}/files/agent.sock"), 400, "not-a-file")
        is_problem(client.put(f"{P}/files/agent.sock", content=b"x"), 400, "not-a-file")
    finally:
        os.chdir(here)
        listener.close()


def test_a_json_body_over_a_mib_is_413_before_it_is_read_and_a_file_upload_is_not_held_to_it(
    client: TestClient, node: PodRuntime
) -> None:
    from tenure.api.limits import JSON_BODY_MAX

    huge = b'{"tenant": "acme", "name": "web", "pad": "' + b"x" * JSON_BODY_MAX + b'"}'
    is_problem(
        client.post("/api/v1/projects", content=huge, headers={"content-type": "application/json"}),
        413,
        "payload-too-large",
    )

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"tenant": "acme", "name": "web", "pad": "'
        for _ in range(JSON_BODY_MAX // 65536 + 1):
            yield b"x" * 65536
        yield b'"}'

    is_problem(
        client.post("/api/v1/projects", content=chunks(), headers={"content-type": "application/json"}),
        413,
        "payload-too-large",
    )
    assert node.projects.list() == [], "neither created anything"
    create(client)
    client.post(f"{P}/bring")
    big_file = b"y" * (2 * JSON_BODY_MAX)
    assert client.put(f"{P}/files/big.bin", content=big_file).status_code == 201, "files have their own limit"
    assert client.get(f"{P}/files/big.bin").content == big_file


def test_a_bring_from_a_snapshot_takes_only_an_exact_id_of_the_projects_own_snapshots(
    client: TestClient, node: PodRuntime
) -> None:
    create(client)
    create(client, "other")
    for project in ("web", "other"):
        assert client.post(f"/api/v1/projects/{T}/{project}/bring").status_code == 200
        client.put(f"/api/v1/projects/{T}/{project}/files/a.txt", content=project.encode())
        assert client.post(f"/api/v1/projects/{T}/{project}/suspend").status_code == 200
    mine = client.get(f"{P}/snapshots").json()["snapshots"][-1]["id"]
    theirs = client.get(f"/api/v1/projects/{T}/other/snapshots").json()["snapshots"][-1]["id"]
    for ref in (theirs, mine[:8], "s-" + "_" * (len(mine) - 2), "x" * 10_000):
        refused = is_problem(client.post(f"{P}/bring", json={"from_snapshot": ref}), 404, "snapshot-not-found")
        assert theirs not in json.dumps(refused) or ref == theirs, "no other snapshot id is named"
        assert len(json.dumps(refused)) < 2_000, "the input is echoed only as a bounded prefix"
    assert client.post(f"{P}/bring", json={"from_snapshot": mine}).status_code == 200


def test_a_snapshot_id_prefix_has_no_wildcards(node: PodRuntime, client: TestClient) -> None:
    create(client)
    assert client.post(f"{P}/bring").status_code == 200
    client.put(f"{P}/files/a.txt", content=b"a")
    snap = client.post(f"{P}/checkpoint").json()["snapshot"]["id"]
    assert node.store.snapshots.get(snap[:10]).id == snap, "a unique prefix still finds it"
    with pytest.raises(TenureError):
        node.store.snapshots.get(snap[:2] + "_" * 8)  # `_` is a character here, not any character


def test_a_file_over_the_size_limit_is_413(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_module, "MAX_FILE_BYTES", 16)
    create(client)
    is_problem(client.put(f"{P}/files/big", content=b"x" * 17), 413, "payload-too-large")
    assert client.put(f"{P}/files/small", content=b"x" * 16).status_code == 201


# ---------------------------------------------------------------------- auth and tenants


def test_once_a_token_exists_requests_need_one(client: TestClient, store: Store) -> None:
    create(client)
    tokens = TokenStore(store)
    token_id, secret = tokens.create(None, admin=True, cluster=False, label="ops")
    denied = client.get("/api/v1/projects")
    is_problem(denied, 401, "unauthorized")
    assert denied.headers["www-authenticate"] == "Bearer"
    is_problem(client.get("/api/v1/projects", headers={"Authorization": "Bearer tnr_wrong"}), 401, "unauthorized")
    is_problem(client.get("/metrics"), 401, "unauthorized")
    assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
    ok = client.get("/api/v1/projects", headers={"Authorization": f"Bearer {secret}"})
    assert ok.status_code == 200 and len(ok.json()["projects"]) == 1
    tokens.revoke(token_id)
    is_problem(client.get("/api/v1/projects", headers={"Authorization": f"Bearer {secret}"}), 401, "unauthorized")
    assert tokens.verify(secret) is None and tokens.any_exist(), "revoked tokens keep the API closed"
    assert all(secret not in json.dumps(t.to_dict()) for t in tokens.list())


def test_a_tenant_token_sees_only_its_tenant(client: TestClient, store: Store) -> None:
    create(client, "web", T)
    create(client, "db", "other")
    _, secret = TokenStore(store).create(T, admin=False, cluster=False)
    _, cluster = TokenStore(store).create(None, admin=False, cluster=True)
    mine = {"Authorization": f"Bearer {secret}"}
    listed = client.get("/api/v1/projects", headers=mine).json()["projects"]
    assert [(p["tenant"], p["name"]) for p in listed] == [(T, "web")]
    assert client.get("/api/v1/projects", params={"tenant": "other"}, headers=mine).json()["projects"] == []
    hidden = is_problem(client.get("/api/v1/projects/other/db", headers=mine), 404, "project-not-found")
    missing = is_problem(client.get("/api/v1/projects/other/nothing", headers=mine), 404, "project-not-found")
    assert set(hidden) == set(missing), "another tenant's project looks exactly like a missing one"
    is_problem(client.post("/api/v1/projects/other/db/bring", headers=mine), 404, "project-not-found")
    is_problem(client.post("/api/v1/projects", json={"tenant": "other", "name": "x"}, headers=mine), 403, "forbidden")
    assert client.get(P, headers=mine).status_code == 200
    everything = client.get("/api/v1/projects", headers={"Authorization": f"Bearer {cluster}"}).json()["projects"]
    assert len(everything) == 2, "a cluster token is accepted like admin"


def test_the_open_api_refuses_other_hosts_and_origins(client: TestClient, store: Store) -> None:
    """With no token the API has no credential: a request addressed to a name that is not loopback (DNS
    rebinding) or sent by a page of another origin (a cross-site form) is refused, 403 ``cross-origin-refused``;
    once a token exists the bearer token is what protects the API and Host and Origin are not checked."""
    create(client)
    evil = {"Origin": "http://evil.example", "Host": "evil.example:8470"}
    body = is_problem(client.post(f"{P}/close", headers=evil), 403, "cross-origin-refused")
    assert body["context"] == {"host": "evil.example:8470"} and "loopback" in body["detail"] and body["hint"]
    for refused in (
        {"Host": "evil.example:8470"},
        {"Host": "localhost.evil.example"},
        {"Host": "127.0.0.1.nip.io:8470"},
        {"Host": "127.0.0.1:8470@evil.example"},
        {"Host": "127.0.0.1:8470", "Origin": "http://evil.example"},
        {"Host": "127.0.0.1:8470", "Origin": "null"},
        {"Host": "127.0.0.1:8470", "Origin": "http://127.0.0.1.evil.example:8470"},
    ):
        is_problem(client.post(f"{P}/close", headers=refused), 403, "cross-origin-refused")
        is_problem(client.get("/api/v1/projects", headers=refused), 403, "cross-origin-refused")
    assert client.get(P).json()["status"] == "INIT", "nothing refused was done"
    assert client.get("/healthz", headers=evil).status_code == 200, "the probes stay open"
    assert client.get("/", headers=evil).status_code == 200, "the dashboard's pages carry no data"
    for accepted in (
        {"Host": "127.0.0.1:8470"},
        {"Host": "LocalHost:8470", "Origin": "http://localhost:8470"},
        {"Host": "127.0.0.2", "Origin": "https://127.0.0.1"},
        {"Host": "[::1]:8470", "Origin": "http://[::1]:8470"},
    ):
        assert client.get("/api/v1/projects", headers=accepted).status_code == 200, accepted

    _, secret = TokenStore(store).create(None, admin=True, cluster=False)
    with_token = dict(evil, Authorization=f"Bearer {secret}")
    assert client.post(f"{P}/close", headers=with_token).json()["status"] == "CLOSED"


def test_token_cli_create_list_revoke(tmp_path: Path) -> None:
    from tenure.cli.main import root

    data = ["--data", str(tmp_path / "d"), "--json"]
    made = CliRunner().invoke(root, [*data, "token", "create", "--tenant", T, "--label", "ci"], obj={})
    assert made.exit_code == 0, made.output
    created = json.loads(made.stdout)
    assert created["secret"].startswith("tnr_") and created["tenant"] == T
    listed = json.loads(CliRunner().invoke(root, [*data, "token", "list"], obj={}).stdout)
    assert [t["id"] for t in listed] == [created["id"]] and "secret" not in listed[0]
    revoked = CliRunner().invoke(root, [*data, "token", "revoke", created["id"]], obj={})
    assert revoked.exit_code == 0 and json.loads(revoked.stdout)["revoked_at"] is not None
    scopeless = CliRunner().invoke(root, [*data, "token", "create"], obj={})
    assert scopeless.exit_code == 2 and "invalid-token-scope" in scopeless.stderr


@pytest.mark.parametrize(
    "scopes", [["--tenant", T, "--admin"], ["--tenant", T, "--cluster"], ["--admin", "--cluster"]], ids=" ".join
)
def test_token_create_refuses_two_scopes(tmp_path: Path, scopes: list[str]) -> None:
    """``--tenant acme --admin`` would be a full admin token under a tenant's name: refused, nothing created."""
    from tenure.cli.main import root

    data = ["--data", str(tmp_path / "d"), "--json"]
    refused = CliRunner().invoke(root, [*data, "token", "create", *scopes], obj={})
    assert refused.exit_code == 2, refused.output
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "invalid-token-scope" and "exactly one scope" in error["message"], error
    assert json.loads(CliRunner().invoke(root, [*data, "token", "list"], obj={}).stdout) == []


# ---------------------------------------------------------------------- probes, metrics, error shapes


def test_readyz_is_503_until_the_pod_runs(make: Callable[..., PodRuntime]) -> None:
    node = make()
    with TestClient(create_app(node)) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503
        node.start()
        assert client.get("/readyz").status_code == 200


def test_metrics_count_beats_and_requests(client: TestClient, node: PodRuntime) -> None:
    node.beat()
    client.get(P)
    text = client.get("/metrics").text
    assert "tenure_beats_total 1.0" in text
    assert 'tenure_http_requests_total{route="/api/v1/projects/{tenant}/{name}",status="404"} 1.0' in text


def test_error_documents_are_problem_json(
    client: TestClient, node: PodRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = is_problem(client.get("/api/v1/projects/acme/none"), 404, "project-not-found")
    assert body["title"] == "Not Found" and body["context"] == {"project": "acme/none"} and body["hint"]
    create(client)
    body = is_problem(client.post("/api/v1/projects", json={"tenant": T, "name": "web"}), 409, "project-exists")
    assert body["title"] == "Conflict"
    body = is_problem(client.post("/api/v1/projects", json={"tenant": T}), 422, "invalid-request")
    assert body["context"]["errors"][0]["loc"] == ["body", "name"]
    is_problem(client.get("/api/v1/nothing"), 404, "not-found")

    def broken(*_: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(node.ownership, "projects_with_owners", broken)  # what GET /projects reads
    crashed = is_problem(client.get("/api/v1/projects"), 500, "internal")
    assert "secret internals" not in crashed["detail"] and "Traceback" not in json.dumps(crashed)


def test_an_unexpected_error_is_logged_with_its_traceback_in_both_log_formats(
    client: TestClient, node: PodRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 500 ``internal`` tells the client nothing; the pod's log must then hold the whole traceback:
    after the line in the text format, in the ``exception`` field of the JSON line."""
    from tenure.pod.daemon import _JsonFormatter, _TextFormatter

    def broken(*_: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(node.ownership, "projects_with_owners", broken)  # what GET /projects reads
    streams = {"text": io.StringIO(), "json": io.StringIO()}
    handlers = []
    for fmt, stream in streams.items():
        handler = logging.StreamHandler(stream)
        handler.setFormatter(_TextFormatter() if fmt == "text" else _JsonFormatter())
        handlers.append(handler)
    logger = logging.getLogger("tenure.serve")
    for handler in handlers:
        logger.addHandler(handler)
    try:
        is_problem(client.get("/api/v1/projects"), 500, "internal")
    finally:
        for handler in handlers:
            logger.removeHandler(handler)

    first, _, after = streams["text"].getvalue().partition("\n")
    assert "request failed" in first and "path=/api/v1/projects" in first
    assert after.startswith("Traceback (most recent call last):"), after
    assert "in broken" in after and "RuntimeError: secret internals" in after
    [line] = [json.loads(text) for text in streams["json"].getvalue().splitlines()]
    assert line["msg"] == "request failed" and line["path"] == "/api/v1/projects"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "in broken" in line["exception"] and "RuntimeError: secret internals" in line["exception"]


@pytest.mark.postgres
def test_an_exhausted_connection_pool_is_503_store_unavailable(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pooled PostgreSQL connection busy for the whole wait: the caller gets the retryable
    ``store-unavailable`` saying so (503, Retry-After), not the pool's own timeout or a 500."""
    from tenure.store import open_store, postgres

    store = open_store(pg_url)
    node = PodRuntime(
        ServeConfig(data_dir=str(tmp_path / "a"), self_pull=False), store, LocalObjectStore(str(tmp_path / "o"))
    )
    node.start()
    held = []
    try:
        with TestClient(create_app(node), follow_redirects=False) as client:
            assert client.get("/api/v1/projects").status_code == 200
            monkeypatch.setattr(postgres, "CHECKOUT_TIMEOUT_S", 0.3)
            pool = store.db.pool  # type: ignore[attr-defined]
            held = [pool.getconn() for _ in range(pool.max_size)]
            refused = client.get("/api/v1/projects")
            body = is_problem(refused, 503, "store-unavailable")
            assert body["retryable"] is True and "busy" in body["detail"], body
            assert refused.headers["retry-after"] == "1"
            for conn in held:
                pool.putconn(conn)
            held = []
            assert client.get("/api/v1/projects").status_code == 200
    finally:
        for conn in held:
            store.db.pool.putconn(conn)  # type: ignore[attr-defined]
        node.stop()
        store.close()


def test_a_verify_sample_that_is_not_a_finite_number_is_422(client: TestClient) -> None:
    for sample in ("nan", "inf"):
        refused = client.post("/api/v1/snapshots/s-nope/verify", params={"sample": sample})
        body = is_problem(refused, 422, "invalid-request")
        assert body["context"]["errors"][0]["loc"] == ["query", "sample"]


def test_openapi_lists_the_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/v1/projects", "/api/v1/projects/{tenant}/{name}/files/{path}", "/api/v1/pods/{pod_id}/drain"} <= set(
        paths
    )


# ---------------------------------------------------------------------- other pods: redirect, 503, drain


def test_a_project_owned_by_another_live_pod_is_redirected(client: TestClient, make: Callable[..., PodRuntime]) -> None:
    create(client)
    other = make("b", listen="127.0.0.1:9999")
    other.start()
    other.bring(T, "web")
    for response in (
        client.post(f"{P}/bring"),
        client.get(f"{P}/files", params={"path": "notes"}),
        client.post(f"{P}/suspend"),
    ):
        assert response.status_code == 307
    assert client.post(f"{P}/bring").headers["location"] == f"http://127.0.0.1:9999{P}/bring"
    assert client.get(f"{P}/files", params={"path": "notes"}).headers["location"] == (
        f"http://127.0.0.1:9999{P}/files?path=notes"
    )
    assert client.get(P).json()["owner"]["pod_id"] == other.pod.pod_id, "reading a project never redirects"


def test_an_owner_whose_pod_is_silent_but_lease_valid_is_503_retry_after(
    store: Store, make: Callable[..., PodRuntime]
) -> None:
    ProjectStore(store).create(T, "web")
    owner = make("b", listen="127.0.0.1:9999")
    owner.start()
    owner.bring(T, "web")
    # a liveness TTL below zero: every other pod's row counts as silent at once, while leases last 60 s
    asking = make("a", liveness_ttl=-1.0)
    asking.start()
    with TestClient(create_app(asking), follow_redirects=False) as client:
        body = is_problem(client.post(f"{P}/bring"), 503, "project-unavailable")
        retry_after = client.post(f"{P}/checkpoint").headers["retry-after"]
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 60
    assert body["retryable"] is True


def test_drain_this_pod_is_202_and_another_pod_is_redirected(
    client: TestClient, node: PodRuntime, make: Callable[..., PodRuntime]
) -> None:
    other = make("b", listen="127.0.0.1:9999")
    other.start()
    asked = threading.Event()
    node.on_drain_requested = asked.set
    moved = client.post(f"/api/v1/pods/{other.pod.pod_id}/drain")
    assert moved.status_code == 307
    assert moved.headers["location"] == f"http://127.0.0.1:9999/api/v1/pods/{other.pod.pod_id}/drain"
    assert not asked.is_set()
    accepted = client.post(f"/api/v1/pods/{node.pod.pod_id}/drain")
    assert accepted.status_code == 202 and asked.is_set()
    pods = {p["id"]: p for p in client.get("/api/v1/pods").json()["pods"]}
    assert pods[node.pod.pod_id]["this"] and pods[other.pod.pod_id]["live"]
    assert client.get(f"/api/v1/pods/{other.pod.pod_id}").json()["endpoint"] == "http://127.0.0.1:9999"
    is_problem(client.get("/api/v1/pods/nope"), 404, "pod-not-found")
