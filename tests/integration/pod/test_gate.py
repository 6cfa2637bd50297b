"""The write gate: a file write through the API is never acknowledged and then lost by a suspend, a hand-over
(drain) or a close that takes the final checkpoint of the same project. A write in progress finishes before the
final checkpoint starts; a write that arrives while it runs is refused with ``project-quiescing`` (503 with
``Retry-After``, retryable)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.errors import TenureError
from tenure.objects.local import LocalObjectStore
from tenure.pod.gate import ProjectQuiescingError, WriteGate
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects import LifecycleType, ProjectStore
from tenure.projects.lifecycle import EnginesStartRequested, EnginesStopRequested
from tenure.store import Store
from tenure.workspaces import WorkspaceService

T = "acme"
P = f"/api/v1/projects/{T}/web"


class GatedEngine:
    """An engine whose stop waits until the test lets it go (the final checkpoint comes after it)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.release = threading.Event()

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        pass

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        self.stopping.set()
        self.release.wait(20)


@pytest.fixture
def engine() -> GatedEngine:
    return GatedEngine()


@pytest.fixture
def node(store: Store, tmp_path: Path, engine: GatedEngine) -> Iterator[PodRuntime]:
    config = ServeConfig(data_dir=str(tmp_path / "a"), self_pull=False, lease_ttl=60.0, master=False)
    made = PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")), engines=[engine])
    made.start()
    yield made
    engine.release.set()
    try:
        made.stop()
    except TenureError:
        pass


def head_files(store: Store, tmp_path: Path, workspace_id: str) -> dict[str, bytes]:
    service = WorkspaceService(store, LocalObjectStore(str(tmp_path / "objects")), str(tmp_path / "reader"))
    dest = tmp_path / "head"
    service.restore(workspace_id, str(dest))
    return {p.name: p.read_bytes() for p in dest.iterdir() if p.is_file()}


def test_a_write_during_a_suspend_is_refused_and_every_acknowledged_write_is_in_the_final_checkpoint(
    store: Store, tmp_path: Path, node: PodRuntime, engine: GatedEngine
) -> None:
    ProjectStore(store).create(T, "web", lifecycle_type=LifecycleType.PERMANENT)
    with TestClient(create_app(node), follow_redirects=False) as client:
        assert client.post(P + "/bring").status_code == 200
        assert client.put(P + "/files/before.txt", content=b"acknowledged").status_code == 201
        suspending = threading.Thread(target=node.suspend, args=(T, "web"))
        suspending.start()
        assert engine.stopping.wait(20)
        refused = client.put(P + "/files/during.txt", content=b"never acknowledged")
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
        assert refused.json()["code"] == "project-quiescing"
        assert client.delete(P + "/files/before.txt").json()["code"] == "project-quiescing"
        engine.release.set()
        suspending.join(30)
    project = ProjectStore(store).get(T, "web")
    assert project.status.value == "SUSPENDED"
    assert head_files(store, tmp_path, project.workspace_id) == {"before.txt": b"acknowledged"}


def test_a_checkpoint_during_a_suspend_is_refused_as_quiescing_and_after_it_as_not_running_here(
    store: Store, tmp_path: Path, node: PodRuntime, engine: GatedEngine
) -> None:
    """A checkpoint is a writer at the gate: asked while a suspend runs it gets the retryable
    ``project-quiescing`` (never a race on the workspace machine), and once the suspend is done the project
    does not run here any more."""
    ProjectStore(store).create(T, "web", lifecycle_type=LifecycleType.PERMANENT)
    with TestClient(create_app(node), follow_redirects=False) as client:
        assert client.post(P + "/bring").status_code == 200
        assert client.put(P + "/files/a.txt", content=b"a").status_code == 201
        suspending = threading.Thread(target=node.suspend, args=(T, "web"))
        suspending.start()
        assert engine.stopping.wait(20)
        refused = client.post(P + "/checkpoint")
        assert refused.status_code == 503 and refused.json()["code"] == "project-quiescing", refused.text
        assert refused.headers["retry-after"] == "1", "a moment's wait, as a client of the API expects"
        engine.release.set()
        suspending.join(30)
        with pytest.raises(TenureError) as gone:
            node.checkpoint(T, "web")
        assert gone.value.code == "not-running-here"
    project = ProjectStore(store).get(T, "web")
    assert project.status.value == "SUSPENDED"
    assert head_files(store, tmp_path, project.workspace_id) == {"a.txt": b"a"}


def test_a_suspend_waits_for_a_write_in_progress_before_it_stops_anything(
    store: Store, tmp_path: Path, node: PodRuntime, engine: GatedEngine
) -> None:
    ProjectStore(store).create(T, "web", lifecycle_type=LifecycleType.PERMANENT)
    project = node.bring(T, "web")
    engine.release.set()
    writing = node.gate.writing(project.id, project.ref)
    writing.__enter__()
    suspending = threading.Thread(target=node.suspend, args=(T, "web"))
    suspending.start()
    assert not engine.stopping.wait(0.3), "the suspend waits for the write in progress"
    Path(node.lifecycle.folder(project), "late.txt").write_bytes(b"written while the gate was held")
    writing.__exit__(None, None, None)
    suspending.join(30)
    assert engine.stopping.is_set()
    assert head_files(store, tmp_path, project.workspace_id) == {"late.txt": b"written while the gate was held"}


def test_the_gate_reopens_after_the_ending_operation_and_counts_writers() -> None:
    gate = WriteGate(drain_timeout=5)
    with gate.writing("p", "t/p"):
        assert gate.writers("p") == 1
    with gate.closing("p"):
        with pytest.raises(ProjectQuiescingError):
            with gate.writing("p", "t/p"):
                pass
        with gate.writing("other", "t/other"):  # other projects are not held back
            pass
    with gate.writing("p", "t/p"):
        assert gate.writers("p") == 1
    assert gate.writers("p") == 0
