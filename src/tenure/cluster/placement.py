"""The score model (P-127): one definition of load, room and "least utilized", for the master and the self-pull.

* A project costs its ``placement_score`` (default 1).
* A pod's **score** is the sum of the scores of the projects it holds; its
  **capacity** is set at start (``tenure serve --capacity``, default 100).
* **Room** is capacity − score; a project fits a pod when its score is at
  most the room.
* **Utilization** is score / capacity; the master places each project on the
  eligible pod with room whose utilization is lowest (ties: fewer projects
  running, then the pod id, so the choice is deterministic).
* A pod is **eligible** for a project when it is RUNNING, live by its own
  heartbeat (the pod liveness TTL) and its labels match the project's
  selector (every ``key=value`` of the selector among the labels).
* The boot self-pull takes at most min(pull factor × capacity, room); a later
  pull, the room (ADR 0017).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PodLoad", "selector_matches", "room", "utilization", "choose"]


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """A project's placement selector matches a pod's labels when every key=value is among them."""
    return all(labels.get(key) == value for key, value in selector.items())


def room(capacity: float, score: float) -> float:
    """What a pod can still take: capacity − score (never below 0)."""
    return max(0.0, capacity - score)


def utilization(score: float, capacity: float) -> float:
    """score / capacity; a pod without capacity counts as full."""
    return score / capacity if capacity > 0 else float("inf")


@dataclass
class PodLoad:
    """A pod as the master sees it during one tick: its labels, capacity and score so far."""

    pod_id: str
    endpoint: str | None
    labels: dict[str, str]
    capacity: float
    score: float
    running: int = 0

    @property
    def utilization(self) -> float:
        return utilization(self.score, self.capacity)

    def fits(self, score: float) -> bool:
        return score <= room(self.capacity, self.score) + 1e-9

    def take(self, score: float) -> None:
        """Count a placement made this tick (until the pod's own claim shows in the store)."""
        self.score += score
        self.running += 1


def choose(score: float, selector: dict[str, str], pods: Iterable[PodLoad]) -> PodLoad | None:
    """The eligible pod with room for ``score`` whose utilization is lowest, or None when none fits."""
    fitting = [p for p in pods if selector_matches(selector, p.labels) and p.fits(score)]
    if not fitting:
        return None
    return min(fitting, key=lambda p: (p.utilization, p.running, p.pod_id))
