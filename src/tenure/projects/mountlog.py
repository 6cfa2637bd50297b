"""What the lifecycle records of each mount on this host (the host-local mount store, ADR 0021).

Each step of bring, checkpoint, suspend, drain, drift and close that changes a
project's folder on this host is recorded before or after it, so that restart
reconciliation finds, for every folder, the generation it was written under,
the snapshot it came from and any durable operation a crash interrupted:

* bring: MOUNTING (with the generation) → the folder restored or adopted →
  MOUNTED with its base snapshot; a live mount of an older generation (this
  host's previous lease) is forced CLOSED first — the takeover path;
* checkpoint: CHECKPOINTING with its idempotency key before anything is
  uploaded → MOUNTED with the new base;
* suspend and drain: CHECKPOINTING with key ``suspend:<generation>`` → the
  checkpoint published and the folder removed → UNMOUNTING → CLOSED;
* drift (lease lost): forced CLOSED (the takeover path), with the preserved
  folder, if any;
* close (and a lost project's folder that had no record): forced CLOSED with
  the place the folder is about to be moved to under ``preserved/`` recorded
  *before* the move, so a crash between the two leaves a record
  reconciliation (or the next close) finishes: the files stay recoverable
  for the recovery window, then go.

Recording never decides anything: the store and the fencing generation do.
"""

from __future__ import annotations

import os
import time

from tenure.errors import ConflictError
from tenure.faults import crash_point, register
from tenure.mounts.store import Mount, MountStore
from tenure.projects.records import Project
from tenure.states import MountState as M

__all__ = ["MountLog", "AFTER_UNMOUNTING"]

AFTER_UNMOUNTING = register(
    "mounts.after_unmounting",
    "suspend or drain: the final checkpoint published and the folder removed, the mount UNMOUNTING, not yet CLOSED",
)


class MountLog:
    """The lifecycle's records of mounts on this host."""

    def __init__(self, store: MountStore) -> None:
        self.store = store

    def current(self, project: Project) -> Mount | None:
        return self.store.live_for(project.workspace_id)

    def adopted(self, project: Project) -> None:
        """This host's previous pod held the project (ADR 0020): its live mount carries the new generation."""
        live = self.current(project)
        if live is not None:
            self.store.set_generation(live.id, project.generation)

    def mounting(self, project: Project, folder: str) -> Mount:
        """Bring step 3 starts: a mount of this generation, MOUNTING (an older one is closed as taken over)."""
        live = self.current(project)
        if live is not None and live.generation == project.generation and live.state is not M.MOUNTING:
            if live.verdict == "control-plane-unknown":
                # reconciliation could not ask the store; this bring's claim under the same generation is the
                # store's answer: the lease is valid, and the mount may publish again (S-59, S-60)
                self.store.set_verdict(live.id, "active-lease-valid")
                return self.store.get(live.id)
            return live  # a re-bring under the same lease: the mount goes on
        if live is not None:
            self.store.force(live.id, M.CLOSED, f"taken over by generation {project.generation}")
        return self._open(project, folder)

    def _open(self, project: Project, folder: str) -> Mount:
        """A new mount record of ``project`` at its generation and lineage, MOUNTING."""
        return self.store.open(
            project.workspace_id,
            folder,
            project.generation,
            project_id=project.id,
            project_ref=project.ref,
            lineage=project.lineage,
        )

    def mounted(self, mount: Mount, base: str | None) -> None:
        """Bring step 3 done: the base recorded and a MOUNTING mount MOUNTED (one write)."""
        self.store.set_base(mount.id, base, move=(M.MOUNTING, M.MOUNTED) if mount.state is M.MOUNTING else None)

    def mount_failed(self, mount: Mount) -> None:
        if mount.state is M.MOUNTING:
            self.store.transition(mount.id, M.MOUNTING, M.CLOSED)

    def checkpointing(self, project: Project, key: str) -> Mount | None:
        """A checkpoint under ``key`` starts (recorded before anything is uploaded)."""
        live = self.current(project)
        if live is None:
            return None
        if live.verdict in ("stale-generation", "control-plane-unknown"):
            raise ConflictError(
                f"mount {live.id} of {project.ref} is {live.verdict}: it may not publish (S-59)",
                code="publish-gated",
                mount=live.id,
                verdict=live.verdict,
                hint="bring the project again under a current lease",
            )
        self.store.checkpoint_begin(live.id, key)
        if live.state is M.MOUNTED:
            self.store.transition(live.id, M.MOUNTED, M.CHECKPOINTING)
        return self.store.get(live.id)

    def checkpointed(self, mount: Mount | None, base: str | None) -> None:
        """The checkpoint published (or found nothing to publish): MOUNTED again on the new base."""
        if mount is None:
            return
        self.store.set_base(mount.id, base)
        self.checkpoint_abandoned(mount)

    def checkpoint_abandoned(self, mount: Mount | None) -> None:
        """The checkpoint ended without a new base: MOUNTED again on the old one."""
        if mount is None:
            return
        self.store.checkpoint_end(mount.id)
        if self.store.get(mount.id).state is M.CHECKPOINTING:
            self.store.transition(mount.id, M.CHECKPOINTING, M.MOUNTED)

    def unmounting(self, project: Project) -> Mount | None:
        """Suspend or drain: the final checkpoint under ``suspend:<generation>`` starts."""
        return self.checkpointing(project, f"suspend:{project.generation}")

    def unmounted(self, mount: Mount | None) -> None:
        """The final checkpoint is published and the folder removed: UNMOUNTING, then CLOSED."""
        if mount is None:
            return
        self.store.checkpoint_end(mount.id)
        current = self.store.get(mount.id)
        if current.state is M.CHECKPOINTING:
            self.store.transition(mount.id, M.CHECKPOINTING, M.UNMOUNTING)
        elif current.state is M.MOUNTED:
            self.store.transition(mount.id, M.MOUNTED, M.UNMOUNTING)
        crash_point(AFTER_UNMOUNTING)  # restart reconciliation: cleanup incomplete, finished there
        self.store.transition(mount.id, M.UNMOUNTING, M.CLOSED)

    def preserving(self, project: Project, folder: str, target: str, reason: str) -> Mount:
        """``folder`` is kept as a preserved delta at ``target``: recorded before the folder is moved.

        The live mount is forced CLOSED for ``reason`` (or, with none, a record
        is opened for the folder); a record an interrupted move left, whose
        move never happened, is reused instead of a second one.
        """
        live = self.current(project)
        if live is None:
            unfinished = [
                m
                for m in self.store.list()
                if m.workspace_id == project.workspace_id
                and m.state is M.CLOSED
                and m.preserved_folder is not None
                and not os.path.isdir(m.preserved_folder)
            ]
            if unfinished:
                live = unfinished[0]
                target = live.preserved_folder or target
            else:
                live = self._open(project, folder)
        if live.state is not M.CLOSED:
            live = self.store.force(live.id, M.CLOSED, reason)
        self.store.set_verdict(live.id, "preserved-delta", preserved_folder=target, preserved_at=time.time())
        return self.store.get(live.id)

    def lost(self, project: Project, reason: str, preserved: str | None) -> None:
        """Drift or close: the lease is gone; forced CLOSED (the takeover path), the preserved folder noted."""
        live = self.current(project)
        if live is None:
            return
        self.store.force(live.id, M.CLOSED, reason)
        if preserved is not None:
            self.store.set_verdict(live.id, "preserved-delta", preserved_folder=preserved, preserved_at=time.time())
