"""The intake engine on real folders: a package dropped into a project's inbox is admitted."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tenure.engines import IntakeEngine
from tenure.intake import CheckpointStore, InboxProcessor, PollResult, ResultKind, State, Workspace
from tenure.projects import EnginesStartRequested, EnginesStopRequested
from tests.integration.engines.support import WAIT, Passes, drop

START = EnginesStartRequested("acme", "p")
STOP = EnginesStopRequested("acme", "p")


def stop_within(engine: IntakeEngine, folder: str, event: EnginesStopRequested = STOP) -> None:
    """Stop, failing the test (instead of hanging it) if the stop does not return."""
    stopper = threading.Thread(target=engine.stop, args=(event, folder), daemon=True)
    stopper.start()
    stopper.join(WAIT)
    assert not stopper.is_alive(), "the intake engine's stop did not return"


@pytest.fixture
def engines() -> Any:
    started: list[tuple[IntakeEngine, str]] = []

    def make(folder: str, **kw: Any) -> tuple[IntakeEngine, Passes]:
        passes = Passes()
        engine = IntakeEngine(kw.pop("interval", 0.05), on_pass=passes, **kw)
        started.append((engine, folder))
        return engine, passes

    yield make
    for engine, folder in started:
        stop_within(engine, folder)


def test_start_creates_the_intake_and_admits_a_dropped_package(tmp_path: Path, engines: Any) -> None:
    folder = str(tmp_path / "project")
    os.makedirs(folder)
    engine, passes = engines(folder)
    engine.start(START, folder)
    intake = Path(folder) / "intake"
    assert (intake / "inbox").is_dir() and (intake / "cases").is_dir()  # opened, created when missing
    drop(intake, tmp_path / "staging")
    report = passes.until(ResultKind.ACCEPTED)
    assert report.project == "acme/p" and report.error is None
    ((accepted,),) = [[r for r in report.results if r.kind is ResultKind.ACCEPTED]]
    assert (accepted.case_id, accepted.package_id, accepted.generation) == ("case-A", "pkg-1", 1)
    stored = CheckpointStore(Workspace(intake, create=False)).current("case-A", "pkg-1")
    assert stored.generation == 1 and stored.state is State.VALIDATED
    assert list((intake / "inbox").iterdir()) == []
    (thread,) = engine.running().values()
    assert thread.is_alive()
    engine.stop(STOP, folder)
    assert not thread.is_alive() and engine.running() == {}


def test_one_thread_per_project_and_start_is_idempotent(tmp_path: Path, engines: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    engine, passes = engines(a)
    engine.start(EnginesStartRequested("acme", "a"), a)
    engine.start(EnginesStartRequested("acme", "a"), a)
    engine.start(  # one engine instance serves every project of the pod
        EnginesStartRequested("acme", "b"), b
    )
    threads = engine.running()
    assert set(threads) == {os.path.abspath(a), os.path.abspath(b)}
    drop(Path(b) / "intake", tmp_path / "staging", "case-B", "pkg-B")
    report = passes.until(ResultKind.ACCEPTED, b)
    assert report.project == "acme/b"
    assert not (Path(a) / "intake" / "cases").exists() or not any((Path(a) / "intake" / "cases").iterdir())
    engine.stop(EnginesStopRequested("acme", "b"), b)
    assert not threads[os.path.abspath(b)].is_alive() and threads[os.path.abspath(a)].is_alive()
    engine.stop(EnginesStopRequested("acme", "a"), a)
    assert engine.running() == {}
    engine.stop(EnginesStopRequested("acme", "a"), a)  # stopping what does not run is a no-op


def test_stop_ends_the_wait_between_passes_at_once(tmp_path: Path, engines: Any) -> None:
    folder = str(tmp_path / "p")
    engine, passes = engines(folder, interval=3600.0)
    engine.start(START, folder)
    assert passes.next().number == 1  # the first pass runs at start; the next would be an hour away
    (thread,) = engine.running().values()
    stop_within(engine, folder)
    assert not thread.is_alive()


def test_a_failing_pass_is_logged_and_the_next_pass_runs(
    tmp_path: Path, engines: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = {"n": 0}
    real_poll = InboxProcessor.poll

    def flaky(self: InboxProcessor, max_jobs: int = 100) -> list[PollResult]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("the disk hiccuped")
        return real_poll(self, max_jobs)

    monkeypatch.setattr(InboxProcessor, "poll", flaky)
    caplog.set_level(logging.INFO, logger="tenure.engines.intake")
    folder = str(tmp_path / "p")
    engine, passes = engines(folder)
    engine.start(START, folder)
    first = passes.next()
    assert isinstance(first.error, OSError) and first.results == []
    drop(Path(folder) / "intake", tmp_path / "staging")
    report = passes.until(ResultKind.ACCEPTED)
    assert report.number > 1 and report.error is None
    failed = [r for r in caplog.records if r.levelno == logging.ERROR and "failed" in r.getMessage()]
    assert failed and failed[0].exc_info is not None and "the disk hiccuped" in str(failed[0].exc_info[1])
    admitted = [r.getMessage() for r in caplog.records if "1 ACCEPTED" in r.getMessage()]
    assert admitted == [f"intake pass {report.number} for acme/p: 1 ACCEPTED"]
    assert next(iter(engine.running().values())).is_alive()


def test_a_failing_on_pass_callback_does_not_end_the_polling(tmp_path: Path) -> None:
    seen: list[int] = []
    second = threading.Event()

    def callback(report: Any) -> None:
        seen.append(report.number)
        if report.number >= 2:
            second.set()
        raise RuntimeError("listener bug")

    folder = str(tmp_path / "p")
    engine = IntakeEngine(0.01, on_pass=callback)
    engine.start(START, folder)
    try:
        assert second.wait(WAIT)
    finally:
        stop_within(engine, folder)
    assert seen[:2] == [1, 2] and engine.running() == {}


def test_quiet_passes_log_nothing(tmp_path: Path, engines: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure.engines.intake")
    folder = str(tmp_path / "p")
    engine, passes = engines(folder)
    engine.start(START, folder)
    for _ in range(3):
        assert passes.next().results == []
    assert [r for r in caplog.records if "intake pass" in r.getMessage()] == []


def test_every_nth_pass_collects_unreferenced_generations(tmp_path: Path, engines: Any) -> None:
    """I-132: the engine runs the collection (ADR 0110) every ``collect_every``-th pass."""
    from tenure.intake import IntakeConfig

    folder = str(tmp_path / "project")
    config = IntakeConfig(chain_span=2)
    ws = Workspace(Path(folder) / "intake", config)
    drop(ws.root, tmp_path / "staging")
    InboxProcessor(ws).poll()
    store = CheckpointStore(ws)
    for i in range(4):  # generation 3 closes a span: generation 2 is no longer referenced
        store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id=f"s{i}")
    case = ws.case_dir("case-A", "pkg-1")
    (case / ".tmp-dead.zip").write_bytes(b"left by a writer that died")
    engine, passes = engines(folder, config=config, collect_every=2)
    engine.start(START, folder)
    assert passes.next().collected is None  # pass 1 only polls
    report = passes.next()
    assert report.number == 2 and report.collected is not None
    assert [Path(p).name for p in report.collected.generations] == ["g00000002.zip", "g00000004.zip"]
    assert report.collected.temporary == 1 and not (case / ".tmp-dead.zip").exists()
    assert [c.step_id for c in store.checkpoints("case-A", "pkg-1")][1:] == ["s0", "s1", "s2", "s3"]
