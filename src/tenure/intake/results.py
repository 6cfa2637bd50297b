"""What one poll reports for each input or blocked case."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ResultKind", "PollResult"]


class ResultKind(str, enum.Enum):
    """The seven outcomes of a poll."""

    ACCEPTED = "ACCEPTED"  #: a new generation was published for the input
    DUPLICATE = "DUPLICATE"  #: the input was already published; nothing new written
    QUARANTINED = "QUARANTINED"  #: invalid or conflicting input, kept in quarantine/
    DEFERRED = "DEFERRED"  #: a BLOCKED case whose retry time is still ahead
    BUSY = "BUSY"  #: a lock is held elsewhere; the input stays pending
    RESUMED = "RESUMED"  #: a due BLOCKED case returned to its interrupted state
    ERROR = "ERROR"  #: infrastructure failure; the input stays pending


@dataclass(frozen=True)
class PollResult:
    """One result: its kind, the paths involved and an optional code and message.

    ``paths`` may hold ``cache`` (the cached snapshot), ``generation`` (the
    stored generation), ``quarantine`` (the quarantine folder), ``case`` or
    ``lock``.
    """

    kind: ResultKind
    input_path: Path | None = None
    paths: Mapping[str, str] = field(default_factory=dict)
    case_id: str | None = None
    package_id: str | None = None
    generation: int | None = None
    state: str | None = None
    code: str | None = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON form (``tenure intake poll --json``)."""
        return {
            "kind": self.kind.value,
            "input": str(self.input_path) if self.input_path else None,
            "paths": dict(self.paths),
            "case_id": self.case_id,
            "package_id": self.package_id,
            "generation": self.generation,
            "state": self.state,
            "code": self.code,
            "message": self.message,
        }
