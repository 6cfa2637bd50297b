"""The write gate: the pod API's file writes against the operations that end a project's mount here.

Engines are stopped before suspend, drain and close take their final
checkpoint, so nothing they write is lost. The files API is a writer too:
without a gate, a write acknowledged while the final checkpoint scans the
folder (or after it) would be acknowledged and then lost when the folder
goes. So each API write (and each checkpoint asked through the API, which
would otherwise race the final one on the workspace machine) holds the
project's gate open for its duration, and
suspend, hand-over and close first close the gate — waiting for the writes in
progress to finish — and refuse new ones with ``project-quiescing`` (503 with
``Retry-After``, retryable) until they are done; a retry then goes wherever the project runs
next.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from tenure.errors import ConflictError

__all__ = ["WriteGate", "ProjectQuiescingError"]


class ProjectQuiescingError(ConflictError):
    """A file write reached a project this pod is suspending, handing over or closing."""

    code = "project-quiescing"
    retryable = True
    #: a moment's wait, like a project whose owner is not reachable yet: 503 with Retry-After (ADR 0049)
    http_status = 503
    default_hint = "the project is being suspended, handed over or closed here; retry in a moment"


class WriteUnsavedError(ConflictError):
    """A durable write reached the project's folder, but the checkpoint that was to save it failed.

    Unlike a refusal answered before writing, its bytes are in the folder: the project's next checkpoint
    (a hand-over's, say) may still save them. Retry the durable write (the same bytes), on whichever pod runs
    the project now, to be told where they are saved."""

    code = "write-unsaved"
    retryable = True
    default_hint = "the bytes were written but not yet saved in a snapshot; send the durable write again"


class WriteGate:
    """Per project: API writes in progress, and whether an ending operation has closed the gate."""

    def __init__(self, drain_timeout: float = 30.0) -> None:
        self._cond = threading.Condition()
        self._writers: Counter[str] = Counter()
        self._closed: Counter[str] = Counter()
        self.drain_timeout = drain_timeout

    @contextmanager
    def writing(self, project_id: str, ref: str) -> Iterator[None]:
        """Hold the gate open for one write; refused while an ending operation runs."""
        with self._cond:
            if self._closed[project_id]:
                raise ProjectQuiescingError(f"project {ref} is being suspended, handed over or closed", project=ref)
            self._writers[project_id] += 1
        try:
            yield
        finally:
            with self._cond:
                self._writers[project_id] -= 1
                if not self._writers[project_id]:
                    del self._writers[project_id]
                self._cond.notify_all()

    @contextmanager
    def closing(self, project_id: str) -> Iterator[None]:
        """Close the gate for an ending operation: new writes refused, the ones in progress waited for."""
        with self._cond:
            self._closed[project_id] += 1
            self._cond.wait_for(lambda: not self._writers[project_id], timeout=self.drain_timeout)
        try:
            yield
        finally:
            with self._cond:
                self._closed[project_id] -= 1
                if not self._closed[project_id]:
                    del self._closed[project_id]

    def writers(self, project_id: str) -> int:
        with self._cond:
            return self._writers[project_id]
