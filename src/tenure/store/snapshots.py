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

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tenure.errors import ConflictError, NotFoundError, VersionConflictError
from tenure.states import READABLE_SNAPSHOT_STATES, SNAPSHOT, SnapshotState
from tenure.store.connector import Connector, Tx
from tenure.store.records import Snapshot
from tenure.store.workspaces import new_id

_READABLE = tuple(sorted(s.value for s in READABLE_SNAPSHOT_STATES))
_READABLE_SQL = "(" + ", ".join(f"'{s}'" for s in _READABLE) + ")"


def lock_gc_shared(tx: Tx) -> None:
    """Hold the GC lock row shared until the transaction ends (SQLite: the write lock does it)."""
    if tx.dialect == "postgres":
        tx.execute("SELECT id FROM gc_lock WHERE id = 1 FOR SHARE")


class SnapshotStore:
    def __init__(self, db: Connector) -> None:
        self.db = db

    # ------------------------------------------------------------------ reads

    def get(self, ref: str, tx: Tx | None = None) -> Snapshot:
        """A snapshot by id, or by a unique id prefix of at least 6 characters."""
        if tx is None:
            with self.db.transaction(write=False) as own:
                return self.get(ref, own)
        row = tx.one("SELECT * FROM snapshots WHERE id = :r", {"r": ref})
        if row is None and len(ref) >= 6:
            rows = tx.execute("SELECT * FROM snapshots WHERE id LIKE :p LIMIT 2", {"p": ref.replace("%", "") + "%"})
            row = rows[0] if len(rows) == 1 else None
        if row is None:
            raise NotFoundError(f"no snapshot {ref!r}", code="snapshot-not-found",
                           hint="list snapshots with `tenure snapshot list WORKSPACE`", snapshot=ref)
        return Snapshot.from_row(row)

    def list(self, workspace_id: str) -> builtins.list[Snapshot]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("SELECT * FROM snapshots WHERE workspace_id = :w ORDER BY created_at, id",
                              {"w": workspace_id})
        return [Snapshot.from_row(r) for r in rows]

    def pinned_ids(self) -> set[str]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("SELECT DISTINCT snapshot_id FROM pins WHERE snapshot_id IS NOT NULL"
                              " AND (expires_at IS NULL OR expires_at > {now})")
        return {r["snapshot_id"] for r in rows}

    # ------------------------------------------------------------------ moves

    def move(self, ref: str, target: SnapshotState, *, error: str | None = None,
             expected: SnapshotState | None = None) -> Snapshot:
        """A guarded snapshot move (verify marks, repair, logical delete)."""
        with self.db.transaction() as tx:
            snap = self.get(ref, tx)
            source = expected or snap.state
            SNAPSHOT.check(source, target)
            rows = tx.execute("UPDATE snapshots SET state = :t, error = :e, updated_at = {now}"
                              " WHERE id = :id AND state = :s RETURNING *",
                              {"t": target.value, "e": error, "id": snap.id, "s": source.value})
            if not rows:
                raise VersionConflictError(f"snapshot {snap.id} changed concurrently", snapshot=snap.id)
            return Snapshot.from_row(rows[0])

    def delete(self, ref: str) -> Snapshot:
        """Logical deletion (→ DELETING). Refuses heads and keep-pinned snapshots."""
        with self.db.transaction() as tx:
            snap = self.get(ref, tx)
            SNAPSHOT.check(snap.state, SnapshotState.DELETING)
            rows = tx.execute(
                "UPDATE snapshots SET state = 'DELETING', updated_at = {now} WHERE id = :id AND state = :s"
                " AND NOT EXISTS (SELECT 1 FROM workspaces WHERE head_snapshot_id = :id AND state <> 'DELETED')"
                " AND NOT EXISTS (SELECT 1 FROM pins WHERE snapshot_id = :id AND kind = 'keep') RETURNING *",
                {"id": snap.id, "s": snap.state.value})
            if rows:
                return Snapshot.from_row(rows[0])
            head = tx.one("SELECT name FROM workspaces WHERE head_snapshot_id = :id AND state <> 'DELETED'",
                          {"id": snap.id})
            if head is not None:
                raise ConflictError(f"snapshot {snap.id} is the head of workspace {head['name']!r}",
                               code="snapshot-is-head", hint="checkpoint a newer head first",
                               snapshot=snap.id, workspace=head["name"])
            raise ConflictError(f"snapshot {snap.id} is pinned", code="snapshot-pinned",
                           hint="unpin it with `tenure snapshot unpin`", snapshot=snap.id)

    def prune(self, workspace_id: str, keep_last: int) -> builtins.list[Snapshot]:
        """Retention: logically delete all but the newest ``keep_last`` READY snapshots.

        FAILED snapshots are always collected; heads (of any workspace) and
        pinned snapshots are always kept.
        """
        doomed = []
        ready = [s for s in self.list(workspace_id) if s.state in (SnapshotState.READY, SnapshotState.DEGRADED)]
        keep = {s.id for s in ready[-keep_last:]} if keep_last > 0 else set()
        failed = [s for s in self.list(workspace_id) if s.state is SnapshotState.FAILED]
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
        if tx.dialect == "postgres":
            tx.execute("SELECT id FROM gc_lock WHERE id = 1 FOR UPDATE")
        else:  # BEGIN IMMEDIATE already holds the write lock; touch the row for clarity
            tx.execute("UPDATE gc_lock SET last_sweep = last_sweep WHERE id = 1")

    def pin_objects(self, holder: str, oids: Iterable[str], ttl_s: float) -> str:
        """An upload pin over ``oids``; returns the pin id."""
        pid = new_id("p-")
        with self.db.transaction() as tx:
            self._lock_shared(tx)
            tx.execute("INSERT INTO pins (id, kind, holder, created_at, expires_at)"
                       " VALUES (:id, 'upload', :h, {now}, {now} + :ttl)", {"id": pid, "h": holder, "ttl": ttl_s})
            tx.executemany("INSERT INTO pin_objects (pin_id, oid) VALUES (:p, :o) ON CONFLICT DO NOTHING",
                           [{"p": pid, "o": oid} for oid in set(oids)])
        return pid

    def pin_snapshot(self, ref: str, holder: str, *, kind: str = "restore", ttl_s: float | None = None) -> str:
        """Pin a readable snapshot (its whole closure); refuses one already DELETED."""
        pid = new_id("p-")
        with self.db.transaction() as tx:
            self._lock_shared(tx)
            snap = self.get(ref, tx)
            rows = tx.execute(
                "INSERT INTO pins (id, kind, snapshot_id, holder, created_at, expires_at)"
                " SELECT :id, :k, :s, :h, {now}, " + ("NULL" if ttl_s is None else "{now} + :ttl") +
                f" WHERE EXISTS (SELECT 1 FROM snapshots WHERE id = :s AND state IN {_READABLE_SQL}) RETURNING id",
                {"id": pid, "k": kind, "s": snap.id, "h": holder, "ttl": ttl_s})
            if not rows:
                raise ConflictError(f"snapshot {snap.id} is {snap.state.value} and can no longer be read",
                               code="snapshot-not-readable", snapshot=snap.id, state=snap.state.value)
        return pid

    def unpin(self, pin_id: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM pin_objects WHERE pin_id = :p", {"p": pin_id})
            tx.execute("DELETE FROM pins WHERE id = :p", {"p": pin_id})

    def unpin_snapshot(self, ref: str, kind: str = "keep") -> int:
        snap = self.get(ref)
        with self.db.transaction() as tx:
            return len(tx.execute("DELETE FROM pins WHERE snapshot_id = :s AND kind = :k RETURNING id",
                                  {"s": snap.id, "k": kind}))

    @contextmanager
    def pinned(self, ref: str, holder: str, ttl_s: float = 3600.0) -> Iterator[Snapshot]:
        """Hold a restore pin on a snapshot for the duration of a ``with`` block."""
        pid = self.pin_snapshot(ref, holder, ttl_s=ttl_s)
        try:
            yield self.get(ref)
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
            tx.execute("DELETE FROM pin_objects WHERE pin_id IN (SELECT id FROM pins WHERE expires_at <= {now})")
            tx.execute("DELETE FROM pins WHERE expires_at <= {now}")
            SNAPSHOT.check(SnapshotState.DELETING, SnapshotState.DELETED)
            tx.execute("UPDATE snapshots SET state = 'DELETED', updated_at = {now} WHERE state = 'DELETING'"
                       " AND id NOT IN (SELECT snapshot_id FROM pins WHERE snapshot_id IS NOT NULL)")
            now = float(tx.execute("SELECT {now} AS now")[0]["now"])
            rows = tx.execute(f"SELECT root_oid FROM snapshots WHERE root_oid IS NOT NULL AND (state IN {_READABLE_SQL}"
                              " OR id IN (SELECT snapshot_id FROM pins WHERE snapshot_id IS NOT NULL))")
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
            rows = tx.execute("SELECT DISTINCT o.oid FROM pin_objects o JOIN pins p ON p.id = o.pin_id"
                              " WHERE p.expires_at IS NULL OR p.expires_at > {now}")
            roots = tx.execute("SELECT DISTINCT root_oid FROM snapshots WHERE root_oid IS NOT NULL"
                               f" AND state IN {_READABLE_SQL} AND updated_at >= :m", {"m": mark_time})
            yield {r["oid"] for r in rows}, {r["root_oid"] for r in roots}

    def stats(self) -> dict[str, Any]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("SELECT state, COUNT(*) AS n FROM snapshots GROUP BY state")
        return {r["state"]: int(r["n"]) for r in rows}
