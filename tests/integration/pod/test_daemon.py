"""The daemon around a node (tenure.pod.daemon.run, ``tenure serve``): the pod becomes RUNNING — ready,
placed on — only once its HTTP server listens, a pod whose server cannot listen never does, and a listen
address that names no reachable endpoint is refused before anything starts."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from tenure.api.app import create_app
from tenure.objects.local import LocalObjectStore
from tenure.pod.daemon import run
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.projects.pods import PodRegistry
from tenure.states import PodState
from tenure.store import Store, open_store
from tests.support.pods import free_port


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path}/tenure.db")
    yield opened
    opened.close()


def listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def pod(store: Store, tmp_path: Path, port: int) -> PodRuntime:
    config = ServeConfig(data_dir=str(tmp_path / "a"), listen=f"127.0.0.1:{port}", self_pull=False)
    return PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")))


def test_a_pod_is_marked_running_only_once_its_api_listens(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    node = pod(store, tmp_path, port)
    node.start(running=False)
    assert not node.ready and node.pods.get(node.pod.pod_id).status == "STARTING"
    assert not listens(port)

    listening_when_marked: list[bool] = []
    marked = threading.Event()
    mark_running = node.mark_running

    def checked() -> None:
        listening_when_marked.append(listens(port))
        mark_running()
        marked.set()

    monkeypatch.setattr(node, "mark_running", checked)
    announced: list[str] = []
    exits: list[int] = []
    serving = threading.Thread(
        target=lambda: exits.append(run(node, create_app(node), "127.0.0.1", port, announce=announced.append)),
        daemon=True,
    )
    serving.start()
    try:
        assert marked.wait(30), "the pod was never marked RUNNING"
        assert listening_when_marked == [True], "RUNNING before the API listened"
        assert node.ready and node.pods.get(node.pod.pod_id).status == "RUNNING"
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
    finally:
        assert node.on_drain_requested is not None
        node.on_drain_requested()  # drain, then the server stops and run returns
        serving.join(30)
    assert exits == [0] and announced == [f"http://127.0.0.1:{port}"]
    assert node.pods.get(node.pod.pod_id).status == "STOPPED"


def test_a_pod_whose_api_cannot_listen_is_never_running(store: Store, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        node = pod(store, tmp_path, port)
        node.start(running=False)
        statuses: list[str] = []
        transition = node.pods.transition

        def recorded(pod_id: str, expected: PodState, target: PodState) -> None:
            statuses.append(target.value)
            transition(pod_id, expected, target)

        node.pods.transition = recorded  # type: ignore[method-assign]
        with pytest.raises(SystemExit):
            run(node, create_app(node), "127.0.0.1", port)
    assert "RUNNING" not in statuses and node.pods.get(node.pod.pod_id).status == "STOPPED"
    assert not node.ready


def test_start_with_no_arguments_still_ends_running(store: Store, tmp_path: Path) -> None:
    node = pod(store, tmp_path, free_port())
    node.start()
    try:
        assert node.ready and node.pods.get(node.pod.pod_id).status == "RUNNING"
        node.mark_running()  # already RUNNING: nothing happens
        assert node.ready
    finally:
        node.stop()


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "[::]"])
def test_a_wildcard_listen_needs_a_public_url(tmp_path: Path, wildcard: str) -> None:
    """``0.0.0.0`` names no address anybody can reach the pod at: without ``--public-url`` the pod would
    advertise ``http://0.0.0.0:PORT`` to every redirect and placement. Refused before anything starts (the
    port is held here, so a pod that did start would fail to listen rather than serve)."""
    from tenure.cli.main import root

    data = ["--data", str(tmp_path / "d"), "--json"]
    made = CliRunner().invoke(root, [*data, "token", "create", "--admin"], obj={})
    assert made.exit_code == 0, made.output
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        listen = f"{wildcard}:{port}"
        refused = CliRunner().invoke(root, [*data, "serve", "--listen", listen, "--no-self-pull"], obj={})
    assert refused.exit_code == 2, refused.output
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "public-url-required" and f"--public-url http://HOST:{port}" in error["hint"], error
    with open_store(f"sqlite:///{tmp_path}/d/tenure.db") as store:
        assert PodRegistry(store).list() == [], "no pod row was written"
