"""Snapshot records, pins and the GC lock.

Pins keep objects alive for as long as someone may still need them:

* an *upload pin* lists every object id of a tree being checkpointed; it is
  written before the upload asks the object store which objects exist;
* a *restore pin* names a snapshot being read (and so its whole closure);
* a *keep pin* names a snapshot retention must never remove.

Pins are created under a shared lock on the single ``gc_lock`` row; a GC
sweep deletes objects while holding that row exclusively. So either the pin
committed first and the sweep sees it, or the sweep finished first and the
upload's existence check sees the object gone and uploads it again. See
docs/adr/0004-gc-pins.md.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tenure.errors import ConflictError, NotFoundError, VersionConflictError
from tenure.faults import crash_point, register
from tenure.states import READABLE_SNAPSHOT_STATES, SNAPSHOT, SnapshotState, WorkspaceState
from tenure.store.connector import Connector, Tx
from tenure.store.queries import state_params
from tenure.store.records import Snapshot
from tenure.store.workspaces import new_id

#: The readable states, as the queries that need them name them (``:uploading`` … ``:deleting``).
READABLE = state_params(*sorted(READABLE_SNAPSHOT_STATES, key=lambda s: s.value))
#: Pin kinds.
UPLOAD, RESTORE, KEEP = "upload", "restore", "keep"


def lock_gc_shared(tx: Tx) -> None:
    """Hold the GC lock row shared until the transaction ends (SQLite: the write lock does it)."""
    if tx.dialect == "postgres":
        tx.execute("gc_lock_shared")


register("snapshot_delete.after_update", "a snapshot is DELETING, not yet committed")


class SnapshotStore:
    def __init__(self, db: Connector) -> None:
        self.db = db

    # ------------------------------------------------------------------ reads

    def get(self, ref: str, tx: Tx | None = None) -> Snapshot:
        """A snapshot by id, or by a unique id prefix of at least 6 characters."""
        if tx is None:
            with self.db.transaction(write=False) as own:
                return self.get(ref, own)
        row = tx.one("snapshot_by_id", {"r": ref})
        if row is None and len(ref) >= 6:
            escaped = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            rows = tx.execute("snapshots_by_id_prefix", {"p": escaped + "%"})
            row = rows[0] if len(rows) == 1 else None
        if row is None:
            raise NotFoundError(
                f"no snapshot {ref!r}",
                code="snapshot-not-found",
                hint="list snapshots with `tenure snapshot list WORKSPACE`",
                snapshot=ref,
            )
        return Snapshot.from_row(row)

    def list(self, workspace_id: str) -> builtins.list[Snapshot]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("snapshots_of_workspace", {"w": workspace_id})
        return [Snapshot.from_row(r) for r in rows]

    def pinned_ids(self) -> set[str]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("pins_live_snapshot_ids")
        return {r["snapshot_id"] for r in rows}

    # ------------------------------------------------------------------ moves

    def move(
        self, ref: str, target: SnapshotState, *, error: str | None = None, expected: SnapshotState | None = None
    ) -> Snapshot:
        """A guarded snapshot move (verify marks, repair, logical delete)."""
        with self.db.transaction() as tx:
            snap = self.get(ref, tx)
            source = expected or snap.state
            SNAPSHOT.check(source, target)
            rows = tx.execute("snapshot_move", {"t": target.value, "e": error, "id": snap.id, "s": source.value})
            if not rows:
                raise VersionConflictError(f"snapshot {snap.id} changed concurrently", snapshot=snap.id)
            return Snapshot.from_row(rows[0])

    def delete(self, ref: str) -> Snapshot:
        """Logical deletion (→ DELETING). Refuses heads and keep-pinned snapshots."""
        with self.db.transaction() as tx:
            snap = self.get(ref, tx)
            tx.execute("snapshot_for_update", {"id": snap.id})  # a fork of it waits, or has committed (ADR 0012)
            snap = self.get(snap.id, tx)
            SNAPSHOT.check(snap.state, SnapshotState.DELETING)
            rows = tx.execute(
                "snapshot_delete",
                {
                    "id": snap.id,
                    "s": snap.state.value,
                    "keep": KEEP,
                    **state_params(SnapshotState.DELETING, WorkspaceState.DELETED),
                },
            )
            if rows:
                crash_point("snapshot_delete.after_update")
                return Snapshot.from_row(rows[0])
            head = tx.one("snapshot_head_of", {"id": snap.id, **state_params(WorkspaceState.DELETED)})
            if head is not None:
                raise ConflictError(
                    f"snapshot {snap.id} is the head of workspace {head['name']!r}",
                    code="snapshot-is-head",
                    hint="checkpoint a newer head first",
                    snapshot=snap.id,
                    workspace=head["name"],
                )
            raise ConflictError(
                f"snapshot {snap.id} is pinned",
                code="snapshot-pinned",
                hint="unpin it with `tenure snapshot unpin`",
                snapshot=snap.id,
            )

    def newest(self, workspace_id: str, keep_last: int, keep_autosaves: int) -> dict[str, str]:
        """The published snapshots retention keeps for being recent, each with why: the newest ``keep_last``
        that are not autosaves (``"newest"``) and, counted apart, the newest ``keep_autosaves`` autosaves
        (``"newest-autosave"``), so frequent autosaves never push a checkpoint someone asked for out."""
        return _newest(self.list(workspace_id), keep_last, keep_autosaves)

    def prune(self, workspace_id: str, keep_last: int, keep_autosaves: int = 0) -> builtins.list[Snapshot]:
        """Retention: logically delete every READY snapshot but the newest ``keep_last`` and, counted apart,
        the newest ``keep_autosaves`` autosaves (:meth:`newest`).

        FAILED snapshots are always collected; heads (of any workspace) and
        pinned snapshots are always kept.
        """
        doomed = []
        listed = self.list(workspace_id)
        ready = [s for s in listed if s.state in (SnapshotState.READY, SnapshotState.DEGRADED)]
        keep = _newest(listed, keep_last, keep_autosaves)
        failed = [s for s in listed if s.state is SnapshotState.FAILED]
        for snap in [s for s in ready if s.id not in keep] + failed:
            try:
                doomed.append(self.delete(snap.id))
            except ConflictError as exc:
                if exc.code not in ("snapshot-is-head", "snapshot-pinned"):
                    raise
        return doomed

    # ------------------------------------------------------------------ pins

    @staticmethod
    def _lock_shared(tx: Tx) -> None:
        lock_gc_shared(tx)

    @staticmethod
    def _lock_exclusive(tx: Tx) -> None:
        tx.execute("gc_lock_exclusive")  # SQLite: BEGIN IMMEDIATE already holds the write lock

    def pin_objects(self, holder: str, oids: Iterable[str], ttl_s: float) -> str:
        """An upload pin over ``oids``; returns the pin id."""
        pid = new_id("p-")
        with self.db.transaction() as tx:
            self._lock_shared(tx)
            tx.execute("pin_insert_upload", {"id": pid, "kind": UPLOAD, "h": holder, "ttl": ttl_s})
            tx.executemany("pin_object_insert", [{"p": pid, "o": oid} for oid in set(oids)])
        return pid

    def pin_snapshot(self, ref: str, holder: str, *, kind: str = RESTORE, ttl_s: float | None = None) -> str:
        """Pin a readable snapshot (its whole closure); refuses one already DELETED."""
        return self._pin_snapshot(ref, holder, kind, ttl_s)[0]

    def _pin_snapshot(self, ref: str, holder: str, kind: str, ttl_s: float | None) -> tuple[str, Snapshot]:
        """The pin's id and the snapshot as the pinning transaction leaves it (read after the pin)."""
        pid = new_id("p-")
        with self.db.transaction() as tx:
            self._lock_shared(tx)
            snap = self.get(ref, tx)
            rows = tx.execute(
                "pin_insert_snapshot", {"id": pid, "k": kind, "s": snap.id, "h": holder, "ttl": ttl_s, **READABLE}
            )
            if not rows:
                raise ConflictError(
                    f"snapshot {snap.id} is {snap.state.value} and can no longer be read",
                    code="snapshot-not-readable",
                    snapshot=snap.id,
                    state=snap.state.value,
                )
            return pid, self.get(snap.id, tx)

    def unpin(self, pin_id: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("pin_objects_delete", {"p": pin_id})
            tx.execute("pin_delete", {"p": pin_id})

    def unpin_snapshot(self, ref: str, kind: str = KEEP) -> int:
        snap = self.get(ref)
        with self.db.transaction() as tx:
            return len(tx.execute("pins_delete_of_snapshot", {"s": snap.id, "k": kind}))

    def drop_abandoned_pins(self, abandoned: Callable[[str], bool]) -> int:
        """Remove every pin whose holder ``abandoned(holder)`` says is gone; return how many."""
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("pins_holders")
        dropped = [r["id"] for r in rows if abandoned(r["holder"])]
        for pin_id in dropped:
            self.unpin(pin_id)
        return len(dropped)

    @contextmanager
    def pinned(self, ref: str, holder: str, ttl_s: float = 3600.0) -> Iterator[Snapshot]:
        """Hold a restore pin on a snapshot for the duration of a ``with`` block; yields the snapshot as
        read in the pinning transaction, once pinned (two transactions in all: pin, unpin)."""
        pid, snap = self._pin_snapshot(ref, holder, RESTORE, ttl_s)
        try:
            yield snap
        finally:
            self.unpin(pid)

    # ------------------------------------------------------------------ GC support

    def mark(self) -> tuple[float, builtins.list[str]]:
        """GC phase 1, exclusive: drop expired pins, move unpinned DELETING → DELETED.

        Returns the store time of the mark and the root tree ids of every
        snapshot that may still be read (including pinned ones).
        """
        with self.db.transaction() as tx:
            self._lock_exclusive(tx)
            tx.execute("pin_objects_delete_expired")
            tx.execute("pins_delete_expired")
            SNAPSHOT.check(SnapshotState.DELETING, SnapshotState.DELETED)
            tx.execute("snapshots_collect_deleting", state_params(SnapshotState.DELETED, SnapshotState.DELETING))
            now = float(tx.execute("store_now")[0]["now"])
            rows = tx.execute("gc_mark_roots", READABLE)
        return now, sorted({r["root_oid"] for r in rows})

    @contextmanager
    def sweep_lock(self, mark_time: float) -> Iterator[tuple[set[str], set[str]]]:
        """GC phase 2: hold the GC lock exclusively while objects are deleted.

        Yields the oids live upload pins protect and the roots that snapshots
        received since ``mark_time`` (a root is set under the shared GC lock,
        so one set after the mark carries a later store time).
        """
        with self.db.transaction() as tx:
            self._lock_exclusive(tx)
            rows = tx.execute("pin_objects_live")
            roots = tx.execute("gc_roots_since", {"m": mark_time, **READABLE})
            yield {r["oid"] for r in rows}, {r["root_oid"] for r in roots}

    def newest_roots(self, limit: int = 16) -> builtins.list[str]:
        """The root trees of the ``limit`` newest published snapshots (READY or DEGRADED), newest first."""
        with self.db.transaction(write=False) as tx:
            rows = tx.execute(
                "snapshot_roots_newest",
                {"limit": limit, **state_params(SnapshotState.READY, SnapshotState.DEGRADED)},
            )
        return [str(r["root_oid"]) for r in rows]

    def stats(self) -> dict[str, Any]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("snapshots_count_by_state")
        return {r["state"]: int(r["n"]) for r in rows}


def _newest(snapshots: Iterable[Snapshot], keep_last: int, keep_autosaves: int) -> dict[str, str]:
    """:meth:`SnapshotStore.newest` over a workspace's snapshots as listed (oldest first)."""
    ready = [s for s in snapshots if s.state in (SnapshotState.READY, SnapshotState.DEGRADED)]
    kept: dict[str, str] = {}
    for why, count, line in (
        ("newest", keep_last, [s for s in ready if s.reason != "autosave"]),
        ("newest-autosave", keep_autosaves, [s for s in ready if s.reason == "autosave"]),
    ):
        kept.update({s.id: why for s in (line[-count:] if count > 0 else [])})
    return kept
