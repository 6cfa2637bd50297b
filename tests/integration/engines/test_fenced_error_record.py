"""A failure of a bring or a suspend whose pod was fenced meanwhile: the failure is raised, not the fence.

The lifecycle records a failed workspace init, engine start or engine stop
on the project (``error``) under the pod's generation. When another pod
fenced it in the meantime, the record is refused (stale generation); that
refusal is logged, and the error the caller sees is still the one that
happened: the damaged head, the engine that would not start or stop.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from tenure.errors import IntegrityError
from tenure.projects import EngineFailedError, EnginesStartRequested, EnginesStopRequested, PodIdentity
from tenure.states import ProjectStatus
from tenure.store import Store
from tests.integration.engines.test_lifecycle_engines import Pod

T = "acme"


class Fencer:
    """Fences the project for another pod when it is called (a takeover landing mid-operation)."""

    def __init__(self, pod: Pod) -> None:
        self.pod = pod
        self.other = PodIdentity.fresh("b", "http://b:8470")

    def __call__(self) -> None:
        project = self.pod.projects.get(T, "p")
        self.pod.service.ownership.fence(project, self.other.pod_id, self.other.node_name)


class FencedThenFails:
    """An engine during whose start (or stop, once ``on_stop``) the project is fenced, and which then fails."""

    def __init__(self, fence: Fencer | None = None) -> None:
        self.fence = fence
        self.on_stop = False

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        if self.fence is not None and not self.on_stop:
            self.fence()
            raise RuntimeError("no licence for this project")

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        if self.fence is not None and self.on_stop:
            self.fence()
            raise RuntimeError("still flushing")


def _fenced_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tenure.lifecycle" and "not recorded" in r.getMessage()]


def test_an_engine_start_failure_of_a_fenced_pod_is_raised_and_the_refused_record_logged(
    store: Store, objects: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = FencedThenFails()
    pod = Pod(store, objects, tmp_path, [engine])
    pod.projects.create(T, "p")
    engine.fence = Fencer(pod)
    with caplog.at_level(logging.WARNING, logger="tenure.lifecycle"), pytest.raises(EngineFailedError) as raised:
        pod.service.bring(T, "p")
    assert "no licence for this project" in raised.value.message
    (logged,) = _fenced_records(caplog)
    assert "engine start failed: no licence for this project" in logged and "stale-generation" in logged
    assert pod.projects.get(T, "p").error is None  # the fenced pod wrote nothing


def test_an_engine_stop_failure_of_a_fenced_pod_is_raised_and_the_refused_record_logged(
    store: Store, objects: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = FencedThenFails()
    pod = Pod(store, objects, tmp_path, [engine])
    pod.projects.create(T, "p")
    pod.service.bring(T, "p")
    engine.fence, engine.on_stop = Fencer(pod), True
    with caplog.at_level(logging.WARNING, logger="tenure.lifecycle"), pytest.raises(EngineFailedError) as raised:
        pod.service.suspend(T, "p")
    assert "failed: still flushing" in raised.value.message
    (logged,) = _fenced_records(caplog)
    assert "engine stop failed: still flushing" in logged


def test_a_damaged_head_found_by_a_fenced_pod_is_raised_and_the_refused_record_logged(
    store: Store, objects: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = Pod(store, objects, tmp_path, [])
    project = pod.projects.create(T, "p")
    pod.service.bring(T, "p")
    with open(os.path.join(pod.service.folder(project), "data.bin"), "wb") as fh:
        fh.write(os.urandom(2 << 20))
    assert pod.service.suspend(T, "p").status is ProjectStatus.SUSPENDED
    objects.delete_many([oid for oid, _ in objects.list_ids()])  # the head's objects are gone

    fence, init_folder = Fencer(pod), pod.service.workspaces.init_folder

    def fenced_init_folder(*args: Any, **kwargs: Any) -> str:
        fence()  # another pod takes the project over while this one restores it
        return init_folder(*args, **kwargs)

    monkeypatch.setattr(pod.service.workspaces, "init_folder", fenced_init_folder)
    with caplog.at_level(logging.WARNING, logger="tenure.lifecycle"), pytest.raises(IntegrityError) as raised:
        pod.service.bring(T, "p")
    assert raised.value.code in ("snapshot-damaged", "object-missing", "snapshot-degraded")
    (logged,) = _fenced_records(caplog)
    assert "workspace init failed" in logged
