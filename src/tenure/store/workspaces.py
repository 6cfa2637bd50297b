"""Workspace records, writer leases and checkpoint publication.

Every conditional write is one statement whose ``WHERE`` carries the whole
precondition (expected state, expected version, writer generation, live
lease, against the store clock). When it matches no row, the transaction is
rolled back and the row is read again only to say *why* (stale generation,
expired lease, wrong state) — never to decide.

The statements are named blocks of ``sql/queries.sql``; states reach them
as parameters (:func:`~tenure.store.queries.state_params`).

Fencing: ``workspaces.writer_generation`` is the generation of the newest
writer lease. A claim bumps it with a compare-and-swap on the workspace row,
so any write guarded by ``writer_generation = :gen`` from an older writer
matches nothing, however late it arrives.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC
from typing import Any, NoReturn

from tenure.errors import (
    ConflictError,
    IdempotencyConflictError,
    IllegalTransitionError,
    InvalidInputError,
    NotFoundError,
    StaleGenerationError,
    VersionConflictError,
)
from tenure.faults import crash_point, register
from tenure.states import (
    LEASE,
    SNAPSHOT,
    WORKSPACE,
    ForcePath,
    LeaseState,
    ProjectStatus,
    SnapshotState,
    WorkspaceState,
)
from tenure.store.connector import Connector, Row, Tx
from tenure.store.queries import state_params
from tenure.store.records import CHECKPOINT_REASONS, CheckpointTicket, Snapshot, Workspace, WriterLease

register("dispose.after_read", "dispose read the workspace row; nothing written yet")
register("dispose.after_lock", "dispose holds the workspace's published snapshots; none moved to DELETING yet")
register("acquire.after_read", "a new writer read the workspace row; nothing written yet")
register("begin_checkpoint.after_read", "begin_checkpoint read the workspace row; nothing written yet")
register("expiry.expire_after_lock", "an expiry holds the project and workspace rows; the guarded move not yet made")
register("expiry.delete_after_lock", "a deletion holds the project and workspace rows; the guarded move not yet made")
register("workspace_create.after_insert", "a fork's workspace row is inserted, not yet committed")
register("checkpoint.after_begin", "workspace is CHECKPOINTING, snapshot record UPLOADING")
register("checkpoint.after_validating", "snapshot record VALIDATING, closure not yet verified")
register("publish.after_head_update", "inside the publish transaction, before the snapshot goes READY")
register("publish.after_commit", "snapshot READY and head advanced, caller not yet told")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LIVE = (LeaseState.ACTIVE.value, LeaseState.RELEASING.value)
_L, _S, _W = LeaseState, SnapshotState, WorkspaceState
#: The lease states the live-lease guards name (``:active``, ``:releasing``).
_LIVE_LEASE = state_params(_L.ACTIVE, _L.RELEASING)
#: Every lease state that is not terminal (``:issued``, ``:active``, ``:releasing``).
_OPEN_LEASE = state_params(_L.ISSUED, _L.ACTIVE, _L.RELEASING)
#: Snapshot states before publication (``:uploading``, ``:validating``).
_UNPUBLISHED = state_params(_S.UPLOADING, _S.VALIDATING)
#: The states the guarded expiry writes name: IDLE → EXPIRING, and EXPIRING → DELETED, each only while no
#: writer lease is live and the workspace's project, if any, is SUSPENDED.
_EXPIRE_IDLE = {**state_params(_W.EXPIRING, _W.IDLE, ProjectStatus.SUSPENDED), **_LIVE_LEASE}
_DELETE_EXPIRED = {**state_params(_W.DELETED, _W.EXPIRING, ProjectStatus.SUSPENDED), **_LIVE_LEASE}


#: The key before every candidate of an expiry page (store times are seconds since the epoch).
_BEFORE_ALL = -1.0


def _page(before: float, after: tuple[float, str] | None, limit: int) -> dict[str, Any]:
    """One page of expiry candidates: ``:before``, the key ``(:kt, :ki)`` it starts after, and ``:limit``."""
    kt, ki = after if after is not None else (_BEFORE_ALL, "")
    return {"before": before, "kt": kt, "ki": ki, "limit": limit}


def _writes_as(row: Row) -> int | None:
    """The writer generation that may still write a snapshot (``snapshot_with_writer_generation``), if any.

    The snapshot's own generation, when it is also its workspace's writer
    generation; ``None`` when a newer writer holds the workspace.
    """
    own = int(row["generation"])
    return own if own == int(row["writer_generation"]) else None


@dataclass(frozen=True)
class Candidate:
    """A workspace the expiry policy may act on, with its page key (``updated_at`` or ``expiring_since``)."""

    id: str
    name: str
    key: float


@dataclass(frozen=True)
class ExpiryStep:
    """What one expiry or deletion attempt did: ``done``, or the guard term that held it back."""

    workspace: Workspace
    done: bool
    #: why not: not-idle, not-expiring, recently-used, in-grace, writer-lease-live, project-not-suspended, changed
    reason: str | None = None
    detail: str = ""
    #: a deletion's snapshots moved to DELETING
    snapshots: tuple[str, ...] = ()


class ExpiryGraceOverError(IllegalTransitionError):
    """An undo of an expiry after its grace period."""

    code = "expiry-grace-over"
    default_hint = "the workspace stays EXPIRING and is deleted by the next `tenure gc --expire-idle`"


class LeaseHeldError(ConflictError):
    """Another writer holds a live lease on the workspace."""

    code = "lease-held"
    retryable = True
    default_hint = "wait for the holder to release it or for its lease to expire"


class LeaseLostError(ConflictError):
    """The writer's own lease expired, was released or was revoked."""

    code = "lease-lost"
    default_hint = "acquire a new writer lease and start again"


