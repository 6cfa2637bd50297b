"""The ownership timeline: an append-only event log per project in the control-plane store.

It answers "why is it here, since when, who had it before": every change of
holder (a claim, a takeover with the former and the new pod, the close
fence), every bring, suspend and close, the engines' start, stop and
failure, a pod's drift in both directions and its drain are appended to
``project_events`` with the store clock's time, so the events of every pod
compare on one clock.

* Writing an event never breaks the operation it describes: outside a
  transaction :meth:`Timeline.record` is best effort (a failure is logged).
  Inside the claim transaction it is one more insert of that transaction, so
  the holder change and its event commit (or roll back) together.
  :meth:`Timeline.record_along` writes one in the transaction of the write it
  describes (a bring's RUNNING), under a savepoint: best effort, no
  transaction of its own.
* Reading: :meth:`Timeline.history`, newest first (``tenure project history``,
  ``GET /api/v1/projects/{tenant}/{name}/history``).
* Retention: :meth:`Timeline.prune` deletes events older than a window but
  always keeps the newest ones of each project (``tenure serve --history-days``,
  run at most hourly by a pod's beat).

The timeline records what ownership decided; it never reads the lease
columns (``tests/unit/test_strict_read_rule.py``).
"""

from __future__ import annotations

import enum
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tenure.store import Store
from tenure.store.connector import Tx
from tenure.store.records import Record, optional, record_dict

__all__ = ["EventKind", "Event", "Timeline", "DEFAULT_KEEP_DAYS", "DEFAULT_KEEP_PER_PROJECT"]

log = logging.getLogger("tenure.timeline")

#: retention: events younger than this many days are kept (``tenure serve --history-days``)
DEFAULT_KEEP_DAYS = 30.0
#: retention: the newest this many events of each project are kept whatever their age
DEFAULT_KEEP_PER_PROJECT = 100


class EventKind(enum.Enum):
    """What happened to a project (the ``kind`` column)."""

    CLAIM = "claim"  #: a pod took the lease of a project nobody held
    TAKEOVER = "takeover"  #: a pod took the lease over from another pod (detail: from, to)
    RENEWAL_LOST = "renewal-lost"  #: a pod could not renew the lease in time
    PLACEMENT = "placement"  #: the cluster master placed the project on a pod
    DRAIN = "drain"  #: a draining pod handed the project over
    BRING = "bring"  #: the project became RUNNING on a pod
    SUSPEND = "suspend"  #: the project became SUSPENDED
    CLOSE = "close"  #: the project became CLOSED
    ENGINE_START = "engine-start"  #: the pod's engines started for the project
    ENGINE_STOP = "engine-stop"  #: the pod's engines stopped for the project
    ENGINE_FAILURE = "engine-failure"  #: an engine failed to start or to stop (detail: phase, error)
    DRIFT_FORWARD = "drift-forward"  #: a pod found it lost the project and deactivated it
    DRIFT_REVERSE = "drift-reverse"  #: a pod held the project without running it
    RELEASE = "release"  #: a pod gave the lease up (detail: reason)
    PRESERVED = "preserved"  #: a host kept unsaved work of the project as a preserved delta (detail: delta, files)
    RECOVERED = "recovered"  #: a preserved delta was recovered (detail: delta, to or merged)


def _detail(text: str | None) -> dict[str, Any]:
    """An event's ``detail`` column as a JSON object (one that is not, or does not parse, is wrapped)."""
    try:
        detail = json.loads(text or "{}")
    except ValueError:
        return {"unreadable": str(text)}
    return detail if isinstance(detail, dict) else {"value": detail}


@dataclass(frozen=True)
class Event(Record):
    """One event of a project's timeline.

    ``at`` is the store clock's time (seconds since the epoch); ``seq`` breaks
    ties between events written within one tick of it; ``kind`` is an
    :class:`EventKind` value (kept as text, so a kind written by a newer
    release still reads); ``detail`` is a JSON object.
    """

    id: str
    project_id: str
    at: float
    seq: int
    kind: str
    pod_id: str | None = None
    generation: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    conversions = {
        "id": str,
        "project_id": str,
        "at": float,
        "seq": int,
        "kind": str,
        "pod_id": optional(str),
        "generation": optional(int),
        "detail": _detail,
    }

    def to_dict(self) -> dict[str, Any]:
        """The event as a JSON object with stable keys (the CLI's ``--json`` and the API): all but ``seq``."""
        return {**record_dict(self, without={"seq"}), "detail": dict(self.detail)}


