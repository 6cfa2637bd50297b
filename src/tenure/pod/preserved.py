"""A pod's part in lost work that is never silent (ADR 0044): record, expire and recover preserved deltas.

When this host keeps the folder of a project it lost as a preserved delta (its mount's verdict
``preserved-delta``: the lost-lease settle, restart reconciliation, a close elsewhere),
:meth:`DeltaKeeper.record_pending` uploads the folder as the head of a workspace of its own
(``preserved-<mount id>``, a checkpoint with the reason ``preserved``: outside the project's head line) and
records it in the store
(:mod:`tenure.projects.preserved`) with the files that differ from the last checkpoint this host took or
restored, the generation and lineage they were written under, the host, and the end of the recovery
window; the project's timeline gets a ``preserved`` event. A delta whose folder holds nothing unsaved is
not recorded (nothing was lost), unless its project is CLOSED (its snapshots are gone: the folder is the
only copy). Recording is retried at every beat until it succeeds (``tenure_preserved_deltas_unrecorded``);
it never stops the pod.

Any pod recovers a recorded delta from the object store (:meth:`DeltaKeeper.recover`): restored into a new
or empty folder of its host, or merged into the running project (its changed files written back, under the
project's write gate). Past the recovery window any pod disposes of the delta's workspace and deletes the
record (:meth:`DeltaKeeper.expire`); the host that keeps the folder deletes it as before.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

from tenure.errors import ConflictError, InvalidInputError, TenureError
from tenure.mounts.classify import Verdict
from tenure.mounts.recovery import check_recovery_target
from tenure.projects.preserved import PreservedDelta, PreservedDeltas
from tenure.projects.timeline import EventKind
from tenure.snapshots.index import folder_changes, load_index
from tenure.states import ProjectStatus

if TYPE_CHECKING:
    from tenure.mounts.store import Mount
    from tenure.pod.runtime import PodRuntime

__all__ = ["DeltaKeeper", "delta_workspace_name"]

log = logging.getLogger("tenure.serve")

#: a delta whose recording failed is tried again after this many seconds (then twice as long, up to 5 min)
RETRY_S = 1.0


def delta_workspace_name(mount_id: str) -> str:
    """The name of the workspace that holds a preserved delta's own snapshot."""
    return f"preserved-{mount_id}"


