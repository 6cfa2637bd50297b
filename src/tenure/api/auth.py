"""Who a request is, and the middleware that asks: bearer tokens, the open loopback mode, request metrics.

While no token was ever created and the pod listens on a loopback address, the API is open — to requests
addressed to a loopback name and sent by no page of another origin (:func:`foreign`: DNS rebinding and
cross-site forms are refused). Otherwise every request but ``/healthz`` and ``/readyz`` needs
``Authorization: Bearer <secret>``; a tenant-scoped token sees only its tenant's projects.
"""

from __future__ import annotations

import logging

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure.api.problems import CrossOriginRefusedError, UnauthorizedError, internal, problem_of
from tenure.errors import ConfigurationError, TenureError
from tenure.pod.daemon import is_loopback, split_listen
from tenure.pod.runtime import PodRuntime
from tenure.pod.tokens import OPEN, Principal, TokenStore

__all__ = ["RequestGate", "foreign", "loopback_listen", "principal_of"]

log = logging.getLogger("tenure.serve")
_OPEN_PATHS = frozenset({"/healthz", "/readyz"})


class RequestGate:
    """ASGI middleware: authenticates each request, counts it by route template and status, and turns an
    unexpected error into a 500 ``internal`` problem (the traceback goes to the log, never to the client)."""

    def __init__(self, app: ASGIApp, *, node: PodRuntime, tokens: TokenStore, loopback: bool) -> None:
        self.app = app
        self.node = node
        self.tokens = tokens
        self.loopback = loopback

    def authenticate(self, scope: Scope) -> Principal | TenureError:
        if scope["path"] in _OPEN_PATHS:
            return OPEN
        if not self.tokens.any_exist():
            if self.loopback:
                return foreign(scope) or OPEN
            return UnauthorizedError("this pod listens beyond loopback and no API token exists yet")
        header = ""
        for key, value in scope.get("headers") or []:
            if key == b"authorization":
                header = value.decode("latin-1")
                break
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            return UnauthorizedError("this request needs a bearer token")
        principal = self.tokens.verify(secret.strip())
        if principal is None:
            return UnauthorizedError("the bearer token is unknown or revoked")
        return principal

    def template(self, scope: Scope) -> str:
        route = scope.get("route")
        if route is not None and hasattr(route, "path"):
            return str(route.path)
        app = scope.get("app")
        for candidate in getattr(getattr(app, "router", None), "routes", []):
            match, _ = candidate.matches(scope)
            if match is Match.FULL:
                return str(candidate.path)
        return "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = False

        async def counted_send(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = int(message["status"])
                started = True
            await send(message)

        try:
            principal = await run_in_threadpool(self.authenticate, scope)
            if isinstance(principal, TenureError):
                await problem_of(principal)(scope, receive, counted_send)
                return
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, counted_send)
        except ClientDisconnect:  # the client went away mid-request (an abandoned upload): one line, no answer
            status = 499
            log.warning(
                "client went away before its request was read",
                extra={"tenure": {"pod": self.node.pod.pod_id, "path": scope["path"][:200]}},
            )
        except Exception as exc:  # noqa: BLE001 - the one place unknown errors become a 500 problem
            log.exception("request failed", extra={"tenure": {"pod": self.node.pod.pod_id, "path": scope["path"]}})
            if started:
                raise
            if isinstance(exc, TenureError):  # e.g. the store failed while authenticating
                await problem_of(exc)(scope, receive, counted_send)
            else:
                await internal()(scope, receive, counted_send)
        finally:
            self.node.metrics.requests.labels(route=self.template(scope), status=str(status)).inc()


def _authority_host(authority: str) -> str | None:
    """The host of ``HOST[:PORT]`` or ``[IPV6][:PORT]``, lower case; ``None`` when it is not one."""
    if not authority or any(c in authority for c in "@/?#\\ \t"):
        return None
    if authority.startswith("["):
        host, sep, rest = authority[1:].partition("]")
        if not sep:
            return None
    else:
        host, sep, port = authority.partition(":")
        rest = sep + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    return host.lower() or None


def _loopback_host(authority: str) -> bool:
    host = _authority_host(authority)
    return host is not None and is_loopback(host)


def _loopback_origin(origin: str) -> bool:
    """``http(s)://`` a loopback name or address, with or without a port, and nothing else (not ``null``)."""
    scheme, sep, authority = origin.partition("://")
    return bool(sep) and scheme.lower() in ("http", "https") and _loopback_host(authority)


def foreign(scope: Scope) -> CrossOriginRefusedError | None:
    """The refusal of a request to the open API that a browser may have sent on another site's behalf.

    The open API has no credential, so the request itself must show it was meant for this pod: a ``Host``
    naming a loopback name or address (a DNS-rebound name of another site names that site), and no
    ``Origin`` but a loopback one (a page of another site posting here). An in-process client's ``Host``
    may also name the address the server took the connection on (``scope["server"]``, which is a loopback
    address for a real listener).
    """
    server = scope.get("server") or (None, None)
    accepted_on = str(server[0]).lower() if server[0] else None
    headers = [(key, raw.decode("latin-1")) for key, raw in scope.get("headers") or [] if key in (b"host", b"origin")]
    for value in (value for key, value in headers if key == b"host"):
        if not _loopback_host(value) and (accepted_on is None or _authority_host(value) != accepted_on):
            return CrossOriginRefusedError(
                f"refused a request for host {value!r}: while no API token exists, this pod answers only"
                " requests addressed to a loopback name or address (localhost, 127.0.0.1, [::1])",
                host=value,
            )
    for value in (value for key, value in headers if key == b"origin"):
        if not _loopback_origin(value):
            return CrossOriginRefusedError(
                f"refused a request sent by a page of origin {value!r}: while no API token exists, only"
                " pages served from a loopback address may call this pod's API",
                origin=value,
            )
    return None


def principal_of(request: Request) -> Principal:
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else OPEN


def loopback_listen(listen: str) -> bool:
    try:
        host, _ = split_listen(listen)
    except ConfigurationError:
        return False
    return is_loopback(host)