def _not_recorded(exc: Exception, project_id: str, kind: EventKind, pod_id: str | None) -> None:
    log.warning(
        "timeline event not recorded: %s",
        exc,
        extra={"tenure": {"project_id": project_id, "kind": kind.value, "pod": pod_id}},
    )


class _Sequence:
    """Per-process monotonic numbers close to the wall clock in microseconds (the ``seq`` tiebreak)."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns() // 1000)
            return self._last


_SEQ = _Sequence()


class Timeline:
    """The ownership timeline over one store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db

    def record(
        self,
        tx: Tx | None,
        project_id: str,
        kind: EventKind,
        *,
        pod_id: str | None = None,
        generation: int | None = None,
        **detail: Any,
    ) -> None:
        """Append one event of ``project_id`` at the store clock; ``detail`` becomes its JSON object
        (keys whose value is None left out).

        With ``tx`` the event is one more insert of that transaction (it
        commits or rolls back with it, and an error is raised as any
        statement's). Without, it is written in a transaction of its own and
        a failure is only logged: recording must never break what it records.
        """
        params = {
            "id": str(uuid.uuid4()),
            "p": project_id,
            "seq": _SEQ.next(),
            "kind": kind.value,
            "pod": pod_id,
            "g": generation,
            "detail": json.dumps({k: v for k, v in detail.items() if v is not None}, sort_keys=True, default=str),
        }
        if tx is not None:
            tx.execute("project_event_insert", params)
            return
        try:
            with self.db.transaction() as own:
                own.execute("project_event_insert", params)
        except Exception as exc:  # noqa: BLE001 - the operation it describes is done; only its record is lost
            _not_recorded(exc, project_id, kind, pod_id)

    def record_along(
        self,
        tx: Tx,
        project_id: str,
        kind: EventKind,
        *,
        pod_id: str | None = None,
        generation: int | None = None,
        **detail: Any,
    ) -> None:
        """Append one event in ``tx``, the transaction of the write it describes, best effort.

        The insert runs under a savepoint: it commits with that write (no
        transaction of its own), and a failure undoes only the event and is
        logged, as :meth:`record` does outside a transaction — recording never
        breaks what it records.
        """
        try:
            with tx.savepoint():
                self.record(tx, project_id, kind, pod_id=pod_id, generation=generation, **detail)
        except Exception as exc:  # noqa: BLE001 - the write it describes goes on; only its record is lost
            _not_recorded(exc, project_id, kind, pod_id)

    def history(self, project_id: str, limit: int = 100, before: float | None = None) -> list[Event]:
        """The newest ``limit`` events of ``project_id``, newest first; with ``before``, those written
        strictly before that store-clock time (for paging back)."""
        params: dict[str, Any] = {"p": project_id, "limit": max(0, int(limit))}
        with self.db.transaction(write=False) as tx:
            if before is None:
                rows = tx.execute("project_events_newest", params)
            else:
                rows = tx.execute("project_events_before", dict(params, before=float(before)))
        return [Event.from_row(r) for r in rows]

    def prune(self, keep_days: float, keep_per_project: int) -> int:
        """Bounded retention: delete the events older than ``keep_days`` (store clock), except the
        newest ``keep_per_project`` of each project; return how many were deleted."""
        with self.db.transaction() as tx:
            return tx.count("project_events_prune", {"age": keep_days * 86400.0, "keep": max(0, int(keep_per_project))})

    def holder_changed(
        self, tx: Tx, project_id: str, pod_id: str, former: str | None, generation: int, **detail: Any
    ) -> None:
        """In the transaction that changed a project's holder: ``takeover`` (from the former pod to
        ``pod_id``) when another pod held it before, else ``claim``."""
        if former is not None and former != pod_id:
            self.record(
                tx,
                project_id,
                EventKind.TAKEOVER,
                pod_id=pod_id,
                generation=generation,
                to=pod_id,
                **{"from": former},
                **detail,
            )
        else:
            self.record(tx, project_id, EventKind.CLAIM, pod_id=pod_id, generation=generation, **detail)
