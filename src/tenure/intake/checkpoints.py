"""CheckpointStore: advance a stored package one confirmed step at a time.

Every successful call writes exactly one new generation holding the
checkpoint artifact and any artifact additions. A repeated ``step_id`` with
the same request returns the latest confirmed package and writes nothing; the
same ``step_id`` with a different request raises ``step-id-reused``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from .canonical import utc_now
from .collect import Collected, collect
from .commit import commit
from .errors import CaseNotFoundError, StepReusedError, TransitionRefusedError
from .machine import IntakeMachine, intake_machine
from .package import Checkpoint, Package, checkpoint_path
from .plan import AdvanceRequest, make_request, plan_advance
from .storage import CaseStorage
from .workspace import Workspace
from .writer import export_package

__all__ = ["CheckpointStore"]

Clock = Callable[[], datetime]


class CheckpointStore:
    """Explicit controller operations on stored packages."""

    def __init__(self, workspace: Workspace, *, clock: Clock = utc_now) -> None:
        self.workspace = workspace
        self.machine: IntakeMachine = intake_machine(workspace.config.phases)
        self.storage = CaseStorage(workspace)
        self._clock = clock

    # ------------------------------------------------------------------ writes

    def advance(
        self,
        case_id: str,
        package_id: str,
        state: Any,
        *,
        step_id: str,
        details: Mapping[str, Any] | None = None,
        artifacts: Mapping[str, bytes] | None = None,
        artifact_pointers: Mapping[str, str] | None = None,
        reason: str | None = None,
        retry_at: datetime | None = None,
    ) -> Package:
        """Move the package to ``state`` as step ``step_id``; return the confirmed package.

        ``artifacts`` maps new file paths to bytes; ``artifact_pointers`` maps
        manifest ``artifacts`` names to paths; ``reason`` and ``retry_at`` are
        required for (and only for) BLOCKED.
        """
        request = make_request(
            self.machine,
            self.workspace.config,
            state,
            step_id=step_id,
            details=details,
            artifacts=artifacts,
            pointers=artifact_pointers,
            reason=reason,
            retry_at=retry_at,
        )
        return self._run(case_id, package_id, step_id, lambda _current: request)

    def block(
        self,
        case_id: str,
        package_id: str,
        *,
        step_id: str,
        reason: str,
        retry_at: datetime,
        details: Mapping[str, Any] | None = None,
    ) -> Package:
        """Interrupt the active state until ``retry_at`` (timezone-aware)."""
        return self.advance(
            case_id, package_id, "BLOCKED", step_id=step_id, details=details, reason=reason, retry_at=retry_at
        )

    def resume(
        self, case_id: str, package_id: str, *, step_id: str, details: Mapping[str, Any] | None = None
    ) -> Package:
        """Return a BLOCKED package to the state it interrupted, once its retry time passed."""

        def build(current: Package) -> AdvanceRequest:
            done = current.checkpoint_at(checkpoint_path(step_id))
            if done is not None:
                target: str | None = done.state
            elif current.state.value != "BLOCKED":
                raise TransitionRefusedError(
                    f"{case_id}/{package_id} is {current.state.value}, not BLOCKED",
                    code="transition-not-allowed",
                    state=current.state.value,
                )
            else:
                target = current.resume_state
            return make_request(self.machine, self.workspace.config, target, step_id=step_id, details=details)

        return self._run(case_id, package_id, step_id, build)

    def reopen(
        self, case_id: str, package_id: str, *, step_id: str, details: Mapping[str, Any] | None = None
    ) -> Package:
        """HANDED_OFF or FAILED_TO_ANALYZE → REOPENED (analysis revision + 1)."""
        return self.advance(case_id, package_id, "REOPENED", step_id=step_id, details=details)

    def fail(self, case_id: str, package_id: str, *, step_id: str, details: Mapping[str, Any] | None = None) -> Package:
        """An active (or blocked) package → FAILED_TO_ANALYZE."""
        return self.advance(case_id, package_id, "FAILED_TO_ANALYZE", step_id=step_id, details=details)

    def _run(self, case_id: str, package_id: str, step_id: str, build: Callable[[Package], AdvanceRequest]) -> Package:
        with self.workspace.locked(case_id):
            current = self._load(case_id, package_id, repair=True)
            request = build(current)
            done = current.checkpoint_at(checkpoint_path(step_id))
            if done is not None:
                return self._repeat(current, done, request)
            now = self._clock()
            plan = plan_advance(current, request, self.machine, now, self.workspace.config.limits)
            folder = self.workspace.case_dir(case_id, package_id)
            return commit(self.workspace, current, plan, folder, now)

    @staticmethod
    def _repeat(current: Package, done: Checkpoint, request: AdvanceRequest) -> Package:
        if done.request_hash == request.hash:
            return current
        raise StepReusedError(
            f"step {request.step_id!r} was already used for a different request (generation {done.generation})",
            step_id=request.step_id,
            generation=done.generation,
        )

    # ------------------------------------------------------------------ reads

    def _load(self, case_id: str, package_id: str, *, repair: bool = False) -> Package:
        package = self.storage.load_current(case_id, package_id, repair=repair)
        if package is None:
            raise CaseNotFoundError(
                f"no stored package {package_id!r} in case {case_id!r}", case_id=case_id, package_id=package_id
            )
        return package

    def current(self, case_id: str, package_id: str) -> Package:
        """The latest confirmed generation, fully validated (never the index)."""
        return self._load(case_id, package_id)

    def generation(self, case_id: str, package_id: str) -> int:
        return self.current(case_id, package_id).generation

    def generations(self, case_id: str, package_id: str) -> list[int]:
        """Stored generation numbers, oldest first."""
        return self.storage.generations(self.workspace.case_dir(case_id, package_id))

    def checkpoints(self, case_id: str, package_id: str) -> list[Checkpoint]:
        """The checkpoint chain of the current generation, oldest first."""
        return list(self.current(case_id, package_id).history)

    def export(self, case_id: str, package_id: str, target: str | os.PathLike[str]) -> Package:
        """Write the current generation as one complete package (format v1) at ``target``; return it read back.

        Stored generations need not be complete packages (stored format v2,
        ADR 0110); this is the package a producer or another intake takes:
        the same files, history and content fingerprint.
        """
        return export_package(self.current(case_id, package_id), Path(target), self.workspace.config)

    def collect(self) -> Collected:
        """Remove unreferenced generations and abandoned temporary files (I-132; :mod:`tenure.intake.collect`)."""
        return collect(self.workspace)

    def packages(self) -> list[Package]:
        """The current generation of every stored package."""
        found = []
        for folder in self.workspace.case_dirs():
            package = self.storage.load_dir(folder)
            if package is not None:
                found.append(package)
        return found
