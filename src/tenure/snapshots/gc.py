"""Garbage collection of unreachable objects.

Logical deletion (snapshot → DELETING) and reclamation are separate
transactions. A GC run:

1. *mark* (one transaction, GC lock exclusive): expired pins are dropped,
   DELETING snapshots that nobody pins become DELETED, and the root of every
   snapshot that may still be read (UPLOADING, VALIDATING, READY, DEGRADED,
   DELETING, or pinned) is collected;
2. *trace* (no lock): the closure of those roots is read from tree objects;
   candidates are stored objects outside it that are older than the grace
   period;
3. *sweep* (in batches, each under the GC lock held exclusively): objects
   named by a live upload pin, or reachable from a root published since the
   mark (a checkpoint that finished and dropped its pins meanwhile), are
   spared; the rest are deleted.

A crash at any point leaves only unreachable objects behind; the next run
finishes the job. See docs/adr/0004-gc-pins.md for why pins, not only the
grace period, protect in-flight uploads and restores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tenure.faults import crash_point, register
from tenure.objects import ObjectStore
from tenure.store import Store

register("gc.after_mark", "DELETING snapshots are DELETED, no object removed yet")
register("gc.mid_sweep", "some unreachable objects removed, others not yet")

BATCH = 1000


@dataclass(frozen=True)
class GcResult:
    roots: int
    reachable: int
    stored: int
    candidates: int
    removed: int
    spared_by_pins: int

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def collect(store: Store, objects: ObjectStore, *, grace_s: float = 3600.0,
            progress: Callable[[int, int], None] | None = None) -> GcResult:
    """Run one GC pass; see the module docstring for the phases."""
    from tenure.snapshots import tree_closure

    mark_time, roots = store.snapshots.mark()
    crash_point("gc.after_mark")
    reachable: set[str] = set()
    for root in roots:
        reachable |= tree_closure(root, objects)
    stored = 0
    candidates = []
    for oid, created in objects.list_ids():
        stored += 1
        if oid not in reachable and created.timestamp() < mark_time - grace_s:
            candidates.append(oid)
    removed = spared = 0
    traced = set(roots)
    for start in range(0, len(candidates), BATCH):
        batch = candidates[start:start + BATCH]
        with store.snapshots.sweep_lock(mark_time) as (pinned, new_roots):
            for root in new_roots - traced:
                reachable |= tree_closure(root, objects)
                traced.add(root)
            doomed = [oid for oid in batch if oid not in pinned and oid not in reachable]
            spared += len(batch) - len(doomed)
            removed += objects.delete_many(doomed)
        if progress is not None:
            progress(min(start + BATCH, len(candidates)), len(candidates))
        crash_point("gc.mid_sweep")
    return GcResult(len(roots), len(reachable), stored, len(candidates), removed, spared)
