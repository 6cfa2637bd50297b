"""The cluster master's records (ADR 0023): the master lease row and placements.

One pod at a time holds the **master lease** (the single ``cluster_master``
row): it takes the role when the row is free or run out by the store clock,
which raises the **epoch**, and renews it in its beat. A **placement**
(project → pod, with the epoch) is written by one statement whose predicate
requires that epoch to be the live master's, so a deposed master's placement
is refused by the store itself. The chosen pod then claims with the normal
compare-and-swap: a placement says where the master wants a project, the
claim decides who owns it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenure.errors import ConflictError, TenureError
from tenure.projects.timeline import EventKind, Timeline
from tenure.store import Store

__all__ = ["ClusterStore", "MasterLease", "Placement", "StaleEpochError"]


class _BatchRefusedError(TenureError):
    """Aborts :meth:`ClusterStore.place_many`'s transaction: a placement was refused."""


class StaleEpochError(ConflictError):
    """A placement request from a master whose epoch is older than the newest seen, or not in the store."""

    code = "stale-epoch"
    default_hint = "a newer master has taken over; its placements are the ones that count"


@dataclass(frozen=True)
class MasterLease:
    """Who holds the master role, at which epoch, and whether it is live by the store clock."""

    pod_id: str | None
    epoch: int
    live: bool
    expires_in: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"pod_id": self.pod_id, "epoch": self.epoch, "live": self.live, "expires_in": self.expires_in}


@dataclass(frozen=True)
class Placement:
    project_id: str
    pod_id: str
    epoch: int
    placed_at: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ClusterStore:
    """The master lease and the placements, over one store."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.timeline = Timeline(store)

    def master(self) -> MasterLease:
        with self.db.transaction(write=False) as tx:
            row = tx.one("master_get")
        if row is None:  # pragma: no cover - the migration inserts the row
            return MasterLease(None, 0, False, None)
        expires_in = None if row["expires_in"] is None else float(row["expires_in"])
        live = row["pod_id"] is not None and expires_in is not None and expires_in > 0
        return MasterLease(row["pod_id"], int(row["epoch"]), live, expires_in)

    def take(self, pod_id: str, ttl: float) -> int | None:
        """Take the role if it is free or run out: the new epoch, or None when another pod holds it."""
        with self.db.transaction() as tx:
            rows = tx.execute("master_take", {"me": pod_id, "ttl": ttl})
        return int(rows[0]["epoch"]) if rows else None

    def renew(self, pod_id: str, epoch: int, ttl: float) -> bool:
        """Renew the role held at ``epoch``; False once it ran out or another pod took it (deposed)."""
        with self.db.transaction() as tx:
            return bool(tx.execute("master_renew", {"me": pod_id, "e": epoch, "ttl": ttl}))

    def resign(self, pod_id: str, epoch: int) -> None:
        """Give the role up at once (drain, stop), if still held at ``epoch``."""
        with self.db.transaction() as tx:
            tx.execute("master_resign", {"me": pod_id, "e": epoch})

    def place(self, master_pod: str, epoch: int, project_id: str, pod_id: str, *, record: bool = False) -> bool:
        """Record that ``master_pod`` at ``epoch`` places the project on ``pod_id``; False when deposed.

        With ``record``, the placement event goes on the project's timeline in
        the same transaction (one commit per placement).
        """
        with self.db.transaction() as tx:
            placed = tx.count("placement_put", {"me": master_pod, "e": epoch, "p": project_id, "pod": pod_id}) == 1
            if placed and record:
                self.timeline.record(tx, project_id, EventKind.PLACEMENT, pod_id=pod_id, epoch=epoch, master=master_pod)
            return placed

    def place_many(self, master_pod: str, epoch: int, pairs: list[tuple[str, str]]) -> bool:
        """:meth:`place` (with ``record``) for each ``(project_id, pod_id)``, all in one transaction: every
        placement with its timeline event, or none of them (False) when ``master_pod`` is deposed at ``epoch``
        or a newer epoch has placed one of the projects."""
        try:
            with self.db.transaction() as tx:
                for project_id, pod_id in pairs:
                    params = {"me": master_pod, "e": epoch, "p": project_id, "pod": pod_id}
                    if tx.count("placement_put", params) != 1:
                        raise _BatchRefusedError("refused")  # rolls back every placement of the batch
                    self.timeline.record(
                        tx, project_id, EventKind.PLACEMENT, pod_id=pod_id, epoch=epoch, master=master_pod
                    )
        except _BatchRefusedError:
            return False
        return True

    def placement(self, project_id: str) -> Placement | None:
        with self.db.transaction(write=False) as tx:
            row = tx.one("placement_get", {"p": project_id})
        if row is None:
            return None
        return Placement(row["project_id"], row["pod_id"], int(row["epoch"]), float(row["placed_at"]))

    def newest_epoch(self) -> int:
        with self.db.transaction(write=False) as tx:
            row = tx.one("placements_newest_epoch")
        return int(row["epoch"]) if row else 0
