"""The built-in intake engine: polls the intake inside each running project's folder.

::

    <project folder>/
      intake/            a tenure.intake workspace (inbox/, quarantine/, cases/, ...)

On start it opens the intake (creating it if missing) and runs one thread for
the project that polls it every ``interval`` seconds, one
:meth:`InboxProcessor.poll` per pass; every ``collect_every``-th pass also
collects the generations no case references any more and the temporary
files of writes that died (:meth:`CheckpointStore.collect`, I-132, ADR 0110). On stop it asks the thread to finish
and joins it: the pass in progress completes (a poll is crash-safe anyway).
The intake lives in the workspace, so it is checkpointed on suspend and moves
with the project; only the pod running the project polls it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tenure.intake import (
    CheckpointStore,
    InboxProcessor,
    IntakeConfig,
    LifecycleError,
    PollResult,
    ResultKind,
    Workspace,
)
from tenure.intake.collect import Collected
from tenure.projects.lifecycle import EnginesStartRequested, EnginesStopRequested

from .loader import BadEngineError

__all__ = ["IntakeEngine", "PassReport", "INTERVAL_ENV", "DEFAULT_INTERVAL", "INTAKE_FOLDER", "DEFAULT_COLLECT_EVERY"]

log = logging.getLogger("tenure.engines.intake")

#: environment variable: seconds between two passes
INTERVAL_ENV = "TENURE_INTAKE_INTERVAL"
DEFAULT_INTERVAL = 2.0
#: passes between two collections (about an hour at the default interval)
DEFAULT_COLLECT_EVERY = 1800
#: the intake's folder inside a project's workspace folder
INTAKE_FOLDER = "intake"


@dataclass(frozen=True)
class PassReport:
    """What one pass did: its results, or the exception that ended it."""

    project: str  #: ``tenant/name``
    folder: str  #: the project's workspace folder
    number: int  #: 1 for the first pass of this thread
    results: list[PollResult]
    error: BaseException | None = None
    #: what this pass collected, when it was one that collects (and the collection ran)
    collected: Collected | None = None


class IntakeEngine:
    """One polling thread per running project, keyed by its folder (see the module docstring).

    ``interval`` defaults to ``TENURE_INTAKE_INTERVAL`` or 2 seconds;
    ``max_jobs`` is handed to each poll; ``on_pass``, if given, is called
    after every pass (in the polling thread) with a :class:`PassReport`;
    every ``collect_every``-th pass (0: never) also runs a collection.
    """

    def __init__(
        self,
        interval: float | None = None,
        *,
        max_jobs: int = 100,
        config: IntakeConfig | None = None,
        on_pass: Callable[[PassReport], None] | None = None,
        collect_every: int = DEFAULT_COLLECT_EVERY,
    ) -> None:
        self.interval = interval_from_env() if interval is None else _positive(interval, "interval")
        if collect_every < 0:
            raise ValueError("collect_every must be 0 (never) or positive")
        self.collect_every = collect_every
        self.max_jobs = max_jobs
        self.config = config
        self.on_pass = on_pass
        self._pollers: dict[str, _Poller] = {}
        self._lock = threading.Lock()

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        """Open ``<folder>/intake`` (created if missing) and start its polling thread; idempotent."""
        key = os.path.abspath(folder)
        with self._lock:
            current = self._pollers.get(key)
            if current is not None and current.alive and not current.stopping:
                return
            if current is not None:
                current.stop()  # a stop that timed out earlier: let its last pass finish first
            workspace = Workspace(os.path.join(key, INTAKE_FOLDER), self.config)
            poller = _Poller(self, f"{event.tenant_id}/{event.project_name}", key, workspace)
            self._pollers[key] = poller
            poller.start()
            log.info("intake engine started for %s (every %ss): %s", poller.project, self.interval, workspace.root)

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        """Stop the project's polling thread and wait for it; nothing to do when none runs."""
        key = os.path.abspath(folder)
        with self._lock:
            poller = self._pollers.get(key)
        if poller is None:
            return
        poller.stop()
        with self._lock:
            if self._pollers.get(key) is poller:
                del self._pollers[key]
        log.info("intake engine stopped for %s/%s", event.tenant_id, event.project_name)

    def running(self) -> dict[str, threading.Thread]:
        """The polling threads alive now, by project folder."""
        with self._lock:
            return {key: p.thread for key, p in self._pollers.items() if p.alive}


