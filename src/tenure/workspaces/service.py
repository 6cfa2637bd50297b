"""The workspace service: checkpoint, restore, verify, repair, retention, GC, and the folders on this host.

It composes the store (records, leases, pins), the object store and the tree
engine, and keeps the publication order of the storage spec: upload objects →
verify closure → publish the record and advance the head in one transaction.
Metadata is never published first.

The lifecycle of a project reaches storage only through this service: it
initializes a project's folder (restore the head, or adopt a folder already
here, never overwrite), checkpoints and removes it on suspend, releases the
writer lease, and disposes of a workspace on close. Folder bookkeeping (base
files, preserved folders, the trash) lives in :mod:`tenure.workspaces.folders`.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tenure.errors import (
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    ObjectStoreError,
    StoreError,
    TenureError,
)
from tenure.objects import ObjectStore
from tenure.snapshots import (
    Interval,
    RestoreResult,
    Unrepairable,
    build_tree,
    repair_tree,
    restore_tree,
    verify_tree,
)
from tenure.snapshots.errors import SnapshotDamagedError
from tenure.snapshots.gc import GcResult, collect
from tenure.snapshots.verify import set_aside
from tenure.states import LeaseState, SnapshotState, WorkspaceState
from tenure.store import CheckpointTicket, LeaseHeldError, LeaseLostError, Snapshot, Store, Workspace, WriterLease
from tenure.workspaces.binding import bind_object_store
from tenure.workspaces.expiry import DEFAULT_GRACE_S, ExpiryResult, expire_idle
from tenure.workspaces.folders import LocalFolders
from tenure.workspaces.holders import abandoned, process_holder

Progress = Callable[[int, int], None]

PIN_TTL_S = 6 * 3600.0


class ClosureIncompleteError(IntegrityError):
    """A snapshot's tree references objects the store does not hold."""

    code = "closure-incomplete"


@dataclass(frozen=True)
class CheckpointResult:
    snapshot: Snapshot
    unchanged: bool
    resumed: bool = False
    skipped: tuple[tuple[str, str], ...] = ()
    #: folders listed to find what changed (all of them when ``walked``; a change journal names fewer)
    folders_listed: int | None = None
    walked: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot.to_dict(),
            "unchanged": self.unchanged,
            "resumed": self.resumed,
            "skipped": [list(s) for s in self.skipped],
            "folders_listed": self.folders_listed,
            "walked": self.walked,
        }


@dataclass(frozen=True)
class VerifyReport:
    snapshot: Snapshot
    checked: int
    missing: tuple[str, ...]
    corrupt: tuple[str, ...]
    lost_paths: tuple[str, ...]
    #: corrupt objects moved out of the object store's way (a checkpoint of a folder holding them stores them again)
    set_aside: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.missing and not self.corrupt

    def to_dict(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot.to_dict(),
            "ok": self.ok,
            "checked": self.checked,
            **_damage(self),
        }


@dataclass(frozen=True)
class RepairReport:
    """The outcome of :meth:`WorkspaceService.repair`: what was put back, what the folder could not give back."""

    snapshot: Snapshot
    #: objects put back from the folder
    repaired: tuple[str, ...] = ()
    #: paths whose lost content the folder cannot give back, each with a reason (``tenure.snapshots.repair.REASONS``)
    unrepairable: tuple[Unrepairable, ...] = ()
    #: what the full verify after the repair still found missing or corrupt, and the paths they make unreadable
    missing: tuple[str, ...] = ()
    corrupt: tuple[str, ...] = ()
    lost_paths: tuple[str, ...] = ()
    #: corrupt objects moved out of the object store's way (then rebuilt like missing ones)
    set_aside: tuple[str, ...] = ()
    bytes_read: int = 0
    #: the snapshot was READY: nothing was read or stored
    nothing_to_repair: bool = False

    @property
    def ok(self) -> bool:
        return self.snapshot.state is SnapshotState.READY

    def to_dict(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot.to_dict(),
            "ok": self.ok,
            "nothing_to_repair": self.nothing_to_repair,
            "repaired": list(self.repaired),
            "unrepairable": [u.to_dict() for u in self.unrepairable],
            **_damage(self),
            "bytes_read": self.bytes_read,
        }


def _damage(report: VerifyReport | RepairReport) -> dict[str, Any]:
    """The damage a verify found (missing and corrupt objects, the paths they make unreadable, what was set aside)."""
    return {
        "missing": list(report.missing),
        "corrupt": list(report.corrupt),
        "lost_paths": list(report.lost_paths),
        "set_aside": list(report.set_aside),
    }


def default_holder() -> str:
    """The holder name of a short-lived, in-process writer: ``cli@HOST:PID``.

    The pid tells a writer that is still running on this host (refused, and
    named) from one that crashed (its lease is taken over at once).
    """
    return f"cli@{socket.gethostname()}:{os.getpid()}"


