"""Pods: one row per process start, heartbeats, and endpoint resolution.

Liveness and lease validity are two questions with two clocks: a pod killed
with SIGKILL keeps a valid project lease for up to the lease TTL while its
row goes stale after the (shorter) liveness TTL. Endpoint resolution answers
only the liveness question.

A row's ``status`` is what the pod last wrote; its **health** is what that
status is worth now (:class:`PodHealth`): ``stopped`` for a STOPPED pod,
``live`` for any other pod heard from within the liveness TTL, ``dead`` for
one silent longer — a pod killed with ``kill -9`` keeps ``status`` RUNNING
for good, and reads ``dead`` once its liveness TTL has passed. A STOPPED pod
runs nothing: stopping clears its load, and its ``score`` and ``running``
read 0 whatever an older row holds.
"""

from __future__ import annotations

import builtins
import enum
import json
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from tenure.defaults import LIVENESS_TTL_S
from tenure.projects.records import Pod
from tenure.states import PodState
from tenure.store import Store
from tenure.store.queries import state_params

POD_STATUSES = tuple(s.value for s in PodState)
#: A pod in these statuses may be live (if heard from recently): ``:running``, ``:draining``.
_MAY_BE_LIVE = state_params(PodState.RUNNING, PodState.DRAINING)


class PodHealth(enum.Enum):
    """What a pod row's status is worth now (module docstring): derived, never stored."""

    LIVE = "live"
    DEAD = "dead"
    STOPPED = "stopped"


@dataclass(frozen=True)
class PodView:
    """A pod row as a listing shows it: ``live`` (RUNNING or DRAINING and heard from: placements and
    redirects go there) and its :class:`PodHealth`."""

    pod: Pod
    live: bool
    health: PodHealth


def _unloaded(pod: Pod) -> Pod:
    """A STOPPED pod carries no load (a row stopped before stopping cleared it may still hold one)."""
    if pod.status == PodState.STOPPED.value and (pod.score or pod.running):
        return replace(pod, score=0.0, running=0)
    return pod


@dataclass(frozen=True)
class PodIdentity:
    """Who this process is: a fresh id per start; the node name is for display only."""

    pod_id: str
    node_name: str
    endpoint: str | None = None

    @classmethod
    def fresh(cls, node_name: str | None = None, endpoint: str | None = None) -> PodIdentity:
        return cls(str(uuid.uuid4()), node_name or socket.gethostname(), endpoint)


