"""The expiry policy: idle workspaces expire, and are deleted once their grace has run out (ADR 0019).

One pass, measured from one store-clock instant ``at``:

1. every IDLE workspace whose row has not changed for ``idle_ttl_s`` (no
   mount, checkpoint or undo since) moves IDLE → EXPIRING;
2. every EXPIRING workspace whose expiry began more than ``grace_s`` before
   ``at`` moves EXPIRING → DELETED, its snapshots DELETING for GC.

Candidates are read by index a page at a time; each move is one guarded
statement that repeats the whole guard against the row (no live writer
lease, no project of it that is not SUSPENDED, the idle or grace time), so a
candidate that was used, brought back or mounted since it was read is
skipped, with the term that held it back. Nothing on disk is touched (S-38):
a deleted workspace's objects go only when ``tenure gc`` finds them
unreferenced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tenure.errors import InvalidInputError
from tenure.faults import crash_point, register
from tenure.store import Store
from tenure.store.workspaces import Candidate, ExpiryStep

register("expiry.idle_selected", "the expiry pass read a page of idle workspaces; nothing locked or written yet")
register("expiry.expiring_selected", "the expiry pass read a page of workspaces past their grace; nothing written yet")

#: Candidates read per page.
PAGE = 500
#: The default grace period between expiry and deletion: 7 days.
DEFAULT_GRACE_S = 7 * 86400.0


@dataclass(frozen=True)
class ExpirySkip:
    """A candidate left as it was, and the guard term that held it back (``ExpiryStep.reason``)."""

    workspace: str
    action: str  # "expire" or "delete"
    reason: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ExpiryResult:
    """One expiry pass: what became EXPIRING, what was deleted after its grace, what was skipped and why."""

    idle_ttl_s: float
    grace_s: float
    #: the store-clock instant the TTL and the grace were measured from
    at: float
    expired: tuple[str, ...]
    deleted: tuple[str, ...]
    #: snapshots of the deleted workspaces moved to DELETING (GC reclaims their objects)
    snapshots_deleting: tuple[str, ...]
    skipped: tuple[ExpirySkip, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "idle_ttl_s": self.idle_ttl_s,
            "grace_s": self.grace_s,
            "at": self.at,
            "expired": list(self.expired),
            "deleted": list(self.deleted),
            "snapshots_deleting": list(self.snapshots_deleting),
            "skipped": [s.to_dict() for s in self.skipped],
        }


def expire_idle(store: Store, idle_ttl_s: float, grace_s: float, now: float | None = None) -> ExpiryResult:
    """One expiry pass (module docstring); ``now`` (store time) may only make it more careful.

    ``now`` is the instant the TTL and the grace are measured from; a value
    later than the store clock is read as the store clock, so a caller's
    clock can never expire or delete anything early.
    """
    if not idle_ttl_s > 0:
        raise InvalidInputError(
            f"the idle TTL must be above 0 s, not {idle_ttl_s}",
            code="invalid-expiry-policy",
            hint="pass a duration such as 30d",
        )
    if not grace_s >= 0:
        raise InvalidInputError(
            f"the expiry grace must be 0 s or more, not {grace_s}",
            code="invalid-expiry-policy",
            hint="pass a duration such as 7d",
        )
    ws = store.workspaces
    clock = ws.now()
    at = clock if now is None else min(float(now), clock)
    expired: list[str] = []
    deleted: list[str] = []
    retired: list[str] = []
    skipped: list[ExpirySkip] = []

    def note(step: ExpiryStep, action: str, done: list[str]) -> None:
        if step.done:
            done.append(step.workspace.name)
            retired.extend(step.snapshots)
        else:
            skipped.append(ExpirySkip(step.workspace.name, action, step.reason or "changed", step.detail))

    for candidate in _pages(lambda after: ws.idle_before(at - idle_ttl_s, after, PAGE), "expiry.idle_selected"):
        note(ws.expire_idle(candidate.id, at - idle_ttl_s), "expire", expired)
    for candidate in _pages(lambda after: ws.expiring_before(at - grace_s, after, PAGE), "expiry.expiring_selected"):
        note(ws.delete_after_grace(candidate.id, at - grace_s), "delete", deleted)
    return ExpiryResult(idle_ttl_s, grace_s, at, tuple(expired), tuple(deleted), tuple(sorted(retired)), tuple(skipped))


def _pages(read: Callable[[tuple[float, str] | None], list[Candidate]], point: str) -> list[Candidate]:
    """Every candidate, read a page at a time by key (so nothing acted on in a page can hide the next one)."""
    found: list[Candidate] = []
    after: tuple[float, str] | None = None
    while True:
        page = read(after)
        crash_point(point)
        found.extend(page)
        if len(page) < PAGE:
            return found
        after = (page[-1].key, page[-1].id)