def _cli_writer(holder: str) -> tuple[str, int | None] | None:
    """``(host, pid)`` of a short-lived writer's holder name (``pid`` None in the older ``cli@HOST`` form)."""
    if not holder.startswith("cli@"):
        return None
    host, sep, pid = holder[4:].rpartition(":")
    if sep and pid.isdigit():
        return host, int(pid)
    return holder[4:], None


def _crashed_here(holder: str) -> bool:
    """True for a short-lived writer of this host whose process no longer runs."""
    writer = _cli_writer(holder)
    if writer is None or writer[0] != socket.gethostname():
        return False
    if writer[1] is None:
        return True  # the pid-less form predates this check: its same-host successor always took over
    return abandoned(holder)


def _busy(name: str, lease: WriterLease, now: float) -> LeaseHeldError:
    """The refusal of a checkpoint while another writer holds the workspace, naming it."""
    expires_in = max(0.0, lease.expires_at - now)
    writer = _cli_writer(lease.holder)
    if writer is not None and writer[1] is not None:
        who = f"another tenure process (pid {writer[1]} on {writer[0]}) is checkpointing it"
    else:
        who = f"{lease.holder} holds its writer lease"
    return LeaseHeldError(
        f"workspace {name!r} is busy: {who} (writer generation {lease.generation}, lease ends in"
        f" {expires_in:.0f} s unless released sooner)",
        holder=lease.holder,
        generation=lease.generation,
        pid=None if writer is None else writer[1],
        expires_in=round(expires_in, 3),
        hint="wait for it to finish and checkpoint again, or pass --wait to wait for it",
    )


def _tenure_paths(data_dir: str, store_url: str, objects_url: str) -> list[str]:
    """tenure's own files on this host: never part of a checkpoint, even when inside the folder."""
    paths = [data_dir]
    if objects_url.startswith("file://"):
        paths.append(objects_url[len("file://") :])
    if store_url.startswith("sqlite:///"):
        db = store_url[len("sqlite:///") :]
        paths += [db, f"{db}-wal", f"{db}-shm", f"{db}-journal"]
    return paths


