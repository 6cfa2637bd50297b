"""A TCP proxy in front of PostgreSQL that can stop forwarding: a peer that stops answering.

``StallingProxy(target)`` listens on 127.0.0.1 and forwards every connection
to ``target``. :meth:`StallingProxy.stall` stops forwarding in both
directions without closing anything: connections stay open, new ones are
accepted (the TCP handshake completes, as the proxy's kernel answers it),
bytes sent are acknowledged and held — exactly what a client sees of a
server that is partitioned away behind a load balancer, paused, or behind a
proxy that hung. Neither TCP keepalives nor ``tcp_user_timeout`` notice
that (the proxy's kernel acknowledges everything); only a client-side
deadline does. :meth:`StallingProxy.resume` forwards what was held and
carries on.

:meth:`StallingProxy.down` is the other fault, a server restart as its
clients see it: every open connection is reset and new ones are closed at
once until :meth:`StallingProxy.up`.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit, urlunsplit

from tenure.store.postgres import PgSettings

#: sub-second limits for the connections a test cuts off with a proxy: a call fails within about a second
FAST = PgSettings(
    connect_timeout=2.0,  # libpq's least
    statement_timeout=0.5,
    long_statement_timeout=2.0,
    lock_timeout=0.3,
    idle_in_transaction_timeout=0.5,
    keepalives_idle=1.0,
    keepalives_interval=1.0,
    keepalives_count=2,
    tcp_user_timeout=0.5,
)


class StallingProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = int(self.listener.getsockname()[1])
        self.flowing = threading.Event()
        self.flowing.set()
        self.closing = threading.Event()
        self.refusing = threading.Event()
        self.open: set[socket.socket] = set()
        self.accepted = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, name="pgproxy", daemon=True)
        self.thread.start()

    @classmethod
    def before(cls, url: str) -> StallingProxy:
        """A proxy in front of the server of ``url``."""
        parts = urlsplit(url)
        return cls((parts.hostname or "127.0.0.1", parts.port or 5432))

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def stall(self) -> None:
        """Stop forwarding: every byte from now on is held, nothing is closed."""
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def down(self) -> None:
        """The server restarts: every connection is reset, new ones are closed until :meth:`up`."""
        self.refusing.set()
        self._reset_all()

    def up(self) -> None:
        self.refusing.clear()

    def _reset_all(self) -> None:
        with self.lock:
            for sock in self.open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closing.set()
        self.flowing.set()
        self._reset_all()
        self.thread.join(5)
        self.listener.close()

    def __enter__(self) -> StallingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.refusing.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self.lock:
                self.accepted += 1
                self.open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), name="pgproxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                self.flowing.wait()  # stalled: held, not dropped
                if self.closing.is_set():
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            with self.lock:
                self.open.discard(src)
                self.open.discard(dst)
