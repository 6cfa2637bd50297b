"""The intake state machine, built with the guarded kit of :mod:`tenure.states`.

The linear sequence is NEW → VALIDATED → BUILDING_CASE → <phases> →
OUTPUT_READY → HANDED_OFF, where <phases> is configurable (default
INTERPRETING → HYPOTHESIZING → DIAGNOSING → REPORTING). The *active* states
are BUILDING_CASE and the phases: they may checkpoint in place (a declared
self-loop), become BLOCKED or become FAILED_TO_ANALYZE. BLOCKED returns to
the state it interrupted through a guarded edge, only after the retry time.
HANDED_OFF and FAILED_TO_ANALYZE may be REOPENED; REOPENED proceeds only to
BUILDING_CASE.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from tenure.errors import IllegalTransitionError
from tenure.states import Guard, Machine

from .config import DEFAULT_PHASES
from .errors import RequestRejectedError, TransitionRefusedError

__all__ = ["State", "IntakeMachine", "intake_machine", "documented_machines", "ROUTES"]


class State(str, enum.Enum):
    """Every state of the default intake machine; values equal manifest values."""

    NEW = "NEW"
    VALIDATED = "VALIDATED"
    BUILDING_CASE = "BUILDING_CASE"
    INTERPRETING = "INTERPRETING"
    HYPOTHESIZING = "HYPOTHESIZING"
    DIAGNOSING = "DIAGNOSING"
    REPORTING = "REPORTING"
    OUTPUT_READY = "OUTPUT_READY"
    HANDED_OFF = "HANDED_OFF"
    BLOCKED = "BLOCKED"
    FAILED_TO_ANALYZE = "FAILED_TO_ANALYZE"
    REOPENED = "REOPENED"


#: The logical routing vocabulary (manifest ``routing``); never a physical move.
ROUTES = ("inbox", "cases", "outbox", "review")

_FIXED = ("NEW", "VALIDATED", "BUILDING_CASE", "OUTPUT_READY", "HANDED_OFF", "BLOCKED", "FAILED_TO_ANALYZE", "REOPENED")


def _resume_guard(record: Mapping[str, Any], _src: Any, dst: Any) -> str | None:
    """BLOCKED → X: only to the recorded interrupted state, only when due."""
    if record.get("resume_state") != dst.value:
        return f"the blocked step interrupted {record.get('resume_state')}, not {dst.value}"
    retry_at: datetime | None = record.get("retry_at")
    now: datetime = record["now"]
    if retry_at is None or now < retry_at:
        return f"the retry time {retry_at.isoformat() if retry_at else '?'} has not passed"
    return None


@dataclass(frozen=True)
class IntakeMachine:
    """The kit machine plus what the intake needs to explain a refusal."""

    machine: Machine[Any]
    states: type[enum.Enum]
    linear: tuple[str, ...]
    active: frozenset[str]

    def state(self, value: Any) -> Any:
        """The machine's member for ``value`` (a member or its string)."""
        raw = value.value if isinstance(value, enum.Enum) else value
        try:
            return self.states(raw)
        except ValueError:
            raise RequestRejectedError(f"unknown state {raw!r}", code="unknown-state", state=str(raw)) from None

    def routing(self, state: Any) -> str:
        """Where a package in ``state`` belongs, logically (I-59, I-124)."""
        name = self.state(state).value
        if name == "NEW" or name == "BLOCKED":
            return "inbox"
        if name == "FAILED_TO_ANALYZE":
            return "review"
        if name in ("OUTPUT_READY", "HANDED_OFF"):
            return "outbox"
        return "cases"

    def check(self, state: Any, target: Any, record: Mapping[str, Any]) -> Any:
        """Return the target member, or raise :class:`TransitionRefusedError` with a code."""
        src, dst = self.state(state), self.state(target)
        try:
            return self.machine.check(src, dst, record)
        except IllegalTransitionError as error:
            code = self._classify(src.value, dst.value, record)
            raise TransitionRefusedError(
                error.message,
                code=code,
                machine=self.machine.name,
                state=src.value,
                target=dst.value,
                reason=error.context.get("reason"),
            ) from None

    def _classify(self, src: str, dst: str, record: Mapping[str, Any]) -> str:
        if src == "BLOCKED" and dst in self.active:
            if record.get("resume_state") != dst:
                return "resume-state-mismatch"
            return "resume-too-early"
        if src in self.linear and dst in self.linear:
            i, j = self.linear.index(src), self.linear.index(dst)
            if j > i + 1:
                return "transition-skip"
            if j < i:
                return "transition-regression"
        return "transition-not-allowed"


