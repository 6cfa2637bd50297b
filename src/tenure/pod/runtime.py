"""The pod runtime behind ``tenure serve``: one pod per process.

A :class:`PodRuntime` owns this process's pod row, its data-folder lock, the
lifecycle service and the activation registry, and runs the beat:

* **start** (:meth:`PodRuntime.start`): pod row STARTING → exclusive lock on the
  data folder → the pod's own lease → the projects of this host's previous
  pod adopted (ADR 0020) → restart reconciliation of this host's mounts
  (:mod:`tenure.pod.reconcile`) → re-derive owner-required → the adopted
  projects brought, then the boot self-pull → RUNNING. Until then ``ready``
  is false and nothing is placed here; a start that fails leaves the row
  STOPPED.
* **beat** (:meth:`PodRuntime.beat`, every ``beat_interval`` seconds): the pod's
  heartbeat with its load, the lease renewal, then drift in both directions —
  a project running here whose lease this pod no longer holds is deactivated
  at once (forward); a project this pod holds but does not run is brought
  again with bounded retries and backoff, then released (reverse) —, and the
  optional periodic pull. The beat thread only renews and checks drift; the
  retries and the pull run on a background thread, their brings on a small
  pool, so a long pull never delays a renewal.
* **bring** is single-flight per project: concurrent requests share one.
* **drain** (:meth:`PodRuntime.drain`, SIGTERM, ``tenure pods drain``): DRAINING,
  then for each project: engines stopped, checkpoint, folder removed, lease
  released while still ours; the project stays RUNNING with no owner so
  another pod brings it. Then STOPPED.

The HTTP API (:mod:`tenure.api.app`) talks to a node only through the
public methods here.
"""

from __future__ import annotations

import enum
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from tenure.cluster.handoff import HandoffNotifier, WakeTransport
from tenure.cluster.master import Master
from tenure.cluster.placement import room, selector_matches
from tenure.defaults import BEAT_S, LEASE_TTL_S, LIVENESS_TTL_S, TICK_S
from tenure.errors import ConfigurationError, ConflictError, DiskFullError, TenureError
from tenure.mounts.classify import Authority, ProjectLease
from tenure.objects import ObjectStore
from tenure.pod.documents import NOT_KNOWN_HERE
from tenure.pod.durable import DEFAULT_AUTOSAVE_S, GroupCommits
from tenure.pod.gate import WriteGate
from tenure.pod.journals import FolderJournals
from tenure.pod.metrics import Metrics
from tenure.pod.preserved import DeltaKeeper
from tenure.pod.reconcile import Reconciler
from tenure.pod.space import DataSpace
from tenure.pod.tokens import TokenStore, cluster_token
from tenure.projects.demand import REQUEST_DEMAND_S, REQUEST_SOURCE, DemandHandle
from tenure.projects.facade import ClaimRejectedError, OwnershipFacade
from tenure.projects.lifecycle import ActivationRegistry, Engine, LifecycleConfig, LifecycleService
from tenure.projects.ownership import NeedingOwnerCursor, Owner, Ownership, refuse_unservable
from tenure.projects.pods import PodIdentity, PodRegistry
from tenure.projects.records import LifecycleType, Project
from tenure.projects.store import ProjectStore
from tenure.projects.timeline import DEFAULT_KEEP_DAYS, DEFAULT_KEEP_PER_PROJECT, EventKind
from tenure.states import MountState, PodState, ProjectStatus
from tenure.store import Store
from tenure.workspaces import WorkspaceService

#: the data folder's staging area for file uploads while they arrive (outside every workspace folder)
UPLOADS = "uploads"

__all__ = ["PodRuntime", "ServeConfig", "Intent", "Route", "selector_matches", "DataFolderLockedError"]

log = logging.getLogger("tenure.serve")
#: pod rows silent this long that hold nothing are deleted (ADR 0016)
REAP_AFTER_S = 24 * 3600.0
#: STOPPED pod rows that hold nothing are deleted this long after they stopped
REAP_STOPPED_AFTER_S = 3600.0
#: projects read per page of the self-pull's needing-owner scan
PULL_PAGE = 100
#: the gauge of preserved deltas recorded in the store is read again every this many beats
PRESERVED_GAUGE_BEATS = 10
#: the autosave policies of the projects held here are read from the store again every this many beats
POLICY_BEATS = 10
#: how often a running pod looks for preserved deltas past the recovery window
DELTA_SWEEP_S = 3600.0
#: how often a running pod prunes the ownership timeline (retention: ServeConfig.history_days)
HISTORY_PRUNE_S = 3600.0
#: the longest wait between two attempts to finish a suspend left SUSPENDING
MAX_RETRY_BACKOFF_S = 300.0
#: the store-outage brake (ADR 0050): a pod that has not renewed for this many beats is out of touch with
#: the store, and once it renews again it takes nothing over for ``takeover_hold_beats`` beats, so the pods
#: that were cut off with it (a store outage cuts off every pod) renew first
OUT_OF_TOUCH_BEATS = 3.0


class DataFolderLockedError(ConfigurationError):
    code = "data-dir-locked"
    default_hint = "another tenure serve runs on this data folder; give each pod its own --data folder"


@dataclass
class ServeConfig:
    """What a pod runs with (SPEC §8 defaults)."""

    data_dir: str
    listen: str = "127.0.0.1:8470"
    labels: dict[str, str] = field(default_factory=dict)
    capacity: float = 100.0
    self_pull: bool = True
    pull_every: float | None = None
    beat_interval: float = BEAT_S
    lease_ttl: float = LEASE_TTL_S
    liveness_ttl: float = LIVENESS_TTL_S
    engine_stop_timeout: float = 30.0
    #: attempts to bring a project this pod holds but does not run, before it releases the lease
    bring_retries: int = 3
    #: first backoff between those attempts (doubles each time)
    bring_backoff: float = 1.0
    #: the boot self-pull lets what this pod holds grow to this × its fair share of the load (P-77, ADR 0052)
    pull_factor: float = 1.5
    public_url: str | None = None
    #: how long a preserved delta is kept on this host before it is deleted (S-65; default 7 days)
    recovery_window: float = 7 * 24 * 3600.0
    #: ownership timeline retention in days; the newest 100 events of each project are kept whatever their age
    history_days: float = DEFAULT_KEEP_DAYS
    #: take part in the master election (ADR 0023)
    master: bool = True
    #: the master lease TTL (None: the project lease TTL)
    master_ttl: float | None = None
    #: the distributor tick (ADR 0050)
    tick: float = TICK_S
    #: at most this many placements per tick
    max_moves: int = 100
    #: the store-outage brake (ADR 0050): after a renewal gap, no takeover for this many beats
    takeover_hold_beats: float = 2.0
    #: keep a change journal of each running project's folder, so checkpoints list only what changed (ADR 0030)
    change_journal: bool = True
    #: every this-many checkpoints of a project walk its whole folder all the same (ADR 0028)
    journal_walk_every: int = 16
    #: brings of pulls and placements run on at most this many threads at once
    bring_workers: int = 4
    #: checkpoint a running project whose folder changed at most this often, in seconds (0: off; ADR 0047)
    autosave: float = DEFAULT_AUTOSAVE_S
    #: an unbound session not created, bound or unbound for this long expires, with its demand (ADR 0046)
    session_ttl: float = 3600.0
    #: fewer free bytes than this on the data folder: not ready, nothing new claimed (ADR 0051)
    min_free_space: int = 64 << 20
    #: the API's connection limits (tenure.pod.connections): request headers complete within this long
    header_timeout: float = 10.0
    #: a request body that sends nothing for this long is cut
    body_timeout: float = 30.0
    #: open API connections at most (lowered to leave descriptors free), and per client address
    max_connections: int = 1000
    max_connections_per_client: int = 100

    @property
    def endpoint(self) -> str:
        return self.public_url or f"http://{self.listen}"


