"""Engines through the real lifecycle service (SQLite + a local object folder, or PostgreSQL).

The intake engine admits packages while the project runs, stops on suspend,
and the intake comes back with the project. A failing engine leaves the
project in a recorded error, never silently RUNNING.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.engines import IntakeEngine
from tenure.intake import CheckpointStore, ResultKind, Workspace
from tenure.projects import (
    EngineFailedError,
    EnginesStartRequested,
    EnginesStopRequested,
    LifecycleConfig,
    LifecycleService,
    PodIdentity,
    ProjectStore,
)
from tenure.states import ProjectStatus
from tenure.store import Store
from tests.integration.engines.support import WAIT, Passes, drop

S = ProjectStatus
T = "acme"


class Pod:
    def __init__(self, store: Store, objects: Any, root: Path, engines: list[Any], stop_timeout: float = 5.0) -> None:
        self.service = LifecycleService(
            store,
            objects,
            str(root / "data"),
            PodIdentity.fresh("a", "http://a:8470"),
            config=LifecycleConfig(engine_stop_timeout=stop_timeout),
            engines=engines,
        )
        self.projects = ProjectStore(store)

    def intake(self, name: str = "p") -> Path:
        return Path(self.service.folder(self.projects.get(T, name))) / "intake"


@pytest.fixture
def intake_engine() -> Iterator[tuple[IntakeEngine, Passes]]:
    passes = Passes()
    engine = IntakeEngine(0.05, on_pass=passes)
    yield engine, passes
    for folder in list(engine.running()):
        engine.stop(EnginesStopRequested(T, "cleanup"), folder)


def test_the_intake_engine_runs_with_the_project_and_its_intake_moves_with_it(
    store: Store, objects: Any, tmp_path: Path, intake_engine: tuple[IntakeEngine, Passes]
) -> None:
    engine, passes = intake_engine
    pod = Pod(store, objects, tmp_path, [engine])
    pod.projects.create(T, "p")
    assert pod.service.bring(T, "p").status is S.RUNNING
    intake = pod.intake()
    folder = str(intake.parent)
    drop(intake, tmp_path / "staging")
    passes.until(ResultKind.ACCEPTED, folder)
    assert CheckpointStore(Workspace(intake, create=False)).current("case-A", "pkg-1").generation == 1
    (thread,) = engine.running().values()

    suspended = pod.service.suspend(T, "p")
    assert suspended.status is S.SUSPENDED and suspended.error is None
    assert not thread.is_alive() and engine.running() == {}
    assert not os.path.exists(folder)  # checkpointed, then removed from this host

    assert pod.service.bring(T, "p").status is S.RUNNING
    restored = CheckpointStore(Workspace(intake, create=False)).current("case-A", "pkg-1")
    assert restored.generation == 1 and restored.case_id == "case-A"
    assert set(engine.running()) == {os.path.abspath(folder)}
    drop(intake, tmp_path / "staging", "case-B", "pkg-2")  # and it polls again after the bring
    passes.until(ResultKind.ACCEPTED, folder)
    assert CheckpointStore(Workspace(intake, create=False)).current("case-B", "pkg-2").generation == 1
    assert pod.service.suspend(T, "p").status is S.SUSPENDED and engine.running() == {}


class FailingStart:
    def start(self, event: EnginesStartRequested, folder: str) -> None:
        raise RuntimeError("no licence for this project")

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        pass


class StuckStop:
    """Stops only once ``release`` is set; raises instead when ``refuse`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.refuse = False

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        pass

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        if self.refuse:
            raise RuntimeError("still flushing")
        self.release.wait(WAIT)


def test_an_engine_that_fails_to_start_leaves_the_project_recovering_with_the_error(
    store: Store, objects: Any, tmp_path: Path
) -> None:
    failing = FailingStart()
    pod = Pod(store, objects, tmp_path, [failing])
    project = pod.projects.create(T, "p")
    with pytest.raises(EngineFailedError) as info:
        pod.service.bring(T, "p")
    assert info.value.code == "engine-failed" and "no licence for this project" in info.value.message
    failed = pod.projects.get(T, "p")
    assert failed.status is S.RECOVERING
    assert failed.error == "engine start failed: no licence for this project"
    assert project.id not in pod.service.registry
    pod.service.engines.remove(failing)  # fixed: the next bring retries and clears the error
    brought = pod.service.bring(T, "p")
    assert brought.status is S.RUNNING and brought.error is None


def test_an_engine_stop_past_the_timeout_leaves_the_project_suspending_with_the_error(
    store: Store, objects: Any, tmp_path: Path, intake_engine: tuple[IntakeEngine, Passes]
) -> None:
    engine, _ = intake_engine
    stuck = StuckStop()
    pod = Pod(store, objects, tmp_path, [engine, stuck], stop_timeout=0.2)
    pod.projects.create(T, "p")
    pod.service.bring(T, "p")
    try:
        with pytest.raises(EngineFailedError) as info:
            pod.service.suspend(T, "p")
        assert info.value.code == "engine-failed" and "stays SUSPENDING" in info.value.message
        stopped = pod.projects.get(T, "p")
        assert stopped.status is S.SUSPENDING and stopped.error == "engine stop timed out"
        assert engine.running() == {}  # the intake engine, before it, did stop
        assert os.path.isdir(pod.intake())  # no checkpoint while an engine may still be writing
    finally:
        stuck.release.set()
    done = pod.service.suspend(T, "p")
    assert done.status is S.SUSPENDED and done.error is None


def test_an_engine_stop_that_raises_leaves_the_project_suspending_with_the_error(
    store: Store, objects: Any, tmp_path: Path
) -> None:
    stuck = StuckStop()
    stuck.refuse = True
    pod = Pod(store, objects, tmp_path, [stuck], stop_timeout=5.0)
    pod.projects.create(T, "p")
    pod.service.bring(T, "p")
    with pytest.raises(EngineFailedError):
        pod.service.suspend(T, "p")
    stopped = pod.projects.get(T, "p")
    assert stopped.status is S.SUSPENDING and stopped.error == "engine stop failed: still flushing"
    stuck.refuse = False
    stuck.release.set()
    assert pod.service.suspend(T, "p").status is S.SUSPENDED
