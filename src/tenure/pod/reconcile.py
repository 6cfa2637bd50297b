"""Restart reconciliation: every mount recorded on this host gets one verdict and its action (S-53…S-68).

Runs at pod start, after the data-folder lock and the adoption of this
host's previous pod's leases (ADR 0020), before the boot self-pull; the pod
serves nothing until it is done. For each mount in the host-local mount
store (ADR 0021): the facts are gathered — the record, the folder (exists,
clean by the local index, S-85), the control-plane store's leases (or
UNKNOWN when it cannot answer) —, :func:`tenure.mounts.classify.classify`
gives the verdict (ADR 0018), and the executor acts:

* **cleanup incomplete** — the final checkpoint is committed: the folder is
  removed if the index vouches for it (otherwise it is preserved), the mount
  CLOSED;
* **checkpoint interrupted** — with a valid lease the checkpoint is finished
  under its own key (published once, S-33, S-80); without one nothing is
  published and the folder is kept like a stale mount's;
* **active lease valid** — the project's bring adopts the folder; when the
  folder is clean and its base snapshot is DEGRADED, the snapshot is first
  repaired from it (its lost objects put back and verified, READY again; a
  repair that fails is logged and never stops the start);
* **control plane unknown** — the mount and its folder are kept and marked;
  nothing is deleted, fenced or published;
* **stale generation** — fenced: forced CLOSED, never publishes; a folder with
  uncommitted data is moved to ``preserved/``, a clean one removed (S-81);
* **preserved delta** — kept under ``preserved/`` for the recovery window
  (default 7 days, ``tenure serve --recovery-window``, S-65), then deleted;
  a record whose move was interrupted (close records first, then moves)
  has its move finished;
* **safe to delete** — the record and the folder are removed — never a folder
  that holds uncommitted data (the executor's guard, S-67), never a folder a
  live mount of this host still uses.

Running it twice gives the same result; a crash in the middle leaves records
the next run finishes. Counts per verdict are kept for ``/metrics`` (S-68,
S-83).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tenure.errors import TenureError
from tenure.faults import crash_point, register
from tenure.mounts.classify import (
    UNKNOWN,
    Authority,
    FolderFacts,
    Lookup,
    MountFacts,
    ProjectLease,
    Verdict,
    classify,
    lease_verdict,
)
from tenure.mounts.store import Mount, MountStore
from tenure.states import LeaseState, ProjectStatus, SnapshotState
from tenure.states import MountState as M
from tenure.workspaces.folders import UNKNOWN_BASE

log = logging.getLogger("tenure.serve")

__all__ = ["Reconciler", "ReconcileReport", "RECOVERY_WINDOW_S"]

#: how long a preserved delta is kept on this host before it is deleted
RECOVERY_WINDOW_S = 7 * 24 * 3600.0

register("reconcile.after_mount", "restart reconciliation: one mount's verdict acted on, the next not yet")


@dataclass
class ReconcileReport:
    """What one run decided: the verdict of each mount, and counts per verdict."""

    verdicts: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    expired_deltas: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"verdicts": dict(self.verdicts), "counts": dict(self.counts), "expired_deltas": self.expired_deltas}


class Reconciler:
    """Classifies and executes every mount of one host (see the module docstring)."""

    def __init__(self, node: Any, *, window_s: float | None = None) -> None:
        self.node = node
        self.mounts: MountStore = node.lifecycle.mounts.store
        self.workspaces = node.workspaces
        self._window_s = window_s
        #: mounts whose project is CLOSED: their folder is kept as a preserved delta, clean or not
        self._closed: set[str] = set()
        #: one settle at a time (the beat's drift check and the sweep of lost mounts may meet on one mount)
        self._settling = threading.RLock()

    # ------------------------------------------------------------------ facts

    def authority(self, mount: Mount) -> Lookup:
        """The control plane's facts for the mount, or UNKNOWN when it cannot answer."""
        node = self.node
        try:
            if mount.project_id is None:
                return UNKNOWN
            project = node.projects.by_id(mount.project_id)
            ws = node.store.workspaces.workspace(mount.workspace_id)
            lease = node.store.workspaces.lease(ws.id, ws.writer_generation)
            if lease is None:
                return UNKNOWN
            if project.status is ProjectStatus.CLOSED:
                self._closed.add(mount.id)
            if project.status is ProjectStatus.CLOSED or lease.state is LeaseState.REVOKED:
                held = ProjectLease.REVOKED
            else:
                owner = node.ownership.owner(project.id, node.config.lease_ttl)
                if owner.live and owner.pod_id == node.pod.pod_id:
                    held = ProjectLease.HELD
                elif owner.live:
                    held = ProjectLease.OTHER_POD
                else:
                    held = ProjectLease.EXPIRED
            return Authority(project_lease=held, generation=int(ws.writer_generation), writer_lease=lease.state)
        except TenureError:
            return UNKNOWN

    def folder(self, mount: Mount) -> FolderFacts:
        if not os.path.isdir(mount.folder):
            return FolderFacts(exists=False)
        return FolderFacts(exists=True, dirty=not self.workspaces.folder_is_clean(mount.workspace_id, mount.folder))

    # ------------------------------------------------------------------ the run

    @property
    def window_s(self) -> float:
        """The recovery window: as given, else the pod's ``recovery_window`` as it is now (7 days by default)."""
        if self._window_s is not None:
            return self._window_s
        configured = getattr(getattr(self.node, "config", None), "recovery_window", None)
        return RECOVERY_WINDOW_S if configured is None else float(configured)

    def run(self) -> ReconcileReport:
        report = ReconcileReport()
        for mount in self.mounts.list():
            if mount.state is M.CLOSED and mount.verdict == Verdict.PRESERVED_DELTA.value:
                self._finish_move(mount)
                report.expired_deltas += self._expire_delta(mount)
                crash_point("reconcile.after_mount")
                continue
            verdict = self.settle(mount)
            report.verdicts[mount.id] = verdict.value
            report.counts[verdict.value] += 1
            crash_point("reconcile.after_mount")
        return report

    def settle(self, mount: Mount) -> Verdict:
        """Classify one mount against the facts as they are now and act on the verdict.

        Restart reconciliation calls it for every mount; a running pod calls it
        for the mount of a project whose lease it just found lost (forward
        drift), so a partitioned pod that heals fences its mount exactly as a
        restarted one would (S-62).
        """
        with self._settling:
            current = self.mounts.get(mount.id)  # as it is now: another settle may have acted on it
            return self._settle(current)

    def _settle(self, mount: Mount) -> Verdict:
        facts = MountFacts(
            state=mount.state,
            generation=mount.generation,
            cleanup_pending=mount.pending_cleanup is not None,
            checkpoint_in_flight=mount.checkpoint_key is not None,
        )
        authority = self.authority(mount)
        folder = self.folder(mount)
        verdict = classify(facts, folder, authority)
        self._execute(mount, verdict, facts, folder, authority)
        return verdict

    def expire_deltas(self) -> int:
        """Delete the preserved deltas past the recovery window (also run by a running pod, hourly)."""
        expired = 0
        for mount in self.mounts.list():
            if mount.state is M.CLOSED and mount.verdict == Verdict.PRESERVED_DELTA.value:
                expired += self._expire_delta(mount)
        return expired

    def _execute(self, mount: Mount, verdict: Verdict, facts: MountFacts, folder: FolderFacts, auth: Lookup) -> None:
        if verdict is Verdict.CLEANUP_INCOMPLETE:
            self._finish_cleanup(mount, folder)
        elif verdict is Verdict.CHECKPOINT_INTERRUPTED:
            if lease_verdict(facts, auth) is Verdict.ACTIVE_LEASE_VALID:
                self._finish_checkpoint(mount)
            else:
                self._fence(mount, folder, "an interrupted checkpoint without a valid lease: never published")
        elif verdict is Verdict.ACTIVE_LEASE_VALID:
            self.mounts.set_verdict(mount.id, verdict.value)
            if folder.exists and not folder.dirty:
                self._repair_base(mount)
        elif verdict is Verdict.CONTROL_PLANE_UNKNOWN:
            self.mounts.set_verdict(mount.id, verdict.value)
        elif verdict is Verdict.STALE_GENERATION:
            self._fence(mount, folder, "stale generation: fenced, never publishes")
        elif verdict is Verdict.PRESERVED_DELTA:
            self._preserve(mount)
        else:
            self._delete(mount, folder)

    # ------------------------------------------------------------------ actions

    def _repair_base(self, mount: Mount) -> None:
        """A kept mount's clean folder holds its base snapshot exactly: a DEGRADED base is repaired from it (S-23).

        The base is the snapshot the folder's base file vouches for (the one
        "clean" was judged against, ADR 0033). Its lost objects whose content
        the folder still holds are put back and verified; the snapshot is
        READY again once nothing is missing (``WorkspaceService.repair``).
        A repair that fails, or leaves paths unrepairable, is logged: the
        snapshot stays DEGRADED and the start goes on.
        """
        base = self.workspaces.folders.read_base(mount.folder)
        if not base or base == UNKNOWN_BASE:
            return
        try:
            snap = self.node.store.snapshots.get(base)
            if snap.state is not SnapshotState.DEGRADED:
                return
            report = self.workspaces.repair(snap.id, mount.folder)
        except Exception as exc:  # noqa: BLE001 - a repair is a bonus: it never stops the pod from starting
            log.warning(
                "a DEGRADED base snapshot could not be repaired from its mount's folder",
                extra={"tenure": {"mount": mount.id, "snapshot": base, "error": f"{type(exc).__name__}: {exc}"}},
            )
            return
        if report.ok:
            log.info(
                "a DEGRADED base snapshot was repaired from its mount's folder and is READY again",
                extra={"tenure": {"mount": mount.id, "snapshot": base, "repaired": len(report.repaired)}},
            )
        else:
            log.warning(
                "a DEGRADED base snapshot stays DEGRADED: its mount's folder could not give back every lost path",
                extra={
                    "tenure": {
                        "mount": mount.id,
                        "snapshot": base,
                        "repaired": len(report.repaired),
                        "unrepairable": [u.path for u in report.unrepairable][:20],
                    }
                },
            )

    def _in_use(self, mount: Mount) -> bool:
        """Another live mount of this host uses the same folder (an adopting bring reused it)."""
        live = self.mounts.live_for(mount.workspace_id)
        return live is not None and live.id != mount.id and live.folder == mount.folder

    def _preserve(self, mount: Mount) -> None:
        """Move the folder aside for the recovery window (unless a live mount uses it) and record where."""
        target = mount.preserved_folder
        if os.path.isdir(mount.folder) and not self._in_use(mount):
            target = self.workspaces.preserve_folder(mount.folder)
        if mount.state is not M.CLOSED:
            self.mounts.force(mount.id, M.CLOSED, "preserved by reconciliation")
        self.mounts.set_verdict(
            mount.id,
            Verdict.PRESERVED_DELTA.value,
            preserved_folder=target,
            preserved_at=mount.preserved_at or time.time(),
        )

    def _finish_move(self, mount: Mount) -> None:
        """A preserved delta recorded before its folder was moved (close) and interrupted in between: move it now."""
        target = mount.preserved_folder
        if target is None or os.path.isdir(target):
            return
        if os.path.isdir(mount.folder) and not self._in_use(mount):
            self.workspaces.preserve_folder(mount.folder, target)

    def _fence(self, mount: Mount, folder: FolderFacts, reason: str) -> None:
        """Fence to CLOSED; keep uncommitted data as a preserved delta, remove a clean folder (S-81).

        A closed project's folder is kept whatever it holds: close disposed its
        snapshots, so "clean" vouches for nothing any more.
        """
        self.mounts.force(mount.id, M.CLOSED, reason)
        if folder.exists and (folder.dirty or mount.id in self._closed):
            self._preserve(self.mounts.get(mount.id))
            return
        self.mounts.set_verdict(mount.id, Verdict.STALE_GENERATION.value)
        if folder.exists and not self._in_use(mount):
            self.workspaces.discard_folder(mount.folder)

    def _finish_cleanup(self, mount: Mount, folder: FolderFacts) -> None:
        if folder.exists and folder.dirty:
            self._preserve(mount)  # written to after its final checkpoint: never thrown away
            return
        if folder.exists and not self._in_use(mount):
            self.workspaces.discard_folder(mount.folder)
        if mount.state is M.UNMOUNTING:
            self.mounts.transition(mount.id, M.UNMOUNTING, M.CLOSED)
        elif mount.state is not M.CLOSED:
            self.mounts.force(mount.id, M.CLOSED, "cleanup finished by reconciliation")
        self.mounts.set_cleanup(mount.id, None)
        self.mounts.delete(mount.id)

    def _finish_checkpoint(self, mount: Mount) -> None:
        """Publish the interrupted checkpoint under its own key, once; a suspend's also removes the folder.

        One that cannot be finished — its folder gone, its key's snapshot FAILED by an earlier attempt — is
        given up (nothing published under the key) and the mount is settled again by its lease alone, its
        folder kept: one such mount never stops the pod from starting. A retryable fault (the store or the
        object store unreachable) is raised: the next start tries again.
        """
        try:
            self._publish_interrupted(mount)
        except TenureError as exc:
            if exc.retryable:
                raise
            self._give_up_checkpoint(mount, exc)

    def _give_up_checkpoint(self, mount: Mount, exc: TenureError) -> None:
        log.warning(
            "an interrupted checkpoint could not be finished; settled by its lease, its folder kept",
            extra={"tenure": {"mount": mount.id, "code": exc.code, "error": str(exc)}},
        )
        self.mounts.checkpoint_end(mount.id)
        current = self.mounts.get(mount.id)
        if current.state is M.CHECKPOINTING:
            current = self.mounts.transition(mount.id, M.CHECKPOINTING, M.MOUNTED)
        self.settle(current)

    def _publish_interrupted(self, mount: Mount) -> None:
        key = mount.checkpoint_key or f"suspend:{mount.generation}"
        if key.startswith("suspend:"):
            self.workspaces.suspend_folder(mount.workspace_id, mount.folder, mount.generation, "reconcile")
            self.mounts.checkpoint_end(mount.id)
            self.mounts.force(mount.id, M.CLOSED, "interrupted suspend finished by reconciliation")
            self.mounts.delete(mount.id)
            return
        lease = self.workspaces.lease(mount.workspace_id, mount.generation)
        if lease is None:
            self._fence(mount, self.folder(mount), "no writer lease to finish the checkpoint under")
            return
        result = self.workspaces.checkpoint(mount.workspace_id, mount.folder, key=key, lease=lease, reason="reconcile")
        self.workspaces.vouch(mount.workspace_id, mount.folder, result.snapshot.id)
        self.mounts.set_base(mount.id, result.snapshot.id)
        self.mounts.checkpoint_end(mount.id)
        if self.mounts.get(mount.id).state is M.CHECKPOINTING:
            self.mounts.transition(mount.id, M.CHECKPOINTING, M.MOUNTED)
        self.mounts.set_verdict(mount.id, Verdict.CHECKPOINT_INTERRUPTED.value)

    def _delete(self, mount: Mount, folder: FolderFacts) -> None:
        if folder.exists and (folder.dirty or mount.id in self._closed):
            self._preserve(mount)  # the guard (S-67): a folder with uncommitted data is never deleted
            return
        if folder.exists and not self._in_use(mount):
            self.workspaces.discard_folder(mount.folder)
        self.mounts.delete(mount.id)

    def _expire_delta(self, mount: Mount) -> int:
        """A preserved delta past the recovery window is deleted (folder and record)."""
        if mount.preserved_at is None or time.time() - mount.preserved_at < self.window_s:
            return 0
        if mount.preserved_folder and not os.path.isdir(mount.preserved_folder) and os.path.isdir(mount.folder):
            return 0  # its move is still to be finished: never deleted from where it was
        if mount.preserved_folder and os.path.isdir(mount.preserved_folder):
            shutil.rmtree(mount.preserved_folder, ignore_errors=True)
        self.mounts.delete(mount.id)
        return 1