class Intent(enum.Enum):
    """What a request needs of the project it names (:meth:`PodRuntime.route`)."""

    SERVE = "serve"
    BRING = "bring"
    LOCATE = "locate"
    LOCATE_LIVE = "locate-live"


@dataclass(frozen=True)
class Route:
    """Where a request for a project goes: exactly one of ``project``, ``redirect``, ``retry_after`` is set."""

    project: Project | None = None  #: served here (running here after the call), or go ahead here
    redirect: str | None = None  #: the live owner's endpoint
    retry_after: float | None = None  #: seconds until it may be claimable (dead owner, or placement deciding)
    reason: str = ""  #: with ``retry_after``: why, in one sentence
    ref: str = ""  #: with ``retry_after``: the project

    @classmethod
    def later(cls, project: Project, seconds: float, reason: str | None = None) -> Route:
        return cls(retry_after=seconds, reason=reason or f"project {project.ref} cannot be served yet", ref=project.ref)


@dataclass
class _Dark:
    attempts: int = 0
    next_at: float = 0.0
    #: a suspend left SUSPENDING (an engine that would not stop) to finish, rather than a bring to retry
    suspend: bool = False


class PodRuntime:
    """One pod: its row, its lock, its lifecycle service and its beat (see the module docstring)."""

    def __init__(
        self,
        config: ServeConfig,
        store: Store,
        objects: ObjectStore,
        *,
        engines: list[Engine] | None = None,
        identity: PodIdentity | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.objects = objects
        self.pod = identity or PodIdentity.fresh(endpoint=config.endpoint)
        self.metrics = metrics or Metrics()
        self.registry = ActivationRegistry()
        self.pods = PodRegistry(store)
        self.ownership = Ownership(store)
        #: where a request for a project another pod holds goes (P-54)
        self.facade = OwnershipFacade(store, self.pod, lease_ttl=config.lease_ttl, liveness_ttl=config.liveness_ttl)
        self.projects = ProjectStore(store)
        self.lifecycle = LifecycleService(
            store,
            objects,
            config.data_dir,
            self.pod,
            config=LifecycleConfig(lease_ttl=config.lease_ttl, engine_stop_timeout=config.engine_stop_timeout),
            engines=engines,
            registry=self.registry,
        )
        self.workspaces: WorkspaceService = self.lifecycle.workspaces
        for engine in engines or ():  # an engine that wants to keep projects in demand gets the handle
            attach = getattr(engine, "attach", None)
            if callable(attach):
                attach(DemandHandle(self.projects))
        #: restart reconciliation of this host's mounts, and the settling of a lost project's mount
        self.reconciler = Reconciler(self)
        #: lost work recorded in the store, expired and recovered (ADR 0044)
        self.keeper = DeltaKeeper(self)
        self.journals = FolderJournals(enabled=config.change_journal, walk_every=config.journal_walk_every)
        self.status = PodState.STARTING
        self._lock_fd: int | None = None
        #: the pod that held this data folder's lock before: dead, since we hold the lock now (ADR 0020)
        self._predecessor: str | None = None
        self._inflight: dict[str, Future[Project]] = {}
        self._inflight_lock = threading.Lock()
        self._dark: dict[str, _Dark] = {}
        self._stop = threading.Event()
        self._beat_thread: threading.Thread | None = None
        #: the pull and the retries of dark projects, off the beat thread (one at a time)
        self._background: threading.Thread | None = None
        #: brings of pulls and placements (bounded: a takeover of many projects does not start them all at once)
        self._brings = ThreadPoolExecutor(max_workers=max(1, config.bring_workers), thread_name_prefix="tenure-bring")
        self._last_renewal = 0.0
        #: no takeover before this moment (monotonic): the store-outage brake (:meth:`takeover_hold`)
        self._hold_until = 0.0
        self.space = DataSpace(config.data_dir, config.min_free_space)
        self._last_pull = 0.0
        self._last_delta_sweep = time.monotonic()  # the start-up reconciliation expires them first
        self._last_history_prune: float | None = None  # the first beat prunes, then hourly
        self._beats = 0
        self._lost_seen = 0
        #: each running project's autosave policy as its record says (``None``: the pod's default), read at
        #: its bring, when set through this pod, and again every POLICY_BEATS beats
        self._autosave_policy: dict[str, float | None] = {}
        #: the lifecycle type of each project brought here (an EPHEMERAL one is suspended once not in use)
        self._types: dict[str, LifecycleType] = {}
        #: until when (monotonic) this pod's last request-made demand of each project lasts
        self._request_demand: dict[str, float] = {}
        #: when each running project was last checkpointed here (monotonic; autosave's clock)
        self._saved_at: dict[str, float] = {}
        #: wall-clock times per running project: its last checkpoint here, and the first moment since then
        #: at which its folder may hold a change no checkpoint has (``saving``)
        self._checkpointed_at: dict[str, float] = {}
        self._unsaved_since: dict[str, float] = {}
        self.reconcile_report: Any = None
        #: the files API's writes against suspend, hand-over and close (tenure.pod.gate)
        self.gate = WriteGate()
        #: durable writes share checkpoints, one running per project (tenure.pod.durable)
        self.commits = GroupCommits(lambda tenant, name: self.checkpoint(tenant, name, reason="durable"))
        #: the master role: election in the beat, the distributor tick (ADR 0023)
        self.master = Master(self, store)
        #: the newest master epoch a placement request came with (older ones are refused)
        self.newest_epoch = 0
        #: what this pod sends other pods (placement requests); None when the API is open
        self._env_cluster_token = cluster_token()
        self._provisioned_token: str | None = None
        #: called when the store says this pod is DRAINING (``tenure pods drain``); default: drain here
        self.on_drain_requested: Callable[[], None] | None = None
        #: the projects the last drain could not hand over (kept here, released by lease expiry)
        self.drain_left: list[str] = []
        #: how a drain's wake-ups reach other pods: HTTP (None), or a callable (pods in one process)
        self.wake_transport: WakeTransport | None = None

    @property
    def cluster_token(self) -> str | None:
        """What this pod sends other pods: ``TENURE_CLUSTER_TOKEN`` when set, else the store's cluster
        credential once tokens exist (provisioned by the first pod that needs it, ADR 0048); ``None`` while
        the API is open."""
        if self._env_cluster_token:
            return self._env_cluster_token
        if self._provisioned_token is None:
            self._provisioned_token = TokenStore(self.store).cluster_credential()
        return self._provisioned_token

    def forget_cluster_token(self) -> None:
        """A pod refused the credential (rotated, revoked): read it again at the next request."""
        self._provisioned_token = None

    # ------------------------------------------------------------------ start / stop

    @property
    def pod_id(self) -> str:
        """This process's pod id (a fresh UUID per start)."""
        return self.pod.pod_id

    @property
    def ready(self) -> bool:
        """True once the pod is RUNNING (``/readyz``) with room in its data folder: only then is anything
        placed here (ADR 0051)."""
        return self.status is PodState.RUNNING and self.space.full is None

    def start(self, *, running: bool = True) -> None:
        """The start-up order of the module docstring; returns once the pod is RUNNING.

        ``running=False`` stops short of the last step: the pod stays STARTING (not ready, nothing placed
        here) until :meth:`mark_running`, which the daemon calls once its HTTP server listens.
        """
        self.pods.register(self.pod, labels=self.config.labels, capacity=self.config.capacity, status=PodState.STARTING)
        self.log("pod starting", endpoint=self.pod.endpoint, labels=self.config.labels)
        try:
            self._start_up()
            if running:
                self.mark_running()
        except BaseException:
            try:  # the row says so: a start-up that failed is STOPPED, never STARTING forever
                self.pods.transition(self.pod.pod_id, PodState.STARTING, PodState.STOPPED)
                self.status = PodState.STOPPED
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
            self._unlock_data_folder()
            raise

    def _start_up(self) -> None:
        self._lock_data_folder()
        # uploads a predecessor was receiving when it stopped: never complete, never acknowledged
        shutil.rmtree(os.path.join(self.config.data_dir, UPLOADS), ignore_errors=True)
        # a pod binds its object store (or checks it) before anything: one started with another object
        # folder than the cluster's is refused here (object-store-mismatch), before it restores or marks a thing
        self.workspaces.bind()
        self.pods.heartbeat(self.pod.pod_id)
        first = self.ownership.renew_leases(self.pod.pod_id)  # the pod lease exists before the first claim
        self._last_renewal = time.monotonic()
        self._lost_seen = first.lost if first is not None else 0
        adopted = self.adopt_predecessor()
        self.reconcile()
        self.projects.rederive_all()
        self._bring_adopted(adopted)
        if self.config.self_pull:
            self.pull(boot=True)

    def mark_running(self) -> None:
        """The last start-up step: RUNNING, so ``/readyz`` answers 200 and the master places projects here.

        Nothing happens unless the pod is still STARTING (a drain may have begun meanwhile).
        """
        if self.status is not PodState.STARTING:
            return
        self._set_status(PodState.RUNNING)
        self.log("pod running")

    def adopt_predecessor(self) -> list[Project]:
        """Take over at once the projects this host's previous pod held (ADR 0020); they are brought later.

        The data-folder lock proves the predecessor is dead, so its leases are
        not waited out (a deliberate exception to P-22's wait, which guards
        against a live predecessor). Another host's pod still waits for expiry.
        """
        prev = self._predecessor
        if prev is None:
            return []
        adopted: list[Project] = []
        for project in self.ownership.find_by_home_pod_id(prev):
            taken = self.ownership.adopt(project.tenant, project.name, self.pod.pod_id, self.pod.node_name, prev)
            if taken is None:
                continue
            self.log("adopted from the previous pod of this host", project=taken.ref, generation=taken.generation)
            self.lifecycle.mounts.adopted(taken)  # this host's folder, now under the new generation
            adopted.append(taken)
        try:
            status = PodState(self.pods.get(prev).status)
            if status is not PodState.STOPPED:
                self.pods.transition(prev, status, PodState.STOPPED)
        except TenureError:
            pass  # its row is gone, or it moved meanwhile: nothing to mark
        return adopted

    def _bring_adopted(self, adopted: list[Project]) -> None:
        for taken in adopted:
            current = self.projects.by_id(taken.id)
            self._keep_alive()
            try:
                if current.status in (ProjectStatus.INIT, ProjectStatus.RECOVERING, ProjectStatus.RUNNING):
                    self.bring(current.tenant, current.name)
                elif current.status is ProjectStatus.SUSPENDING:
                    self.suspend(current.tenant, current.name)  # a suspend the dead pod did not finish
            except Exception as exc:  # noqa: BLE001 - noted as reverse drift, retried by the beat
                self.log(
                    "finishing an adopted project failed", level=logging.WARNING, project=taken.ref, error=str(exc)
                )

    def reconcile(self) -> None:
        """Restart reconciliation of this host's mounts (:mod:`tenure.pod.reconcile`), before anything is served."""
        from tenure.mounts.report import write_report

        report = self.reconciler.run()
        self.reconcile_report = report
        try:  # for `tenure pods show` on this host; the run itself is already done
            write_report(self.config.data_dir, self.pod.pod_id, report.counts, expired_deltas=report.expired_deltas)
        except OSError as exc:
            self.log("the reconciliation report was not written", level=logging.WARNING, error=str(exc))
        for verdict, count in report.counts.items():
            self.metrics.reconcile.labels(verdict=verdict).inc(count)
        if report.counts or report.expired_deltas:
            self.log("reconciled", expired_deltas=report.expired_deltas, **report.counts)

    def run_beats(self) -> None:
        """Start the beat thread and the master's tick thread (daemons)."""
        # start-up just finished its work against the store: its length is no gap in touch (ADR 0050)
        self._last_renewal = time.monotonic()
        self._beat_thread = threading.Thread(target=self._beat_loop, name="tenure-beat", daemon=True)
        self._beat_thread.start()
        self.master.start()

    def _beat_loop(self) -> None:
        # a periodic pull finer than the beat gets ticks of its own between beats
        tick = min(self.config.beat_interval, self.config.pull_every or self.config.beat_interval)
        next_beat = time.monotonic() + self.config.beat_interval
        while not self._stop.wait(tick):
            try:
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.config.beat_interval
                    if self._beat_core():
                        self._in_background(self._after_beat)
                elif self.config.pull_every and self.ready:
                    if time.monotonic() - self._last_pull >= self.config.pull_every:
                        self._in_background(self.pull)
            except Exception as exc:  # noqa: BLE001 - a failed beat is logged and retried next beat
                self.metrics.beat_failures.inc()
                self.log("beat failed", level=logging.WARNING, error=str(exc))

    def stop(self) -> None:
        """Stop beating and release what is still held (best effort), then STOPPED and unlock."""
        self._stop.set()
        if self._beat_thread is not None and self._beat_thread is not threading.current_thread():
            self._beat_thread.join(timeout=self.config.beat_interval + 5)
        background = self._background
        if background is not None and background is not threading.current_thread():
            background.join(timeout=self.config.beat_interval + 5)
        self._brings.shutdown(wait=False, cancel_futures=True)
        self.master.stop()
        for project_id in list(self.registry.ids()):
            self.registry.remove(project_id)
        self.journals.close()
        try:
            self.ownership.release_leases(self.pod.pod_id)
            if self.status is not PodState.STOPPED:
                self._set_status(PodState.STOPPED)
        finally:
            self.lifecycle.trash.wait()
            self._unlock_data_folder()

    def _lock_data_folder(self) -> None:
        os.makedirs(self.config.data_dir, mode=0o700, exist_ok=True)
        try:  # workspaces, the store, preserved work: for the pod's own user only, whatever the file modes inside
            os.chmod(self.config.data_dir, 0o700)
        except PermissionError:
            self.log("the data folder is not this user's: its mode is left as it is", level=logging.WARNING)
        path = os.path.join(self.config.data_dir, "pod.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read_text(path)
            raise DataFolderLockedError(
                f"data folder {self.config.data_dir} is in use by another pod ({holder or 'unknown'})",
                path=path,
                holder=holder,
            ) from None
        previous = _read_text(path).split(" ")[0]
        self._predecessor = previous if previous and previous != self.pod.pod_id else None
        os.ftruncate(fd, 0)
        os.write(fd, f"{self.pod.pod_id} pid={os.getpid()}\n".encode())
        self._lock_fd = fd

    def _unlock_data_folder(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _set_status(self, status: PodState) -> None:
        self.pods.transition(self.pod.pod_id, self.status, status)
        self.status = status

    # ------------------------------------------------------------------ the beat

    def _in_background(self, work: Callable[[], object]) -> None:
        """Run ``work`` on the background thread unless it is still busy with the previous one.

        The beat thread only renews and checks drift: a pull or a retry that brings many projects (each
        a restore) must never hold up the renewal, or every lease bound to this pod would run out.
        """
        if self._background is not None and self._background.is_alive():
            return

        def guarded() -> None:
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - logged; retried at the next beat
                self.metrics.beat_failures.inc()
                self.log("background work failed", level=logging.WARNING, error=str(exc))

        self._background = threading.Thread(target=guarded, name="tenure-pull", daemon=True)
        self._background.start()

    def _keep_alive(self) -> None:
        """Renew the pod's lease between the steps of long start-up work (no beat thread runs yet)."""
        if self._beat_thread is not None or time.monotonic() - self._last_renewal < self.config.beat_interval:
            return
        self.pods.heartbeat(self.pod.pod_id)
        self.ownership.renew_leases(self.pod.pod_id)
        self._last_renewal = time.monotonic()

    def beat(self) -> None:
        """One heartbeat: load, renewal, drift both ways, the periodic pull — all before it returns.

        The beat thread runs the same steps, with the retries of dark projects and the pull handed to a
        background thread (:meth:`_in_background`), so a long pull never delays the next renewal.
        """
        if self._beat_core():
            self._after_beat()

    def _after_beat(self) -> None:
        """Reverse drift retried, autosave, then the periodic pull when due: the part of a beat that brings
        projects and writes checkpoints."""
        if self.workspaces.retry_abandons():  # a store that came back: no workspace stays CHECKPOINTING
            self.log("checkpoints still to abandon: the store refused again", level=logging.WARNING)
        self._retry_dark()
        if self._beats % POLICY_BEATS == 0:
            self._expire_demand()
        self._suspend_unused_ephemeral()
        self._settle_ghosts()
        self.keeper.record_pending()
        if self._beats % PRESERVED_GAUGE_BEATS == 1:
            self.keeper.refresh_gauge()
        self._track_unsaved()
        self._autosave()
        every = self.config.pull_every
        if every and self.ready and time.monotonic() - self._last_pull >= every:
            self.pull()

    def _beat_core(self) -> bool:
        """Heartbeat, renewal, a drain asked through the store, drift found, the master's beat, housekeeping.

        Returns whether the rest of the beat (:meth:`_after_beat`) should run.
        """
        started = time.perf_counter()
        running = self.registry.ids()
        self.journals.keep(running)
        score = self._score()
        refusing = self._check_space()
        self.pods.heartbeat(self.pod.pod_id, score=score, running=len(running), refusing=refusing)
        renewal = self.ownership.renew_leases(self.pod.pod_id)
        self._renewed()
        self.metrics.renew_seconds.observe(time.perf_counter() - started)
        self.metrics.beats.inc()
        self.metrics.running.set(len(running))
        self.metrics.score.set(score)
        self._beats += 1
        if renewal is None:
            return False  # STOPPED: nothing of ours to renew
        if self.status is PodState.RUNNING and renewal.status == PodState.DRAINING.value:
            self.log("drain requested through the store")
            if self.on_drain_requested is not None:
                self.on_drain_requested()
            else:
                self.drain()
            return False
        if renewal.lost != self._lost_seen:  # a takeover or a fence of one of ours: find which
            self.check_drift()
            self._lost_seen = renewal.lost  # only once every lost project was found: a failed check runs again
        if self.status is PodState.RUNNING:
            self.master.beat()
        # pod rows that hold nothing: silent for a day, or STOPPED for an hour (at the first beat, then every
        # quarter of that hour, so a STOPPED row goes within 1¼ hours of its stop)
        reap_every = max(1, int(REAP_STOPPED_AFTER_S / 4 / max(self.config.beat_interval, 1e-3)))
        if (self._beats - 1) % reap_every == 0:
            self.ownership.reap_pods(REAP_AFTER_S, stopped_age=REAP_STOPPED_AFTER_S)
        self._expire_deltas()
        self._prune_history()
        return True

    def _check_space(self) -> str | None:
        """The data folder's room, each beat (:mod:`tenure.pod.space`): why this pod claims nothing new, if so."""
        was = self.space.full
        now = self.space.check()
        self.metrics.disk_full.set(0 if now is None else 1)
        if now is not None and was is None:
            self.log("data folder full: not ready, claiming nothing new", level=logging.WARNING, reason=now)
        elif now is None and was is not None:
            self.log("data folder has room again: ready")
        return now

    def note_full(self, exc: BaseException) -> None:
        """Any ``disk-full`` (a restore's, the object folder's, the store's, a file write's) makes the data
        folder count as full until the next beat's probe finds room (:meth:`DataSpace.write_failed`)."""
        if isinstance(exc, TenureError) and exc.code == "disk-full":
            self.space.write_failed(exc.message)

    def _refuse_claim_if_full(self, ref: str) -> None:
        """A bring of a project this pod does not hold, while its data folder is full: ``disk-full``."""
        full = self.space.full
        if full is not None:
            raise DiskFullError(
                f"pod {self.pod.pod_id} claims nothing new while its data folder is full, so {ref} stays where"
                f" it is ({full})",
                project=ref,
                pod=self.pod.pod_id,
                hint="another pod takes it; free space on this pod's data folder",
            )

    def _renewed(self) -> None:
        """A renewal committed: after a gap of :data:`OUT_OF_TOUCH_BEATS` beats or more (the store was out of
        reach, or this pod was paused), hold takeovers for ``takeover_hold_beats`` beats (ADR 0050). Only
        with the beat thread running: a pod beaten by hand (tests, embedding) keeps its own time."""
        now = time.monotonic()
        beat = self.config.beat_interval
        gap = now - self._last_renewal
        if self._beat_thread is not None and self._last_renewal and gap > OUT_OF_TOUCH_BEATS * beat:
            self._hold_until = now + self.config.takeover_hold_beats * beat
            self.metrics.takeover_holds.inc()
            self.log(
                "renewed after a gap: takeovers held",
                level=logging.WARNING,
                gap_s=round(gap, 3),
                hold_s=round(self.config.takeover_hold_beats * beat, 3),
            )
        self._last_renewal = now

    def takeover_hold(self) -> float:
        """Seconds before this pod may take over a project whose owner went silent (0: now) — the store-outage
        brake (ADR 0050). Positive while this pod's beat has not renewed for :data:`OUT_OF_TOUCH_BEATS` beats
        (it cannot tell a dead owner from a store that failed them both), and for ``takeover_hold_beats``
        beats after it renews again: when the store was out of reach for every pod, the live ones renew in that
        time and nothing changes owner. A project nobody held is never held back by it."""
        now = time.monotonic()
        beat = self.config.beat_interval
        if (
            self._beat_thread is not None
            and self._last_renewal
            and now - self._last_renewal > OUT_OF_TOUCH_BEATS * beat
        ):
            return beat
        return max(0.0, self._hold_until - now)

    def saving(self, project_id: str) -> dict[str, float | None]:
        """How saved a project running here is: ``last_checkpoint_at`` (its last checkpoint on this pod) and
        ``unsaved_since`` (the first moment since then at which its folder may have changed; ``None`` while
        its change journal has seen nothing), both Unix times. Both ``None`` for a project not running here."""
        if project_id not in self.registry:
            return dict(NOT_KNOWN_HERE)
        return {
            "last_checkpoint_at": self._checkpointed_at.get(project_id),
            "unsaved_since": self._unsaved_since.get(project_id),
        }

    def _track_unsaved(self) -> None:
        """Note when each running project's folder first changed since its last checkpoint here, and set the
        gauge of the oldest such change. A project already known unsaved costs nothing; one without a
        journal yet (no checkpoint here since it was brought) counts as unsaved from the moment it is seen."""
        running = self.registry.ids()
        for table in (self._unsaved_since, self._checkpointed_at):
            for gone in set(table) - running:
                table.pop(gone, None)
        now = time.time()
        for project_id in running:
            if project_id not in self._unsaved_since and self.journals.changed(project_id):
                self._unsaved_since[project_id] = now
        oldest = min(self._unsaved_since.values(), default=None)
        self.metrics.oldest_unsaved.set(0.0 if oldest is None else max(0.0, now - oldest))

    def autosave_every(self, project_id: str) -> float:
        """The autosave period of a project running here: its own policy, else the pod's default (0: off)."""
        policy = self._autosave_policy.get(project_id)
        return self.config.autosave if policy is None else policy

    def note_policy(self, project: Project) -> None:
        """The project's record changed through this pod (its autosave policy, its type): use it from now on."""
        if project.id in self.registry:
            self._autosave_policy[project.id] = project.autosave
            self._types[project.id] = project.lifecycle_type

    def _refresh_policies(self) -> None:
        """Every POLICY_BEATS beats, the autosave policies of the projects held here as the store has them
        (one read), so a policy set through another pod or the CLI takes effect within that many beats."""
        if self._beats % POLICY_BEATS != 0:
            return
        held = {p.id: p for p in self.ownership.find_by_home_pod_id(self.pod.pod_id)}
        for project_id in list(self._autosave_policy):
            if project_id in held:
                self._autosave_policy[project_id] = held[project_id].autosave
                self._types[project_id] = held[project_id].lifecycle_type
            elif project_id not in self.registry:
                self._autosave_policy.pop(project_id, None)
                self._types.pop(project_id, None)

    def _autosave(self) -> None:
        """Checkpoint each project running here whose folder changed, at most every :meth:`autosave_every`
        seconds (its own policy, else ``tenure serve --autosave``; 0 off).

        A project is due that many seconds after it was brought or last checkpointed here; a due project
        whose change journal saw nothing costs one drain of its journal and no store work.
        """
        self._refresh_policies()
        if self.config.autosave <= 0 and not any(v for v in self._autosave_policy.values()):
            return
        now = time.monotonic()
        running = self.registry.ids()
        for gone in set(self._saved_at) - running:
            self._saved_at.pop(gone, None)
        for project_id in sorted(running):
            every = self.autosave_every(project_id)
            since = self._saved_at.setdefault(project_id, now)
            if every <= 0 or now - since < every or self._stop.is_set():
                continue
            if not self.journals.changed(project_id):
                self._saved_at[project_id] = now
                continue
            started = time.perf_counter()
            try:
                project = self.projects.by_id(project_id)
                self.checkpoint(project.tenant, project.name, reason="autosave")
            except Exception as exc:  # noqa: BLE001 - retried at the next beat; the folder keeps the writes
                self.log("autosave failed", level=logging.WARNING, project=project_id, error=str(exc))
                continue
            self.metrics.autosave_seconds.observe(time.perf_counter() - started)

    def _expire_deltas(self) -> None:
        """Preserved deltas past the recovery window go, checked hourly (or 4 times a window, if shorter)."""
        every = min(DELTA_SWEEP_S, self.config.recovery_window / 4)
        if time.monotonic() - self._last_delta_sweep < every:
            return
        self._last_delta_sweep = time.monotonic()
        expired = self.reconciler.expire_deltas()
        if expired:
            self.log("preserved deltas past the recovery window deleted", count=expired)
        try:
            ended = self.keeper.expire()
        except TenureError as exc:
            self.log("preserved deltas past the window not ended in the store", level=logging.WARNING, error=str(exc))
        else:
            if ended:
                self.log("preserved deltas past the recovery window ended in the store", count=ended)

    def _prune_history(self) -> None:
        """Ownership timeline retention, at most hourly: events older than ``history_days`` go, except the
        newest of each project. A failure is logged; the beat goes on."""
        if self._last_history_prune is not None and time.monotonic() - self._last_history_prune < HISTORY_PRUNE_S:
            return
        self._last_history_prune = time.monotonic()
        try:
            pruned = self.lifecycle.timeline.prune(self.config.history_days, DEFAULT_KEEP_PER_PROJECT)
        except Exception as exc:  # noqa: BLE001 - retention can wait for the next hour
            self.log("timeline retention failed", level=logging.WARNING, error=str(exc))
            return
        if pruned:
            self.log("timeline events past the retention deleted", count=pruned)

    def check_drift(self) -> None:
        """Deactivate what runs here without our lease (forward); note what we hold but do not run (reverse)."""
        held = {p.id: p for p in self.ownership.find_by_home_pod_id(self.pod.pod_id)}
        for project_id in self.registry.ids() - set(held):
            self._lost(project_id)
        for project_id, project in held.items():
            if project_id not in self.registry and project.ref not in self._inflight and project_id not in self._dark:
                if project.status in (ProjectStatus.INIT, ProjectStatus.RECOVERING, ProjectStatus.RUNNING):
                    self._dark[project_id] = _Dark()
                    self._event(project, EventKind.DRIFT_REVERSE)

    def _lost(self, project_id: str) -> None:
        project = self.projects.by_id(project_id)
        closed = project.status is ProjectStatus.CLOSED
        self.lifecycle.deactivate(project)
        self.metrics.drift.labels(direction="forward").inc()
        mount = self.lifecycle.mounts.current(project)
        verdict = "no-mount-record"
        try:
            if mount is None:
                self.lifecycle.keep_lost_folder(project, "closed elsewhere" if closed else "the lease was taken over")
            else:
                verdict = self.reconciler.settle(mount).value
                self.metrics.reconcile.labels(verdict=verdict).inc()
        except Exception as exc:  # noqa: BLE001 - the record stays; the next start's reconciliation settles it
            verdict = "unsettled"
            self.log(
                "the lost project's mount was not settled; the next start reconciles it",
                level=logging.WARNING,
                project=project.ref,
                error=str(exc),
            )
        self._event(project, EventKind.DRIFT_FORWARD, closed=closed, verdict=verdict)
        self.log(
            "lease lost: deactivated",
            project=project.ref,
            generation=project.generation,
            closed=closed,
            verdict=verdict,
        )

    def demanded_by_request(self, project: Project) -> None:
        """A mutating request that needs the folder (a file write or delete, a checkpoint) keeps an AUTO or EPHEMERAL
        project in demand for REQUEST_DEMAND_S; the record is written again only once the one this pod
        wrote is within half of that of its end (no transaction per request)."""
        if project.lifecycle_type not in (LifecycleType.AUTO, LifecycleType.EPHEMERAL):
            return
        now = time.monotonic()
        if self._request_demand.get(project.id, 0.0) > now + REQUEST_DEMAND_S / 2:
            return
        self.projects.add_demand(project.tenant, project.name, REQUEST_SOURCE, REQUEST_DEMAND_S)
        self._request_demand[project.id] = now + REQUEST_DEMAND_S

    def _expire_demand(self) -> None:
        """Demand records past their end and idle unbound sessions go (any pod may; flags re-derived)."""
        try:
            gone = self.projects.expire_demand(self.config.session_ttl)
        except TenureError as exc:
            self.log("expired demand not removed", level=logging.WARNING, error=str(exc))
            return
        if gone:
            self.log("expired demand and idle sessions removed", count=gone)

    def _suspend_unused_ephemeral(self) -> None:
        """An EPHEMERAL project running here with neither a session nor demand left is suspended (P-117)."""
        for project_id in sorted(self.registry.ids()):
            if self._types.get(project_id) is not LifecycleType.EPHEMERAL or self._stop.is_set():
                continue
            try:
                project = self.projects.by_id(project_id)
                if project.lifecycle_type is not LifecycleType.EPHEMERAL or self.projects.in_demand(project):
                    self._types[project_id] = project.lifecycle_type
                    continue
                self.suspend(project.tenant, project.name)
            except TenureError as exc:
                self.log("an unused EPHEMERAL project was not suspended", level=logging.WARNING, error=str(exc))
                continue
            self._request_demand.pop(project_id, None)
            self.log("an EPHEMERAL project no longer in use suspended", project=project.ref)

    def _settle_ghosts(self) -> None:
        """No lost project stays MOUNTED here. A project that ran in this process and runs here no more, whose
        mount at the generation it ran under is still live while the store says another pod holds it (or a
        newer generation, or a revoked lease), is settled as a lost lease's would be — whatever left it: a
        drift check that failed half-way, a settle the store could not answer, a pod resumed after a pause.
        One the store cannot judge now is tried again next beat. Mounts of other processes on this data
        folder (the CLI's short-lived pods) and of projects being brought, suspended or handed over here are
        left alone."""
        ran = self.registry.ran()
        if not ran:
            return
        running = self.registry.ids()
        live = {
            m.project_id: m
            for m in self.lifecycle.mounts.store.list()
            if m.project_id in ran and m.state in (MountState.MOUNTED, MountState.CHECKPOINTING)
        }
        for project_id, generation in ran.items():
            if project_id in running:
                continue
            mount = live.get(project_id)
            if mount is None or mount.generation != generation:
                self.registry.forget(project_id)  # nothing of it left live here
                continue
            if project_id in self._dark or mount.project_ref in self._inflight:
                continue
            facts = self.reconciler.authority(mount)
            if not isinstance(facts, Authority):
                continue  # the store cannot answer now: the next beat asks again
            if facts.generation == mount.generation and facts.project_lease in (
                ProjectLease.HELD,  # ours, at this generation: a suspend or a hand-over is under way
                ProjectLease.EXPIRED,  # nobody else has it: a bring (here or elsewhere) decides, not this sweep
            ):
                continue
            try:
                verdict = self.reconciler.settle(mount).value
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                self.log("a lost mount was not settled", level=logging.WARNING, mount=mount.id, error=str(exc))
                continue
            self.metrics.reconcile.labels(verdict=verdict).inc()
            self.log("a lost project's mount settled", project=mount.project_ref, mount=mount.id, verdict=verdict)

    def _retry_dark(self) -> None:
        now = time.monotonic()
        for project_id, dark in list(self._dark.items()):
            if dark.next_at > now:
                continue
            try:
                project = self.projects.by_id(project_id)
            except TenureError:
                self._dark.pop(project_id, None)
                continue
            if dark.suspend:
                self._retry_suspend(project, dark, now)
                continue
            if project_id in self.registry or project.status not in (
                ProjectStatus.INIT,
                ProjectStatus.RECOVERING,
                ProjectStatus.RUNNING,
            ):
                self._dark.pop(project_id, None)
                continue
            self.metrics.drift.labels(direction="reverse").inc()
            try:
                self.bring(project.tenant, project.name)
                self._dark.pop(project_id, None)
            except Exception as exc:  # noqa: BLE001 - counted, retried with backoff, then released
                dark.attempts += 1
                if dark.attempts >= self.config.bring_retries:
                    self._dark.pop(project_id, None)
                    self.ownership.release_lease(project.tenant, project.name, self.pod.pod_id)
                    self._event(project, EventKind.RELEASE, reason="bring kept failing", error=str(exc))
                    self.log("bring kept failing: lease released", project=project.ref, error=str(exc))
                else:
                    dark.next_at = now + self.config.bring_backoff * 2 ** (dark.attempts - 1)
                    self.log("bring failed: will retry", project=project.ref, error=str(exc))

    def _retry_suspend(self, project: Project, dark: _Dark, now: float) -> None:
        """Finish a suspend an engine stop failed: retried with backoff; the last attempt stops best effort."""
        if project.status is not ProjectStatus.SUSPENDING or not self.ownership.holds(
            project.id, self.pod.pod_id, self.config.lease_ttl
        ):
            self._dark.pop(project.id, None)
            return
        last = dark.attempts + 1 >= self.config.bring_retries
        try:
            self.suspend(project.tenant, project.name, force_stop=last)
            self._dark.pop(project.id, None)
        except Exception as exc:  # noqa: BLE001 - retried with backoff
            dark.attempts += 1
            dark.next_at = now + min(MAX_RETRY_BACKOFF_S, self.config.bring_backoff * 2 ** (dark.attempts - 1))
            self.log("suspend failed: will retry", project=project.ref, error=str(exc), forced=last)

    # ------------------------------------------------------------------ pull

    def _score(self) -> float:
        """Σ placement scores of what this pod holds, as the store sums them (P-106): a score changed while a
        project runs here counts at once, and so does a project held but not (yet) running here."""
        return self.ownership.sum_score_by_home_pod_id(self.pod.pod_id)

    def _fair_share(self, capacity: float, held: float) -> float:
        """This pod's share of the cluster's load, by capacity (ADR 0052), ``held`` being what it holds itself:
        ``capacity × (Σ scores held by the live RUNNING pods and this one + Σ scores of the projects needing an
        owner) / (capacity + Σ those pods' capacities)``. Alone, a pod's share is everything that needs an owner;
        beside live pods, the boot pull leaves the rest to the master, which places by utilization."""
        others = [
            pod
            for pod, live in self.pods.list_with_liveness(self.config.liveness_ttl)
            if live and pod.id != self.pod.pod_id and pod.status == PodState.RUNNING.value and pod.refusing is None
        ]
        load = held + sum(pod.score for pod in others)
        load += self.ownership.score_needing_owner(self.config.lease_ttl)
        total = capacity + sum(pod.capacity for pod in others)
        return capacity * load / total if total > 0 else 0.0

    def headroom(self, capacity: float | None = None) -> float:
        """Capacity left on this pod, by the score model (P-127): capacity − Σ scores of held projects."""
        return room(self.config.capacity if capacity is None else capacity, self._score())

    def pull(self, *, boot: bool = False) -> list[Project]:
        """Claim and bring projects needing an owner whose selector matches this pod, up to the cap.

        Eligibility and headroom come from this pod's own row (P-80, P-81): no row (or a pod that is
        not STARTING or RUNNING), nothing is pulled. The cap (P-77, ADR 0052): at boot, what this pod
        holds may grow to min(pull_factor × its fair share (:meth:`_fair_share`), capacity); later pulls
        take up to the headroom.
        """
        self._last_pull = time.monotonic()
        if self.takeover_hold() > 0:
            return []  # the store-outage brake: the silent owners may only have been cut off with us
        if self.space.full is not None:
            return []  # no room to restore what it would claim (ADR 0051)
        try:
            row = self.pods.get(self.pod.pod_id)
        except TenureError:
            return []
        if row.status not in (PodState.STARTING.value, PodState.RUNNING.value):
            return []
        labels, capacity = row.labels, row.capacity
        held = self._score()  # one read of the store's sum, for the headroom and the fair share both
        budget = room(capacity, held)
        if boot:
            # at least one project's worth (a score of 1): a fair share smaller than one project still brings one
            share = self.config.pull_factor * self._fair_share(capacity, held) - held
            budget = min(max(share, 1.0), budget)
        brought: list[Project] = []
        # paged by key, never by OFFSET: what this pull brings leaves the set it pages over (P-83)
        cursor: NeedingOwnerCursor | None = None
        while budget > 0 and not self._stop.is_set():
            page, cursor = self.ownership.page_projects_needing_owner(self.config.lease_ttl, PULL_PAGE, cursor)
            if not page:
                break
            chosen: list[Project] = []
            for candidate in page:
                if candidate.placement_score > budget:
                    continue
                if not selector_matches(candidate.placement_selector, labels):
                    continue
                chosen.append(candidate)
                budget -= candidate.placement_score
                if budget <= 0:
                    break
            # a page's brings run side by side (bring_workers at most); a failed one gives its score back
            futures = [(c, self._brings.submit(self.bring, c.tenant, c.name)) for c in chosen]
            for candidate, future in futures:
                try:
                    brought.append(future.result())
                except ClaimRejectedError:
                    budget += candidate.placement_score  # another pod was faster: the claim decides
                except Exception as exc:  # noqa: BLE001 - one project must not stop the pull
                    budget += candidate.placement_score
                    self.log("pull: bring failed", level=logging.WARNING, project=candidate.ref, error=str(exc))
                self._keep_alive()
            if len(page) < PULL_PAGE:
                break  # the last page
        if brought:
            self.log("pulled", count=len(brought), boot=boot)
        return brought

    # ------------------------------------------------------------------ lifecycle, single-flight

    def bring(
        self, tenant: str, name: str, *, from_snapshot: str | None = None, project: Project | None = None
    ) -> Project:
        """Bring the project here; concurrent calls for one project share one bring.

        ``project`` is its record when the caller has just read it (the bring then does not read it again).
        """
        key = f"{tenant}/{name}"
        with self._inflight_lock:
            running = self._inflight.get(key)
            if running is None:
                future: Future[Project] = Future()
                self._inflight[key] = future
        if running is not None:
            return running.result()
        try:
            if self.space.full is not None:  # read only then: a bring costs no extra read while there is room
                known = project if project is not None else self.projects.get(tenant, name)
                if known.id not in self.registry:
                    self._refuse_claim_if_full(known.ref)
            try:
                project = self.lifecycle.bring(tenant, name, from_snapshot=from_snapshot, project=project)
            except BaseException as exc:
                self.note_full(exc)
                self._note_dark(tenant, name)
                raise
            self._autosave_policy[project.id] = project.autosave
            self._types[project.id] = project.lifecycle_type
            self.metrics.brings.labels(result="ok").inc()
            self.log("brought", project=project.ref, generation=project.generation)
            future.set_result(project)
            return project
        except BaseException as exc:
            self.metrics.brings.labels(result=getattr(exc, "code", type(exc).__name__)).inc()
            future.set_exception(exc)
            raise
        finally:
            with self._inflight_lock:
                self._inflight.pop(key, None)

    def _note_stuck_suspend(self, tenant: str, name: str) -> None:
        """A suspend failed with the project left SUSPENDING on this pod: the beat finishes it."""
        try:
            project = self.projects.get(tenant, name)
            if (
                project.status is ProjectStatus.SUSPENDING
                and project.id not in self._dark
                and self.ownership.holds(project.id, self.pod.pod_id, self.config.lease_ttl)
            ):
                self._dark[project.id] = _Dark(next_at=time.monotonic() + self.config.bring_backoff, suspend=True)
        except TenureError:
            pass

    def _note_dark(self, tenant: str, name: str) -> None:
        """A bring failed after its claim: the project is held here but not running (reverse drift)."""
        try:
            project = self.projects.get(tenant, name)
            if project.id not in self._dark and self.ownership.holds(
                project.id, self.pod.pod_id, self.config.lease_ttl
            ):
                self._dark[project.id] = _Dark(next_at=time.monotonic() + self.config.bring_backoff)
        except TenureError:
            pass

    def suspend(self, tenant: str, name: str, *, force_stop: bool = False) -> Project:
        """Suspend the project (single lifecycle call under its write gate).

        One left SUSPENDING (an engine that did not stop) is retried by the beat with backoff, the last
        attempt stopping the engines best effort (``force_stop``), so it never stays SUSPENDING.
        """
        try:
            with self.gate.closing(self.projects.get(tenant, name).id):
                project = self.lifecycle.suspend(tenant, name, force_stop=force_stop)
        except BaseException as exc:
            self.metrics.suspends.labels(result=getattr(exc, "code", type(exc).__name__)).inc()
            self._note_stuck_suspend(tenant, name)
            raise
        self.metrics.suspends.labels(result="ok").inc()
        self.log("suspended", project=project.ref, generation=project.generation)
        return project

    def close(self, tenant: str, name: str) -> Project:
        with self.gate.closing(self.projects.get(tenant, name).id):
            project = self.lifecycle.close(tenant, name)
        self.log("closed", project=project.ref, generation=project.generation)
        return project

    def checkpoint(self, tenant: str, name: str, reason: str = "manual") -> Any:
        """Checkpoint a project running here under its writer lease now.

        It holds the project's write gate like a file write: a suspend,
        hand-over or close waits for it, and one already under way refuses
        it with ``project-quiescing`` (retryable) instead of letting the two
        race on the workspace machine.
        """
        project = self.projects.get(tenant, name)
        started = time.perf_counter()
        with self.gate.writing(project.id, project.ref):
            # asked inside the gate: an ending operation is done with it; and under the generation the
            # project runs under here, never the store's newest (another pod's, after a takeover)
            project = self._as_running_here(project)
            self.journals.keep(self.registry.ids())
            interval = self.journals.interval(project.id, project.generation, self.lifecycle.folder(project))
            try:
                result = self.lifecycle.checkpoint_running(project, interval=interval, reason=reason)
            except BaseException as exc:
                self.note_full(exc)
                raise
        self._saved_at[project.id] = time.monotonic()
        self._checkpointed_at[project.id] = time.time()
        self._unsaved_since.pop(project.id, None)
        self.metrics.checkpoint_seconds.observe(time.perf_counter() - started)
        self.metrics.checkpoint_bytes.inc(getattr(result, "bytes_uploaded", 0) or 0)
        return result

    def _as_running_here(self, project: Project) -> Project:
        """``project`` at the generation it runs under on this pod (its engines', its writer lease's).

        A checkpoint or hand-over must use that generation, never the one the store holds now: after a
        takeover the store's generation is the new owner's, and its writer lease would let this pod's
        folder be published as the new owner's work. With this pod's own generation the store's fence
        refuses it (``stale-generation``). Raises ``not-running-here`` when it does not run here.
        """
        running = self.registry.generation(project.id)
        if running is None:
            raise ConflictError(
                f"project {project.ref} does not run on this pod", code="not-running-here", project=project.ref
            )
        return project if running == project.generation else replace(project, generation=running)

    def route(self, tenant: str, name: str, *, intent: Intent = Intent.SERVE, project: Project | None = None) -> Route:
        """Where a request for the project goes (P-50, P-26, P-54): here, the live owner, or later.

        The one routing decision of the pod. ``intent`` says what the request needs:

        * ``SERVE`` (files, checkpoint, a session bind): the project running here, brought here first when
          nobody holds it; CLOSED, HOMELESS and SUSPENDED projects are refused (P-92: a suspend is what a
          user or policy asked for, so a request that needs the workspace fails instead of bringing it back);
        * ``BRING`` (an explicit bring): ``SERVE``, and a SUSPENDED project is brought back;
        * ``LOCATE`` (a suspend, a bring from a snapshot): nothing is claimed or brought; a project held by
          another live pod is redirected there, one whose silent owner's lease still runs waits;
        * ``LOCATE_LIVE`` (a close): ``LOCATE``, but a silent owner is not waited for.

        ``project`` is the record when the caller has just read it (saves a read).
        """
        if project is None:
            project, owner = self.ownership.project_with_owner(tenant, name, self.config.lease_ttl)
        else:
            owner = self.ownership.owner(project.id, self.config.lease_ttl)
        if intent in (Intent.LOCATE, Intent.LOCATE_LIVE):
            return self._locate(project, owner, wait_for_silent=intent is Intent.LOCATE)
        refuse_unservable(project.ref, project.status, project.lifecycle_type, suspended_ok=intent is Intent.BRING)
        mine = owner.live and owner.pod_id == self.pod.pod_id
        if mine and project.id in self.registry:
            return Route(project=project)
        if owner.live and not mine:
            return self._to_holder(project, owner)
        if owner.pod_id is not None and not mine:
            hold = self.takeover_hold()
            if hold > 0:  # the store-outage brake: its silent owner may renew within a beat
                return Route.later(project, hold)
        if self.space.full is not None:  # no room to restore it here (ADR 0051): another pod may take it
            return Route.later(
                project,
                self.config.beat_interval,
                f"project {project.ref} is not served by pod {self.pod.pod_id}, whose data folder is full",
            )
        if not self.ready or not selector_matches(project.placement_selector, self.config.labels):
            return Route.later(project, self.config.beat_interval)
        try:
            return Route(project=self.bring(tenant, name, project=project))
        except ClaimRejectedError:
            pass  # another pod was faster: the claim decided, so ask who won
        project, owner = self.ownership.project_with_owner(tenant, name, self.config.lease_ttl)
        return self._to_holder(project, owner)

    def _to_holder(self, project: Project, owner: Owner) -> Route:
        """A project another pod holds: its live endpoint, or when its lease may have run out."""
        held = self.facade.holder_answer(owner)
        if held.redirect is not None:
            return Route(redirect=held.redirect)
        return Route.later(project, max(1.0, held.retry_after or 1.0))

    def _locate(self, project: Project, owner: Owner, *, wait_for_silent: bool) -> Route:
        """A live owner on another pod (redirect), a silent one whose lease runs (wait), or go ahead here."""
        if not owner.live or owner.pod_id == self.pod.pod_id or owner.pod_id is None:
            return Route(project=project)
        held = self.facade.holder_answer(owner)
        if held.redirect is not None:
            return Route(redirect=held.redirect)
        if not wait_for_silent:
            return Route(project=project)
        return Route.later(
            project,
            owner.expires_in or 1.0,
            f"project {project.ref} is held by a pod that is not answering; its lease has not run out",
        )

    def start_drain(self) -> None:
        """Drain in the background: through :attr:`on_drain_requested` (the daemon then exits), or
        :meth:`drain` on a thread of its own."""
        hook = self.on_drain_requested
        if hook is not None:
            hook()
            return

        def run() -> None:
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - logged; the pod's leases then end by expiry
                log.exception("drain failed", extra={"tenure": {"pod": self.pod.pod_id}})

        threading.Thread(target=run, name="tenure-drain", daemon=True).start()

    # ------------------------------------------------------------------ drain

    def accept_placement(self, tenant: str, name: str, epoch: int) -> Project:
        """A placement request from the master at ``epoch``: checked, then brought in the background.

        Refused with ``stale-epoch`` when a newer epoch has placed here
        before, or when the store holds no placement of the project on this
        pod at that epoch (a deposed master's placement never reached the
        store); with ``pod-not-running`` unless this pod is RUNNING; with ``disk-full`` while its data folder is
        full (ADR 0051). The bring
        claims with the normal compare-and-swap: a project another pod took
        meanwhile is simply not brought.
        """
        project = self.projects.get(tenant, name)
        self.master.check_placement(project.id, epoch, self.newest_epoch)
        self.newest_epoch = max(self.newest_epoch, epoch)
        self._refuse_claim_if_full(project.ref)  # a placement made before this pod's beat said it was full
        self._brings.submit(self._bring_placed, tenant, name)
        return project

    def accept_placements(self, items: list[tuple[str, str]], epoch: int) -> list[TenureError | None]:
        """:meth:`accept_placement` for each ``(tenant, name)`` of one request of the master (ADR 0053): per
        item None (accepted, brought in the background) or the error that refused it."""
        answers: list[TenureError | None] = []
        for tenant, name in items:
            try:
                self.accept_placement(tenant, name, epoch)
                answers.append(None)
            except TenureError as exc:
                answers.append(exc)
        return answers

    def _bring_placed(self, tenant: str, name: str) -> None:
        try:
            self.bring(tenant, name)
        except ClaimRejectedError:
            pass  # another pod won the claim: the CAS decided
        except Exception as exc:  # noqa: BLE001 - logged; the project stays unowned and the master retries
            self.log("placed bring failed", level=logging.WARNING, project=f"{tenant}/{name}", error=str(exc))

    def drain(self) -> list[str]:
        """DRAINING; each project: engines stopped, checkpoint, folder removed, lease released; then STOPPED.

        Returns the projects handed over. A project whose checkpoint fails keeps its lease and its
        folder (nothing is lost); it is released only by lease expiry, and is listed in
        :attr:`drain_left` (``tenure serve`` then exits non-zero). After each release the master is woken
        (:class:`tenure.cluster.handoff.HandoffNotifier`), so the project's new owner brings it at once.
        """
        if self.status is PodState.RUNNING or self.status is PodState.STARTING:
            try:
                self._set_status(PodState.DRAINING)
            except ConflictError:  # already marked DRAINING in the store (tenure pods drain)
                self.status = PodState.DRAINING
        self.log("draining")
        self.master.resign()
        notifier = HandoffNotifier(
            self.store,
            self.pod.pod_id,
            liveness_ttl=self.config.liveness_ttl,
            token=lambda: self.cluster_token,
            forget_token=self.forget_cluster_token,
            transport=self.wake_transport,
        )
        moved: list[str] = []
        self.drain_left = []
        try:
            for project_id in sorted(self.registry.ids()):
                project = self.projects.by_id(project_id)
                try:
                    with self.gate.closing(project_id):
                        self.lifecycle.hand_over(self._as_running_here(project))
                    notifier.poke()  # its new owner brings it now, not at the next tick (ADR 0049)
                    moved.append(project.ref)
                    self._event(project, EventKind.DRAIN)
                    self.log("handed over", project=project.ref, generation=project.generation)
                except Exception as exc:  # noqa: BLE001 - the next project must still be drained
                    self.drain_left.append(project.ref)
                    self.log("hand-over failed", level=logging.WARNING, project=project.ref, error=str(exc))
        finally:
            notifier.close()
        self._stop.set()
        self._set_status(PodState.STOPPED)
        self.log("stopped", handed_over=len(moved), left_behind=len(self.drain_left))
        return moved

    # ------------------------------------------------------------------ logs

    def _event(self, project: Project, kind: EventKind, **detail: Any) -> None:
        """Record ``kind`` on the project's timeline for this pod (best effort: never raises)."""
        self.lifecycle.timeline.record(
            None, project.id, kind, pod_id=self.pod.pod_id, generation=project.generation, **detail
        )

    def log(self, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
        log.log(level, message, extra={"tenure": {"pod": self.pod.pod_id, **fields}})


@contextmanager
def started(node: PodRuntime) -> Iterator[PodRuntime]:
    """Start a node and its beat; stop it on exit (tests and embedding)."""
    node.start()
    node.run_beats()
    try:
        yield node
    finally:
        node.stop()


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


Hook = Callable[[], None]
