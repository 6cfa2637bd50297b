"""GET /api/v1/projects/{tenant}/{name}/history: the project's ownership timeline over HTTP, newest first,
with the same tenant scoping as every project route (docs/api.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tenure.pod.runtime import PodRuntime
from tenure.pod.tokens import TokenStore
from tenure.store import Store
from tests.support.runtime import running_node

T = "acme"
P = f"/api/v1/projects/{T}/web"


@pytest.fixture
def node(store: Store, tmp_path: Path) -> Iterator[PodRuntime]:
    yield from running_node(store, tmp_path)


def test_history_answers_the_project_and_its_events_newest_first(client: TestClient, node: PodRuntime) -> None:
    assert client.post("/api/v1/projects", json={"tenant": T, "name": "web"}).status_code == 201
    assert client.post(f"{P}/bring").status_code == 200
    assert client.post(f"{P}/suspend").status_code == 200

    answer = client.get(f"{P}/history")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"project", "events"} and body["project"] == f"{T}/web"
    assert [e["kind"] for e in body["events"]] == ["suspend", "bring", "claim"]
    project_id = client.get(P).json()["id"]
    for event in body["events"]:
        assert set(event) == {"id", "project_id", "at", "kind", "pod_id", "generation", "detail"}
        assert event["project_id"] == project_id and event["pod_id"] == node.pod.pod_id
    assert [e["at"] for e in body["events"]] == sorted((e["at"] for e in body["events"]), reverse=True)

    assert [e["kind"] for e in client.get(f"{P}/history", params={"limit": 1}).json()["events"]] == ["suspend"]
    refused = client.get(f"{P}/history", params={"limit": 0})
    assert refused.status_code == 422 and refused.json()["code"] == "invalid-request"
    missing = client.get(f"/api/v1/projects/{T}/nope/history")
    assert missing.status_code == 404 and missing.json()["code"] == "project-not-found"


def test_history_refuses_a_before_that_is_not_a_finite_number(client: TestClient) -> None:
    """``before=nan`` compares false with every time (and ``inf`` is no store-clock time): bad input, 422."""
    assert client.post("/api/v1/projects", json={"tenant": T, "name": "web"}).status_code == 201
    for before in ("nan", "NaN", "inf", "-inf", "Infinity"):
        refused = client.get(f"{P}/history", params={"before": before})
        assert refused.status_code == 422, (before, refused.text)
        assert refused.json()["code"] == "invalid-request"
        assert refused.json()["context"]["errors"][0]["loc"] == ["query", "before"]
    assert client.get(f"{P}/history", params={"before": "1e12"}).status_code == 200


def test_a_tenant_token_reads_only_its_tenants_history(client: TestClient, store: Store) -> None:
    for tenant in (T, "other"):
        assert client.post("/api/v1/projects", json={"tenant": tenant, "name": "web"}).status_code == 201
        assert client.post(f"/api/v1/projects/{tenant}/web/bring").status_code == 200
    _, secret = TokenStore(store).create(T, admin=False, cluster=False)
    mine = {"Authorization": f"Bearer {secret}"}

    own = client.get(f"{P}/history", headers=mine)
    assert own.status_code == 200 and [e["kind"] for e in own.json()["events"]] == ["bring", "claim"]
    hidden = client.get("/api/v1/projects/other/web/history", headers=mine)
    nothing = client.get("/api/v1/projects/other/nothing/history", headers=mine)
    assert hidden.status_code == nothing.status_code == 404
    assert hidden.json()["code"] == nothing.json()["code"] == "project-not-found"
    assert "events" not in hidden.json(), "another tenant's history looks exactly like a missing project"
    assert client.get("/api/v1/projects/other/web/history").status_code == 401, "a token exists: one is needed"
