"""Running a pod as a process: the node, its beat thread, the HTTP server and the signals.

The listening socket is bound (:func:`bind_listen`) before the pod registers
or claims anything: a taken ``--listen`` address is one
``listen-address-in-use`` error and the configuration exit code, with no pod
row and no claim left behind. The server then serves that socket.

SIGTERM and SIGINT drain the pod (every project handed over: engines
stopped, checkpoint, lease released; after each release the master is woken
so the new owner brings it at once), then the server stops and the process
exits 0 — or 4 with one ``drain-incomplete`` line when a project could not be
handed over (it keeps its lease and folder until expiry). A second signal
while draining stops at once (the leases then end by expiry, as after
``kill -9``). ``tenure pods drain POD`` from anywhere marks the pod DRAINING
in the store; the pod sees it at its next beat and drains the same way.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from tenure.errors import ConfigurationError, DrainIncompleteError
from tenure.pod.connections import Limits, guarded_protocol, quiet_accept_errors

__all__ = ["run", "split_listen", "is_loopback", "configure_logging", "bind_listen"]


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → (host, port); ``bad-listen`` otherwise."""
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigurationError(
            f"--listen {listen!r} is not HOST:PORT", code="bad-listen", hint="e.g. --listen 127.0.0.1:8470"
        )
    return host, int(port)


def bind_listen(host: str, port: int) -> socket.socket:
    """The pod's listening socket on ``host:port``, bound and listening before anything else happens.

    ``listen-address-in-use`` when another socket holds the address; ``listen-address-unusable`` when it
    cannot be bound at all (not an address of this host, a privileged port, a name that does not resolve).
    Listening at once reserves the address: a second pod started on it a moment later is refused too, and
    connections made while the pod starts wait in the backlog until its server takes them.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart reuses a port in TIME_WAIT
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigurationError(
                f"--listen {where} is in use: another process listens on that address",
                code="listen-address-in-use",
                hint="stop the process that holds it, or pass another --listen HOST:PORT",
                listen=where,
            ) from None
        raise ConfigurationError(
            f"--listen {where} cannot be bound: {exc.strerror or exc}",
            code="listen-address-unusable",
            hint="listen on an address of this host (e.g. 127.0.0.1) and a port this user may bind",
            listen=where,
        ) from None
    return sock


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _traceback(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback (``log.exception``, ``exc_info=``) and stack (``stack_info=``), or ``""``."""
    text = ""
    if record.exc_info:
        if not record.exc_text:
            record.exc_text = formatter.formatException(record.exc_info)
    if record.exc_text:
        text = record.exc_text
    if record.stack_info:
        text = (text + "\n" if text else "") + formatter.formatStack(record.stack_info)
    return text


class _JsonFormatter(logging.Formatter):
    """One JSON object per line; a traceback goes into its ``exception`` field."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, "tenure", {}) or {})
        traceback = _traceback(self, record)
        if traceback:
            line["exception"] = traceback
        return json.dumps(line, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    """One line per record; a traceback follows on the lines after it."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "tenure", {}) or {}
        pod = str(fields.get("pod", ""))[:8]
        rest = " ".join(f"{k}={v}" for k, v in fields.items() if k != "pod")
        stamp = self.formatTime(record, "%H:%M:%S")
        line = f"{stamp} {record.levelname.lower():7} {pod} {record.getMessage()}" + (f"  {rest}" if rest else "")
        traceback = _traceback(self, record)
        return f"{line}\n{traceback}" if traceback else line


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """One line per lifecycle step on stderr: readable text, or JSON lines (``--log-format json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    for name in ("tenure", "tenure.serve", "tenure.engines"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
    logger = logging.getLogger("tenure")
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def run(
    node: Any,
    app: Any,
    host: str,
    port: int,
    *,
    announce: Callable[[str], None] | None = None,
    sock: socket.socket | None = None,
) -> int:
    """Serve ``app`` for the started ``node`` until it is drained or stopped; returns the exit code.

    ``sock``: the listening socket :func:`bind_listen` bound before the node started (closed here once the
    server stops); without it the server binds ``host:port`` itself. A node started with ``running=False``
    becomes RUNNING (:meth:`PodRuntime.mark_running`) only once the server serves, so nothing is placed on a
    pod, and ``/readyz`` does not answer 200, before its API can be reached; ``announce`` is called then too.
    """
    import asyncio

    import uvicorn

    #: held by a drain for its whole length, and while the pod is marked RUNNING: a pod whose drain began
    #: (a signal during start-up drains it while STARTING) is never marked RUNNING afterwards
    status_lock = threading.Lock()
    failed: list[BaseException] = []

    class Server(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.draining:
                self.should_exit = self.force_exit = True  # a second signal: stop now
                return
            self.draining = True
            threading.Thread(target=drain_then_exit, name="tenure-drain", daemon=True).start()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            asyncio.get_running_loop().set_exception_handler(quiet_accept_errors)
            await super().startup(sockets)
            if self.started and not self.should_exit:
                await asyncio.to_thread(listening)

    cfg = node.config
    limits = Limits(
        header_timeout=cfg.header_timeout,
        body_timeout=cfg.body_timeout,
        max_connections=cfg.max_connections,
        max_per_client=cfg.max_connections_per_client,
    )
    server = Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            http=guarded_protocol(limits),  # header and body deadlines, connection caps (tenure.pod.connections)
            timeout_keep_alive=5,
            backlog=limits.backlog(),
        )
    )

    def listening() -> None:
        if not status_lock.acquire(blocking=False):
            return  # draining already
        try:
            node.mark_running()
        except BaseException as exc:  # noqa: BLE001 - reported once the server has stopped
            failed.append(exc)
            server.should_exit = True
            return
        finally:
            status_lock.release()
        if announce is not None:
            announce(f"http://{host}:{port}")

    def drain_then_exit() -> None:
        try:
            with status_lock:
                node.drain()
        finally:
            server.should_exit = True

    def on_drain_requested() -> None:  # `tenure pods drain` seen by the beat
        if not server.draining:
            server.draining = True
            threading.Thread(target=drain_then_exit, name="tenure-drain", daemon=True).start()

    node.on_drain_requested = on_drain_requested
    node.run_beats()
    try:
        server.run(sockets=None if sock is None else [sock])
    finally:
        try:
            node.stop()
        finally:
            if sock is not None:
                sock.close()
    if failed:
        raise failed[0]
    if node.drain_left:
        raise DrainIncompleteError(
            f"the drain left {len(node.drain_left)} project(s) behind: {', '.join(node.drain_left[:10])}",
            projects=node.drain_left,
        )
    return 0
