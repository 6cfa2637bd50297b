"""The restart-reconciliation classifier: one verdict per mount, from facts alone (S-54, ADR 0018).

At pod start every mount recorded on this host is given exactly one
:class:`Verdict` from three sets of facts, gathered by the caller:

* :class:`MountFacts` — the host-local record: its status in the mount
  machine (:data:`tenure.states.MOUNT`), the generation its claim gave,
  whether a local cleanup is pending and whether a checkpoint is in flight
  (its idempotency key is recorded);
* :class:`FolderFacts` — whether the mount's folder exists and whether it
  holds uncommitted data (S-85, judged elsewhere from the local index);
* :class:`Authority` — what the control-plane store says about the mount's
  project and workspace, or :data:`UNKNOWN` when the store cannot be reached
  or holds no matching lease.

:func:`classify` asks, in this order, and the first answer wins (S-55):

1. **cleanup incomplete** — a cleanup is pending, or the mount is UNMOUNTING
   (its final checkpoint committed, the folder not yet removed);
2. **checkpoint interrupted** — a checkpoint key is recorded, or the mount is
   CHECKPOINTING;
3. for a live mount (MOUNTING or MOUNTED — CHECKPOINTING was taken by 2), the
   lease, by :func:`lease_verdict`:

   a. :data:`UNKNOWN` → **control plane unknown**;
   b. another writer-lease generation than the mount's, or the project held
      by another pod → **stale generation** (case 1, S-62);
   c. the project lease or the writer lease revoked → **stale generation**
      (case 3, S-64);
   d. the project lease expired, or the writer lease EXPIRED or RELEASED →
      **stale generation** (case 2, S-63);
   e. a writer lease still ISSUED (never activated) → **control plane
      unknown**: it is no lease that may publish, and nothing says it ended;
   f. otherwise — held by this pod, live, same generation, writer lease ACTIVE
      or RELEASING — **active lease valid** (S-58);

4. a torn-down mount (CLOSED — UNMOUNTING was taken by 1): its folder holds
   uncommitted data → **preserved delta** (S-65);
5. **safe to delete** (S-66): everything else, that is a torn-down mount whose
   folder is clean or gone.

Decisions where the storage spec is silent (ADR 0018):

* Steps 1 and 2 read both the status and the recorded column, so the
  window between writing one and the other (the key is recorded before
  MOUNTED → CHECKPOINTING, and cleared before the move back) never hides an
  interrupted operation. They apply to every mount, a CLOSED one included: a
  mount closed in the middle of a checkpoint keeps its folder for the resume
  rather than falling through to deletion.
* The lease verdicts apply to live mounts only; a torn-down mount has nothing
  to renew or fence, and is judged by its folder alone, whatever the lease.
* The folder is not read for a live mount: every live verdict keeps the
  folder (control plane unknown and stale generation preserve it, S-60,
  S-81), so cleanliness cannot change what happens to it.
* "Different generation" means different, older or newer: the classifier
  never decides which of two writers is the newer one.
* Only :data:`PUBLISHING_VERDICTS` (active lease valid) permit publishing
  (S-59). An interrupted checkpoint publishes on resume only if the lease,
  judged alone by :func:`lease_verdict`, is valid (S-80); store fencing still
  applies.

The module is pure: no I/O, no clock, no randomness; the same facts always
give the same verdict.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from tenure.states import LeaseState, MountState

__all__ = [
    "Verdict",
    "PUBLISHING_VERDICTS",
    "ProjectLease",
    "MountFacts",
    "FolderFacts",
    "Authority",
    "Lookup",
    "UNKNOWN",
    "classify",
    "lease_verdict",
]


class Verdict(str, enum.Enum):
    """What restart reconciliation does with one mount; values are the mount store's values."""

    #: a checkpoint committed but local cleanup remained: kept for resume (S-56)
    CLEANUP_INCOMPLETE = "cleanup-incomplete"
    #: a checkpoint was in flight: preserved for resume, whatever the lease says (S-57)
    CHECKPOINT_INTERRUPTED = "checkpoint-interrupted"
    #: the lease is live, unexpired and of the mount's generation: renewed, the mount resumes (S-58)
    ACTIVE_LEASE_VALID = "active-lease-valid"
    #: live mount, no matching lease known: preserved and marked; nothing deleted, fenced or published (S-60)
    CONTROL_PLANE_UNKNOWN = "control-plane-unknown"
    #: another generation, an expired or a revoked lease: fenced to CLOSED, never publishes (S-62…S-64)
    STALE_GENERATION = "stale-generation"
    #: torn down, the folder holds uncommitted data: kept for a bounded recovery window (S-65)
    PRESERVED_DELTA = "preserved-delta"
    #: torn down, nothing uncommitted: the record and its folder are removed (S-66)
    SAFE_TO_DELETE = "safe-to-delete"


