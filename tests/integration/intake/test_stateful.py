"""advance / block / resume / reopen / fail against an independent model of the
intake machine (hypothesis RuleBasedStateMachine)."""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tenure.intake import CheckpointStore, InboxProcessor, LifecycleError, Workspace
from tests.support.intake import PHASES, put

LINEAR = list(PHASES)
ACTIVE = LINEAR[2:7]
ALL = LINEAR + ["BLOCKED", "FAILED_TO_ANALYZE", "REOPENED"]


class IntakeModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="intake-model-"))
        self.now = datetime(2030, 1, 1, tzinfo=UTC)
        self.ws = Workspace(self.dir / "ws")
        put(self.ws, "p.zip")
        InboxProcessor(self.ws, clock=lambda: self.now).poll()
        self.store = CheckpointStore(self.ws, clock=lambda: self.now)
        self.state, self.revision, self.retries, self.generation = "VALIDATED", 0, 0, 1
        self.resume_state: str | None = None
        self.retry_at: datetime | None = None
        self.steps = 0
        self.last: tuple[str, dict[str, object]] | None = None

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---------------------------------------------------------------- the model

    def legal(self, target: str) -> bool:
        src = self.state
        if src in LINEAR and target in LINEAR and LINEAR.index(target) == LINEAR.index(src) + 1:
            return True
        if src in ACTIVE and target in (src, "BLOCKED", "FAILED_TO_ANALYZE"):
            return True
        if src == "BLOCKED":
            return target == "FAILED_TO_ANALYZE" or (
                target == self.resume_state and self.retry_at is not None and self.now >= self.retry_at
            )
        if src in ("HANDED_OFF", "FAILED_TO_ANALYZE"):
            return target == "REOPENED"
        return src == "REOPENED" and target == "BUILDING_CASE"

    def apply(self, target: str, retry_at: datetime | None = None) -> None:
        if target == "BUILDING_CASE" and self.state == "VALIDATED" and self.revision == 0:
            self.revision = 1
        if target == "REOPENED":
            self.revision += 1
        if target == "BLOCKED":
            self.retries += 1
            self.resume_state, self.retry_at = self.state, retry_at
        else:
            self.resume_state, self.retry_at = None, None
        self.state = target
        self.generation += 1

    def call(self, target: str, **kwargs: object) -> None:
        self.steps += 1
        step = f"step-{self.steps}"
        legal = self.legal(target)
        try:
            package = self.store.advance("case-A", "pkg-1", target, step_id=step, **kwargs)  # type: ignore[arg-type]
        except LifecycleError as error:
            assert not legal, f"{self.state} -> {target} refused: {error}"
            assert self.store.generation("case-A", "pkg-1") == self.generation
            return
        assert legal, f"{self.state} -> {target} was allowed"
        self.apply(target, kwargs.get("retry_at"))  # type: ignore[arg-type]
        assert package.generation == self.generation
        self.last = (step, {"state": target, **kwargs})

    # ---------------------------------------------------------------- rules

    @rule(state=st.sampled_from(ALL[1:]))
    def advance(self, state: str) -> None:
        if state == "BLOCKED":
            self.call(state, reason="waiting", retry_at=self.now + timedelta(hours=1))
        else:
            self.call(state)

    @rule(hours=st.integers(min_value=-2, max_value=2))
    def block(self, hours: int) -> None:
        self.call("BLOCKED", reason="tool unavailable", retry_at=self.now + timedelta(hours=hours))

    @rule()
    def resume(self) -> None:
        self.steps += 1
        target = self.resume_state
        legal = self.state == "BLOCKED" and target is not None and self.legal(target)
        try:
            package = self.store.resume("case-A", "pkg-1", step_id=f"step-{self.steps}")
        except LifecycleError:
            assert not legal
            return
        assert legal and target is not None
        self.apply(target)
        assert package.state.value == target

    @rule()
    def reopen(self) -> None:
        self.call("REOPENED")

    @rule()
    def fail(self) -> None:
        self.call("FAILED_TO_ANALYZE")

    @rule(hours=st.integers(min_value=1, max_value=3))
    def tick(self, hours: int) -> None:
        self.now += timedelta(hours=hours)

    @rule()
    def repeat_last(self) -> None:
        if self.last is None:
            return
        step, request = self.last
        state = request.pop("state")
        package = self.store.advance("case-A", "pkg-1", state, step_id=step, **request)  # type: ignore[arg-type]
        request["state"] = state
        assert package.generation == self.generation

    # ---------------------------------------------------------------- invariants

    @invariant()
    def matches_model(self) -> None:
        package = self.store.current("case-A", "pkg-1")
        assert package.state.value == self.state
        assert package.analysis_revision == self.revision
        assert package.retry_count == self.retries
        assert package.generation == self.generation == len(package.chain)
        assert package.manifest["history"]["revisions"] == self.revision
        assert package.resume_state == self.resume_state


IntakeModel.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_intake_machine_model = IntakeModel.TestCase
