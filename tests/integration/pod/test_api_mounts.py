"""This host's mounts over the pod API (docs/api.md): list, show, the preserved delta's files and discard, with
the files API's path checks (no ``..``, no symlink followed) and tenant scoping (S-65, S-68)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.mounts.store import Mount, MountStore
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.pod.tokens import TokenStore
from tenure.states import MountState as M
from tenure.store import Store
from tests.integration.pod.test_api import is_problem
from tests.support.runtime import running_node, stop_all

M_ = "/api/v1/mounts"


@pytest.fixture
def node(store: Store, tmp_path: Path) -> Iterator[PodRuntime]:
    yield from running_node(store, tmp_path, listen="127.0.0.1:8470")


def preserved_delta(node: PodRuntime, ref: str | None, name: str = "delta") -> tuple[Mount, Path]:
    """A fenced mount whose uncommitted data reconciliation kept under ``<data>/preserved/``."""
    kept = Path(node.config.data_dir, "preserved", name)
    (kept / "sub").mkdir(parents=True)
    (kept / "sub" / "f.txt").write_text("recover me")
    (kept / "top.txt").write_bytes(b"\x00\x01 binary")
    records: MountStore = node.lifecycle.mounts.store
    mount = records.open("w-" + name, str(kept.parent.parent / "workspaces" / name), 3, project_ref=ref)
    records.force(mount.id, M.CLOSED, "test: fenced")
    records.set_verdict(mount.id, "preserved-delta", preserved_folder=str(kept), preserved_at=time.time())
    return records.get(mount.id), kept


def test_a_preserved_delta_is_listed_shown_read_and_discarded(client: TestClient, node: PodRuntime) -> None:
    mount, kept = preserved_delta(node, "acme/web")
    listed = client.get(M_).json()["mounts"]
    assert [(m["id"], m["verdict"], m["state"], m["project_ref"]) for m in listed] == [
        (mount.id, "preserved-delta", "CLOSED", "acme/web")
    ]
    shown = client.get(f"{M_}/{mount.id}").json()
    assert shown["preserved_folder"] == str(kept) and shown["generation"] == 3

    top = client.get(f"{M_}/{mount.id}/files").json()
    assert top["path"] == "" and [(e["name"], e["type"]) for e in top["entries"]] == [
        ("sub", "folder"),
        ("top.txt", "file"),
    ]
    sub = client.get(f"{M_}/{mount.id}/files", params={"path": "sub"}).json()["entries"]
    assert [(e["name"], e["size"]) for e in sub] == [("f.txt", 10)]
    read = client.get(f"{M_}/{mount.id}/files/sub/f.txt")
    assert read.status_code == 200 and read.content == b"recover me"
    assert read.headers["content-type"] == "application/octet-stream" and read.headers["content-length"] == "10"
    assert client.get(f"{M_}/{mount.id}/files/top.txt").content == b"\x00\x01 binary"
    is_problem(client.get(f"{M_}/{mount.id}/files/nothing.txt"), 404, "file-not-found")
    is_problem(client.get(f"{M_}/{mount.id}/files/sub"), 400, "not-a-file")

    discarded = client.post(f"{M_}/{mount.id}/discard")
    assert discarded.status_code == 200 and discarded.json() == {"mount": mount.id, "discarded": str(kept)}
    assert not kept.exists() and node.lifecycle.mounts.store.list() == []
    is_problem(client.post(f"{M_}/{mount.id}/discard"), 404, "mount-not-found")
    is_problem(client.get(f"{M_}/{mount.id}/files"), 404, "mount-not-found")


def test_the_files_of_a_preserved_delta_take_the_files_api_path_checks(
    client: TestClient, node: PodRuntime, tmp_path: Path
) -> None:
    mount, kept = preserved_delta(node, "acme/web")
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    os.symlink(str(outside), kept / "leak")
    os.symlink(str(tmp_path), kept / "out")
    os.symlink("sub", kept / "inner")
    base = f"{M_}/{mount.id}/files"
    is_problem(client.get(base, params={"path": "../.."}), 400, "bad-path")
    is_problem(client.get(base, params={"path": "/etc"}), 400, "bad-path")
    is_problem(client.get(f"{base}/sub/..%2F..%2Fsecret.txt"), 400, "bad-path")
    is_problem(client.get(f"{base}/leak"), 400, "bad-path")
    is_problem(client.get(f"{base}/out/secret.txt"), 400, "bad-path")
    is_problem(client.get(base, params={"path": "out"}), 400, "bad-path")
    is_problem(client.get(f"{base}/inner/f.txt"), 400, "bad-path")  # a link inside is not followed either
    entries = {e["name"]: e for e in client.get(base).json()["entries"]}
    assert entries["leak"]["type"] == "symlink" and entries["leak"]["target"] == str(outside)
    assert outside.read_text() == "not yours"


def test_a_mount_without_a_preserved_delta_and_an_unknown_mount(client: TestClient, node: PodRuntime) -> None:
    records: MountStore = node.lifecycle.mounts.store
    live = records.open("w-live", str(Path(node.config.data_dir, "workspaces", "live")), 1, project_ref="acme/web")
    is_problem(client.get(f"{M_}/{live.id}/files"), 409, "no-preserved-delta")
    is_problem(client.get(f"{M_}/{live.id}/files/a.txt"), 409, "no-preserved-delta")
    is_problem(client.post(f"{M_}/{live.id}/discard"), 409, "no-preserved-delta")
    assert records.get(live.id).state is M.MOUNTING, "nothing changed"
    is_problem(client.get(f"{M_}/m-nothing"), 404, "mount-not-found")
    is_problem(client.post(f"{M_}/m-nothing/discard"), 404, "mount-not-found")


def test_a_preserved_folder_outside_the_data_folder_is_never_served_or_deleted(
    client: TestClient, node: PodRuntime, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    records: MountStore = node.lifecycle.mounts.store
    mount = records.open("w-x", str(elsewhere), 1, project_ref="acme/web")
    records.force(mount.id, M.CLOSED, "test")
    records.set_verdict(mount.id, "preserved-delta", preserved_folder=str(elsewhere), preserved_at=time.time())
    is_problem(client.get(f"{M_}/{mount.id}/files"), 409, "no-preserved-delta")
    is_problem(client.post(f"{M_}/{mount.id}/discard"), 409, "no-preserved-delta")
    linked = Path(node.config.data_dir, "preserved", "link")
    linked.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(str(elsewhere), linked)
    records.set_verdict(mount.id, "preserved-delta", preserved_folder=str(linked), preserved_at=time.time())
    is_problem(client.post(f"{M_}/{mount.id}/discard"), 409, "no-preserved-delta")
    assert (elsewhere / "keep.txt").read_text() == "keep"


def test_a_tenant_token_sees_only_its_tenants_mounts(client: TestClient, node: PodRuntime, store: Store) -> None:
    mine, my_folder = preserved_delta(node, "acme/web", "mine")
    theirs, their_folder = preserved_delta(node, "other/db", "theirs")
    orphan, _ = preserved_delta(node, None, "orphan")
    _, tenant = TokenStore(store).create("acme", admin=False, cluster=False)
    _, cluster = TokenStore(store).create(None, admin=False, cluster=True)
    acme = {"Authorization": f"Bearer {tenant}"}
    assert [m["id"] for m in client.get(M_, headers=acme).json()["mounts"]] == [mine.id]
    assert client.get(f"{M_}/{mine.id}", headers=acme).status_code == 200
    assert client.get(f"{M_}/{mine.id}/files/sub/f.txt", headers=acme).content == b"recover me"
    for hidden in (theirs.id, orphan.id):
        is_problem(client.get(f"{M_}/{hidden}", headers=acme), 404, "mount-not-found")
        is_problem(client.get(f"{M_}/{hidden}/files", headers=acme), 404, "mount-not-found")
        is_problem(client.get(f"{M_}/{hidden}/files/sub/f.txt", headers=acme), 404, "mount-not-found")
        is_problem(client.post(f"{M_}/{hidden}/discard", headers=acme), 404, "mount-not-found")
    hidden_doc = is_problem(client.get(f"{M_}/{theirs.id}", headers=acme), 404, "mount-not-found")
    missing_doc = is_problem(client.get(f"{M_}/m-missing", headers=acme), 404, "mount-not-found")
    assert set(hidden_doc) == set(missing_doc), "another tenant's mount looks exactly like a missing one"
    assert their_folder.exists()
    everything = client.get(M_, headers={"Authorization": f"Bearer {cluster}"}).json()["mounts"]
    assert sorted(m["id"] for m in everything) == sorted([mine.id, theirs.id, orphan.id])
    assert client.post(f"{M_}/{mine.id}/discard", headers=acme).status_code == 200 and not my_folder.exists()
    is_problem(client.get(M_), 401, "unauthorized")


def test_this_pods_row_carries_its_reconciliation_counts(
    store: Store, tmp_path: Path, make_node: Callable[[str], PodRuntime]
) -> None:
    a = make_node("a")
    records = a.lifecycle.mounts.store
    orphan = Path(a.config.data_dir, "workspaces", "orphan")
    orphan.mkdir(parents=True)
    (orphan / "f.txt").write_text("keep")
    kept = records.open("w-unknown", str(orphan), 7, project_id="p-unknown", project_ref="acme/gone")
    records.transition(kept.id, M.MOUNTING, M.MOUNTED)
    a.stop()
    again = make_node("a")  # the same data folder: reconciliation gives the record its verdict
    assert dict(again.reconcile_report.counts) == {"control-plane-unknown": 1}
    other = make_node("b")
    with TestClient(create_app(again), follow_redirects=False) as client:
        shown = client.get(f"/api/v1/pods/{again.pod.pod_id}").json()
        assert shown["this"] is True and shown["reconcile"] == {"control-plane-unknown": 1}
        elsewhere = client.get(f"/api/v1/pods/{other.pod.pod_id}").json()
        assert elsewhere["this"] is False and elsewhere["reconcile"] is None
        metrics = client.get("/metrics").text
        assert 'tenure_reconcile_verdicts_total{verdict="control-plane-unknown"} 1.0' in metrics


@pytest.fixture
def make_node(store: Store, tmp_path: Path) -> Iterator[Callable[[str], PodRuntime]]:
    made: list[PodRuntime] = []

    def build(name: str) -> PodRuntime:
        config = ServeConfig(data_dir=str(tmp_path / name), self_pull=False, lease_ttl=60.0)
        node = PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")))
        made.append(node)
        node.start()
        return node

    yield build
    stop_all(made)
