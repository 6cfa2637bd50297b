"""``tenure pods show POD``: the pod row, and its last restart reconciliation's counts per verdict when POD
holds this host's data folder or is the pod at ``--url`` (S-68, S-83)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.cli.main import root
from tenure.mounts.report import data_folder_pod, read_report
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.states import MountState as M
from tenure.store import Store
from tests.support.runtime import stop_all


@pytest.fixture
def made(store: Store, tmp_path: Path) -> Iterator[list[PodRuntime]]:
    nodes: list[PodRuntime] = []
    yield nodes
    stop_all(nodes)


def start(store: Store, tmp_path: Path, made: list[PodRuntime], name: str, **labels: str) -> PodRuntime:
    config = ServeConfig(data_dir=str(tmp_path / name), self_pull=False, lease_ttl=60.0, labels=labels)
    node = PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")))
    made.append(node)
    node.start()
    return node


def restarted_with_an_unanswerable_mount(store: Store, tmp_path: Path, made: list[PodRuntime]) -> PodRuntime:
    """A pod whose start-up reconciliation found one mount the control plane cannot answer for."""
    a = start(store, tmp_path, made, "a")
    records = a.lifecycle.mounts.store
    folder = Path(a.config.data_dir, "workspaces", "orphan")
    folder.mkdir(parents=True)
    (folder / "f.txt").write_text("keep")
    mount = records.open("w-unknown", str(folder), 7, project_id="p-unknown", project_ref="acme/gone")
    records.transition(mount.id, M.MOUNTING, M.MOUNTED)
    a.stop()
    return start(store, tmp_path, made, "a", zone="eu")


def tenure(store: Store, data: Path, *args: str) -> Result:
    return CliRunner().invoke(root, ["--data", str(data), "--db", store.url, *args], obj={})


def test_pods_show_on_this_hosts_data_folder_has_the_reconciliation_counts(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    pod = restarted_with_an_unanswerable_mount(store, tmp_path, made)
    assert data_folder_pod(pod.config.data_dir) == pod.pod.pod_id
    report = read_report(pod.config.data_dir)
    assert report is not None and report["pod_id"] == pod.pod.pod_id
    assert report["counts"] == {"control-plane-unknown": 1}

    result = tenure(store, tmp_path / "a", "--json", "pods", "show", pod.pod.pod_id)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["id"] == pod.pod.pod_id and shown["status"] == "RUNNING" and shown["live"] is True
    assert shown["this"] is True and shown["labels"] == {"zone": "eu"}
    assert {"endpoint", "capacity", "score", "running", "heartbeat_at"} <= set(shown)
    assert shown["reconcile"] == {"control-plane-unknown": 1}

    human = tenure(store, tmp_path / "a", "pods", "show", pod.pod.pod_id)
    assert human.exit_code == 0, human.output
    assert "reconcile control-plane-unknown" in human.stdout and "label zone" in human.stdout


def test_pods_show_of_a_pod_of_another_data_folder_has_no_counts(
    store: Store, tmp_path: Path, made: list[PodRuntime]
) -> None:
    a = restarted_with_an_unanswerable_mount(store, tmp_path, made)
    b = start(store, tmp_path, made, "b")
    shown = json.loads(tenure(store, tmp_path / "b", "--json", "pods", "show", a.pod.pod_id).stdout)
    assert shown["this"] is False and shown["reconcile"] is None, "host b's data folder says nothing of pod a"
    own = json.loads(tenure(store, tmp_path / "b", "--json", "pods", "show", b.pod.pod_id).stdout)
    assert own["this"] is True and own["reconcile"] == {}, "b reconciled nothing"
    missing = tenure(store, tmp_path / "b", "--json", "pods", "show", "no-such-pod")
    assert missing.exit_code == 3 and "pod-not-found" in missing.stderr


def test_pods_show_over_the_api_has_the_served_pods_counts(
    store: Store, tmp_path: Path, made: list[PodRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = restarted_with_an_unanswerable_mount(store, tmp_path, made)
    other = start(store, tmp_path, made, "b")
    app = create_app(pod)

    def client(**_: Any) -> httpx.Client:
        return TestClient(app, base_url="http://127.0.0.1:8470", follow_redirects=False)

    monkeypatch.setattr(httpx, "Client", client)
    url = ["--url", "http://127.0.0.1:8470"]
    elsewhere = tmp_path / "elsewhere"  # no data folder here: everything comes from the pod
    shown = json.loads(tenure(store, elsewhere, *url, "--json", "pods", "show", pod.pod.pod_id).stdout)
    assert shown["this"] is True and shown["reconcile"] == {"control-plane-unknown": 1}
    assert shown["labels"] == {"zone": "eu"} and shown["live"] is True
    not_served = json.loads(tenure(store, elsewhere, *url, "--json", "pods", "show", other.pod.pod_id).stdout)
    assert not_served["this"] is False and not_served["reconcile"] is None
    missing = tenure(store, elsewhere, *url, "--json", "pods", "show", "no-such-pod")
    assert missing.exit_code == 3 and "pod-not-found" in missing.stderr
    assert not elsewhere.exists()
