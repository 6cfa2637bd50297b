"""The master role of one pod: election in the beat, the distributor tick and the stale-bind sweep (ADR 0023).

**Election.** Every RUNNING pod tries, in its beat, to take the master lease
(:class:`tenure.cluster.store.ClusterStore`) when it is free or run out by
the store clock; the holder renews it in its beat. Taking it raises the
epoch. A master whose renewal fails (it ran out, another pod took it) is
deposed at once and stops placing. A draining or stopping pod resigns.

**The tick** (``tenure serve --tick``, SPEC §8 default 60 s), on the master
only (P-84):

1. the eligible pods: RUNNING, live by their own heartbeat (the pod liveness
   TTL), with their labels, capacity and score — the scores of the projects
   they hold in the store plus the placements this master made that are not
   claimed yet;
2. the projects needing an owner, read a page at a time by the same index
   range scans as the self-pull (P-87, P-88), paged by key (each page after
   the last project read, P-83: the set shrinks as the tick places);
3. for each — the most constrained first (fewest pods it may go to), then
   the largest —, the eligible pod with room whose utilization is lowest (the
   score model, :mod:`tenure.cluster.placement`, P-89, P-127); the
   placement row is written under the master's epoch (refused by the store
   if the master was deposed: the tick stops), then the pod is asked to
   bring the project (``POST /api/v1/cluster/place`` with the epoch; the pod
   checks the store's placement row and that no newer epoch has placed,
   then claims with the normal compare-and-swap and brings);
4. what fits nowhere is marked pending placement (its ``pending_since``
   kept from the first miss) and reported as demand; retried next tick;
5. at most ``--max-moves`` placements per tick (a tick that reached it is
   followed by the next at once: the limit bounds a tick's length, not the
   rate of placements);
6. the stale-bind sweep (P-51): the sessions of projects that have no live
   owner are unbound.

A tick also runs at once when it is woken (:meth:`Master.wake`, ``POST
/api/v1/cluster/wake``): a draining pod wakes the master after each project
it releases, so a hand-over waits for no tick (a pod without the role that
is woken takes it first if it is free: the draining pod resigned it).

The next tick runs early when a pod lease (or a project's own lease) runs
out before it unless renewed — a live pod renews long before, a dead one's
runs out then — so a takeover does not wait for a whole tick. Correctness never rests
on the master (P-86): two pods placing at once, or a placement racing a
self-pull, end in one claim winning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from prometheus_client import Counter, Gauge, Histogram

from tenure.cluster.placement import PodLoad, choose, selector_matches
from tenure.cluster.store import ClusterStore, StaleEpochError
from tenure.errors import ConflictError, NotFoundError, TenureError
from tenure.projects.ownership import NeedingOwnerCursor, Ownership
from tenure.projects.pods import PodRegistry
from tenure.projects.records import Project
from tenure.projects.store import ProjectStore
from tenure.states import PodState
from tenure.store import Store

__all__ = [
    "Master",
    "MasterMetrics",
    "MasterSettings",
    "PodHandle",
    "TickReport",
    "PLACE_PATH",
    "WAKE_PATH",
    "post_as_cluster",
]

log = logging.getLogger("tenure.serve")

#: where a pod takes placement requests
PLACE_PATH = "/api/v1/cluster/place"
#: where a pod is asked to run the master's tick now (a hand-over: tenure.cluster.handoff)
WAKE_PATH = "/api/v1/cluster/wake"
#: projects read per page of the needing-owner scan
PAGE = 500


@dataclass
class TickReport:
    """What one tick did."""

    epoch: int
    placed: int = 0
    pending: int = 0
    skipped_in_flight: int = 0
    unbound_sessions: int = 0
    #: placements the target refused or did not answer (never counted in ``placed``)
    asked_failed: int = 0
    deposed: bool = False
    #: seconds the tick was put off by the store-outage brake (ADR 0050; nothing placed), else 0
    held: float = 0.0
    seconds: float = 0.0
    placements: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["placements"] = [{"project": p, "pod": q} for p, q in self.placements]
        return data


def post_as_cluster(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    token: Callable[[], str | None],
    forget: Callable[[], None],
) -> httpx.Response:
    """POST ``body`` to another pod with the cluster credential (``token()``); on a 401 — tokens appeared, or
    the credential was rotated — ``forget()`` it and send once more with the one read again. Raises
    :class:`httpx.HTTPError` when the pod cannot be reached."""
    for _ in range(2):
        secret = token()
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        response = client.post(url, json=body, headers=headers)
        if response.status_code != 401:
            break
        forget()
    return response


class MasterSettings(Protocol):
    """The pod settings the master reads (``tenure serve`` options)."""

    @property
    def master(self) -> bool: ...
    @property
    def master_ttl(self) -> float | None: ...
    @property
    def lease_ttl(self) -> float: ...
    @property
    def liveness_ttl(self) -> float: ...
    @property
    def beat_interval(self) -> float: ...
    @property
    def tick(self) -> float: ...
    @property
    def max_moves(self) -> int: ...


class MasterMetrics(Protocol):
    """The master's Prometheus series, registered by the pod with its own."""

    master: Gauge
    master_epoch: Gauge
    ticks: Counter
    tick_failures: Counter
    tick_seconds: Histogram
    placements: Counter
    demand_projects: Gauge
    demand_score: Gauge


