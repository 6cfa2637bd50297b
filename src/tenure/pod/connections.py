"""Connections a hostile client cannot hoard: a deadline for request headers and for a stalled body, and caps.

uvicorn's h11 protocol times out only an idle keep-alive connection: a client that sends its headers a byte at a
time, or a body that stops half way, holds a connection (a file descriptor) as long as it likes, and a few
hundred of them exhaust the process's descriptors, so the pod stops accepting even ``/healthz``.
:class:`GuardedH11Protocol` is that protocol with

* a **header deadline** (:attr:`Limits.header_timeout`): a connection whose request headers are not complete
  this long after it opened (or after its previous response) is closed;
* a **body deadline** (:attr:`Limits.body_timeout`): a request body that sends nothing for this long is cut
  (unless the pod itself stopped reading it, flow control);
* **caps** on open connections, in all (:attr:`Limits.max_connections`, kept below the descriptor limit) and per
  client address (:attr:`Limits.max_per_client`). A new connection over a cap closes the oldest one still
  waiting for request headers (an idle keep-alive connection or a slow client) — so a client that sends its
  request at once always gets in — and is itself refused when none is waiting;
* a bounded log: refusals and timeouts are counted and logged at most once per :data:`LOG_EVERY_S`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["GuardedH11Protocol", "Limits", "guarded_protocol", "quiet_accept_errors", "LOG_EVERY_S"]

log = logging.getLogger("tenure.serve")

#: at most one log line about refused or timed-out connections this often
LOG_EVERY_S = 10.0
#: descriptors kept free of connections beyond those open when the server starts: each of the API's worker
#: threads (anyio's default 40) opens the store (SQLite: the database and its WAL), and files, objects and the
#: change journal need their own
RESERVED_FDS = 40 * 3 + 32


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


@dataclass(frozen=True)
class Limits:
    """The connection limits of a pod's API listener (``tenure serve`` options)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1000
    max_per_client: int = 100

    def effective_max(self) -> int:
        """:attr:`max_connections`, lowered to half the descriptors left after those open now and
        :data:`RESERVED_FDS`: the other
        half is for connections accepted but not yet counted (the event loop accepts up to :meth:`backlog` at
        a time before any of them reaches the protocol)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(8, min(self.max_connections, (soft - _open_fds() - RESERVED_FDS) // 2))

    def backlog(self) -> int:
        """The listen backlog, which is also how many connections the event loop accepts in one go."""
        return max(16, min(511, self.effective_max() // 4))


class _Tally:
    """Counts of what the guard did, logged at most once per :data:`LOG_EVERY_S` (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.logged = 0.0

    def note(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            now = time.monotonic()
            if now - self.logged < LOG_EVERY_S:
                return
            counts, self.counts, self.logged = self.counts, {}, now
        log.warning("connections closed by the API guard", extra={"tenure": dict(sorted(counts.items()))})


TALLY = _Tally()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines and caps of :class:`Limits` (see the module docstring)."""

    limits = Limits()
    #: the connection cap (:meth:`Limits.effective_max`, reckoned when the server starts)
    cap = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._opened = time.monotonic()

    # ------------------------------------------------------------------ the caps

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._headers_late)
        mine = [
            c
            for c in self.connections
            if isinstance(c, GuardedH11Protocol) and c is not self and not c.transport.is_closing()
        ]
        peer = self.client[0] if self.client else None
        same = [c for c in mine if c.client and c.client[0] == peer]
        if len(same) + 1 > self.limits.max_per_client and not self._evict(same):
            self._refuse("per-client cap")
        elif len(mine) + 1 > self.cap and not self._evict(mine):
            self._refuse("connection cap")

    def _evict(self, candidates: list[GuardedH11Protocol]) -> bool:
        """Close the oldest of ``candidates`` still waiting for request headers; False when none is."""
        waiting = [c for c in candidates if c._waiting_for_headers()]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c._opened)
        TALLY.note("evicted waiting for headers")
        oldest._close()
        return True

    def _refuse(self, why: str) -> None:
        TALLY.note(f"refused ({why})")
        self._close()

    def _waiting_for_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

    # ------------------------------------------------------------------ the deadlines

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._waiting_for_headers():
            if self._header_timer is None:  # the next request began to arrive: its headers have the deadline
                self._opened = time.monotonic()
                self._header_timer = self.loop.call_later(self.limits.header_timeout, self._headers_late)
        else:
            self._cancel("_header_timer")
        if self.conn.their_state is h11.SEND_BODY:
            self._cancel("_body_timer")
            self._body_timer = self.loop.call_later(self.limits.body_timeout, self._body_late)
        else:
            self._cancel("_body_timer")

    def on_response_complete(self) -> None:
        self._cancel("_body_timer")
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel("_header_timer")
        self._cancel("_body_timer")
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            TALLY.note("request headers too slow")
            self._close()

    def _body_late(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self.flow.read_paused:  # the pod stopped reading (the app is busy with the body): not the client
            self._body_timer = self.loop.call_later(self.limits.body_timeout, self._body_late)
            return
        TALLY.note("request body stalled")
        self._close()

    def _cancel(self, name: str) -> None:
        timer = getattr(self, name)
        if timer is not None:
            timer.cancel()
            setattr(self, name, None)

    def _close(self) -> None:
        self._cancel("_header_timer")
        self._cancel("_body_timer")
        if not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(limits: Limits) -> type[GuardedH11Protocol]:
    """:class:`GuardedH11Protocol` with ``limits`` (a subclass per server, so two servers keep their own)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits, "cap": limits.effective_max()})


def quiet_accept_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An event loop exception handler: the loop's "out of system resource" on accept (descriptors ran out
    for a moment; it retries by itself) is counted in the guard's bounded log, not printed with a traceback
    each time; anything else goes to the default handler."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and "accept" in str(context.get("message", "")):
        TALLY.note(f"accept failed ({exc.strerror or exc})")
        return
    loop.default_exception_handler(context)
