"""The lifecycle service: the only orchestrator of bring, suspend and close.

bring:   1 claim → 1a unbind stale sessions (in the claim's transaction) → 2 RECOVERING
         → 3 workspace init → 4 engines-start event → 5 RUNNING with its timeline
         event (and the activation registry)
suspend: 1 SUSPENDING → 2 engines-stop event → 3 checkpoint, folder to trash
         → 4 SUSPENDED (lease released, out of the registry)
close:   fence (new generation) → dispose (workspace DELETED, snapshots
         DELETING) → local folder kept as a preserved delta for the recovery
         window (recorded, then moved) → CLOSED

Every status write and every checkpoint carries the project's generation, so
a pod fenced by a newer claim changes nothing. Each step has a named crash
point; the next bring or suspend finishes what a crash interrupted.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tenure.defaults import LEASE_TTL_S
from tenure.errors import IntegrityError, TenureError
from tenure.faults import crash_point, register
from tenure.mounts.store import MountStore
from tenure.objects import ObjectStore
from tenure.projects.facade import OwnershipFacade
from tenure.projects.mountlog import MountLog
from tenure.projects.ownership import Ownership, refuse_unservable
from tenure.projects.pods import PodIdentity
from tenure.projects.records import Kind, Project
from tenure.projects.store import CLOSED_GROUP, ProjectStore, StatusConflictError, SystemProjectError
from tenure.projects.timeline import EventKind, Timeline
from tenure.states import ProjectStatus
from tenure.workspaces import (
    CheckpointResult,
    Interval,
    LeaseLostError,
    LocalFolders,
    Store,
    Workspace,
    WorkspaceService,
)
from tenure.workspaces.expiry import DEFAULT_GRACE_S

for _name, _what in [
    ("bring.after_claim", "1: lease claimed"),
    ("bring.after_unbind", "1a: stale sessions unbound"),
    ("bring.after_recovering", "2: status RECOVERING"),
    ("bring.after_workspace_init", "3: workspace folder restored or adopted"),
    ("bring.after_engines_start", "4: engines-start delivered"),
    ("bring.after_running", "5: status RUNNING"),
    ("checkpoint_running.after_recorded", "checkpoint of a running project: its key recorded, nothing uploaded yet"),
    ("suspend.after_suspending", "1: status SUSPENDING"),
    ("suspend.after_engines_stop", "2: engines-stop delivered"),
    ("suspend.after_workspace", "3: checkpoint published, folder moved to trash"),
    ("suspend.after_suspended", "4: status SUSPENDED"),
    ("close.after_fence", "generation raised, writer leases revoked"),
    ("close.after_delta_recorded", "the folder's place under preserved/ recorded; the folder not moved yet"),
    ("close.after_dispose", "workspace DELETED, snapshots DELETING, folder kept as a preserved delta"),
    ("close.after_closed", "status CLOSED"),
]:
    register(_name, _what)

S = ProjectStatus
log = logging.getLogger("tenure.lifecycle")


class EngineFailedError(TenureError):
    code = "engine-failed"
    retryable = True
    exit_code = 4
    default_hint = "fix the engine and bring the project again"


@dataclass(frozen=True)
class EnginesStartRequested:
    tenant_id: str
    project_name: str


@dataclass(frozen=True)
class EnginesStopRequested:
    tenant_id: str
    project_name: str


class Engine(Protocol):
    """User code that runs for a project while it is RUNNING here."""

    def start(self, event: EnginesStartRequested, folder: str) -> None: ...

    def stop(self, event: EnginesStopRequested, folder: str) -> None: ...


@dataclass
class ActivationRegistry:
    """In-process "running here": only bring adds, suspend / close / drift remove.

    Each entry remembers the fencing generation its engines were started
    under, so a pod can tell "running here under the current lease" from
    "engines left over from a lease that has since moved on".
    """

    _ids: dict[str, int] = field(default_factory=dict)
    #: the generation each project last ran under here, kept after it leaves (until :meth:`forget`)
    _ran: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, project_id: str, generation: int = 0) -> None:
        with self._lock:
            self._ids[project_id] = generation
            self._ran[project_id] = generation

    def ran(self) -> dict[str, int]:
        """Every project that ran in this process and is not forgotten, with the generation it last ran
        under (whether it still runs or not): what a pod may have left a mount of."""
        with self._lock:
            return dict(self._ran)

    def forget(self, project_id: str) -> None:
        """Nothing of the project is left here to settle: :meth:`ran` no longer names it (unless it runs)."""
        with self._lock:
            if project_id not in self._ids:
                self._ran.pop(project_id, None)

    def remove(self, project_id: str) -> None:
        with self._lock:
            self._ids.pop(project_id, None)

    def generation(self, project_id: str) -> int | None:
        """The generation the project's engines were started under here, if it runs here."""
        with self._lock:
            return self._ids.get(project_id)

    def __contains__(self, project_id: object) -> bool:
        with self._lock:
            return project_id in self._ids

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._ids)


