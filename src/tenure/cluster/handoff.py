"""A draining pod's hand-over, at once: after each project it releases, the master is woken (ADR 0049).

A drain releases its projects one by one (engines stopped, checkpoint
published, lease released). Without help, a released PERMANENT project (or
one in demand) waits for the master's next regular tick, up to ``--tick``
seconds. :class:`HandoffNotifier` wakes the master instead
(``POST /api/v1/cluster/wake``, cluster or admin token) so it places the
released projects on live pods at once:

* the live master, when another pod holds the role;
* else each other live RUNNING pod in turn until one answers that it holds
  the role now (a woken pod takes the role when it is free — the draining
  pod resigned it at the start of its drain).

Wake-ups are coalesced: one request is in flight at a time, and the releases
made meanwhile are covered by the next one (the tick places every project
needing an owner, not a list). A wake-up that reaches nobody changes
nothing: the projects are placed at the next tick, or pulled, as before.
Correctness never rests on it (the claim's compare-and-swap decides).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx

from tenure.cluster.master import WAKE_PATH, post_as_cluster
from tenure.cluster.store import ClusterStore
from tenure.errors import TenureError
from tenure.projects.pods import PodRegistry
from tenure.states import PodState
from tenure.store import Store

__all__ = ["HandoffNotifier", "WakeTransport"]

log = logging.getLogger("tenure.serve")

#: how a wake-up reaches a pod: (pod id, endpoint) → whether that pod holds the master role now
WakeTransport = Callable[[str, str | None], bool]


class HandoffNotifier:
    """Wakes the master after releases (see the module docstring); :meth:`poke` never blocks."""

    def __init__(
        self,
        store: Store,
        pod_id: str,
        *,
        liveness_ttl: float,
        token: Callable[[], str | None],
        forget_token: Callable[[], None],
        transport: WakeTransport | None = None,
        timeout: float = 2.0,
    ) -> None:
        self.pods = PodRegistry(store)
        self.cluster = ClusterStore(store)
        self.pod_id = pod_id
        self.liveness_ttl = liveness_ttl
        self._token, self._forget_token = token, forget_token
        self.transport = transport
        self.timeout = timeout
        self._wanted = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None
        #: wake-ups sent, and how many reached a pod holding the role (tests, logs)
        self.sent = 0
        self.reached = 0

    def poke(self) -> None:
        """A project was released: wake the master soon (coalesced with the wake-ups under way)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tenure-handoff", daemon=True)
                self._thread.start()
        self._wanted.set()

    def close(self, wait: float = 5.0) -> None:
        """Send what is still wanted, then stop (the drain is over)."""
        self._done.set()
        self._wanted.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=wait)
        if self._http is not None:
            self._http.close()
            self._http = None

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            try:
                self.wake_once()
            except Exception as exc:  # noqa: BLE001 - a wake-up is help, never required
                log.warning("hand-over wake-up failed", extra={"tenure": {"pod": self.pod_id, "error": str(exc)}})
            if self._done.is_set() and not self._wanted.is_set():
                return

    def wake_once(self) -> bool:
        """One wake-up: the live master, else the other live RUNNING pods until one holds the role."""
        self.sent += 1
        try:
            lease = self.cluster.master()
            rows = self.pods.list_with_liveness(self.liveness_ttl)
        except TenureError as exc:
            log.warning("hand-over wake-up: store unavailable", extra={"tenure": {"error": str(exc)}})
            return False
        live = {
            pod.id: pod.endpoint
            for pod, alive in rows
            if alive and pod.id != self.pod_id and pod.status == PodState.RUNNING.value
        }
        order: list[str] = []
        if lease.live and lease.pod_id in live:
            order.append(lease.pod_id)
        order += sorted(p for p in live if p not in order)
        for pod_id in order:
            if self._send(pod_id, live[pod_id]):
                self.reached += 1
                return True
        return False

    def _send(self, pod_id: str, endpoint: str | None) -> bool:
        if self.transport is not None:
            return self.transport(pod_id, endpoint)
        if not endpoint:
            return False
        if self._http is None:
            self._http = httpx.Client(timeout=self.timeout, follow_redirects=False)
        try:
            response = post_as_cluster(
                self._http, endpoint.rstrip("/") + WAKE_PATH, {}, self._token, self._forget_token
            )
        except httpx.HTTPError:
            return False
        if response.status_code != 202:
            return False
        try:
            return bool(response.json().get("master"))
        except ValueError:
            return False
