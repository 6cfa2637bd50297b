"""Garbage collection of unreachable objects.

Logical deletion (snapshot → DELETING) and reclamation are separate
transactions. A GC run:

1. *mark* (one transaction, GC lock exclusive): expired pins are dropped,
   DELETING snapshots that nobody pins become DELETED, and the root of every
   snapshot that may still be read (UPLOADING, VALIDATING, READY, DEGRADED,
   DELETING, or pinned) is collected;
2. *trace* (no lock): the closure of those roots is read from tree objects;
   candidates are stored objects outside it that are older than the grace
   period, and those only FAILED snapshots' trees reach, whatever their age
   (:func:`_failed_uploads`);
3. *sweep* (in batches, each under the GC lock held exclusively): objects
   named by a live upload pin, or reachable from a root published since the
   mark (a checkpoint that finished and dropped its pins meanwhile), are
   spared; the rest are deleted.

Last, a local object folder's temp files that writers which died left
behind (untouched for an hour) are removed.

A crash at any point leaves only unreachable objects behind; the next run
finishes the job. A damaged snapshot (a tree object missing or corrupt) does
not stop the run: whatever of its closure can still be read is kept, its
root is reported in :attr:`GcResult.damaged`, and the rest is reclaimed.
Key objects (the reserved names ``key.N`` of an encrypted repository,
:mod:`tenure.objects.crypto`) are not content: they are never candidates.
See docs/adr/0004-gc-pins.md for why pins, not only the grace period,
protect in-flight uploads and restores.

Batch size: the sweep deletes at most 1,000 candidates per batch (one
transaction holding the GC lock each). The environment variable
``TENURE_GC_BATCH`` (a positive integer) sets another size; tests use a small
one so that a crash at ``gc.mid_sweep`` lands between two batches of a small
tree. A value that is not a positive integer is refused with
``bad-gc-batch``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenure.errors import ConfigurationError, IntegrityError
from tenure.faults import crash_point, register
from tenure.objects import ObjectStore
from tenure.objects.codec import reserved
from tenure.states import SnapshotState
from tenure.store import Store

register("gc.after_mark", "DELETING snapshots are DELETED, no object removed yet")
register("gc.mid_sweep", "some unreachable objects removed, others not yet")

BATCH = 1000
#: The environment variable that overrides :data:`BATCH` (see the module docstring).
BATCH_ENV = "TENURE_GC_BATCH"


def batch_size() -> int:
    """Candidates deleted per sweep batch: ``TENURE_GC_BATCH`` if set, else :data:`BATCH`."""
    raw = os.environ.get(BATCH_ENV)
    if raw is None or raw.strip() == "":
        return BATCH
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ConfigurationError(
            f"{BATCH_ENV}={raw!r} is not a positive integer",
            code="bad-gc-batch",
            hint=f"unset {BATCH_ENV} (default {BATCH}) or set it to a whole number above 0",
        )
    return size


@dataclass(frozen=True)
class GcResult:
    roots: int
    reachable: int
    stored: int
    candidates: int
    removed: int
    spared_by_pins: int
    damaged: tuple[str, ...] = field(default=())
    #: The grace period of this run, in seconds.
    grace_s: float = 3600.0
    #: Stored objects kept because a readable snapshot references them.
    referenced: int = 0
    #: Stored objects no snapshot references, kept because they are younger than the grace period.
    young: int = 0
    #: Seconds until the last of the ``young`` objects is older than the grace period (None: there are none).
    young_reclaimable_in: float | None = None
    #: Candidates younger than the grace period taken anyway: only FAILED uploads' trees reach them.
    failed_uploads: int = 0
    #: Temp files of writes that died, removed from a local object folder (older than an hour).
    temp_removed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "damaged": list(self.damaged)}


def collect(
    store: Store, objects: ObjectStore, *, grace_s: float = 3600.0, progress: Callable[[int, int], None] | None = None
) -> GcResult:
    """Run one GC pass; see the module docstring for the phases."""
    step = batch_size()
    mark_time, roots = store.snapshots.mark()
    crash_point("gc.after_mark")
    reachable: set[str] = set()
    damaged: list[str] = []
    for root in roots:
        reachable |= _closure(root, objects, damaged)
    failed = _failed_uploads(store, objects, reachable)
    stored = referenced = young = of_failed = 0
    youngest = None
    candidates = []
    for oid, created in objects.list_ids():
        if reserved(oid):
            continue  # a key object (tenure.objects.crypto), not content
        stored += 1
        if oid in reachable:
            referenced += 1
        elif created.timestamp() < mark_time - grace_s:
            candidates.append(oid)
        elif oid in failed:
            candidates.append(oid)
            of_failed += 1
        else:
            young += 1
            youngest = created.timestamp() if youngest is None else max(youngest, created.timestamp())
    removed = spared = 0
    traced = set(roots)
    for start in range(0, len(candidates), step):
        batch = candidates[start : start + step]
        with store.snapshots.sweep_lock(mark_time) as (pinned, new_roots):
            for root in new_roots - traced:
                reachable |= _closure(root, objects, damaged)
                traced.add(root)
            doomed = [oid for oid in batch if oid not in pinned and oid not in reachable]
            spared += len(batch) - len(doomed)
            removed += objects.delete_many(doomed)
        if progress is not None:
            progress(min(start + step, len(candidates)), len(candidates))
        crash_point("gc.mid_sweep")
    clean_temp = getattr(objects, "clean_temp", None)  # a local folder's temp files of writers that died
    temp_removed = clean_temp() if callable(clean_temp) else 0
    return GcResult(
        len(roots),
        len(reachable),
        stored,
        len(candidates),
        removed,
        spared,
        tuple(sorted(damaged)),
        grace_s=grace_s,
        referenced=referenced,
        young=young,
        young_reclaimable_in=None if youngest is None else round(youngest + grace_s - mark_time, 3),
        failed_uploads=of_failed,
        temp_removed=int(temp_removed),
    )


def _failed_uploads(store: Store, objects: ObjectStore, reachable: set[str]) -> frozenset[str]:
    """Objects only FAILED snapshots' trees reach: they need not wait for the grace period.

    A FAILED snapshot is never published, read or adopted again, and a
    writer that relies on an object it did not store pins it before it asks
    whether it is stored (ADR 0004), so the sweep spares any of these that a
    live upload needs, and any a snapshot published since the mark reaches.
    Read after the mark: one that became DELETING (prune) since is in the
    mark's roots or among the roots the sweep reads again. Only a FAILED
    snapshot that got as far as its root tree has anything here; an upload
    that failed while it stored objects (a full disk) named none of them.
    """
    found: set[str] = set()
    for ws in store.workspaces.workspaces():
        for snap in store.snapshots.list(ws.id):
            if snap.state is SnapshotState.FAILED and snap.root_oid is not None:
                found |= _closure(snap.root_oid, objects, None)
    return frozenset(found - reachable)


def _closure(root: str, objects: ObjectStore, damaged: list[str] | None) -> frozenset[str]:
    """The closure of ``root``; for a damaged tree, as much of it as can still be read (and reported in
    ``damaged``, if given)."""
    from tenure.snapshots import tree_closure
    from tenure.snapshots.walk import load_listing

    try:
        return tree_closure(root, objects)
    except IntegrityError:
        if damaged is not None:
            damaged.append(root)
    try:
        listing = load_listing(root, objects, with_ids=True)
    except IntegrityError:
        return frozenset({root})
    return frozenset({root} | set(listing.trees) | set(listing.ids) | listing.data_oids())