def _custom_states(phases: tuple[str, ...]) -> type[enum.Enum]:
    members = [(n, n) for n in (*_FIXED[:3], *phases, *_FIXED[3:])]
    return enum.Enum("IntakeState", members, type=str)  # type: ignore[return-value]


def _build(phases: tuple[str, ...]) -> IntakeMachine:
    for name in phases:
        if not name or not name.isupper() or name in _FIXED or phases.count(name) > 1:
            raise ValueError(f"invalid phase name {name!r}")
    states = State if phases == DEFAULT_PHASES else _custom_states(phases)
    s = states
    linear = ("NEW", "VALIDATED", "BUILDING_CASE", *phases, "OUTPUT_READY", "HANDED_OFF")
    active = ("BUILDING_CASE", *phases)
    edges: dict[tuple[Any, Any], Guard | None] = {}
    labels: dict[tuple[Any, Any], str] = {}
    for a, b in zip(linear, linear[1:]):
        edges[(s(a), s(b))] = None
        labels[(s(a), s(b))] = "admission" if a == "NEW" else "next phase"
    for a in active:
        edges[(s(a), s(a))] = None
        labels[(s(a), s(a))] = "checkpoint progress in place"
        edges[(s(a), s("BLOCKED"))] = None
        labels[(s(a), s("BLOCKED"))] = "blocked: reason + aware retry time; retry count + 1"
        edges[(s(a), s("FAILED_TO_ANALYZE"))] = None
        labels[(s(a), s("FAILED_TO_ANALYZE"))] = "give up"
    for a in active:
        edges[(s("BLOCKED"), s(a))] = _resume_guard
        labels[(s("BLOCKED"), s(a))] = "resume: only the interrupted state, only when due"
    edges[(s("BLOCKED"), s("FAILED_TO_ANALYZE"))] = None
    labels[(s("BLOCKED"), s("FAILED_TO_ANALYZE"))] = "give up while blocked"
    for a in ("HANDED_OFF", "FAILED_TO_ANALYZE"):
        edges[(s(a), s("REOPENED"))] = None
        labels[(s(a), s("REOPENED"))] = "reopen: analysis revision + 1"
    edges[(s("REOPENED"), s("BUILDING_CASE"))] = None
    labels[(s("REOPENED"), s("BUILDING_CASE"))] = "rebuild the case (revision kept)"
    labels[(s("VALIDATED"), s("BUILDING_CASE"))] = "start building (revision 0 → 1)"
    machine: Machine[Any] = Machine(
        name="intake", states=states, initial=s("NEW"), edges=edges, terminal=frozenset(), labels=labels
    )
    return IntakeMachine(machine=machine, states=states, linear=linear, active=frozenset(active))


@lru_cache(maxsize=16)
def intake_machine(phases: Sequence[str] = DEFAULT_PHASES) -> IntakeMachine:
    """The intake machine for a phase list (cached; the default uses :class:`State`)."""
    return _build(tuple(phases))


DESCRIPTION = (
    "The intake machine governs a package's `state` field (package format v1). Admission "
    "moves a fresh NEW package to VALIDATED; every later move is an explicit `advance` that "
    "writes one new package generation with a checkpoint. The linear phases between "
    "BUILDING_CASE and OUTPUT_READY are configurable (default INTERPRETING, HYPOTHESIZING, "
    "DIAGNOSING, REPORTING). Active states (BUILDING_CASE and the phases) declare a self-loop "
    "for progress checkpoints and may become BLOCKED or FAILED_TO_ANALYZE. The BLOCKED → X "
    "edges are guarded: the record's interrupted state must be X and the UTC-aware retry time "
    "must have passed. VALIDATED → BUILDING_CASE starts analysis revision 1; entering REOPENED "
    "increments the revision once. Routing (inbox, cases, outbox, review) is a separate "
    "manifest field derived from the target state. There is no terminal state: HANDED_OFF and "
    "FAILED_TO_ANALYZE can be reopened."
)


def documented_machines() -> dict[str, tuple[Machine[Any], str]]:
    """The intake machine's page for ``docs/machines/`` (see ``tenure.cli.docs``)."""
    return {"intake": (intake_machine().machine, DESCRIPTION)}
