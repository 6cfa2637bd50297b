"""Helpers for the engine tests: drop a real package into an inbox, wait on pass reports."""

from __future__ import annotations

import os
import queue
import uuid
from pathlib import Path

from tenure.engines import PassReport
from tenure.intake import ResultKind, Workspace
from tests.support.intake import put

WAIT = 30.0  # seconds before a wait gives up (a failure, never a cadence)


def drop(intake: str | Path, staging: Path, case: str = "case-A", package: str = "pkg-1") -> Path:
    """Build a valid NEW package outside the inbox, then move it in whole (a poll never sees half a file)."""
    staging_ws = Workspace(staging)
    built = put(staging_ws, f"{uuid.uuid4().hex}.zip", case, package)
    target = Path(intake) / "inbox" / f"{case}-{package}.zip"
    os.replace(built, target)
    return target


class Passes:
    """An ``on_pass`` callback that queues every report; tests wait on it with a timeout."""

    def __init__(self) -> None:
        self.reports: queue.Queue[PassReport] = queue.Queue()

    def __call__(self, report: PassReport) -> None:
        self.reports.put(report)

    def next(self) -> PassReport:
        return self.reports.get(timeout=WAIT)

    def until(self, kind: ResultKind, folder: str | None = None) -> PassReport:
        """The first pass (from now on) whose results include ``kind``, for ``folder`` if given."""
        while True:
            report = self.next()
            if folder is not None and report.folder != os.path.abspath(folder):
                continue
            if any(r.kind is kind for r in report.results):
                return report