@dataclass
class LifecycleConfig:
    lease_ttl: float = LEASE_TTL_S
    engine_stop_timeout: float = 30.0
    #: a bring undoes the expiry of a SUSPENDED project's workspace within this grace (ADR 0019)
    expiry_grace: float = DEFAULT_GRACE_S


def project_folder(data_dir: str, project: Project) -> str:
    """The project's workspace folder on this host (ids are hashed before they become paths)."""
    return LocalFolders(data_dir).path(project.id)


class LifecycleService:
    """bring / suspend / close for one pod (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        objects: ObjectStore,
        data_dir: str,
        pod: PodIdentity,
        *,
        config: LifecycleConfig | None = None,
        engines: list[Engine] | None = None,
        registry: ActivationRegistry | None = None,
    ) -> None:
        self.store = store
        self.pod = pod
        self.config = config or LifecycleConfig()
        self.engines = list(engines or [])
        self.registry = registry or ActivationRegistry()
        self.projects = ProjectStore(store)
        self.ownership = Ownership(store)
        self.facade = OwnershipFacade(store, pod, lease_ttl=self.config.lease_ttl)
        self.workspaces = WorkspaceService(store, objects, data_dir, holder=pod.pod_id)
        self.data_dir = data_dir
        self.trash = self.workspaces.folders.trash
        self.trash.sweep()
        self.mounts = MountLog(MountStore(data_dir))
        self.timeline = Timeline(store)

    def folder(self, project: Project) -> str:
        """The project's workspace folder on this host."""
        return self.workspaces.folder_for(project.id)

    # ------------------------------------------------------------------ bring

    def bring(
        self, tenant: str, name: str, *, from_snapshot: str | None = None, project: Project | None = None
    ) -> Project:
        """Make the project RUNNING on this pod; returns the updated row.

        ``from_snapshot`` restores that READY snapshot instead of the head: the
        explicit way back when the head is DEGRADED (never chosen silently).
        ``project``: the row of ``tenant/name`` the caller has just read (a
        pod's routing of the request), so it is not read again.

        Control-plane transactions of a bring that does not return early: the
        read of the row (none when ``project`` is given); the claim with step
        1a and the workspace read (:meth:`OwnershipFacade.claim_to_bring`);
        RECOVERING; the restore's pin and unpin, when there is a head to
        restore; RUNNING with the timeline's ``bring`` event. Engine events add
        theirs (``tests/integration/test_bring_transactions.py``).
        """
        if project is None:
            project = self.projects.get(tenant, name)
        refuse_unservable(project.ref, project.status, project.lifecycle_type, suspended_ok=True)
        if project.id in self.registry:
            if project.status is S.RUNNING and from_snapshot is None:
                renewed = self.ownership.claim(
                    tenant, name, self.pod.pod_id, self.pod.node_name, self.pod.endpoint, self.config.lease_ttl
                )
                if renewed is not None and renewed.generation == self.registry.generation(project.id):
                    return renewed  # running here under the current lease (even one that had run out): renewed
            self._deactivate(project)  # engines from an older lease, or a re-bring: stop them first
        # A bring is a use: an EXPIRING workspace comes back to IDLE in the claim's transaction, within the
        # grace (ADR 0019); past it the bring is refused with expiry-grace-over and nothing changes.
        claimed = self.facade.claim_to_bring(
            tenant, name, lease_ttl=self.config.lease_ttl, expiry_grace=self.config.expiry_grace
        )
        project = claimed.project
        if from_snapshot is not None and from_snapshot != claimed.workspace.head_snapshot_id:
            project = self.projects.new_lineage(project)  # not the head: writes since it may be missing
        crash_point("bring.after_claim")
        crash_point("bring.after_unbind")  # step 1a ran in the claim's transaction
        if project.status is not S.RECOVERING:
            project = self.projects.transition_status(tenant, name, project.status, S.RECOVERING, project.generation)
        crash_point("bring.after_recovering")
        folder = self._init_folder_or_record(project, from_snapshot, claimed.workspace)
        crash_point("bring.after_workspace_init")
        self._start_engines(project, folder)
        crash_point("bring.after_engines_start")
        project = self.projects.transition_status(
            tenant, name, S.RECOVERING, S.RUNNING, project.generation, then=self._bring_event(from_snapshot)
        )
        self.registry.add(project.id, project.generation)
        crash_point("bring.after_running")
        return project

    def _bring_event(self, from_snapshot: str | None) -> Callable[[Any, Project], None]:
        """The timeline's ``bring``, written in the RUNNING transaction (best effort: never raises)."""

        def record(tx: Any, project: Project) -> None:
            self.timeline.record_along(
                tx,
                project.id,
                EventKind.BRING,
                pod_id=self.pod.pod_id,
                generation=project.generation,
                from_snapshot=from_snapshot,
            )

        return record

    def _init_folder(self, project: Project, from_snapshot: str | None, workspace: Workspace | None) -> str:
        """Step 3; a damaged head leaves the project RECOVERING with the error and the way out recorded."""
        mount = self.mounts.mounting(project, self.folder(project))
        try:
            folder = self.workspaces.init_folder(
                project.workspace_id, self.folder(project), snapshot=from_snapshot, workspace=workspace
            )
            self.mounts.mounted(mount, self.workspaces.folders.read_base(folder))
            return folder
        except BaseException:
            self.mounts.mount_failed(mount)
            raise

    def _init_folder_or_record(
        self, project: Project, from_snapshot: str | None, workspace: Workspace | None = None
    ) -> str:
        try:
            return self._init_folder(project, from_snapshot, workspace)
        except IntegrityError as exc:
            ready = self.workspaces.newest_ready(project.workspace_id)
            way_out = (
                f"bring it from the newest READY snapshot with `tenure project bring {project.ref}"
                f" --from-snapshot {ready.id}`, or repair the head"
                if ready is not None
                else "repair the head from a live copy; there is no READY snapshot to fall back to"
            )
            self._record_error(project, f"workspace init failed: {exc.message}; {way_out}")
            exc.context.setdefault("project", project.ref)
            exc.context["newest_ready"] = ready.id if ready is not None else None
            exc.hint = way_out
            raise

    def _deactivate(self, project: Project) -> None:
        """Stop this pod's engines for a project it no longer owns at this generation (best effort)."""
        self.registry.remove(project.id)
        self._stop_quietly(project, self.engines)

    def _stop_quietly(self, project: Project, engines: list[Engine]) -> None:
        """Stop ``engines`` for ``project``, each within the stop timeout; failures are logged, never raised.

        Used where the caller must go on (a new owner's bring, the beat's drift
        handling): a stop that hangs is left behind in its own thread instead of
        holding the caller up, and the engine is fenced anyway.
        """
        event = EnginesStopRequested(project.tenant, project.name)
        folder = self.folder(project)
        for engine in engines:
            why = self._stop_one(engine, event, folder)
            if why is not None:
                log.warning("engine stop %s", why, extra={"tenure": {"project": project.ref, "pod": self.pod.pod_id}})

    def _stop_one(self, engine: Engine, event: EnginesStopRequested, folder: str) -> str | None:
        """Run one engine's stop in its own thread, up to the stop timeout; why it failed, or None."""
        errors: list[BaseException] = []
        thread = threading.Thread(target=_capture(errors, _stopper(engine, event, folder)), daemon=True)
        thread.start()
        thread.join(self.config.engine_stop_timeout)
        if thread.is_alive():
            return "timed out"
        return f"failed: {errors[0]}" if errors else None

    def deactivate(self, project: Project) -> None:
        """Forward drift: this pod runs ``project`` without its lease any more.

        Engines are stopped (they are fenced anyway) and the project leaves
        the registry. Its folder is left to the caller: the pod settles its
        mount through restart reconciliation's classifier, and a folder with
        no mount record goes through :meth:`keep_lost_folder`.
        """
        self._deactivate(project)

    def keep_lost_folder(self, project: Project, reason: str) -> None:
        """The folder of a project this pod lost, with no mount record: kept as a preserved delta.

        Whether another pod took it over (the folder may hold work the new
        owner does not have) or it was closed (its snapshots are gone), the
        folder is moved under ``preserved/`` for the recovery window, with a
        record so that ``tenure mounts`` lists it and the window ends it.
        """
        self._preserve(project, reason)

    def checkpoint_running(
        self, project: Project, *, interval: Interval | None = None, reason: str = "manual"
    ) -> CheckpointResult:
        """Checkpoint the folder of a project running here, under its writer lease (fenced by the generation);
        ``reason`` is recorded with the snapshot.

        ``interval``: what the folder's change journal saw change since the last checkpoint (ADR 0030).
        """
        lease = self.workspaces.lease(project.workspace_id, project.generation)
        if lease is None:
            raise LeaseLostError(
                f"project {project.ref} has no writer lease at generation {project.generation} here",
                project=project.ref,
                generation=project.generation,
            )
        key = f"now:{project.generation}:{uuid.uuid4().hex[:12]}"
        mount = self.mounts.checkpointing(project, key)
        crash_point("checkpoint_running.after_recorded")
        try:
            result = self.workspaces.checkpoint(
                project.workspace_id, self.folder(project), key=key, lease=lease, interval=interval, reason=reason
            )
        except BaseException:
            self.mounts.checkpoint_abandoned(mount)
            raise
        self.workspaces.vouch(project.workspace_id, self.folder(project), result.snapshot.id)  # adopted at a restart
        self.mounts.checkpointed(mount, result.snapshot.id)
        return result

    def hand_over(self, project: Project) -> None:
        """Drain one project: engines stopped, checkpoint, folder removed, lease released while still ours.

        The status stays RUNNING with no owner, so another pod brings it. A
        failure leaves the lease and the folder in place (nothing is lost).
        """
        self._stop_engines(project, stays="RUNNING on this pod, with its lease")
        mount = self.mounts.unmounting(project)
        self.workspaces.suspend_folder(project.workspace_id, self.folder(project), project.generation, "drain")
        self.mounts.unmounted(mount)
        self.registry.remove(project.id)
        self.ownership.release_lease(project.tenant, project.name, self.pod.pod_id, checkpointed_at=project.generation)

    def _start_engines(self, project: Project, folder: str) -> None:
        event = EnginesStartRequested(project.tenant, project.name)
        for index, engine in enumerate(self.engines):
            try:
                engine.start(event, folder)
            except Exception as exc:
                # the engines already started must not run on: stop them, last started first
                self._stop_quietly(project, list(reversed(self.engines[:index])))
                self._event(project, EventKind.ENGINE_FAILURE, phase="start", error=str(exc))
                self._record_error(project, f"engine start failed: {exc}")
                raise EngineFailedError(
                    f"an engine failed to start for {project.ref}: {exc}", project=project.ref
                ) from exc
        if self.engines:
            self._event(project, EventKind.ENGINE_START, engines=len(self.engines))

    # ------------------------------------------------------------------ suspend

    def suspend(self, tenant: str, name: str, *, force_stop: bool = False) -> Project:
        """Make the project SUSPENDED: engines stopped, checkpoint published, folder gone.

        An engine that fails to stop (or not within the stop timeout) leaves the project SUSPENDING with the
        error recorded (``engine-failed``). ``force_stop`` — the pod's last retry of such a suspend — stops
        the engines best effort and goes on, so SUSPENDING never lasts forever.
        """
        project = self.projects.get(tenant, name)
        if project.status is S.CLOSED:
            raise StatusConflictError(
                f"project {project.ref} is CLOSED", project=project.ref, expected="not CLOSED", actual="CLOSED"
            )
        if project.status is S.SUSPENDED:
            return project
        if project.status is S.INIT:
            return self.projects.transition_status(tenant, name, S.INIT, S.SUSPENDED, project.generation)
        if project.status is S.RECOVERING:
            self.bring(tenant, name)
        project = self.facade.claim_for_local_pod(tenant, name, lease_ttl=self.config.lease_ttl)
        if project.status is S.RUNNING:
            project = self.projects.transition_status(tenant, name, S.RUNNING, S.SUSPENDING, project.generation)
        crash_point("suspend.after_suspending")
        if force_stop:
            self._stop_quietly(project, self.engines)
        else:
            self._stop_engines(project)
        crash_point("suspend.after_engines_stop")
        mount = self.mounts.unmounting(project)
        self.workspaces.suspend_folder(project.workspace_id, self.folder(project), project.generation)
        self.mounts.unmounted(mount)
        crash_point("suspend.after_workspace")
        project = self.projects.transition_status(tenant, name, S.SUSPENDING, S.SUSPENDED, project.generation)
        self.registry.remove(project.id)
        self.ownership.release_lease(tenant, name, self.pod.pod_id, checkpointed_at=project.generation)
        self._event(project, EventKind.SUSPEND)
        crash_point("suspend.after_suspended")
        return self.projects.get(tenant, name)

    def _stop_engines(self, project: Project, *, stays: str = "SUSPENDING") -> None:
        event = EnginesStopRequested(project.tenant, project.name)
        folder = self.folder(project)
        for engine in self.engines:
            why = self._stop_one(engine, event, folder)
            if why is not None:
                self._event(project, EventKind.ENGINE_FAILURE, phase="stop", error=why)
                self._record_error(project, f"engine stop {why}")
                raise EngineFailedError(
                    f"an engine stop {why} for {project.ref}; the project stays {stays}", project=project.ref
                )
        if self.engines:
            self._event(project, EventKind.ENGINE_STOP, engines=len(self.engines))

    # ------------------------------------------------------------------ close

    def close(self, tenant: str, name: str, closed_group_id: str = CLOSED_GROUP) -> Project:
        """Terminal: fence, dispose the workspace and its snapshots, then CLOSED. No stop event."""
        project = self.projects.get(tenant, name)
        if project.status is S.CLOSED:
            return project
        if project.kind is Kind.SYSTEM:
            raise SystemProjectError(f"project {project.ref} is a SYSTEM project", project=project.ref)
        if not self.workspaces.is_disposed(project.workspace_id):
            project = self.ownership.fence(project, self.pod.pod_id, self.pod.node_name)
            crash_point("close.after_fence")
            self.workspaces.dispose(project.workspace_id, project.generation)
        self._preserve(project, "closed", point="close.after_delta_recorded")
        crash_point("close.after_dispose")
        project = self.projects.close(tenant, name, closed_group_id, project.generation)
        self.ownership.release_closed(project.id)
        project = self.projects.get(tenant, name)
        self.registry.remove(project.id)
        self._event(project, EventKind.CLOSE)
        crash_point("close.after_closed")
        return project

    def _preserve(self, project: Project, reason: str, *, point: str | None = None) -> None:
        """The project's folder on this host becomes a preserved delta for the recovery window.

        Close disposes the workspace and its snapshots, and a lost lease
        leaves work the new owner may not have, so the folder may hold the
        only copy of its files: it is moved under ``preserved/`` — recorded
        first, then moved (``point`` names the crash point between the two) —
        and deleted only when the recovery window ends. An empty folder is
        simply discarded.
        """
        folder = self.folder(project)
        if not os.path.isdir(folder) or not os.listdir(folder):
            self.workspaces.discard_folder(folder)
            self.mounts.lost(project, reason, None)
            return
        mount = self.mounts.preserving(project, folder, self.workspaces.folders.preserve_target(folder), reason)
        assert mount.preserved_folder is not None
        if point is not None:
            crash_point(point)
        self.workspaces.preserve_folder(folder, mount.preserved_folder)

    def _record_error(self, project: Project, error: str) -> None:
        """Record a failure on the project, best effort: the failure itself is what the caller raises.

        A pod fenced meanwhile (``stale-generation``: another pod holds the
        project now) or a store that refuses the write only leaves a log
        line; the record stays the new owner's to write.
        """
        try:
            self.projects.record_error(project, error)
        except TenureError as exc:
            log.warning(
                "project error not recorded (%s): %s",
                exc.code,
                error,
                extra={"tenure": {"project": project.ref, "pod": self.pod.pod_id, "reason": exc.message}},
            )

    def _event(self, project: Project, kind: EventKind, **detail: object) -> None:
        """Record ``kind`` on the project's timeline for this pod (best effort: never raises)."""
        self.timeline.record(None, project.id, kind, pod_id=self.pod.pod_id, generation=project.generation, **detail)

    def shutdown(self) -> None:
        """Release every lease this pod holds (best effort) and let the trash finish."""
        self.ownership.release_leases(self.pod.pod_id)
        self.trash.wait()


def _stopper(engine: Engine, event: EnginesStopRequested, folder: str) -> Callable[[], None]:
    return lambda: engine.stop(event, folder)


def _capture(errors: list[BaseException], fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            errors.append(exc)

    return run