class PodRegistry:
    def __init__(self, store: Store) -> None:
        self.db = store.db

    def register(
        self,
        identity: PodIdentity,
        *,
        labels: dict[str, str] | None = None,
        capacity: float = 100.0,
        status: PodState = PodState.RUNNING,
    ) -> Pod:
        """Insert this process's pod row (a restart is a new pod, P-22).

        A short-lived pod (one CLI command) starts RUNNING; ``tenure serve``
        registers STARTING and moves to RUNNING once its start-up is done.
        """
        with self.db.transaction() as tx:
            tx.execute(
                "pod_insert",
                {
                    "status": status.value,
                    "id": identity.pod_id,
                    "n": identity.node_name,
                    "e": identity.endpoint,
                    "l": json.dumps(labels or {}, sort_keys=True),
                    "c": capacity,
                },
            )
        return self.get(identity.pod_id)

    def get(self, pod_id: str) -> Pod:
        with self.db.transaction(write=False) as tx:
            row = tx.one("pod_by_id", {"id": pod_id})
        if row is None:
            from tenure.errors import NotFoundError

            raise NotFoundError(f"no pod {pod_id}", code="pod-not-found")
        return Pod.from_row(row)

    def heartbeat(
        self, pod_id: str, *, score: float | None = None, running: int | None = None, refusing: str | None = None
    ) -> bool:
        """A heartbeat with the pod's load (P-106) and why it claims nothing new (``refusing``, None: it
        claims; ADR 0051); False once the pod is STOPPED or unknown."""
        with self.db.transaction() as tx:
            return (
                tx.count(
                    "pod_heartbeat",
                    {
                        "id": pod_id,
                        "score": score,
                        "running": running,
                        "refusing": refusing,
                        **state_params(PodState.STOPPED),
                    },
                )
                == 1
            )

    def transition(self, pod_id: str, expected: PodState, target: PodState) -> None:
        """Guarded ``expected → target`` of the pod machine (:data:`tenure.states.POD`)."""
        from tenure.errors import ConflictError
        from tenure.states import POD, PodState

        POD.check(PodState(expected.value), PodState(target.value))
        params = {"id": pod_id, "e": expected.value, "t": target.value}
        with self.db.transaction() as tx:
            if target is PodState.STOPPED:  # a pod that stops runs nothing: its load goes in the same statement
                moved = tx.count("pod_transition_to_stopped", params)
            else:
                moved = tx.count("pod_transition", params)
        if moved != 1:
            raise ConflictError(
                f"pod {pod_id} is not {expected.value}", code="pod-status-conflict", pod=pod_id, expected=expected.value
            )

    def set_status(self, pod_id: str, status: str) -> None:
        """Set the status, checked against the pod machine from the status it has now."""
        assert status in POD_STATUSES
        current = PodState(self.get(pod_id).status)
        if current.value != status:
            self.transition(pod_id, current, PodState(status))

    def list(self) -> builtins.list[tuple[Pod, bool]]:
        """Every pod with whether it is live under the default liveness TTL (15 s)."""
        return self.list_with_liveness(LIVENESS_TTL_S)

    def list_with_liveness(self, liveness_ttl: float) -> builtins.list[tuple[Pod, bool]]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("pods_with_liveness", {"ttl": liveness_ttl, **_MAY_BE_LIVE})
        return [(_unloaded(Pod.from_row(r)), bool(r["live"])) for r in rows]

    def list_with_health(self, liveness_ttl: float) -> builtins.list[PodView]:
        """Every pod, oldest first, with ``live`` and its :class:`PodHealth` under ``liveness_ttl`` (store clock)."""
        params = {"ttl": liveness_ttl, **_MAY_BE_LIVE, **state_params(PodState.STOPPED)}
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("pods_with_health", params)
        views = []
        for r in rows:
            pod = _unloaded(Pod.from_row(r))
            if pod.status == PodState.STOPPED.value:
                health = PodHealth.STOPPED
            else:
                health = PodHealth.LIVE if r["heard"] else PodHealth.DEAD
            views.append(PodView(pod, bool(r["live"]), health))
        return views

    def with_health(self, documents: Iterable[dict[str, Any]], liveness_ttl: float) -> builtins.list[dict[str, Any]]:
        """Pod documents (``id``, ``status``, …) with ``health`` after ``status``, and no load on a STOPPED
        pod. A document whose row is gone since it was read (pruned: it was stopped or dead) reads
        ``stopped`` when its status says STOPPED, else ``dead``."""
        views = {view.pod.id: view for view in self.list_with_health(liveness_ttl)}
        shown = []
        for doc in documents:
            view = views.get(str(doc.get("id")))
            if view is not None:
                health = view.health
            else:
                health = PodHealth.STOPPED if doc.get("status") == PodState.STOPPED.value else PodHealth.DEAD
            out: dict[str, Any] = {}
            for key, value in doc.items():
                out[key] = value
                if key == "status":
                    out["health"] = health.value
            out.setdefault("health", health.value)
            if health is PodHealth.STOPPED:
                out["score"], out["running"] = 0.0, 0
            shown.append(out)
        return shown

    def resolve_endpoint(self, pod_id: str, liveness_ttl: float) -> str | None:
        """The endpoint of a live pod, or ``None`` when it is unknown, stopped or silent too long."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("pod_endpoint_if_live", {"id": pod_id, "ttl": liveness_ttl, **_MAY_BE_LIVE})
        return None if row is None else row["endpoint"]