#: The only verdicts under which a mount may publish (S-59).
PUBLISHING_VERDICTS: Final = frozenset({Verdict.ACTIVE_LEASE_VALID})


class ProjectLease(str, enum.Enum):
    """The project's lease as the control-plane store sees it, from this pod's side."""

    #: held by this pod, and live
    HELD = "held"
    #: it ran out (the holder's pod lease, or a lease of its own, expired), or nobody holds it
    EXPIRED = "expired"
    #: another pod holds it
    OTHER_POD = "other-pod"
    #: fenced: the project was closed and its writer leases revoked
    REVOKED = "revoked"


_LIVE: Final = frozenset({MountState.MOUNTING, MountState.MOUNTED, MountState.CHECKPOINTING})


@dataclass(frozen=True)
class MountFacts:
    """The host-local record of one mount, as the mount store holds it."""

    state: MountState
    #: the generation the claim gave when the mount was opened
    generation: int
    #: a local cleanup is recorded as left to do
    cleanup_pending: bool = False
    #: a checkpoint's idempotency key is recorded (the checkpoint may not have finished)
    checkpoint_in_flight: bool = False

    @property
    def live(self) -> bool:
        """Not torn down: MOUNTING, MOUNTED or CHECKPOINTING (UNMOUNTING and CLOSED are torn down)."""
        return self.state in _LIVE


@dataclass(frozen=True)
class FolderFacts:
    """The mount's folder: whether it exists, and whether it holds uncommitted data (S-85)."""

    exists: bool
    #: differs from the snapshot it was restored from or last checkpointed to (computed elsewhere)
    dirty: bool = False

    def __post_init__(self) -> None:
        if self.dirty and not self.exists:
            raise ValueError("a folder that does not exist holds no uncommitted data")


@dataclass(frozen=True)
class Authority:
    """The control-plane store's facts about the mount's project and workspace."""

    project_lease: ProjectLease
    #: the generation of the workspace's newest writer lease (the project's fencing generation)
    generation: int
    #: that writer lease's state
    writer_lease: LeaseState


class _Unknown(enum.Enum):
    UNKNOWN = "unknown"


#: The control plane cannot be reached, or holds no lease matching the mount (S-61).
UNKNOWN: Final = _Unknown.UNKNOWN
#: What a lease lookup answers: the authoritative facts, or :data:`UNKNOWN`.
Lookup: TypeAlias = Authority | Literal[_Unknown.UNKNOWN]

_EXPIRED_WRITER: Final = frozenset({LeaseState.EXPIRED, LeaseState.RELEASED})


def classify(mount: MountFacts, folder: FolderFacts, authority: Lookup) -> Verdict:
    """The one verdict for ``mount`` (the order of the module docstring; S-54, S-55)."""
    if mount.cleanup_pending or mount.state is MountState.UNMOUNTING:
        return Verdict.CLEANUP_INCOMPLETE
    if mount.checkpoint_in_flight or mount.state is MountState.CHECKPOINTING:
        return Verdict.CHECKPOINT_INTERRUPTED
    if mount.live:
        return lease_verdict(mount, authority)
    if folder.exists and folder.dirty:
        return Verdict.PRESERVED_DELTA
    return Verdict.SAFE_TO_DELETE


def lease_verdict(mount: MountFacts, authority: Lookup) -> Verdict:
    """What the lease alone says about ``mount``: active lease valid, control plane unknown or stale generation."""
    if authority is UNKNOWN:
        return Verdict.CONTROL_PLANE_UNKNOWN
    if authority.generation != mount.generation or authority.project_lease is ProjectLease.OTHER_POD:
        return Verdict.STALE_GENERATION
    if authority.project_lease is ProjectLease.REVOKED or authority.writer_lease is LeaseState.REVOKED:
        return Verdict.STALE_GENERATION
    if authority.project_lease is ProjectLease.EXPIRED or authority.writer_lease in _EXPIRED_WRITER:
        return Verdict.STALE_GENERATION
    if authority.writer_lease is LeaseState.ISSUED:
        return Verdict.CONTROL_PLANE_UNKNOWN
    return Verdict.ACTIVE_LEASE_VALID