class _Poller:
    def __init__(self, engine: IntakeEngine, project: str, folder: str, workspace: Workspace) -> None:
        self.engine = engine
        self.project = project
        self.folder = folder
        self.workspace = workspace
        self.halt = threading.Event()
        self.passes = 0
        self.thread = threading.Thread(target=self._run, name=f"tenure-intake {project}", daemon=True)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self.halt.is_set()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.halt.set()
        if self.thread is not threading.current_thread():
            self.thread.join()

    def _run(self) -> None:
        try:
            while not self.halt.is_set():
                self._pass()
                self.halt.wait(self.engine.interval)  # the cadence; a stop ends the wait at once
        except BaseException:
            log.critical("intake engine thread for %s ended by an exception", self.project, exc_info=True)
            raise

    def _pass(self) -> None:
        self.passes += 1
        results: list[PollResult] = []
        error: BaseException | None = None
        try:
            results = InboxProcessor(self.workspace).poll(max_jobs=self.engine.max_jobs)
        except Exception as exc:  # noqa: BLE001 - logged; the next pass runs
            error = exc
            log.exception("intake pass %d for %s failed; the next pass runs", self.passes, self.project)
        else:
            _log_results(self.project, self.passes, results)
        collected = (
            self._collect() if self.engine.collect_every and self.passes % self.engine.collect_every == 0 else None
        )
        callback = self.engine.on_pass
        if callback is not None:
            try:
                callback(PassReport(self.project, self.folder, self.passes, results, error, collected))
            except Exception:  # noqa: BLE001 - a listener's failure must not end the polling
                log.exception("intake on_pass callback for %s failed", self.project)

    def _collect(self) -> Collected | None:
        try:
            collected = CheckpointStore(self.workspace).collect()
        except LifecycleError as exc:  # worker-busy: a CLI command holds the intake; the next collection runs
            log.debug("intake collection for %s skipped: %s", self.project, exc.code)
            return None
        except Exception:  # noqa: BLE001 - logged; the polling goes on
            log.exception("intake collection for %s failed; the next one runs", self.project)
            return None
        if collected.generations or collected.temporary or collected.skipped:
            log.log(
                logging.WARNING if collected.skipped else logging.INFO,
                "intake collection for %s: %d generations and %d temporary files removed, %d folders skipped %s",
                self.project,
                len(collected.generations),
                collected.temporary,
                len(collected.skipped),
                collected.skipped or "",
            )
        return collected


def _log_results(project: str, number: int, results: list[PollResult]) -> None:
    """One line per non-empty pass: counts by kind; WARNING when something was quarantined or failed."""
    if not results:
        return
    counts = Counter(r.kind for r in results)
    summary = ", ".join(f"{counts[kind]} {kind.value}" for kind in ResultKind if counts[kind])
    if counts[ResultKind.QUARANTINED] or counts[ResultKind.ERROR]:
        level = logging.WARNING
    elif set(counts) == {ResultKind.BUSY}:
        level = logging.DEBUG  # another worker (a CLI poll) holds the lock: nothing happened here
    else:
        level = logging.INFO
    log.log(level, "intake pass %d for %s: %s", number, project, summary)


def interval_from_env() -> float:
    """``TENURE_INTAKE_INTERVAL`` in seconds (a positive number), or 2.0 when unset."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    return _positive(value, INTERVAL_ENV, raw)


def _positive(value: float, what: str, raw: object = None) -> float:
    if not value > 0 or value == float("inf"):
        raise BadEngineError(
            f"intake engine: {what} must be a positive number of seconds, not {raw if raw is not None else value!r}",
            hint=f"set {INTERVAL_ENV} to a positive number of seconds (default {DEFAULT_INTERVAL})",
            spec="intake",
        )
    return float(value)