class PodHandle(Protocol):
    """What the master needs of the pod it runs on; the cluster never imports the pod runtime."""

    @property
    def pod_id(self) -> str: ...
    @property
    def status(self) -> PodState: ...
    @property
    def config(self) -> MasterSettings: ...
    @property
    def metrics(self) -> MasterMetrics: ...
    @property
    def cluster_token(self) -> str | None: ...
    def forget_cluster_token(self) -> None: ...
    def takeover_hold(self) -> float: ...

    def accept_placement(self, tenant: str, name: str, epoch: int) -> object:
        """Take a placement of this pod's own master: checked, then brought in the background."""
        ...

    def accept_placements(self, items: list[tuple[str, str]], epoch: int) -> list[TenureError | None]:
        """:meth:`accept_placement` for each item: per item None (accepted) or the error that refused it."""
        ...

    def log(self, message: str, *, level: int = logging.INFO, **fields: Any) -> None: ...


class Master:
    """The master role on one pod (see the module docstring)."""

    def __init__(self, node: PodHandle, store: Store) -> None:
        self.node = node
        self.cluster = ClusterStore(store)
        self.ownership = Ownership(store)
        self.pods = PodRegistry(store)
        self.projects = ProjectStore(store)
        self.epoch: int | None = None
        #: placements not claimed yet: project id → (pod id, score, monotonic deadline)
        self._in_flight: dict[str, tuple[str, float, float]] = {}
        self._wake = threading.Event()
        #: a wake-up that asked for a tick now (set by :meth:`wake`, taken by the loop): never lost to a
        #: tick under way, which sets the next due time as it ends
        self._rush = False
        self._role_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_tick = 0.0
        #: when the next tick is due (the regular tick, or earlier when a lease runs out first)
        self._due_at = 0.0
        self._lock = threading.Lock()
        self.last_tick: TickReport | None = None
        #: ticks begun (a held one too)
        self.ticks = 0
        self._http: httpx.Client | None = None
        #: how placement requests reach other pods: HTTP (None), or a callable (pods in one process)
        self.transport: Callable[[PodLoad, str, str, int], bool] | None = None

    # ------------------------------------------------------------------ election

    @property
    def is_master(self) -> bool:
        return self.epoch is not None

    @property
    def ttl(self) -> float:
        """The master lease TTL: ``--master-ttl``, else the project lease TTL."""
        return self.node.config.master_ttl or self.node.config.lease_ttl

    def beat(self) -> None:
        """Renew the role, or try to take it (RUNNING pods only)."""
        with self._role_lock:
            self._beat()

    def wake(self) -> bool:
        """Run the tick now (projects were released for a hand-over); a RUNNING pod without the role takes
        it first when it is free. Returns whether this pod holds the role (then the tick runs at once)."""
        if self.epoch is None and self.node.config.master and self.node.status is PodState.RUNNING:
            self.beat()
        if self.epoch is None:
            return False
        self._rush = True
        self._wake.set()
        return True

    def _beat(self) -> None:
        node = self.node
        if not node.config.master:
            return
        if self.epoch is not None:
            if self.cluster.renew(node.pod_id, self.epoch, self.ttl):
                return
            self._deposed("its master lease ran out or another pod took it")
        if node.status is not PodState.RUNNING:
            return
        epoch = self.cluster.take(node.pod_id, self.ttl)
        if epoch is not None:
            self.epoch = epoch
            self._in_flight.clear()
            node.metrics.master.set(1)
            node.metrics.master_epoch.set(epoch)
            node.log("master role taken", epoch=epoch)
            self._next_tick = self._due_at = 0.0
            self._wake.set()

    def resign(self) -> None:
        """Give the role up (drain, stop) so another pod takes it at its next beat."""
        epoch = self.epoch
        if epoch is None:
            return
        self._deposed("resigned")
        try:
            self.cluster.resign(self.node.pod_id, epoch)
        except TenureError:
            pass

    def _deposed(self, why: str) -> None:
        if self.epoch is not None:
            self.node.log("master role lost", level=logging.WARNING, epoch=self.epoch, reason=why)
        self.epoch = None
        self.node.metrics.master.set(0)

    # ------------------------------------------------------------------ the tick loop

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tenure-master", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.resign()
        if self._http is not None:
            self._http.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._delay())
            self._wake.clear()
            if self._stop.is_set():
                return
            rushed, self._rush = self._rush, False
            if self.epoch is None or (not rushed and time.monotonic() < self._due_at - 0.005):
                continue
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - a failed tick is logged and run again next time
                self.node.metrics.tick_failures.inc()
                self.node.log("distributor tick failed", level=logging.WARNING, error=str(exc))
                # tried again a beat later, not a whole tick: a store that came back must not leave a dead
                # pod's projects waiting for the regular tick
                self._next_tick = self._due_at = time.monotonic() + self.node.config.beat_interval

    def _delay(self) -> float:
        """Seconds to wait before looking again: until the tick is due, at most one beat.

        The tick is due at the regular tick, or earlier at the moment the
        first pod lease (or a project's own lease) runs out unless renewed.
        That moment only moves earlier until a tick has run, so a wake-up that
        comes late (a busy host) still runs the tick it was for.
        """
        if self.epoch is None:
            return max(0.05, self.node.config.beat_interval)
        now = time.monotonic()
        self._due_at = min(self._due_at, self._next_tick)
        expiry = self._expiry_wait()
        if expiry is not None:
            self._due_at = min(self._due_at, now + expiry + 0.02)
        return max(0.01, min(self._due_at - now, self.node.config.beat_interval))

    def _expiry_wait(self) -> float | None:
        cfg = self.node.config
        try:
            return self.ownership.next_lease_expiry(cfg.lease_ttl)
        except TenureError:
            return None

    # ------------------------------------------------------------------ one tick

    @property
    def in_flight_timeout(self) -> float:
        """How long a placement counts against its pod before it is claimed: after that it is placed again.

        A pod claims at the start of its bring (milliseconds after the
        request), so this only covers a request that was lost or a bring that
        failed before its claim.
        """
        return max(5.0, 4 * self.node.config.beat_interval)

    def eligible_pods(self) -> list[PodLoad]:
        """RUNNING pods live by their own heartbeat, each with its load: what it holds, plus what this master
        placed on it that no pod has claimed yet.

        What a pod holds is the larger of the score it reported in its last
        beat (P-106) and the scores of the projects the store shows it
        holding (one indexed sum per pod), so a claim counts from the moment
        it commits, whatever the beat. A placement counts against its pod
        until a live pod claims the project (then the claim counts, on
        whichever pod won it) or until :attr:`in_flight_timeout` passes (a
        lost request, a bring that failed before its claim: it is placed
        again). Counted exactly once either way, so pods whose beats report
        at different moments are still compared on equal terms.
        """
        node = self.node
        ttl = node.config.lease_ttl
        now = time.monotonic()
        with self._lock:
            flights = list(self._in_flight.items())
        pending: dict[str, float] = {}
        for project_id, (pod_id, score, deadline) in flights:
            if deadline <= now or self._claimed(project_id, ttl):
                with self._lock:
                    if self._in_flight.get(project_id, (None, 0.0, 0.0))[2] == deadline:
                        del self._in_flight[project_id]
                continue
            pending[pod_id] = pending.get(pod_id, 0.0) + score
        pods = []
        for pod, live in self.pods.list_with_liveness(node.config.liveness_ttl):
            if not live or pod.status != PodState.RUNNING.value or pod.refusing is not None:
                continue  # a refusing pod (a full data folder, ADR 0051) is given nothing
            held = max(pod.score, self.ownership.sum_score_by_home_pod_id(pod.id))
            pods.append(
                PodLoad(pod.id, pod.endpoint, pod.labels, pod.capacity, held + pending.get(pod.id, 0.0), pod.running)
            )
        return pods

    def _claimed(self, project_id: str, ttl: float) -> bool:
        """Has a live pod claimed the project since it was placed (a project gone counts as claimed)?"""
        try:
            return self.ownership.owner(project_id, ttl).live
        except NotFoundError:
            return True

    def tick(self) -> TickReport | None:
        """One distributor tick (module docstring); None when this pod is not the master."""
        epoch = self.epoch
        if epoch is None:
            return None
        node = self.node
        cfg = node.config
        started = time.perf_counter()
        report = TickReport(epoch=epoch)
        self.ticks += 1
        hold = node.takeover_hold()
        if hold > 0:  # the store-outage brake (ADR 0050): the silent pods may renew within a beat
            report.held = hold
            self._next_tick = self._due_at = time.monotonic() + hold
            self.last_tick = report
            return report
        pods = self.eligible_pods()
        # paged by key, never by OFFSET: what this tick places (and the pods claim) leaves the set (P-83)
        cursor: NeedingOwnerCursor | None = None
        pages = 0
        while report.placed < cfg.max_moves:
            if pages and not self.cluster.renew(node.pod_id, epoch, self.ttl):
                self._deposed("its master lease ran out during a long tick")  # a long tick renews per page
                report.deposed = True
                break
            page, cursor = self.ownership.page_projects_needing_owner(cfg.lease_ttl, PAGE, cursor)
            if not page:
                break
            pages += 1
            # most constrained first (fewest pods it may go to), then the largest: fewer left over
            page.sort(
                key=lambda p: (
                    sum(1 for q in pods if selector_matches(p.placement_selector, q.labels)),
                    -p.placement_score,
                )
            )
            chosen: list[tuple[Project, PodLoad]] = []
            for project in page:
                if report.placed + len(chosen) >= cfg.max_moves:
                    break
                if project.id in self._in_flight:
                    report.skipped_in_flight += 1
                    continue
                target = choose(project.placement_score, project.placement_selector, pods)
                if target is None:
                    self.projects.mark_pending_placement(project.tenant, project.name)
                    report.pending += 1
                    continue
                target.take(project.placement_score)
                chosen.append((project, target))
            # the page's placements in one transaction, then one request per pod (ADR 0053)
            if chosen and not self.cluster.place_many(node.pod_id, epoch, [(p.id, t.pod_id) for p, t in chosen]):
                self._deposed("the store refused a placement under its epoch")
                report.deposed = True
                break
            with self._lock:
                deadline = time.monotonic() + self.in_flight_timeout
                for project, target in chosen:
                    self._in_flight[project.id] = (target.pod_id, project.placement_score, deadline)
            by_pod: dict[str, list[tuple[Project, PodLoad]]] = {}
            for project, target in chosen:
                by_pod.setdefault(target.pod_id, []).append((project, target))
            for group in by_pod.values():
                target = group[0][1]
                accepted = self._ask_many(target, [(p.tenant, p.name) for p, _ in group], epoch)
                for (project, _), ok in zip(group, accepted, strict=True):
                    if not ok:
                        # refused or unreachable: not placed (kept in flight until its timeout, so the next
                        # tick asks again, perhaps another pod), counted apart and never as a placement
                        report.asked_failed += 1
                        continue
                    report.placed += 1
                    report.placements.append((project.ref, target.pod_id))
                    node.metrics.placements.inc()
            if report.deposed or len(page) < PAGE:
                break
        if not report.deposed:
            report.unbound_sessions = self.ownership.unbind_ownerless_sessions(cfg.lease_ttl)
            self.publish_demand()
        report.seconds = time.perf_counter() - started
        node.metrics.ticks.inc()
        node.metrics.tick_seconds.observe(report.seconds)
        self.last_tick = report
        self._next_tick = time.monotonic() + cfg.tick
        if report.placed or report.asked_failed:  # placed again once it is no longer in flight
            self._next_tick = min(self._next_tick, time.monotonic() + self.in_flight_timeout + 0.05)
        if report.placed >= cfg.max_moves:  # the limit bounds one tick's length, not the rate: go on at once
            self._next_tick = time.monotonic()
        self._due_at = self._next_tick
        if report.placed or report.pending or report.unbound_sessions or report.asked_failed:
            node.log(
                "distributor tick",
                epoch=epoch,
                placed=report.placed,
                refused=report.asked_failed,
                pending=report.pending,
                unbound_sessions=report.unbound_sessions,
            )
        return report

    def publish_demand(self) -> list[Any]:
        """The projects pending placement, also set as the demand gauges."""
        demand = self.ownership.find_pending_placement(self.node.config.lease_ttl)
        self.node.metrics.demand_projects.set(len(demand))
        self.node.metrics.demand_score.set(sum(p.placement_score for p in demand))
        return demand

    def _ask_many(self, target: PodLoad, items: list[tuple[str, str]], epoch: int) -> list[bool]:
        """Ask ``target`` to bring each ``(tenant, name)`` under this epoch, in one request (this pod: directly,
        in the background; a test's :attr:`transport`: one call per project). Per item, whether it accepted."""
        node = self.node
        if target.pod_id == node.pod_id:
            answers = node.accept_placements(items, epoch)
            for (tenant, name), error in zip(items, answers, strict=True):
                if error is not None:
                    node.log(
                        "own placement refused", level=logging.WARNING, project=f"{tenant}/{name}", error=str(error)
                    )
            return [error is None for error in answers]
        transport = self.transport
        if transport is not None:
            return [transport(target, tenant, name, epoch) for tenant, name in items]
        if not target.endpoint:
            return [False] * len(items)
        body = {"epoch": epoch, "projects": [{"tenant": tenant, "name": name} for tenant, name in items]}
        response = self._post(target, body)
        if response is not None and response.status_code == 422:  # it knows only single placements (older)
            single = [self._post(target, {"tenant": t, "name": n, "epoch": epoch}) for t, n in items]
            return [r is not None for r in single]
        if response is None:
            return [False] * len(items)
        try:
            refused = list(response.json().get("refused", []))
        except (ValueError, AttributeError):
            refused = [{"project": f"{t}/{n}"} for t, n in items]  # an answer it cannot read: none accepted
        if refused:
            node.log(
                "placements refused",
                level=logging.WARNING,
                pod=target.pod_id,
                count=len(refused),
                first=refused[0],
            )
        gone = {entry.get("project") for entry in refused}
        return [f"{tenant}/{name}" not in gone for tenant, name in items]

    def _post(self, target: PodLoad, body: dict[str, Any]) -> httpx.Response | None:
        """POST a placement request to ``target`` (a 401 retried once with the credential read again): the
        202 response (or the 422 of a pod too old to take several projects in one request), or None when it
        failed or was refused as a whole."""
        node = self.node
        assert target.endpoint
        if self._http is None:
            self._http = httpx.Client(timeout=5.0, follow_redirects=False)
        url = target.endpoint.rstrip("/") + PLACE_PATH
        try:
            response = post_as_cluster(self._http, url, body, lambda: node.cluster_token, node.forget_cluster_token)
        except httpx.HTTPError as exc:
            node.log("placement request failed", level=logging.WARNING, pod=target.pod_id, error=str(exc))
            return None
        if response.status_code == 422 and "projects" in body:  # a pod of an older release: one at a time
            return response
        if response.status_code != 202:
            node.log(
                "placement request refused",
                level=logging.WARNING,
                pod=target.pod_id,
                status=response.status_code,
                body=response.text[:200],
            )
            return None
        return response

    def check_placement(self, project_id: str, epoch: int, newest_seen: int) -> None:
        """A placement request is for this pod at ``epoch``, no older than the newest epoch seen (else refused)."""
        if epoch < newest_seen:
            raise StaleEpochError(
                f"placement under epoch {epoch} refused: epoch {newest_seen} has placed since",
                epoch=epoch,
                newest=newest_seen,
            )
        placement = self.cluster.placement(project_id)
        if placement is None or placement.pod_id != self.node.pod_id or placement.epoch != epoch:
            raise StaleEpochError(
                f"placement under epoch {epoch} refused: the store holds no placement of this project"
                f" on this pod at that epoch",
                epoch=epoch,
                stored=None if placement is None else placement.to_dict(),
            )
        if self.node.status is not PodState.RUNNING:
            raise ConflictError(
                f"pod {self.node.pod_id} is {self.node.status.value}: it takes no placements",
                code="pod-not-running",
                hint="the master places on RUNNING pods only; it will choose another",
            )