class DeltaKeeper:
    """The preserved deltas of one pod (see the module docstring)."""

    def __init__(self, node: PodRuntime) -> None:
        self.node = node
        self.deltas = PreservedDeltas(node.store)
        self._done: set[str] = set()  # mounts recorded (or with nothing to record): never looked at again
        self._retry: dict[str, tuple[float, float]] = {}  # mount → (next attempt, delay)
        self._known: dict[str, list[dict[str, Any]]] = {}  # project → its deltas, as of the last read
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ recording

    def unrecorded(self) -> list[Mount]:
        """This host's preserved deltas not recorded in the store yet (a local read only)."""
        return [
            m
            for m in self.node.lifecycle.mounts.store.list()
            if m.verdict == Verdict.PRESERVED_DELTA.value
            and m.project_id is not None
            and m.preserved_folder
            and m.id not in self._done
            and os.path.isdir(m.preserved_folder)
        ]

    def record_pending(self) -> int:
        """Upload and record every delta of this host not recorded yet (one attempt each, failures retried
        later with backoff); how many were recorded now."""
        recorded = 0
        with self._lock:
            pending = self.unrecorded()
            now = time.monotonic()
            for mount in pending:
                due, delay = self._retry.get(mount.id, (0.0, RETRY_S))
                if due > now:
                    continue
                try:
                    if self._record(mount) is not None:
                        recorded += 1
                    self._done.add(mount.id)
                    self._retry.pop(mount.id, None)
                except Exception as exc:  # noqa: BLE001 - kept on disk; tried again at a later beat
                    self._retry[mount.id] = (now + delay, min(delay * 2, 300.0))
                    log.warning(
                        "a preserved delta was not recorded in the store; tried again later",
                        extra={"tenure": {"mount": mount.id, "project": mount.project_ref, "error": str(exc)}},
                    )
            self.node.metrics.preserved_unrecorded.set(len([m for m in pending if m.id not in self._done]))
        if recorded:
            self.refresh_gauge()
        return recorded

    def _record(self, mount: Mount) -> PreservedDelta | None:
        existing = self.deltas.find(mount.id)
        if existing is not None:
            return None
        node = self.node
        assert mount.project_id is not None and mount.preserved_folder is not None
        project = node.projects.by_id(mount.project_id)
        closed = project.status is ProjectStatus.CLOSED
        index = load_index(None if closed else node.workspaces.index_path(mount.workspace_id, mount.folder))
        changes = folder_changes(mount.preserved_folder, index)
        if not changes.paths and not changes.removed and not closed:
            return None  # nothing unsaved: nothing was lost
        name = delta_workspace_name(mount.id)
        try:
            workspace = node.workspaces.create(name)
        except ConflictError as exc:
            if exc.code != "workspace-exists":
                raise
            workspace = node.workspaces.workspace(name)  # a retry after a crash between the two steps
        result = node.workspaces.checkpoint(name, mount.preserved_folder, reason="preserved")
        window = node.config.recovery_window
        kept = (mount.preserved_at or time.time()) + window - time.time()
        self.deltas.record(
            mount.id,
            project_id=project.id,
            workspace_id=mount.workspace_id,
            generation=mount.generation,
            lineage=mount.lineage,
            pod_id=node.pod_id,
            host=socket.gethostname(),
            folder=mount.preserved_folder,
            delta_workspace_id=workspace.id,
            snapshot_id=result.snapshot.id,
            paths=changes.paths,
            files=len(changes.paths),
            size=changes.size,
            keep_s=max(0.0, kept),
            reason=mount.forced_reason,
        )
        node.lifecycle.timeline.record(
            None,
            project.id,
            EventKind.PRESERVED,
            pod_id=node.pod_id,
            generation=mount.generation,
            delta=mount.id,
            lineage=mount.lineage,
            files=len(changes.paths),
            bytes=changes.size,
            removed=changes.removed,
            snapshot=result.snapshot.id,
        )
        log.warning(
            "unsaved work of a lost project kept as a preserved delta and recorded in the store",
            extra={
                "tenure": {
                    "project": project.ref,
                    "mount": mount.id,
                    "generation": mount.generation,
                    "files": len(changes.paths),
                    "bytes": changes.size,
                }
            },
        )
        return self.deltas.find(mount.id)

    # ------------------------------------------------------------------ the window

    def refresh_gauge(self) -> None:
        """Read every delta in its recovery window again (one read, best effort): the cache answers about
        projects carry between reads, and ``tenure_preserved_deltas`` (those not recovered yet)."""
        try:
            current = self.deltas.in_window()
        except TenureError:
            return
        known: dict[str, list[dict[str, Any]]] = {}
        for delta in current:
            known.setdefault(delta.project_id, []).append(delta.to_dict())
        self._known = known
        self.node.metrics.preserved.set(sum(1 for d in current if d.recovered_at is None))

    def known(self, project_id: str) -> list[dict[str, Any]]:
        """The project's deltas as of the last read (every 10 beats, and once this host recorded one): what
        answers other than ``GET`` of the project carry, so they cost no read of their own."""
        return list(self._known.get(project_id, ()))

    def expire(self) -> int:
        """Deltas past their recovery window: their workspace disposed (gc reclaims what only it held), the
        record deleted. Any pod may do it; how many this call ended."""
        ended = 0
        for delta in self.deltas.past_window():
            try:
                self._dispose_workspace(delta)
                self.deltas.delete(delta.id)
                ended += 1
            except TenureError as exc:
                log.warning(
                    "a preserved delta past its window was not deleted; tried again later",
                    extra={"tenure": {"mount": delta.id, "error": str(exc)}},
                )
        return ended

    def discard(self, delta_id: str) -> None:
        """A user discarded the delta: its record and its workspace go too (it cannot be recovered)."""
        delta = self.deltas.find(delta_id)
        if delta is None:
            return
        self._dispose_workspace(delta)
        self.deltas.delete(delta_id)

    def _dispose_workspace(self, delta: PreservedDelta) -> None:
        store = self.node.store.workspaces
        try:
            ws = store.workspace(delta.delta_workspace_id)
        except TenureError:
            return  # already gone
        if not self.node.workspaces.is_disposed(ws.id):
            store.dispose(ws.id, ws.writer_generation)

    # ------------------------------------------------------------------ recovery

    def restore_to(self, delta: PreservedDelta, dest: str) -> dict[str, Any]:
        """Restore the delta's snapshot into ``dest`` (absolute; new or empty; outside the data folder)."""
        if not os.path.isabs(dest):
            raise InvalidInputError(f"{dest!r} is not an absolute path", code="invalid-input", to=dest)
        check_recovery_target(self.node.config.data_dir, dest)
        snapshot, result = self.node.workspaces.restore(delta_workspace_name(delta.id), dest)
        self.deltas.recovered(delta.id)
        self._recovered_event(delta, to=dest)
        return {
            "mount": delta.id,
            "to": dest,
            "snapshot": snapshot.id,
            "files": result.files,
            "bytes": result.bytes_written,
        }

    def merge_into(self, delta: PreservedDelta, write: Any) -> dict[str, Any]:
        """Write the delta's changed files back into the project through ``write(path, data)`` (the
        project's own fenced write); files only, symbolic links and special files are listed as skipped."""
        from tenure.workspaces import files

        if delta.truncated:
            raise ConflictError(
                f"preserved delta {delta.id} changed more than {len(delta.paths)} paths: too many to merge",
                code="delta-too-large-to-merge",
                mount=delta.id,
                hint='restore it into a folder instead: POST /api/v1/mounts/ID/recover {"to": DIR}',
            )
        scratch = tempfile.mkdtemp(prefix="recover-", dir=self.node.config.data_dir)
        written: list[str] = []
        skipped: list[str] = []
        try:
            self.node.workspaces.restore(delta_workspace_name(delta.id), scratch)
            for path in delta.paths:
                full = os.path.join(scratch, path)
                if os.path.islink(full) or not os.path.isfile(full):
                    skipped.append(path)
                    continue
                fd, _size = files.open_file(scratch, path)
                write(path, b"".join(files.chunks(fd)))  # chunks closes the descriptor
                written.append(path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.deltas.recovered(delta.id)
        self._recovered_event(delta, merged=len(written))
        return {"mount": delta.id, "merged": written, "skipped": skipped}

    def _recovered_event(self, delta: PreservedDelta, **detail: Any) -> None:
        self.node.lifecycle.timeline.record(
            None, delta.project_id, EventKind.RECOVERED, pod_id=self.node.pod_id, delta=delta.id, **detail
        )