def validate_name(kind: str, name: str) -> str:
    """Names become keys and display strings: keep them plain."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidInputError(
            f"invalid {kind} name {name!r}",
            hint="use 1-128 characters: letters, digits, '.', '_' or '-', starting with a letter or digit",
            code="invalid-name",
            name=name if isinstance(name, str) else repr(name),
        )
    return name


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:20]}"


def _found(row: Row | None, ref: str) -> Workspace:
    """The workspace of ``row``; ``workspace-not-found`` naming ``ref`` when there is no row."""
    if row is None:
        raise NotFoundError(
            f"no workspace named {ref!r}",
            code="workspace-not-found",
            hint="list workspaces with `tenure workspace list`",
            workspace=ref,
        )
    return Workspace.from_row(row)


class WorkspaceStore:
    """Workspaces, writer leases and publication over one connector."""

    def __init__(self, db: Connector) -> None:
        self.db = db

    # ------------------------------------------------------------------ reads

    def now(self) -> float:
        with self.db.transaction(write=False) as tx:
            return float(tx.execute("store_now")[0]["now"])

    def workspace(self, ref: str, tx: Tx | None = None) -> Workspace:
        """A workspace by name or id."""
        if tx is not None:
            row = tx.one("workspace_by_ref", {"r": ref})
        else:
            with self.db.transaction(write=False) as rtx:
                row = rtx.one("workspace_by_ref", {"r": ref})
        return _found(row, ref)

    def _locked(self, tx: Tx, ref: str) -> Workspace:
        """The workspace row, held until ``tx`` ends: a decision read that cannot go stale (ADR 0012)."""
        return _found(tx.one("workspace_for_update", {"r": ref}), ref)

    def workspaces(self) -> list[Workspace]:
        with self.db.transaction(write=False) as tx:
            return [Workspace.from_row(r) for r in tx.execute("workspaces_all")]

    def head_and_state(self, ref: str) -> tuple[str | None, WorkspaceState, int]:
        """Head, state and version read together (one statement)."""
        ws = self.workspace(ref)
        return ws.head_snapshot_id, ws.state, ws.version

    def lease(self, workspace_id: str, generation: int, tx: Tx | None = None) -> WriterLease | None:
        params = {"w": workspace_id, "g": generation}
        if tx is not None:
            row = tx.one("writer_lease_by_generation", params)
        else:
            with self.db.transaction(write=False) as rtx:
                row = rtx.one("writer_lease_by_generation", params)
        return None if row is None else WriterLease.from_row(row)

    def leases(self, workspace_id: str) -> list[WriterLease]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("writer_leases_of_workspace", {"w": workspace_id})
        return [WriterLease.from_row(r) for r in rows]

    # ------------------------------------------------------------------ workspaces

    def create(self, name: str, base_snapshot_id: str | None = None, tx: Tx | None = None) -> Workspace:
        """Create a workspace, empty or forked from a READY snapshot (CREATING → IDLE)."""
        validate_name("workspace", name)
        if tx is None:
            with self.db.transaction() as own:
                return self.create(name, base_snapshot_id, own)
        wid = new_id("w-")
        if tx.one("workspace_id_by_name", {"n": name}):
            raise ConflictError(
                f"workspace {name!r} already exists", code="workspace-exists", hint="pick another name", workspace=name
            )
        if base_snapshot_id is None:
            tx.execute("workspace_insert", {"id": wid, "n": name, "s": WorkspaceState.CREATING.value})
        else:
            inserted = tx.execute(
                "workspace_insert_from_snapshot",
                {
                    "id": wid,
                    "n": name,
                    "b": base_snapshot_id,
                    "s": WorkspaceState.CREATING.value,
                    **state_params(_S.READY),
                },
            )
            if not inserted:
                self._refuse_base(tx, base_snapshot_id)
            crash_point("workspace_create.after_insert")
        self._move(tx, wid, WorkspaceState.CREATING, WorkspaceState.IDLE)
        return self.workspace(wid, tx)

    @staticmethod
    def _refuse_base(tx: Tx, snapshot_id: str) -> None:
        row = tx.one("snapshot_state", {"s": snapshot_id})
        if row is None:
            raise NotFoundError(f"no snapshot {snapshot_id}", code="snapshot-not-found", snapshot=snapshot_id)
        raise ConflictError(
            f"snapshot {snapshot_id} is {row['state']}; only READY snapshots can be a base",
            code="snapshot-not-ready",
            hint="pick a READY snapshot (`tenure snapshot list`)",
            snapshot=snapshot_id,
            state=row["state"],
        )

    def _move(
        self,
        tx: Tx,
        wid: str,
        expected: WorkspaceState,
        target: WorkspaceState,
        record: dict[str, Any] | None = None,
        *,
        expiring: bool = False,
    ) -> None:
        """A guarded workspace move: machine check, then a CAS on the state (``expiring``: record when)."""
        WORKSPACE.check(expected, target, record)
        params = {"t": target.value, "e": expected.value, "id": wid}
        if expiring:
            rows = tx.execute("workspace_move_to_expiring", params)
        else:
            rows = tx.execute("workspace_move", params)
        if not rows:
            raise VersionConflictError(
                f"workspace changed concurrently (expected {expected.value})", workspace=wid, expected=expected.value
            )

    def expire(self, ref: str) -> Workspace:
        """Retention ended: IDLE or MOUNTED → EXPIRING. Nothing on disk is touched."""
        with self.db.transaction() as tx:
            ws = self.workspace(ref, tx)
            self._move(tx, ws.id, ws.state, WorkspaceState.EXPIRING, expiring=True)
            return self.workspace(ws.id, tx)

    def undo_expiry(self, ref: str, grace_s: float, tx: Tx | None = None) -> Workspace:
        """EXPIRING → back to IDLE, only within the grace period; the head is untouched.

        Refused with ``workspace-not-expiring`` for any other state (a deleted
        workspace stays deleted) and with ``expiry-grace-over`` once
        ``grace_s`` has passed since the expiry began. The move sets
        ``updated_at``, so an idle TTL starts afresh (ADR 0019). With ``tx``
        it is part of that transaction (a bring's claim).
        """
        from datetime import datetime, timedelta

        if tx is None:
            with self.db.transaction() as own:
                return self.undo_expiry(ref, grace_s, own)
        ws = self._locked(tx, ref)
        if ws.state is not WorkspaceState.EXPIRING:
            raise ConflictError(
                f"workspace {ws.name!r} is {ws.state.value}; only an EXPIRING workspace can be brought back",
                code="workspace-not-expiring",
                workspace=ws.name,
                state=ws.state.value,
            )
        now = float(tx.execute("store_now")[0]["now"])
        record = {
            "now": datetime.fromtimestamp(now, UTC),
            "expiring_since": None if ws.expiring_since is None else datetime.fromtimestamp(ws.expiring_since, UTC),
            "grace": timedelta(seconds=grace_s),
        }
        target = WorkspaceState.IDLE
        try:
            WORKSPACE.check(ws.state, target, record)
        except IllegalTransitionError as exc:
            since = ws.expiring_since or now
            raise ExpiryGraceOverError(
                f"workspace {ws.name!r} has been EXPIRING for {now - since:.0f} s, past its grace of"
                f" {grace_s:.0f} s: it can no longer be brought back",
                workspace=ws.name,
                expiring_since=ws.expiring_since,
                grace_s=grace_s,
            ) from exc
        rows = tx.execute("workspace_undo_expiry", {"id": ws.id, "g": grace_s, **state_params(_W.IDLE, _W.EXPIRING)})
        if not rows:
            raise VersionConflictError("workspace changed concurrently", workspace=ws.id)
        return self.workspace(ws.id, tx)

    def delete_expired(self, ref: str) -> Workspace:
        """EXPIRING → DELETED, only when no writer lease is live; its snapshots go DELETING.

        Not for the workspace of a project that is not SUSPENDED (ADR 0019).
        The grace period is the caller's business here; the expiry policy
        uses :meth:`delete_after_grace`, whose statement also carries it.
        """
        with self.db.transaction() as tx:
            ws = self.workspace(ref, tx)
            project = tx.one("project_of_workspace_for_share", {"w": ws.id})
            ws = self._locked(tx, ws.id)
            live = tx.one("writer_lease_live_exists", {"w": ws.id, **_LIVE_LEASE})
            WORKSPACE.check(ws.state, WorkspaceState.DELETED, {"live_writer": bool(live)})
            rows = tx.execute("workspace_delete_expired", {"id": ws.id, "before": None, **_DELETE_EXPIRED})
            if not rows:
                if project is not None and project["status"] != ProjectStatus.SUSPENDED.value:
                    raise ConflictError(
                        f"workspace {ws.name!r} belongs to project {project['tenant']}/{project['name']}, which is"
                        f" {project['status']}",
                        code="workspace-of-active-project",
                        hint="suspend the project first, or close it (close disposes of its workspace)",
                        workspace=ws.name,
                        project=f"{project['tenant']}/{project['name']}",
                        status=project["status"],
                    )
                raise VersionConflictError("workspace changed concurrently", workspace=ws.id)
            self._retire_snapshots(tx, ws.id)
            return self.workspace(ws.id, tx)

    # ------------------------------------------------------------------ the expiry policy (ADR 0019)

    def idle_before(self, before: float, after: tuple[float, str] | None = None, limit: int = 500) -> list[Candidate]:
        """IDLE workspaces whose row has not changed since store time ``before``, oldest first.

        One page of at most ``limit``, after the key ``after`` (the last
        candidate's ``(key, id)`` of the previous page).
        """
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("workspaces_idle_before", {**_page(before, after, limit), **state_params(_W.IDLE)})
        return [Candidate(r["id"], r["name"], float(r["k"])) for r in rows]

    def expiring_before(
        self, before: float, after: tuple[float, str] | None = None, limit: int = 500
    ) -> list[Candidate]:
        """EXPIRING workspaces whose expiry began before store time ``before``, oldest first (one page)."""
        with self.db.transaction(write=False) as tx:
            rows = tx.execute(
                "workspaces_expiring_before", {**_page(before, after, limit), **state_params(_W.EXPIRING)}
            )
        return [Candidate(r["id"], r["name"], float(r["k"])) for r in rows]

    def expire_idle(self, ref: str, before: float) -> ExpiryStep:
        """IDLE → EXPIRING when unchanged since store time ``before``; else why not (no error).

        The statement carries the whole guard: the workspace IDLE and not
        changed since ``before`` (no mount, checkpoint or undo since), no live
        writer lease, and no project of it that is not SUSPENDED. The project
        row is locked before the workspace row (the order a claim takes them).
        """
        with self.db.transaction() as tx:
            ws = self.workspace(ref, tx)
            project = tx.one("project_of_workspace_for_share", {"w": ws.id})
            ws = self._locked(tx, ws.id)
            crash_point("expiry.expire_after_lock")
            if ws.state is WorkspaceState.IDLE:
                WORKSPACE.check(ws.state, WorkspaceState.EXPIRING)
            rows = tx.execute("workspace_expire_idle", {"id": ws.id, "before": before, **_EXPIRE_IDLE})
            if rows:
                return ExpiryStep(self.workspace(ws.id, tx), True)
            return self._why_kept(tx, ws, project, WorkspaceState.IDLE, before)

    def delete_after_grace(self, ref: str, before: float) -> ExpiryStep:
        """EXPIRING → DELETED when its expiry began before store time ``before``; else why not.

        Guarded like :meth:`expire_idle` (no live writer lease, no project of
        it that is not SUSPENDED), and by the grace: the expiry began before
        ``before``. Its published and failed snapshots go DELETING in the same
        transaction — except a snapshot that is the head of another live
        workspace (a fork) or keep-pinned — so GC reclaims their objects.
        """
        with self.db.transaction() as tx:
            ws = self.workspace(ref, tx)
            project = tx.one("project_of_workspace_for_share", {"w": ws.id})
            ws = self._locked(tx, ws.id)
            crash_point("expiry.delete_after_lock")
            live = tx.one("writer_lease_live_exists", {"w": ws.id, **_LIVE_LEASE})
            if ws.state is WorkspaceState.EXPIRING and not live:
                WORKSPACE.check(ws.state, WorkspaceState.DELETED, {"live_writer": False})
                rows = tx.execute("workspace_delete_expired", {"id": ws.id, "before": before, **_DELETE_EXPIRED})
                if rows:
                    retired = self._retire_snapshots(tx, ws.id)
                    return ExpiryStep(self.workspace(ws.id, tx), True, snapshots=retired)
            return self._why_kept(tx, ws, project, WorkspaceState.EXPIRING, before)

    def _retire_snapshots(self, tx: Tx, wid: str) -> tuple[str, ...]:
        """A deleted workspace's unfinished snapshots FAILED, the others DELETING (forked heads, kept ones stay)."""
        from tenure.store.snapshots import KEEP  # that module builds on this one

        tx.execute("snapshots_of_workspace_for_update", {"w": wid, **state_params(_S.READY, _S.DEGRADED, _S.FAILED)})
        tx.execute("snapshots_fail_unfinished", {"w": wid, **state_params(_S.FAILED), **_UNPUBLISHED})
        rows = tx.execute(
            "snapshots_delete_of_expired_workspace",
            {
                "w": wid,
                "keep": KEEP,
                **state_params(_S.DELETING, _S.READY, _S.DEGRADED, _S.FAILED, _W.DELETED),
            },
        )
        return tuple(sorted(r["id"] for r in rows))

    def _why_kept(
        self, tx: Tx, ws: Workspace, project: Row | None, expected: WorkspaceState, before: float
    ) -> ExpiryStep:
        """An expiry write matched nothing: say which term of its guard held it back (read, never decided on)."""
        now = float(tx.execute("store_now")[0]["now"])
        expiring = expected is WorkspaceState.EXPIRING
        if ws.state is not expected:
            return ExpiryStep(ws, False, "not-expiring" if expiring else "not-idle", f"it is {ws.state.value}")
        moment = ws.expiring_since if expiring else ws.updated_at
        if moment is None or moment > before or (expiring and moment == before):
            ago = "" if moment is None else f" {max(0.0, now - moment):.3f} s ago"
            if expiring:
                return ExpiryStep(ws, False, "in-grace", f"its expiry began{ago}, within the grace period")
            return ExpiryStep(ws, False, "recently-used", f"last used{ago}, within the idle TTL")
        if tx.one("writer_lease_live_exists", {"w": ws.id, **_LIVE_LEASE}) is not None:
            lease = self.lease(ws.id, ws.writer_generation, tx)
            holder = "a writer" if lease is None else lease.holder
            return ExpiryStep(ws, False, "writer-lease-live", f"{holder} holds a live writer lease")
        if project is not None and project["status"] != ProjectStatus.SUSPENDED.value:
            return ExpiryStep(
                ws,
                False,
                "project-not-suspended",
                f"project {project['tenant']}/{project['name']} is {project['status']}",
            )
        return ExpiryStep(ws, False, "changed", "the workspace changed concurrently")

    def dispose(self, ref: str, generation: int) -> Workspace:
        """Terminal teardown for a closing project, through the named takeover path.

        Fenced by ``generation``: the workspace goes to DELETED from whatever
        state it is in, its writer leases are revoked, unfinished snapshots
        FAILED and published ones DELETING (GC reclaims them) — except a
        snapshot that is the head of another live workspace (a fork of it),
        which stays as it is. The snapshots are locked before they move, so a
        fork of one either commits first (and its head is spared) or is
        refused (ADR 0012). Repeating it is harmless.
        """
        with self.db.transaction() as tx:
            ws = self._locked(tx, ref)
            crash_point("dispose.after_read")
            if ws.writer_generation != generation:
                raise StaleGenerationError(
                    f"workspace {ws.name!r}: generation {generation} is fenced",
                    generation=generation,
                    current_generation=ws.writer_generation,
                )
            if ws.state is not WorkspaceState.DELETED:
                WORKSPACE.force(ws.state, WorkspaceState.DELETED, ForcePath.TAKEOVER)
                if tx.count("workspace_dispose", {"id": ws.id, "g": generation, **state_params(_W.DELETED)}) != 1:
                    raise StaleGenerationError(
                        f"workspace {ws.name!r}: generation {generation} is fenced", generation=generation
                    )
            tx.execute("writer_leases_revoke_all", {"w": ws.id, **state_params(_L.REVOKED), **_OPEN_LEASE})
            tx.execute(
                "snapshots_of_workspace_for_update", {"w": ws.id, **state_params(_S.READY, _S.DEGRADED, _S.FAILED)}
            )
            crash_point("dispose.after_lock")
            tx.execute("snapshots_fail_unfinished", {"w": ws.id, **state_params(_S.FAILED), **_UNPUBLISHED})
            tx.execute(
                "snapshots_delete_of_workspace",
                {"w": ws.id, **state_params(_S.DELETING, _S.READY, _S.DEGRADED, _S.FAILED, _W.DELETED)},
            )
            return self.workspace(ws.id, tx)

    # ------------------------------------------------------------------ writer leases

    def acquire(
        self, ref: str, holder: str, ttl_s: float, *, takeover: bool = False, tx: Tx | None = None
    ) -> WriterLease:
        """Issue a new writer lease at the next generation and activate it.

        Refused with :class:`LeaseHeldError` while another holder's lease is live,
        unless ``takeover``. Older non-terminal leases become EXPIRED (past
        their TTL) or REVOKED; a workspace left MOUNTED or CHECKPOINTING by a
        former writer is moved to MOUNTED through the named takeover path and
        its unfinished snapshot is FAILED — all in this one transaction.
        """
        if tx is None:
            with self.db.transaction() as own:
                return self.acquire(ref, holder, ttl_s, takeover=takeover, tx=own)
        ws = self._locked(tx, ref)
        crash_point("acquire.after_read")
        now = float(tx.execute("store_now")[0]["now"])
        current = self.lease(ws.id, ws.writer_generation, tx)
        if (
            current is not None
            and current.state.value in LIVE + (LeaseState.ISSUED.value,)
            and current.expires_at > now
            and current.holder != holder
            and not takeover
        ):
            raise LeaseHeldError(
                f"workspace {ws.name!r} is held by {current.holder} (generation {current.generation})",
                holder=current.holder,
                generation=current.generation,
                expires_in=round(current.expires_at - now, 3),
            )
        if ws.state in (WorkspaceState.IDLE,):
            target = WORKSPACE.check(ws.state, WorkspaceState.MOUNTED)
        elif ws.state in (WorkspaceState.MOUNTED, WorkspaceState.CHECKPOINTING):
            target = WORKSPACE.force(ws.state, WorkspaceState.MOUNTED, ForcePath.TAKEOVER)
        else:
            raise ConflictError(
                f"workspace {ws.name!r} is {ws.state.value}; a writer cannot mount it",
                code="workspace-not-mountable",
                workspace=ws.name,
                state=ws.state.value,
            )
        generation = ws.writer_generation + 1
        bumped = tx.execute(
            "workspace_bump_writer", {"g": generation, "t": target.value, "id": ws.id, "old": ws.writer_generation}
        )
        if not bumped:
            raise VersionConflictError(f"another writer acquired workspace {ws.name!r} concurrently", workspace=ws.name)
        # An unfinished checkpoint of the former writer is kept: a retry under its key adopts it
        # (S-33); the new writer's first checkpoint under another key fails it.
        tx.execute(
            "writer_leases_retire_older",
            {"w": ws.id, "g": generation, **state_params(_L.EXPIRED, _L.REVOKED), **_OPEN_LEASE},
        )
        lid = new_id("l-")
        tx.execute(
            "writer_lease_insert",
            {"id": lid, "w": ws.id, "g": generation, "h": holder, "ttl": ttl_s, **state_params(_L.ISSUED)},
        )
        self._lease_move(tx, lid, LeaseState.ISSUED, LeaseState.ACTIVE)
        lease = self.lease(ws.id, generation, tx)
        assert lease is not None
        return lease

    @staticmethod
    def _lease_move(tx: Tx, lid: str, expected: LeaseState, target: LeaseState) -> None:
        LEASE.check(expected, target)
        rows = tx.execute("writer_lease_move", {"t": target.value, "e": expected.value, "id": lid})
        if not rows:
            raise VersionConflictError("writer lease changed concurrently", lease=lid)

    def renew(self, lease: WriterLease, ttl_s: float) -> bool:
        """Extend a live, current lease; False when it is no longer renewable."""
        with self.db.transaction() as tx:
            rows = tx.execute(
                "writer_lease_renew", {"ttl": ttl_s, "id": lease.id, "w": lease.workspace_id, **_LIVE_LEASE}
            )
        return bool(rows)

    def expire_leases(self) -> int:
        """Mark every live lease past its TTL EXPIRED; return how many."""
        with self.db.transaction() as tx:
            rows = tx.execute("writer_leases_expire", {**state_params(_L.EXPIRED), **_OPEN_LEASE})
        return len(rows)

    def begin_release(self, lease: WriterLease) -> None:
        """Clean unmount begins: ACTIVE → RELEASING (a final checkpoint may still publish)."""
        with self.db.transaction() as tx:
            self._fenced_lease_move(tx, lease, LeaseState.ACTIVE, LeaseState.RELEASING)

    def finish_release(self, lease: WriterLease) -> None:
        """RELEASING → RELEASED and the workspace MOUNTED → IDLE, together."""
        with self.db.transaction() as tx:
            self._fenced_lease_move(tx, lease, LeaseState.RELEASING, LeaseState.RELEASED)
            WORKSPACE.check(WorkspaceState.MOUNTED, WorkspaceState.IDLE)
            rows = tx.execute(
                "workspace_release",
                {"w": lease.workspace_id, "g": lease.generation, **state_params(_W.IDLE, _W.MOUNTED)},
            )
            if not rows:
                self._diagnose(tx, lease, WorkspaceState.MOUNTED)

    def release(self, lease: WriterLease) -> None:
        self.begin_release(lease)
        self.finish_release(lease)

    def revoke(self, ref: str) -> WriterLease | None:
        """Operator action: revoke the current ACTIVE lease (ACTIVE → REVOKED)."""
        with self.db.transaction() as tx:
            ws = self.workspace(ref, tx)
            lease = self.lease(ws.id, ws.writer_generation, tx)
            if lease is None or lease.state is not LeaseState.ACTIVE:
                return None
            self._lease_move(tx, lease.id, LeaseState.ACTIVE, LeaseState.REVOKED)
            return self.lease(ws.id, ws.writer_generation, tx)

    def _fenced_lease_move(self, tx: Tx, lease: WriterLease, expected: LeaseState, target: LeaseState) -> None:
        LEASE.check(expected, target)
        rows = tx.execute(
            "writer_lease_fenced_move",
            {"t": target.value, "e": expected.value, "id": lease.id, "w": lease.workspace_id},
        )
        if not rows:
            self._diagnose(tx, lease, None)

    def _diagnose(self, tx: Tx, lease: WriterLease, expected: WorkspaceState | None) -> None:
        """A guarded write matched nothing: say why, then raise."""
        ws = self.workspace(lease.workspace_id, tx)
        if ws.writer_generation != lease.generation:
            raise StaleGenerationError(
                f"writer generation {lease.generation} of workspace {ws.name!r} is fenced: generation"
                f" {ws.writer_generation} is current",
                generation=lease.generation,
                current_generation=ws.writer_generation,
                workspace=ws.name,
            )
        now = float(tx.execute("store_now")[0]["now"])
        current = self.lease(ws.id, lease.generation, tx)
        if current is None or current.state.value not in LIVE or current.expires_at <= now:
            state = "missing" if current is None else current.state.value
            raise LeaseLostError(
                f"writer lease generation {lease.generation} is no longer live ({state},"
                f" expired {max(0.0, now - (current.expires_at if current else now)):.3f}s ago)",
                generation=lease.generation,
                lease_state=state,
            )
        raise VersionConflictError(
            f"workspace {ws.name!r} is {ws.state.value}" + (f", expected {expected.value}" if expected else ""),
            workspace=ws.name,
            state=ws.state.value,
        )

    # ------------------------------------------------------------------ checkpoint publication

    def begin_checkpoint(self, lease: WriterLease, key: str, reason: str = "manual") -> CheckpointTicket:
        """MOUNTED → CHECKPOINTING and a new UPLOADING snapshot record, fenced; ``reason`` is recorded with it
        (one of ``CHECKPOINT_REASONS``, else ``ValueError`` before anything is written).

        A key already published returns its snapshot (no write). A workspace
        already CHECKPOINTING under the same key resumes that checkpoint
        (same snapshot record, same expected version).
        """
        if reason not in CHECKPOINT_REASONS:
            raise ValueError(f"not a checkpoint reason: {reason!r} (one of {', '.join(CHECKPOINT_REASONS)})")
        with self.db.transaction() as tx:
            ws = self._locked(tx, lease.workspace_id)
            crash_point("begin_checkpoint.after_read")
            existing = tx.one("snapshot_by_key", {"w": lease.workspace_id, "k": key})
            if existing is not None:
                snap = Snapshot.from_row(existing)
                if snap.state in (SnapshotState.READY, SnapshotState.DEGRADED):
                    return CheckpointTicket(
                        ws.id,
                        snap.id,
                        key,
                        ws.version,
                        snap.parent_id,
                        snap.generation,
                        resumed=False,
                        already_published=snap,
                    )
                if ws.state is WorkspaceState.CHECKPOINTING and ws.pending_key == key:
                    if ws.writer_generation != lease.generation:
                        self._diagnose(tx, lease, WorkspaceState.CHECKPOINTING)
                    assert ws.pending_version is not None
                    return CheckpointTicket(
                        ws.id, snap.id, key, ws.pending_version, snap.parent_id, lease.generation, resumed=True
                    )
                if (
                    snap.state in (SnapshotState.UPLOADING, SnapshotState.VALIDATING)
                    and snap.generation < lease.generation
                    and ws.state is WorkspaceState.MOUNTED
                ):
                    return self._adopt(tx, ws, lease, snap, key)
                raise IdempotencyConflictError(
                    f"idempotency key {key!r} belongs to snapshot {snap.id}, which is {snap.state.value}",
                    snapshot=snap.id,
                    state=snap.state.value,
                    hint="use a new idempotency key for a new checkpoint",
                )
            sid = new_id("s-")
            if ws.writer_generation == lease.generation and ws.state is WorkspaceState.CHECKPOINTING:
                raise ConflictError(
                    f"workspace {ws.name!r} has an unfinished checkpoint under key {ws.pending_key!r}",
                    code="checkpoint-in-progress",
                    pending_key=ws.pending_key,
                    hint="resume it with the same idempotency key",
                )
            if ws.writer_generation == lease.generation:
                WORKSPACE.check(ws.state, WorkspaceState.CHECKPOINTING)
            rows = tx.execute(
                "workspace_begin_checkpoint",
                {
                    "s": sid,
                    "k": key,
                    "w": ws.id,
                    "g": lease.generation,
                    **state_params(_W.CHECKPOINTING, _W.MOUNTED),
                    **_LIVE_LEASE,
                },
            )
            if not rows:
                self._diagnose(tx, lease, WorkspaceState.MOUNTED)
                raise AssertionError("unreachable")
            version, head = int(rows[0]["version"]), rows[0]["head_snapshot_id"]
            tx.execute(
                "snapshots_fail_superseded",
                {
                    "w": ws.id,
                    "g": lease.generation,
                    "e": f"superseded by writer generation {lease.generation}",
                    **state_params(_S.FAILED),
                    **_UNPUBLISHED,
                },
            )
            tx.execute(
                "snapshot_insert",
                {
                    "s": sid,
                    "w": ws.id,
                    "p": head,
                    "g": lease.generation,
                    "k": key,
                    "r": reason,
                    **state_params(_S.UPLOADING),
                },
            )
        crash_point("checkpoint.after_begin")
        return CheckpointTicket(ws.id, sid, key, version, head, lease.generation, resumed=False)

    def _adopt(self, tx: Tx, ws: Workspace, lease: WriterLease, snap: Snapshot, key: str) -> CheckpointTicket:
        """Retry of a former writer's unfinished checkpoint under its key: it becomes this writer's (S-33).

        The workspace goes MOUNTED → CHECKPOINTING with that snapshot pending,
        fenced like any begin; the record is re-parented on the current head
        and takes this writer's generation. The build then runs on the folder
        as it is now, reusing every object already uploaded, and publishes once.
        """
        WORKSPACE.check(ws.state, WorkspaceState.CHECKPOINTING)
        rows = tx.execute(
            "workspace_begin_checkpoint",
            {
                "s": snap.id,
                "k": key,
                "w": ws.id,
                "g": lease.generation,
                **state_params(_W.CHECKPOINTING, _W.MOUNTED),
                **_LIVE_LEASE,
            },
        )
        if not rows:
            self._diagnose(tx, lease, WorkspaceState.MOUNTED)
        version, head = int(rows[0]["version"]), rows[0]["head_snapshot_id"]
        if not tx.execute(
            "snapshot_adopt", {"s": snap.id, "w": ws.id, "g": lease.generation, "p": head, **_UNPUBLISHED}
        ):
            raise VersionConflictError(f"snapshot {snap.id} changed concurrently", snapshot=snap.id)
        return CheckpointTicket(ws.id, snap.id, key, version, head, lease.generation, resumed=True)

    def mark_uploaded(
        self,
        ticket: CheckpointTicket,
        root: str,
        files: int,
        bytes_read: int,
        bytes_new: int,
        skipped: list[tuple[str, str]],
    ) -> None:
        """UPLOADING → VALIDATING with the root tree id (a resumed one may already be VALIDATING)."""
        import json

        with self.db.transaction() as tx:
            if tx.dialect == "postgres":  # a root appears under the shared GC lock (ADR 0004)
                tx.execute("gc_lock_shared")
            row = tx.one("snapshot_with_writer_generation", {"s": ticket.snapshot_id})
            if row is None:
                raise NotFoundError(f"no snapshot {ticket.snapshot_id}", code="snapshot-not-found")
            state = SnapshotState(row["state"])
            if state is SnapshotState.VALIDATING and row["root_oid"] == root:
                if _writes_as(row) != ticket.generation:  # fenced: told so, even though nothing would change
                    self._superseded(ticket, row)
                return  # a resumed checkpoint of an unchanged folder: nothing to write
            expected = SnapshotState.UPLOADING
            if state is SnapshotState.VALIDATING:  # resumed with a changed folder: re-validate
                expected = SnapshotState.VALIDATING
            elif state is not SnapshotState.UPLOADING:
                SNAPSHOT.check(state, SnapshotState.VALIDATING)
            # the statement is the fence: the snapshot must still be this ticket's writer's (a newer
            # writer that adopted it under the key has made it its own, S-33), and that writer current
            rows = tx.execute(
                "snapshot_mark_validating",
                {
                    "r": root,
                    "f": files,
                    "br": bytes_read,
                    "bn": bytes_new,
                    "sk": json.dumps(skipped),
                    "s": ticket.snapshot_id,
                    "e": expected.value,
                    "w": ticket.workspace_id,
                    "g": ticket.generation,
                    **state_params(_S.VALIDATING),
                },
            )
            if not rows:
                current = tx.one("snapshot_with_writer_generation", {"s": ticket.snapshot_id})
                if current is not None and _writes_as(current) == ticket.generation:
                    raise VersionConflictError(
                        f"snapshot {ticket.snapshot_id} changed concurrently", snapshot=ticket.snapshot_id
                    )
                self._superseded(ticket, current)
        crash_point("checkpoint.after_validating")

    @staticmethod
    def _superseded(ticket: CheckpointTicket, row: Row | None) -> NoReturn:
        """Raise: ``ticket``'s writer is fenced (a newer writer holds the workspace, or adopted the snapshot)."""
        now_gen = None if row is None else int(row["writer_generation"])
        raise StaleGenerationError(
            f"snapshot {ticket.snapshot_id} was superseded by writer generation {now_gen}",
            generation=ticket.generation,
            current_generation=now_gen,
        )

    def fail_snapshot(self, snapshot_id: str, error: str, *, generation: int | None = None) -> None:
        """An unpublished checkpoint's record → FAILED (its closure is incomplete), fenced.

        ``generation`` is the checkpoint's writer (its ticket's generation):
        the statement matches only while the snapshot is still that writer's
        and the writer is the workspace's current one, so a fenced writer can
        fail neither a checkpoint a newer writer adopted under the same key
        (S-33) nor one of its own that was superseded; it gets
        :class:`StaleGenerationError` and nothing changes. Without it, the
        generation the snapshot has when it is read is the one required (the
        snapshot must be the current writer's). A snapshot that is gone is
        left alone.
        """
        with self.db.transaction() as tx:
            row = tx.one("snapshot_with_writer_generation", {"s": snapshot_id})
            if row is None:
                return
            SNAPSHOT.check(row["state"], SnapshotState.FAILED)
            writer = int(row["generation"]) if generation is None else generation
            params = {"e": error, "s": snapshot_id, "st": row["state"], "g": writer, **state_params(_S.FAILED)}
            if not tx.execute("snapshot_fail", params):
                current = tx.one("snapshot_with_writer_generation", {"s": snapshot_id})
                if current is None:
                    return
                if _writes_as(current) == writer:
                    raise VersionConflictError(f"snapshot {snapshot_id} changed concurrently", snapshot=snapshot_id)
                now_gen = int(current["writer_generation"])
                raise StaleGenerationError(
                    f"snapshot {snapshot_id}: writer generation {writer} is fenced (the workspace's is {now_gen})",
                    generation=writer,
                    current_generation=now_gen,
                )

    def publish(self, lease: WriterLease, ticket: CheckpointTicket) -> Snapshot:
        """One transaction: head advance + CHECKPOINTING → MOUNTED, snapshot VALIDATING → READY.

        Guarded by expected version, idempotency key and writer generation
        (with a live lease). A publication that already committed is
        returned as is; a stale generation raises StaleGenerationError and
        changes nothing.
        """
        with self.db.transaction() as tx:
            WORKSPACE.check(WorkspaceState.CHECKPOINTING, WorkspaceState.MOUNTED)
            SNAPSHOT.check(SnapshotState.VALIDATING, SnapshotState.READY)
            rows = tx.execute(
                "workspace_publish",
                {
                    "s": ticket.snapshot_id,
                    "w": ticket.workspace_id,
                    "v": ticket.expected_version,
                    "k": ticket.idempotency_key,
                    "g": lease.generation,
                    **state_params(_W.MOUNTED, _W.CHECKPOINTING),
                    **_LIVE_LEASE,
                },
            )
            if not rows:
                done = tx.one("snapshot_published", {"s": ticket.snapshot_id, **state_params(_S.READY, _S.DEGRADED)})
                if done is not None:
                    return Snapshot.from_row(done)
                self._diagnose(tx, lease, WorkspaceState.CHECKPOINTING)
            crash_point("publish.after_head_update")
            ready = tx.execute(
                "snapshot_mark_ready", {"s": ticket.snapshot_id, **state_params(_S.READY, _S.VALIDATING)}
            )
            if not ready:
                raise VersionConflictError(
                    f"snapshot {ticket.snapshot_id} is not VALIDATING", snapshot=ticket.snapshot_id
                )
            snap = Snapshot.from_row(ready[0])
        crash_point("publish.after_commit")
        return snap

    def abandon_checkpoint(self, lease: WriterLease, ticket: CheckpointTicket, *, error: str | None) -> None:
        """CHECKPOINTING → MOUNTED without a head advance.

        ``error=None`` means "nothing changed": the UPLOADING record, never
        published nor referenced, is removed. Otherwise it becomes FAILED.
        """
        with self.db.transaction() as tx:
            WORKSPACE.check(WorkspaceState.CHECKPOINTING, WorkspaceState.MOUNTED)
            rows = tx.execute(
                "workspace_abandon_checkpoint",
                {
                    "w": ticket.workspace_id,
                    "k": ticket.idempotency_key,
                    "g": lease.generation,
                    **state_params(_W.MOUNTED, _W.CHECKPOINTING),
                },
            )
            if not rows:
                self._diagnose(tx, lease, WorkspaceState.CHECKPOINTING)
            if error is None:
                tx.execute("snapshot_delete_unpublished", {"s": ticket.snapshot_id, **_UNPUBLISHED})
            else:
                tx.execute(
                    "snapshot_fail_unpublished",
                    {"s": ticket.snapshot_id, "e": error, **state_params(_S.FAILED), **_UNPUBLISHED},
                )
