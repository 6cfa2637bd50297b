"""The host-local mount store: one record per mount of a workspace on this host (ADR 0021).

A **mount** is a workspace folder materialized on this host for a project
running here: the folder, the snapshot it was restored from, the generation
the claim gave, the checkpoint in flight (its idempotency key: the pending
snapshot is found by it in the control-plane store, and the objects uploaded
so far by the build's own existence check, ADR 0021) and any local cleanup
left to do. The records live in a SQLite
file under the data folder (``<data>/mounts.db``; WAL, ``synchronous=FULL``,
so a record is on disk when a call returns) and survive the process: restart
reconciliation reads them at the next start.

Every change of status goes through the mount machine's check
(:data:`tenure.states.MOUNT`) and a guarded update that only moves from
the expected status. :meth:`MountStore.force` is the one forced path, for
reconciliation and takeover only (S-52; a test checks no other caller uses
it).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from tenure.errors import ConflictError, NotFoundError
from tenure.states import MOUNT, MountState
from tenure.store.migrate import migrate
from tenure.store.queries import load, state_params
from tenure.store.records import Record
from tenure.store.sqlite import SqliteConnector

__all__ = ["Mount", "MountStore", "MOUNTS_FILE"]

#: the mount store's file name under the data folder
MOUNTS_FILE = "mounts.db"
SCHEMA = "tenure.mounts"


@dataclass(frozen=True)
class Mount(Record):
    """One mount record."""

    id: str
    workspace_id: str
    project_id: str | None
    project_ref: str | None
    generation: int
    folder: str
    base_snapshot: str | None
    state: MountState
    checkpoint_key: str | None
    pending_snapshot: str | None
    pending_cleanup: str | None
    verdict: str | None
    forced_reason: str | None
    preserved_folder: str | None
    preserved_at: float | None
    created_at: float
    updated_at: float
    #: the project's lineage when the mount was opened (``None`` for mounts recorded before it was kept)
    lineage: int | None = None

    conversions = {"generation": int, "state": MountState, "created_at": float, "updated_at": float}

    @property
    def live(self) -> bool:
        """Not torn down: MOUNTING, MOUNTED or CHECKPOINTING."""
        return self.state in (MountState.MOUNTING, MountState.MOUNTED, MountState.CHECKPOINTING)


class MountStore:
    """The records of this host's mounts, in ``<data>/mounts.db``."""

    def __init__(self, data_dir: str) -> None:
        os.makedirs(data_dir, exist_ok=True)
        self.path = os.path.join(data_dir, MOUNTS_FILE)
        self.db = SqliteConnector(self.path, queries=load(SCHEMA))
        migrate(self.db)

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ reading

    def get(self, mount_id: str) -> Mount:
        with self.db.transaction(write=False) as tx:
            row = tx.one("mount_by_id", {"id": mount_id})
        if row is None:
            raise NotFoundError(f"no mount {mount_id} on this host", code="mount-not-found", mount=mount_id)
        return Mount.from_row(row)

    def list(self) -> list[Mount]:
        with self.db.transaction(write=False) as tx:
            return [Mount.from_row(r) for r in tx.execute("mounts_all")]

    def live_for(self, workspace_id: str) -> Mount | None:
        """The mount of ``workspace_id`` that is not CLOSED, if any."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("mount_live_for_workspace", {"w": workspace_id, **state_params(MountState.CLOSED)})
        return None if row is None else Mount.from_row(row)

    # ------------------------------------------------------------------ writing

    def open(
        self,
        workspace_id: str,
        folder: str,
        generation: int,
        *,
        project_id: str | None = None,
        project_ref: str | None = None,
        base_snapshot: str | None = None,
        lineage: int | None = None,
    ) -> Mount:
        """A new mount in the machine's initial status (MOUNTING)."""
        mount_id = "m-" + uuid.uuid4().hex[:20]
        with self.db.transaction() as tx:
            (row,) = tx.execute(
                "mount_insert",
                {
                    "id": mount_id,
                    "w": workspace_id,
                    "p": project_id,
                    "ref": project_ref,
                    "g": generation,
                    "f": folder,
                    "b": base_snapshot,
                    "s": MOUNT.initial.value,
                    "lin": lineage,
                },
            )
        return Mount.from_row(row)

    def transition(self, mount_id: str, expected: MountState, target: MountState) -> Mount:
        """``expected → target``, checked by the mount machine, only from ``expected``."""
        MOUNT.check(expected, target)
        with self.db.transaction() as tx:
            moved = tx.execute("mount_transition", {"id": mount_id, "e": expected.value, "t": target.value})
        if not moved:
            self._refuse_move(mount_id, expected)
        return Mount.from_row(moved[0])

    def _refuse_move(self, mount_id: str, expected: MountState) -> None:
        """A guarded move matched nothing: say which status the mount is in instead."""
        current = self.get(mount_id)
        raise ConflictError(
            f"mount {mount_id} is {current.state.value}, not {expected.value}",
            code="mount-state-conflict",
            mount=mount_id,
            expected=expected.value,
            actual=current.state.value,
        )

    def force(self, mount_id: str, target: MountState, reason: str) -> Mount:
        """The forced path: reconciliation and takeover only (S-52). Any status → ``target``."""
        with self.db.transaction() as tx:
            forced = tx.execute("mount_force", {"id": mount_id, "t": target.value, "why": reason})
        if not forced:
            raise NotFoundError(f"no mount {mount_id} on this host", code="mount-not-found", mount=mount_id)
        return Mount.from_row(forced[0])

    def set_generation(self, mount_id: str, generation: int) -> None:
        with self.db.transaction() as tx:
            tx.execute("mount_set_generation", {"id": mount_id, "g": generation})

    def set_base(
        self, mount_id: str, snapshot_id: str | None, *, move: tuple[MountState, MountState] | None = None
    ) -> None:
        """The mount's folder holds ``snapshot_id`` now; with ``move`` (expected, target), also that guarded
        change of status, in the same transaction. The base is recorded even when the move is refused
        (``mount-state-conflict``, raised after the commit)."""
        if move is not None:
            MOUNT.check(*move)
        with self.db.transaction() as tx:
            tx.execute("mount_set_base", {"id": mount_id, "b": snapshot_id})
            moved = move is None or bool(
                tx.execute("mount_transition", {"id": mount_id, "e": move[0].value, "t": move[1].value})
            )
        if not moved:
            assert move is not None
            self._refuse_move(mount_id, move[0])

    def checkpoint_begin(self, mount_id: str, key: str) -> None:
        """A checkpoint under ``key`` is in flight (recorded before anything is uploaded)."""
        with self.db.transaction() as tx:
            tx.execute("mount_checkpoint_begin", {"id": mount_id, "k": key})

    def checkpoint_pending(self, mount_id: str, snapshot_id: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("mount_checkpoint_pending", {"id": mount_id, "s": snapshot_id})

    def checkpoint_end(self, mount_id: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("mount_checkpoint_end", {"id": mount_id})

    def set_cleanup(self, mount_id: str, cleanup: str | None) -> None:
        with self.db.transaction() as tx:
            tx.execute("mount_set_cleanup", {"id": mount_id, "c": cleanup})

    def set_verdict(
        self, mount_id: str, verdict: str, *, preserved_folder: str | None = None, preserved_at: float | None = None
    ) -> None:
        with self.db.transaction() as tx:
            tx.execute("mount_set_verdict", {"id": mount_id, "v": verdict, "pf": preserved_folder, "pa": preserved_at})

    def delete(self, mount_id: str) -> None:
        with self.db.transaction() as tx:
            tx.execute("mount_delete", {"id": mount_id})