@dataclass
class WorkspaceService:
    """Workspace operations over one store, one object store and a data folder."""

    store: Store
    objects: ObjectStore
    data_dir: str
    holder: str = field(default_factory=default_holder)
    lease_ttl_s: float = 60.0
    #: Progress callback for checkpoints and restores that are not given one (bring and suspend in the CLI).
    progress: Progress | None = None
    #: The object store's identity once the store records it (``bind_object_store``).
    object_store_id: str | None = field(default=None, init=False)
    #: Checkpoints whose abandonment the store could not record (it was down): workspace id → lease and
    #: ticket, abandoned again before the workspace's next checkpoint and by :meth:`retry_abandons`.
    _unabandoned: dict[str, tuple[WriterLease, CheckpointTicket, str]] = field(
        default_factory=dict, init=False, repr=False
    )
    _unabandoned_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        # The store and the object store belong together: a mismatch is refused before anything is done.
        self.object_store_id = bind_object_store(self.store, self.objects, create=False)

    def bind(self) -> str:
        """Bind the object store to the store now, or check the binding (a pod does so at start)."""
        bound = bind_object_store(self.store, self.objects)
        assert bound is not None  # create=True binds or raises
        self.object_store_id = bound
        return bound

    def _checked_before_reading(self) -> None:
        """Before a restore or a verify reads an object: the object store is the one the store is bound to.

        A service made before the store had a binding (an empty object store) asks again, so one made with
        another, empty object folder is refused with ``object-store-mismatch`` instead of finding the head's
        objects missing and marking it DEGRADED. Once bound the binding never changes: no read.
        """
        if self.object_store_id is None:
            self.object_store_id = bind_object_store(self.store, self.objects, create=False)

    # ------------------------------------------------------------------ records

    def create(self, name: str, from_snapshot: str | None = None) -> Workspace:
        base = self.store.snapshots.get(from_snapshot).id if from_snapshot else None
        return self.store.workspaces.create(name, base)

    def list(self) -> list[Workspace]:
        return self.store.workspaces.workspaces()

    def workspace(self, ref: str) -> Workspace:
        """A workspace by name or id."""
        return self.store.workspaces.workspace(ref)

    def lease(self, workspace_id: str, generation: int) -> WriterLease | None:
        """The writer lease of ``workspace_id`` at ``generation``, if one was issued."""
        return self.store.workspaces.lease(workspace_id, generation)

    def index_path(self, workspace_id: str, folder: str) -> str:
        digest = hashlib.sha256(os.path.realpath(folder).encode("utf-8", "surrogateescape")).hexdigest()[:24]
        path = os.path.join(self.data_dir, "index", workspace_id)
        os.makedirs(path, exist_ok=True)
        return os.path.join(path, f"{digest}.idx")

    # ------------------------------------------------------------------ checkpoint

    def checkpoint(
        self,
        name: str,
        folder: str,
        *,
        key: str | None = None,
        lease: WriterLease | None = None,
        progress: Progress | None = None,
        exclude: Sequence[str] = (),
        wait: bool = False,
        on_wait: Callable[[str], None] | None = None,
        interval: Interval | None = None,
        reason: str = "manual",
    ) -> CheckpointResult:
        """Checkpoint ``folder`` as the workspace's new head; ``reason`` is recorded with the snapshot.

        Without ``lease`` this call is a short-lived writer: it acquires a
        writer lease and releases it at the end. While another writer holds
        a live lease it is refused at once with ``lease-held`` naming the
        holder (and, for another short-lived writer, its pid), before any
        file is read; with ``wait`` it waits for that lease to end instead
        (``on_wait`` is told why, once). A lease left by a short-lived
        writer of this host whose process is gone is taken over, so a
        retry after a crash resumes under the same key. So does a retry
        after a retryable error (``disk-full``, ``store-unavailable``,
        ``folder-changed``…) of a checkpoint given a ``key``: its snapshot
        stays pending under the key instead of FAILED (:meth:`_leave_resumable`).
        Without a key, with a ``lease`` (a pod's checkpoints, keys it makes
        itself) or after an error that is not retryable, a failed checkpoint
        is FAILED.

        ``exclude`` holds gitignore patterns, read after ``.tenureignore``.
        tenure's own data (the data folder, a local object folder, a SQLite
        file) is never part of the tree, even when it lies inside ``folder``.
        ``interval``: what a change journal of the folder saw change since
        the last checkpoint; only the folders it names are listed (ADR 0030).
        """
        progress = progress if progress is not None else self.progress
        leave_out = _tenure_paths(self.data_dir, self.store.url, self.objects.url)
        if lease is not None:
            return self._checkpoint(
                lease, folder, key or uuid.uuid4().hex, progress, exclude, leave_out, interval, reason=reason
            )
        ws_store = self.store.workspaces
        delay, told = 0.05, False
        while True:
            ws = ws_store.workspace(name)
            current = ws_store.lease(ws.id, ws.writer_generation)
            now = ws_store.now()
            # A crashed short-lived writer of this host: take its lease over now rather than after its TTL.
            takeover = current is not None and _crashed_here(current.holder)
            held = (
                current is not None
                and current.holder != self.holder
                and not takeover
                and current.state in (LeaseState.ISSUED, LeaseState.ACTIVE, LeaseState.RELEASING)
                and current.expires_at > now
            )
            if held:
                assert current is not None
                busy = _busy(ws.name, current, now)
            else:
                try:
                    own = ws_store.acquire(name, self.holder, self.lease_ttl_s, takeover=takeover)
                    break
                except LeaseHeldError as exc:  # another writer came first
                    latest = ws_store.lease(ws.id, int(exc.context.get("generation", ws.writer_generation)))
                    if latest is None:
                        raise
                    busy = _busy(ws.name, latest, ws_store.now())
            if not wait:
                raise busy
            if on_wait is not None and not told:
                on_wait(busy.message)
                told = True
            time.sleep(delay)  # polling the store: the holder may be on another host
            delay = min(1.0, delay * 2)
        kept: list[CheckpointTicket] = []
        try:
            result = self._checkpoint(
                own,
                folder,
                key or uuid.uuid4().hex,
                progress,
                exclude,
                leave_out,
                keep=kept if key else None,
                reason=reason,
            )
        except BaseException:
            if kept:
                self._leave_resumable(own)
            else:
                self._release_quietly(own)
            raise
        self.store.workspaces.release(own)
        return result

    def _leave_resumable(self, lease: WriterLease) -> None:
        """A keyed checkpoint failed with a retryable error: its snapshot stays pending, the workspace is let go.

        A new lease of this writer takes the workspace over from ``lease``
        (CHECKPOINTING → MOUNTED through the takeover path, which keeps the
        unfinished snapshot, S-33) and is released at once, so the workspace
        is IDLE and nobody waits for a lease to run out. A retry under the
        key adopts the snapshot and publishes it once; a checkpoint under
        another key (or none) supersedes it (FAILED). The takeover is not
        forced: if another writer holds the workspace by now, it is left
        alone. Best effort: should the store refuse (it may be the full
        disk), the workspace is left as after a crash, which the next
        checkpoint of this host takes over at once.
        """
        try:
            handed = self.store.workspaces.acquire(lease.workspace_id, self.holder, self.lease_ttl_s)
        except Exception:  # noqa: BLE001 - the original error matters more
            return
        self._release_quietly(handed)

    def _release_quietly(self, lease: WriterLease) -> None:
        try:
            self.store.workspaces.release(lease)
        except Exception:  # noqa: BLE001 - the original error matters more
            pass

    def _checkpoint(
        self,
        lease: WriterLease,
        folder: str,
        key: str,
        progress: Progress | None,
        exclude: Sequence[str] = (),
        leave_out: Sequence[str] = (),
        interval: Interval | None = None,
        keep: MutableSequence[CheckpointTicket] | None = None,
        reason: str = "manual",
    ) -> CheckpointResult:
        """The checkpoint under ``lease``. A failure abandons it (FAILED) unless ``keep`` is given and the
        error is retryable: then the snapshot stays pending under its key, the ticket is appended to
        ``keep`` and the caller lets the workspace go (:meth:`_leave_resumable`)."""
        ws_store = self.store.workspaces
        if self.object_store_id is None:  # nothing may be stored before the object store is bound
            self.object_store_id = bind_object_store(self.store, self.objects)
        self._abandon_again(lease.workspace_id, raising=True)
        ticket = ws_store.begin_checkpoint(lease, key, reason)
        if ticket.already_published is not None:
            return CheckpointResult(ticket.already_published, unchanged=False)
        pins: list[str] = []

        def pin(oids: frozenset[str]) -> None:
            pins.append(self.store.snapshots.pin_objects(process_holder(self.holder), oids, PIN_TTL_S))

        try:
            head = self.store.snapshots.get(ticket.parent_id) if ticket.parent_id else None
            if head is not None and head.state is SnapshotState.DEGRADED and head.root_oid is not None:
                # Its corrupt objects must not be reused: moved aside they are missing, so the build
                # reads the files that use them again and stores them afresh.
                set_aside(self.objects, verify_tree(head.root_oid, self.objects).corrupt)
            built = build_tree(
                folder,
                self.objects,
                index_path=self.index_path(lease.workspace_id, folder),
                pin=pin,
                progress=progress,
                exclude=exclude,
                leave_out=leave_out,
                interval=interval,
            )
            head = self.store.snapshots.get(ticket.parent_id) if ticket.parent_id else None
            # Only a READY head makes a checkpoint "unchanged": a damaged one is repaired by a new snapshot.
            if (
                head is not None
                and head.root_oid == built.root
                and head.state is SnapshotState.READY
                and not ticket.resumed
            ):
                ws_store.abandon_checkpoint(lease, ticket, error=None)
                return CheckpointResult(
                    head,
                    unchanged=True,
                    skipped=built.skipped,
                    folders_listed=built.folders_listed,
                    walked=built.walked,
                )
            ws_store.mark_uploaded(
                ticket, built.root, built.files, built.bytes_read, built.bytes_new, list(built.skipped)
            )
            self._verify_closure(ticket.snapshot_id, built.objects, ticket.generation)
            self.objects.sync()  # objects found already stored may be a crashed writer's, never synced
            snap = ws_store.publish(lease, ticket)
            return CheckpointResult(
                snap,
                unchanged=False,
                resumed=ticket.resumed,
                skipped=built.skipped,
                folders_listed=built.folders_listed,
                walked=built.walked,
            )
        except Exception as exc:
            if keep is not None and isinstance(exc, TenureError) and exc.retryable:
                keep.append(ticket)  # a retry under the key resumes it (S-33)
            else:
                self._abandon_quietly(lease, ticket, exc)
            raise
        finally:
            for pid in pins:
                self.store.snapshots.unpin(pid)

    def _abandon_quietly(self, lease: WriterLease, ticket: CheckpointTicket, exc: Exception) -> None:
        """A failed checkpoint: its record becomes FAILED, the workspace MOUNTED again, the head unchanged.

        Should the store not take the abandonment for a retryable reason (it
        is down or unreachable: the very fault that failed the checkpoint, as
        often as not), the ticket is kept and abandoned again before the
        workspace's next checkpoint and by :meth:`retry_abandons`, so the
        workspace is never left CHECKPOINTING for its lease's lifetime, every
        later checkpoint refused with ``checkpoint-in-progress``.
        """
        error = f"{type(exc).__name__}: {exc}"
        try:
            self.store.workspaces.abandon_checkpoint(lease, ticket, error=error)
        except StoreError as failure:  # the store did not answer: abandoned again later
            if failure.retryable:
                with self._unabandoned_lock:
                    self._unabandoned[ticket.workspace_id] = (lease, ticket, error)
        except TenureError:  # it answered: fenced, or the workspace was settled another way
            pass
        except Exception:  # noqa: BLE001 - the original error matters more
            pass

    def _abandon_again(self, workspace_id: str, *, raising: bool) -> bool:
        """Abandon the kept checkpoint of ``workspace_id``, if any; True when none is left.

        A fenced or already settled one (a newer writer took the workspace, it
        is MOUNTED again) is dropped; a store still unreachable keeps it and,
        with ``raising``, raises that retryable error (the caller's checkpoint
        could not begin anyway).
        """
        with self._unabandoned_lock:
            kept = self._unabandoned.get(workspace_id)
        if kept is None:
            return True
        lease, ticket, error = kept
        try:
            self.store.workspaces.abandon_checkpoint(lease, ticket, error=error)
        except StoreError as failure:
            if failure.retryable:  # still unreachable: kept
                if raising:
                    raise
                return False
        except TenureError:
            pass  # it answered (a version conflict: settled another way; fenced): nothing left to abandon
        with self._unabandoned_lock:
            if self._unabandoned.get(workspace_id) is kept:
                del self._unabandoned[workspace_id]
        return True

    def retry_abandons(self) -> int:
        """Abandon again every checkpoint the store could not abandon; returns how many are still kept.

        A pod calls it after each renewal, so a store restart leaves no
        workspace CHECKPOINTING once the store answers again.
        """
        with self._unabandoned_lock:
            pending = list(self._unabandoned)
        return sum(not self._abandon_again(workspace_id, raising=False) for workspace_id in pending)

    def _verify_closure(self, snapshot_id: str, closure: frozenset[str], generation: int) -> None:
        """VALIDATING: every object of the tree's closure (as built, pinned) is in the store, asked once.

        The snapshot is failed only under the ticket's ``generation``: a former writer whose checkpoint a newer
        one adopted (S-33) cannot fail the adopted one.
        """
        missing = closure - self.objects.has_many(closure)
        if missing:
            self.store.workspaces.fail_snapshot(
                snapshot_id, f"{len(missing)} objects missing after upload", generation=generation
            )
            raise ClosureIncompleteError(
                f"snapshot {snapshot_id}: {len(missing)} objects missing after upload",
                snapshot=snapshot_id,
                missing=sorted(missing)[:20],
            )

    # ------------------------------------------------------------------ restore

    def restore(
        self,
        name: str,
        dest: str,
        *,
        snapshot: str | None = None,
        partial: bool = False,
        allow_deleting: bool = False,
        keep_special_bits: bool = False,
        progress: Progress | None = None,
        workspace: Workspace | None = None,
    ) -> tuple[Snapshot, RestoreResult]:
        """Materialize a snapshot (default: the head) into ``dest``, pinned while it runs.

        Only a READY snapshot restores without a word (S-16). A DEGRADED one is
        refused with ``snapshot-degraded`` naming the lost paths (a full verify
        finds them), even if its objects have come back since: ``tenure
        snapshot verify`` makes it READY again. ``partial`` restores the intact
        files of a DEGRADED snapshot and returns the rest as lost. A DELETING
        one is refused with ``snapshot-deleting`` unless ``allow_deleting``: its
        objects stay until GC (S-19), so it can still be read on purpose.
        ``keep_special_bits`` restores setuid and setgid bits as stored (by
        default they are dropped; see ``restore_tree``). A restore that finds
        objects of a READY snapshot missing or corrupt (``snapshot-damaged``,
        or the lost paths of a partial one) marks it DEGRADED, as a verify
        does, so it is no longer offered as READY nor taken as a fork base.
        ``workspace``: the record of ``name`` the caller has just read (not read again).
        """
        ws = workspace if workspace is not None else self.store.workspaces.workspace(name)
        ref = snapshot or ws.head_snapshot_id
        self._checked_before_reading()
        if ref is None:
            raise NotFoundError(
                f"workspace {ws.name!r} has no snapshot yet",
                code="workspace-empty",
                hint="checkpoint a folder first with `tenure workspace checkpoint`",
            )
        with self.store.snapshots.pinned(ref, process_holder(self.holder), PIN_TTL_S) as snap:
            if snap.root_oid is None or snap.state not in (
                SnapshotState.READY,
                SnapshotState.DEGRADED,
                SnapshotState.DELETING,
            ):
                raise ConflictError(
                    f"snapshot {snap.id} is {snap.state.value}; only published snapshots can be restored",
                    code="snapshot-not-ready",
                    snapshot=snap.id,
                    state=snap.state.value,
                )
            if snap.state is SnapshotState.DELETING and not allow_deleting:
                raise ConflictError(
                    f"snapshot {snap.id} is DELETING: it is being deleted and its objects go at the next GC",
                    code="snapshot-deleting",
                    snapshot=snap.id,
                    hint="pass --allow-deleting to read it anyway before GC reclaims it, or restore"
                    " a READY snapshot (tenure snapshot list)",
                )
            if snap.state is SnapshotState.DEGRADED and not partial:
                report = verify_tree(snap.root_oid, self.objects)
                lost = sorted(report.lost_paths)
                shown = ", ".join(repr(p) for p in lost[:10]) + (
                    f" and {len(lost) - 10} more" if len(lost) > 10 else ""
                )
                raise IntegrityError(
                    f"snapshot {snap.id} is DEGRADED: {len(lost)} paths cannot be restored: {shown}"
                    if lost
                    else f"snapshot {snap.id} is DEGRADED ({snap.error or 'objects were missing or corrupt'}), though"
                    " every object verifies now",
                    code="snapshot-degraded",
                    snapshot=snap.id,
                    lost_paths=lost,
                    missing=sorted(report.missing),
                    corrupt=sorted(report.corrupt),
                    hint="restore the intact files with --partial, or an older READY snapshot (tenure snapshot list);"
                    f" `tenure snapshot repair {snap.id} --from DIR` puts lost objects back from a folder"
                    if lost
                    else f"run `tenure snapshot verify {snap.id}` to make it READY again",
                )
            try:
                result = restore_tree(
                    snap.root_oid,
                    self.objects,
                    dest,
                    partial=partial,
                    progress=progress if progress is not None else self.progress,
                    index_path=self.index_path(ws.id, dest),
                    keep_special_bits=keep_special_bits,
                )
            except SnapshotDamagedError as exc:  # corrupt objects found: moved aside, they count as missing
                self._set_aside_quietly(list(exc.context.get("corrupt", ())))
                self._found_damaged(snap, exc.context.get("missing", ()), exc.context.get("corrupt", ()))
                raise
            self._set_aside_quietly(result.corrupt)
            if result.missing or result.corrupt:
                self._found_damaged(snap, result.missing, result.corrupt)
        return snap, result

    def _found_damaged(self, snap: Snapshot, missing: Iterable[str], corrupt: Iterable[str]) -> None:
        """A restore found objects of ``snap`` missing or corrupt: READY → DEGRADED, as a verify does (S-23).

        The guarded move of the snapshot machine; a snapshot that is not READY
        (already DEGRADED, DELETING) or that moved meanwhile is left as it is,
        and a store that cannot be written to leaves the restore's own error
        to be reported: the next verify marks it.
        """
        if snap.state is not SnapshotState.READY:
            return
        missing, corrupt = list(missing), list(corrupt)
        try:
            self.store.snapshots.move(
                snap.id,
                SnapshotState.DEGRADED,
                expected=SnapshotState.READY,
                error=f"restore found {len(missing)} missing, {len(corrupt)} corrupt objects",
            )
        except TenureError:
            pass

    # ------------------------------------------------------------------ verify, retention, gc

    def verify(self, ref: str, *, sample: float = 1.0) -> VerifyReport:
        """Re-hash objects; a damaged READY snapshot becomes DEGRADED, a healed DEGRADED one READY.

        Corrupt objects are moved out of the object store's way (``set_aside``),
        so they count as missing from then on: the next checkpoint of a folder
        that holds their content stores them again, and a verify after that
        finds the snapshot intact and makes it READY (docs/operations.md,
        "Repairing a DEGRADED snapshot"). A folder that refuses the move (read
        only) keeps them; the report then lists none as set aside.
        """
        self._checked_before_reading()
        with self.store.snapshots.pinned(ref, process_holder(self.holder), PIN_TTL_S) as snap:
            if snap.root_oid is None:
                raise ConflictError(
                    f"snapshot {snap.id} is {snap.state.value} and has no tree yet",
                    code="snapshot-not-ready",
                    snapshot=snap.id,
                )
            result = verify_tree(snap.root_oid, self.objects, sample=sample)
            aside = self._set_aside_quietly(result.corrupt)
        missing, corrupt = tuple(result.missing), tuple(result.corrupt)
        lost = tuple(result.lost_paths)
        if (missing or corrupt) and snap.state is SnapshotState.READY:
            snap = self.store.snapshots.move(
                snap.id,
                SnapshotState.DEGRADED,
                expected=SnapshotState.READY,
                error=f"{len(missing)} missing, {len(corrupt)} corrupt objects",
            )
        elif not (missing or corrupt) and sample >= 1.0 and snap.state is SnapshotState.DEGRADED:
            snap = self.store.snapshots.move(snap.id, SnapshotState.READY, expected=SnapshotState.DEGRADED)
        return VerifyReport(snap, int(getattr(result, "checked", 0)), missing, corrupt, lost, tuple(sorted(aside)))

    def repair(self, ref: str, folder: str, *, progress: Progress | None = None) -> RepairReport:
        """Put back a DEGRADED snapshot's lost objects from ``folder``; READY again once nothing is missing (S-23).

        For every file whose objects the store lacks, the file at the same
        relative path in ``folder`` is read (never written, never through a
        symlink) and cut or packed again as the build does; only content that
        hashes to a lost id is stored (``tenure.snapshots.repair``). A full
        verify follows; corrupt objects it finds are moved aside and rebuilt
        the same way, once. If nothing is missing or corrupt any more, the
        snapshot moves DEGRADED → READY (guarded); its id and tree never
        change. Paths the folder cannot give back are reported with a reason
        and the snapshot stays DEGRADED. A READY snapshot has nothing to
        repair: nothing is read.
        """
        with self.store.snapshots.pinned(ref, process_holder(self.holder), PIN_TTL_S) as snap:
            if snap.state is SnapshotState.READY:
                return RepairReport(snap, nothing_to_repair=True)
            if snap.state is not SnapshotState.DEGRADED or snap.root_oid is None:
                raise ConflictError(
                    f"snapshot {snap.id} is {snap.state.value}; only a DEGRADED snapshot is repaired",
                    code="snapshot-deleting" if snap.state is SnapshotState.DELETING else "snapshot-not-ready",
                    snapshot=snap.id,
                    state=snap.state.value,
                )
            if self.object_store_id is None:  # nothing may be stored before the object store is bound
                self.object_store_id = bind_object_store(self.store, self.objects)
            repaired: set[str] = set()
            aside: set[str] = set()
            bytes_read = 0
            for _ in range(2):  # a second round only for corrupt objects the verify has just moved aside
                result = repair_tree(snap.root_oid, self.objects, folder, progress=progress)
                repaired |= result.repaired
                bytes_read += result.bytes_read
                check = verify_tree(snap.root_oid, self.objects)
                moved = self._set_aside_quietly(check.corrupt)
                aside |= moved
                if check.ok or not moved:
                    break
            if check.ok:
                snap = self._repaired(snap)
        return RepairReport(
            snap,
            tuple(sorted(repaired)),
            () if check.ok else result.unrepairable,
            tuple(sorted(check.missing)),
            tuple(sorted(check.corrupt)),
            tuple(check.lost_paths),
            tuple(sorted(aside)),
            bytes_read,
        )

    def _repaired(self, snap: Snapshot) -> Snapshot:
        """DEGRADED → READY (guarded); a concurrent repair or verify that got there first is as good."""
        try:
            return self.store.snapshots.move(snap.id, SnapshotState.READY, expected=SnapshotState.DEGRADED)
        except ConflictError:
            now = self.store.snapshots.get(snap.id)
            if now.state is SnapshotState.READY:
                return now
            raise

    def _set_aside_quietly(self, oids: Iterable[str]) -> frozenset[str]:
        """Move corrupt objects aside; an object store that refuses (read-only) keeps them."""
        oids = list(oids)
        if not oids:
            return frozenset()
        try:
            return set_aside(self.objects, oids)
        except ObjectStoreError:
            return frozenset()

    def gc(self, *, grace_s: float = 3600.0, progress: Progress | None = None) -> GcResult:
        """One GC pass; pins of killed processes on this host are dropped first (they hold nothing)."""
        self.store.snapshots.drop_abandoned_pins(abandoned)
        return collect(self.store, self.objects, grace_s=grace_s, progress=progress)

    def expire_idle(
        self, idle_ttl_s: float, grace_s: float = DEFAULT_GRACE_S, now: float | None = None
    ) -> ExpiryResult:
        """Idle workspaces past ``idle_ttl_s`` expire; EXPIRING ones past ``grace_s`` are deleted (ADR 0019).

        Idle means the workspace row has not changed for the TTL: no writer
        lease taken or released, no checkpoint begun, published or abandoned,
        no undo. Never a workspace with a live writer lease, nor one whose
        project is not SUSPENDED. A deleted workspace's snapshots go DELETING;
        the next :meth:`gc` reclaims the objects nothing else references.
        """
        return expire_idle(self.store, idle_ttl_s, grace_s, now)

    def undo_expiry(self, name: str, grace_s: float = DEFAULT_GRACE_S) -> Workspace:
        """EXPIRING → IDLE within ``grace_s`` of the expiry, head intact; ``expiry-grace-over`` after."""
        return self.store.workspaces.undo_expiry(name, grace_s)

    # ------------------------------------------------------------------ folders on this host

    @cached_property
    def folders(self) -> LocalFolders:
        """Base files, preserved folders and the trash under the data folder (created on first use)."""
        return LocalFolders(self.data_dir)

    def folder_for(self, key: str) -> str:
        """The working folder on this host for ``key`` (a project id); hashed, never user text."""
        return self.folders.path(key)

    def init_folder(
        self, workspace_id: str, folder: str, *, snapshot: str | None = None, workspace: Workspace | None = None
    ) -> str:
        """Restore the head (or ``snapshot``) into ``folder``, or adopt the folder already there.

        A folder whose recorded base is the snapshot to restore is kept as it
        is, uncommitted changes included. A folder with another or an unknown
        base is moved aside as a preserved delta (never deleted or
        overwritten), then the snapshot is restored. ``workspace``: the record
        the caller read after its claim (a bring's claim reads it in its own
        transaction), whose head is restored without reading it again.
        """
        if snapshot:
            base: str | None = self._chosen_base(workspace_id, snapshot)
        else:
            workspace = workspace if workspace is not None else self.workspace(workspace_id)
            base = workspace.head_snapshot_id
        if os.path.isdir(folder):
            if self.folders.read_base(folder) == base:
                return folder
            self.folders.preserve(folder)
        self.folders.write_base(folder, base)
        if base is None:
            os.makedirs(folder, exist_ok=True)
        else:
            self.restore(workspace_id, folder, snapshot=base, workspace=workspace)
            self.vouch(workspace_id, folder, base)
        return folder

    def vouch(self, workspace_id: str, folder: str, snapshot_id: str) -> None:
        """Record that ``folder`` holds ``snapshot_id`` — just published from it, or restored into it — as its
        local index now describes it (ADR 0033). Only then may the folder be judged clean."""
        from tenure.snapshots.index import index_identity

        identity = index_identity(self.index_path(workspace_id, folder))
        self.folders.write_base(folder, snapshot_id, index=identity)

    def _chosen_base(self, workspace_id: str, ref: str) -> str:
        """An explicitly chosen base: a READY snapshot of this workspace."""
        snap = self.store.snapshots.get(ref)
        if snap.workspace_id != workspace_id:
            raise InvalidInputError(
                f"snapshot {snap.id} belongs to another workspace",
                code="foreign-snapshot",
                hint="pick a snapshot of this workspace (tenure snapshot list)",
                snapshot=snap.id,
            )
        if snap.state is not SnapshotState.READY:
            raise ConflictError(
                f"snapshot {snap.id} is {snap.state.value}; only a READY snapshot can be a base",
                code="snapshot-not-ready",
                snapshot=snap.id,
                state=snap.state.value,
            )
        return snap.id

    def newest_ready(self, workspace_id: str) -> Snapshot | None:
        """The most recent READY snapshot of the workspace (offered when the head is damaged)."""
        ready = [s for s in self.store.snapshots.list(workspace_id) if s.state is SnapshotState.READY]
        return max(ready, key=lambda s: s.created_at) if ready else None

    def suspend_folder(self, workspace_id: str, folder: str, generation: int, reason: str = "suspend") -> None:
        """Checkpoint ``folder`` under the writer lease at ``generation``, trash it, release the lease.

        A checkpoint a crash interrupted is resumed under its own key, so a
        repeated suspend publishes once. Without a usable writer lease at
        ``generation`` nothing is discarded: the folder may hold uncommitted
        data, so this raises and leaves it in place.
        """
        if os.path.isdir(folder):
            ws = self.workspace(workspace_id)
            lease = self.lease(workspace_id, generation)
            if lease is None or lease.state not in (LeaseState.ACTIVE, LeaseState.RELEASING):
                raise LeaseLostError(
                    f"no live writer lease at generation {generation} for workspace {ws.name}; the folder"
                    f" {folder} was kept",
                    workspace=ws.name,
                    generation=generation,
                    folder=folder,
                    lease_state=None if lease is None else lease.state.value,
                )
            key = ws.pending_key if ws.state is WorkspaceState.CHECKPOINTING and ws.pending_key else None
            self.checkpoint(workspace_id, folder, key=key or f"suspend:{generation}", lease=lease, reason=reason)
            self.folders.discard(folder)
        self.folders.forget_base(folder)
        self.release_writer(workspace_id, generation)

    def release_writer(self, workspace_id: str, generation: int) -> None:
        """Clean unmount: the writer lease at ``generation`` ends RELEASED, the workspace IDLE again."""
        lease = self.lease(workspace_id, generation)
        if lease is not None and lease.state is LeaseState.ACTIVE:
            self.store.workspaces.release(lease)

    def is_disposed(self, workspace_id: str) -> bool:
        return self.workspace(workspace_id).state is WorkspaceState.DELETED

    def dispose(self, workspace_id: str, generation: int) -> None:
        """Workspace DELETED (takeover path), its leases ended, its snapshots DELETING; fenced by ``generation``."""
        self.store.workspaces.dispose(workspace_id, generation)

    def preserve_folder(self, folder: str, target: str | None = None) -> str | None:
        """Move ``folder`` aside as a preserved delta (to ``target`` when given); None when absent."""
        if not os.path.isdir(folder):
            return None
        self.folders.forget_base(folder)
        return self.folders.preserve(folder, target)

    def folder_is_clean(self, workspace_id: str, folder: str) -> bool:
        """Whether ``folder`` holds exactly what its last restore or checkpoint stored (S-85).

        Judged from the local index against the folder's stat fields, so a
        clean folder costs a walk, not a read; anything the index cannot vouch
        for (no index, a racy or changed file, a link, a file it does not name)
        counts as uncommitted data. The index itself must be the one the base
        file vouches for (:meth:`vouch`): a build saves its index before it
        publishes, so the index of a checkpoint that never published (a crash,
        a takeover fencing the publish) describes data no snapshot holds, and
        a folder matching it is not clean (ADR 0033).
        """
        from tenure.snapshots.index import folder_matches, index_identity, load_index

        if not os.path.isdir(folder):
            return True
        path = self.index_path(workspace_id, folder)
        vouched = self.folders.read_vouched_index(folder)
        if vouched is None or vouched != index_identity(path):
            return False
        return folder_matches(folder, load_index(path))

    def discard_folder(self, folder: str) -> None:
        """Move ``folder`` and its base file out of the way; the trash deletes it in the background."""
        self.folders.discard(folder)
        self.folders.forget_base(folder)
