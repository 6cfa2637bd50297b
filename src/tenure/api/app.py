"""The HTTP API every pod serves (docs/api.md), versioned under ``/api/v1``.

It talks to the pod only through :class:`~tenure.serve.node.Node`'s public
methods. A request for a project that must run here (bring, checkpoint,
files, session bind) goes through :meth:`Node.route`: served here (brought
first if nobody holds it), redirected (307) to the live owner's endpoint with
the same path and query, or answered 503 with ``Retry-After`` while the
owner's pod is silent but its lease has not run out.

Errors are ``application/problem+json`` documents carrying the same stable
codes as the CLI; the error family decides the status (:func:`http_status`).

Auth (:class:`_Gate`): while no token was ever created and the pod listens on
a loopback address, the API is open — to requests addressed to a loopback
name and sent by no page of another origin (:func:`_foreign`: DNS rebinding
and cross-site forms are refused). Otherwise every request but
``/healthz`` and ``/readyz`` needs ``Authorization: Bearer <secret>``; a
tenant-scoped token sees only its tenant's projects (another tenant's project
is answered exactly like one that does not exist).

The mount endpoints answer for this pod's host only: its mount store and the
preserved deltas under ``<data>/preserved/`` (read with the same path checks
as the workspace files, never outside that folder).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from http import HTTPStatus
from typing import Any, ClassVar
from urllib.parse import quote

from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure.errors import (
    ConfigurationError,
    ConflictError,
    IntakeError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    ObjectStoreError,
    StoreError,
    TenureError,
)
from tenure.fsio import tmp_name, write_all
from tenure.mounts.store import Mount
from tenure.projects.records import LifecycleType, Project, Session
from tenure.serve.daemon import is_loopback, split_listen
from tenure.serve.dashboard import mount_dashboard
from tenure.serve.node import Node
from tenure.serve.tokens import OPEN, Principal, TokenStore
from tenure.states import ProjectStatus

__all__ = ["create_app", "http_status", "MAX_FILE_BYTES", "PREFIX"]

log = logging.getLogger("tenure.serve")
PREFIX = "/api/v1"
#: the largest file a PUT may write
MAX_FILE_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024
_OPEN_PATHS = frozenset({"/healthz", "/readyz"})
PROBLEM = "application/problem+json"


# ---------------------------------------------------------------------- errors of the API itself


class UnauthorizedError(TenureError):
    code = "unauthorized"
    http_status: ClassVar[int] = 401
    default_hint = "send Authorization: Bearer <token> (create one with `tenure token create`)"


class ForbiddenError(TenureError):
    code = "forbidden"
    http_status: ClassVar[int] = 403
    default_hint = "this token may not do that; use an admin token or one scoped to that tenant"


class CrossOriginRefusedError(TenureError):
    """While the API is open (no token exists), a request addressed to a name that is not loopback (DNS
    rebinding) or sent by a page of another origin (a cross-site form or fetch)."""

    code = "cross-origin-refused"
    http_status: ClassVar[int] = 403
    default_hint = (
        "call the API at http://127.0.0.1:PORT or http://localhost:PORT, from a client that sends no Origin"
        " or from the pod's own dashboard; or create an API token (`tenure token create --admin`) and send it"
        " as Authorization: Bearer <token>"
    )


class ProjectUnavailableError(TenureError):
    """The project's owner cannot be reached yet (its pod is silent, its lease still valid), or no pod fits."""

    code = "project-unavailable"
    retryable = True
    http_status: ClassVar[int] = 503
    default_hint = "retry after the number of seconds in Retry-After"

    def __init__(self, message: str, *, retry_after: float, **context: Any) -> None:
        super().__init__(message, **context)
        self.retry_after = max(1, math.ceil(retry_after))
        self.context["retry_after"] = self.retry_after


class BadPathError(InvalidInputError):
    code = "bad-path"
    default_hint = "give a relative path inside the workspace folder, without '..' and not through a symlink"


class PayloadTooLargeError(InvalidInputError):
    code = "payload-too-large"
    http_status: ClassVar[int] = 413
    default_hint = f"a file written through the API holds at most {MAX_FILE_BYTES // (1024 * 1024)} MiB"


class _Redirect(Exception):
    """Answer 307 to ``location`` (another pod's endpoint, same path and query)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


#: each family's HTTP status; an error belongs to the first family in its class's method resolution order
_FAMILY_STATUS: dict[type[TenureError], int] = {
    NotFoundError: 404,
    ConflictError: 409,
    InvalidInputError: 400,
    IntakeError: 400,
    StoreError: 503,
    ObjectStoreError: 503,
    IntegrityError: 500,
    ConfigurationError: 500,
}


def http_status(exc: TenureError) -> int:
    """The HTTP status of a tenure error: its own ``http_status`` if it has one, else its family's."""
    own = getattr(exc, "http_status", None)
    if isinstance(own, int):
        return own
    for cls in type(exc).__mro__:
        if cls in _FAMILY_STATUS:
            return _FAMILY_STATUS[cls]
    return 500


_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_safe(value: Any) -> Any:
    """Lone surrogates (file names that are not UTF-8) as ``\\udcNN`` text, so every document is valid UTF-8."""
    if isinstance(value, str):
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value) if _SURROGATE.search(value) else value
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(_json_safe(k)): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return _json_safe(str(value))


class SafeJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(_json_safe(content), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    hint: str = "",
    context: dict[str, Any] | None = None,
    retryable: bool = False,
    headers: dict[str, str] | None = None,
) -> Response:
    """An ``application/problem+json`` response (RFC 9457) with tenure's code, hint and context."""
    body = {
        "type": f"https://tenure.dev/errors/{code}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
        "hint": hint,
        "retryable": retryable,
        "context": context or {},
    }
    return SafeJSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _problem_of(exc: TenureError) -> Response:
    status = http_status(exc)
    doc = exc.to_dict()
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, ProjectUnavailableError):
        headers["Retry-After"] = str(exc.retry_after)
    elif status == 503:
        headers["Retry-After"] = "1"
    return problem(
        status,
        exc.code,
        exc.message,
        hint=exc.hint,
        context=doc["context"],
        retryable=exc.retryable,
        headers=headers,
    )


def _internal() -> Response:
    return problem(500, "internal", "an unexpected error occurred", hint="see the pod's log and report it")


# ---------------------------------------------------------------------- auth and request metrics


class _Gate:
    """ASGI middleware: authenticates each request, counts it by route template and status, and turns an
    unexpected error into a 500 ``internal`` problem (the traceback goes to the log, never to the client)."""

    def __init__(self, app: ASGIApp, *, node: Node, tokens: TokenStore, loopback: bool) -> None:
        self.app = app
        self.node = node
        self.tokens = tokens
        self.loopback = loopback

    def authenticate(self, scope: Scope) -> Principal | TenureError:
        if scope["path"] in _OPEN_PATHS:
            return OPEN
        if not self.tokens.any_exist():
            if self.loopback:
                return _foreign(scope) or OPEN
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
                await _problem_of(principal)(scope, receive, counted_send)
                return
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, counted_send)
        except Exception as exc:  # noqa: BLE001 - the one place unknown errors become a 500 problem
            log.exception("request failed", extra={"tenure": {"pod": self.node.pod.pod_id, "path": scope["path"]}})
            if started:
                raise
            if isinstance(exc, TenureError):  # e.g. the store failed while authenticating
                await _problem_of(exc)(scope, receive, counted_send)
            else:
                await _internal()(scope, receive, counted_send)
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


def _foreign(scope: Scope) -> CrossOriginRefusedError | None:
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


def _principal(request: Request) -> Principal:
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else OPEN


def _loopback(listen: str) -> bool:
    try:
        host, _ = split_listen(listen)
    except ConfigurationError:
        return False
    return is_loopback(host)


# ---------------------------------------------------------------------- request bodies


class ProjectCreate(BaseModel):
    tenant: str
    name: str
    lifecycle_type: LifecycleType = LifecycleType.AUTO
    group: str = "default"
    selector: dict[str, str] | None = Field(default=None, description="placement selector, set with the project")
    score: float | None = Field(default=None, description="placement score, set with the project")


class BringBody(BaseModel):
    from_snapshot: str | None = Field(default=None, description="restore this READY snapshot instead of the head")


class TypeBody(BaseModel):
    lifecycle_type: LifecycleType


class PlacementBody(BaseModel):
    selector: dict[str, str] = Field(default_factory=dict)
    score: float = 1.0


class BindBody(BaseModel):
    connection_id: str = Field(min_length=1, max_length=256)


def _session_dict(session: Session) -> dict[str, Any]:
    return asdict(session)


# ---------------------------------------------------------------------- the workspace folder's files


_PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "hint": {"type": "string"},
        "context": {"type": "object"},
    },
}
#: Every operation may answer a problem document (application/problem+json); redirects carry a Location.
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{
        status: {"description": why, "content": {"application/problem+json": {"schema": _PROBLEM_SCHEMA}}}
        for status, why in (
            (400, "bad input (code names what)"),
            (401, "a bearer token is needed"),
            (403, "the token may not do this"),
            (404, "not found (also another tenant's project)"),
            (409, "conflict: a status, a lease or a bound session"),
            (413, "body too large"),
            (422, "the request does not match the schema (invalid-request)"),
            (500, "internal error (never a traceback)"),
            (503, "not available here now: Retry-After says when to try again"),
        )
    },
    307: {"description": "the project runs on another live pod: Location is its endpoint"},
}


def _parts(path: str) -> list[str]:
    """The components of a relative path; ``bad-path`` for an absolute one, ``..`` or a NUL."""
    if "\x00" in path:
        raise BadPathError("a path may not hold a NUL character", path=path)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise BadPathError("a path must be UTF-8 text (it holds a lone surrogate)", path=repr(path)) from None
    if path.startswith(("/", "\\")) or os.path.isabs(path):
        raise BadPathError(f"{path!r} is absolute; give a path relative to the workspace folder", path=path)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadPathError(f"{path!r} climbs out with '..'", path=path)
    return parts


def _inside(root: str, parts: list[str], path: str) -> None:
    """The resolved path must stay inside the (resolved) folder: a symlink may not lead out of it."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, *parts))
    if real != real_root and not real.startswith(real_root + os.sep):
        raise BadPathError(f"{path!r} resolves outside the workspace folder", path=path)


def _os_error(exc: OSError, path: str) -> TenureError:
    if exc.errno == errno.ENOENT:
        return NotFoundError(f"no file or folder {path!r} in the workspace folder", code="file-not-found", path=path)
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return BadPathError(f"{path!r} goes through a symlink, which the API does not follow", path=path)
    if exc.errno == errno.ENOTDIR:
        return BadPathError(f"a component of {path!r} is not a folder", path=path)
    if exc.errno == errno.ENAMETOOLONG:
        return BadPathError(f"a component of {path!r} is longer than the file system allows", path=path)
    if exc.errno == errno.ENOTEMPTY:
        return ConflictError(
            f"folder {path!r} is not empty",
            code="folder-not-empty",
            path=path,
            hint="delete what it holds first",
        )
    if exc.errno == errno.EISDIR:
        return InvalidInputError(f"{path!r} is a folder", code="not-a-file", path=path)
    raise exc


#: a folder of the path: never through a symlink; O_DIRECTORY refuses a FIFO or device before it is opened
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextmanager
def _parent(root: str, parts: list[str], path: str, *, create: bool = False, last: bool = True) -> Iterator[int]:
    """An open descriptor of the folder holding the last component, reached one component at a time
    with ``O_NOFOLLOW`` (no symlink is followed, even one swapped in after the check). ``last`` False
    leaves the last component unresolved (deleting a symlink removes the link itself)."""
    _inside(root, parts if last else parts[:-1], path)
    flags = _FOLDER_FLAGS
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _entry(entry: os.DirEntry[str], fd: int) -> dict[str, Any]:
    st = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(st.st_mode):
        kind = "folder"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    found: dict[str, Any] = {
        "name": entry.name,
        "type": kind,
        "size": st.st_size if kind == "file" else None,
        "mtime": st.st_mtime,
        "executable": bool(st.st_mode & 0o111) if kind == "file" else None,
    }
    if kind == "symlink":
        found["target"] = os.readlink(entry.name, dir_fd=fd)
    return found


def list_folder(root: str, path: str) -> list[dict[str, Any]]:
    parts = _parts(path)
    try:
        with _parent(root, parts, path) as fd:
            if parts:
                folder = os.open(parts[-1], _FOLDER_FLAGS, dir_fd=fd)
            else:
                folder = os.dup(fd)
            try:
                with os.scandir(folder) as entries:
                    found = [_entry(e, folder) for e in entries]
            finally:
                os.close(folder)
    except OSError as exc:
        raise _os_error(exc, path) from None
    return sorted(found, key=lambda e: str(e["name"]))


def open_file(root: str, path: str) -> tuple[int, int]:
    """An open descriptor of a regular file (never through a symlink) and its size.

    The file is opened with ``O_NONBLOCK``: opening a FIFO (or a device) would otherwise wait for a
    writer and hold the request's thread for good. Anything that is not a regular file is refused
    (``not-a-file``) before a byte is read; ``O_NONBLOCK`` is cleared again for reading the file.
    """
    parts = _parts(path)
    if not parts:
        raise InvalidInputError("the workspace folder itself is not a file", code="not-a-file", path=path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        with _parent(root, parts, path) as parent:
            fd = os.open(parts[-1], flags, dir_fd=parent)
    except OSError as exc:
        raise _os_error(exc, path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInputError(f"{path!r} is not a regular file", code="not-a-file", path=path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _chunks(fd: int) -> Iterator[bytes]:
    try:
        while chunk := os.read(fd, _CHUNK):
            yield chunk
    finally:
        os.close(fd)


def write_file(root: str, path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` (parents created, replaced atomically); True if the file is new."""
    parts = _parts(path)
    if not parts:
        raise InvalidInputError("the workspace folder itself is not a file", code="not-a-file", path=path)
    name = parts[-1]
    try:
        with _parent(root, parts, path, create=True) as parent:
            mode = 0o644
            created = True
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISLNK(st.st_mode):
                    raise BadPathError(f"{path!r} is a symlink, which the API does not follow", path=path)
                if not stat.S_ISREG(st.st_mode):
                    raise InvalidInputError(f"{path!r} is not a regular file", code="not-a-file", path=path)
                mode, created = stat.S_IMODE(st.st_mode), False
            tmp = tmp_name()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
            try:
                try:
                    write_all(fd, data)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=parent)
                except OSError:
                    pass
                raise
    except OSError as exc:
        raise _os_error(exc, path) from None
    return created


def delete_path(root: str, path: str) -> None:
    """Delete a file or symlink (the link itself), or an empty folder."""
    parts = _parts(path)
    if not parts:
        raise BadPathError("the workspace folder itself cannot be deleted", path=path)
    try:
        with _parent(root, parts, path, last=False) as parent:
            st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(parts[-1], dir_fd=parent)
            else:
                os.unlink(parts[-1], dir_fd=parent)
    except OSError as exc:
        raise _os_error(exc, path) from None


# ---------------------------------------------------------------------- the app


def create_app(node: Node, *, tokens: TokenStore | None = None) -> FastAPI:
    """The pod's HTTP API over ``node`` (see the module docstring and docs/api.md)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("tenure")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
        release = "0"
    app = FastAPI(
        title="tenure",
        version=release,
        description="The pod API of tenure: projects, sessions, workspace files, snapshots, pods, this host's mounts.",
        openapi_url="/openapi.json",
        redoc_url=None,
        default_response_class=SafeJSONResponse,
        responses=PROBLEM_RESPONSES,
    )
    token_store = tokens or TokenStore(node.store)
    app.add_middleware(_Gate, node=node, tokens=token_store, loopback=_loopback(node.config.listen))
    mount_dashboard(app)  # the pages at / and /ui/…, in front of the auth gate (docs/serve.md, "Dashboard")

    # ------------------------------------------------------------------ error handlers

    async def on_tenure_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, TenureError)
        return _problem_of(exc)

    async def on_redirect(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _Redirect)
        return Response(status_code=307, headers={"Location": exc.location})

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        return problem(
            422,
            "invalid-request",
            "the request does not match the API schema",
            hint="see /openapi.json for the expected parameters and body",
            context={"errors": errors},
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        return problem(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {}))

    app.add_exception_handler(TenureError, on_tenure_error)
    app.add_exception_handler(_Redirect, on_redirect)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)

    # ------------------------------------------------------------------ helpers

    def here(request: Request, endpoint: str) -> _Redirect:
        path = request.scope.get("raw_path") or quote(request.scope["path"]).encode()
        query = request.scope.get("query_string") or b""
        location = endpoint.rstrip("/") + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        return _Redirect(location)

    def visible(principal: Principal, tenant: str, name: str) -> None:
        """Another tenant's project is answered exactly like one that does not exist."""
        if not principal.sees(tenant):
            raise NotFoundError(
                f"no project {tenant}/{name}",
                code="project-not-found",
                project=f"{tenant}/{name}",
                hint="list projects with `tenure project list`",
            )

    def project_of(principal: Principal, tenant: str, name: str) -> Project:
        visible(principal, tenant, name)
        return node.projects.get(tenant, name)

    def served(request: Request, tenant: str, name: str, *, bring: bool = False) -> Project:
        """The project running here (brought if nobody holds it), or a redirect / 503 raised.

        A SUSPENDED project is brought only by an explicit bring (``bring``); otherwise 409
        ``project-suspended`` (P-92).
        """
        route = node.route(tenant, name, bring=bring)
        if route.redirect is not None:
            raise here(request, route.redirect)
        if route.retry_after is not None:
            raise ProjectUnavailableError(
                f"project {tenant}/{name} cannot be served yet",
                retry_after=route.retry_after,
                project=f"{tenant}/{name}",
            )
        assert route.project is not None
        return route.project

    def not_elsewhere(request: Request, project: Project, *, dead_owner_ok: bool = False) -> None:
        """Redirect to a live owner on another pod; 503 while that owner's pod is silent (unless ``dead_owner_ok``)."""
        owner = node.ownership.owner(project.id, node.config.lease_ttl)
        if not owner.live or owner.pod_id == node.pod.pod_id or owner.pod_id is None:
            return
        endpoint = node.pods.resolve_endpoint(owner.pod_id, node.config.liveness_ttl)
        if endpoint is not None:
            raise here(request, endpoint)
        if not dead_owner_ok:
            raise ProjectUnavailableError(
                f"project {project.ref} is held by a pod that is not answering; its lease has not run out",
                retry_after=owner.expires_in or 1.0,
                project=project.ref,
            )

    def folder(project: Project) -> str:
        return node.workspaces.folder_for(project.id)

    def show(project: Project) -> dict[str, Any]:
        owner = node.ownership.owner(project.id, node.config.lease_ttl)
        return dict(
            project.to_dict(),
            owner={"pod_id": owner.pod_id, "live": owner.live, "expires_in": owner.expires_in},
            running_here=project.id in node.registry,
        )

    principal_dep = Depends(_principal)
    _OPTIONAL_BODY = Body(default=None)
    p = PREFIX + "/projects/{tenant}/{name}"

    # ------------------------------------------------------------------ probes and metrics

    @app.get("/healthz", tags=["pod"])
    def healthz() -> dict[str, Any]:
        """200 while the process lives."""
        return {"ok": True, "pod_id": node.pod.pod_id}

    @app.get("/readyz", tags=["pod"], responses={503: {"description": "not ready yet (or any more)"}})
    def readyz() -> Response:
        """200 only once the pod is RUNNING (start-up done, not draining)."""
        body = {"ready": node.ready, "status": node.status.value, "pod_id": node.pod.pod_id}
        return SafeJSONResponse(body, status_code=200 if node.ready else 503)

    @app.get("/metrics", tags=["pod"])
    def metrics() -> Response:
        """Prometheus text format."""
        return Response(node.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    # ------------------------------------------------------------------ projects

    @app.post(PREFIX + "/projects", status_code=201, tags=["projects"])
    def create_project(body: ProjectCreate, principal: Principal = principal_dep) -> dict[str, Any]:
        """Create an INIT project."""
        if not principal.sees(body.tenant):
            raise ForbiddenError(f"this token may not create projects of tenant {body.tenant}", tenant=body.tenant)
        project = node.projects.create(
            body.tenant,
            body.name,
            lifecycle_type=body.lifecycle_type,
            group=body.group,
            selector=body.selector,
            score=body.score,
        )
        return show(project)

    @app.get(PREFIX + "/projects", tags=["projects"])
    def list_projects(
        tenant: str | None = None, status: ProjectStatus | None = None, principal: Principal = principal_dep
    ) -> dict[str, Any]:
        """Every project this token may see, optionally of one tenant and one status."""
        found = [
            pr.to_dict()
            for pr in node.projects.list(status)
            if principal.sees(pr.tenant) and (tenant is None or pr.tenant == tenant)
        ]
        return {"projects": found}

    @app.get(p, tags=["projects"])
    def show_project(tenant: str, name: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """A project with its owner (pod, live, seconds until its lease runs out) and generation."""
        return show(project_of(principal, tenant, name))

    @app.post(p + "/bring", tags=["projects"])
    def bring(
        request: Request,
        tenant: str,
        name: str,
        body: BringBody | None = _OPTIONAL_BODY,
        principal: Principal = principal_dep,
    ) -> dict[str, Any]:
        """Bring the project to RUNNING on this pod, or redirect to the pod that runs it."""
        project = project_of(principal, tenant, name)
        if body is not None and body.from_snapshot is not None:
            not_elsewhere(request, project)
            if not node.ready:
                raise ProjectUnavailableError(
                    "this pod is not ready", retry_after=node.config.beat_interval, project=project.ref
                )
            return show(node.bring(tenant, name, from_snapshot=body.from_snapshot))
        return show(served(request, tenant, name, bring=True))

    @app.post(p + "/suspend", tags=["projects"])
    def suspend(request: Request, tenant: str, name: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """Suspend: engines stopped, checkpoint published, folder removed, lease released."""
        project = project_of(principal, tenant, name)
        if project.status not in (ProjectStatus.SUSPENDED, ProjectStatus.INIT, ProjectStatus.CLOSED):
            not_elsewhere(request, project)
        return show(node.suspend(tenant, name))

    @app.post(p + "/close", tags=["projects"])
    def close(request: Request, tenant: str, name: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """Close (terminal): workspace and snapshots disposed. Sent to the live owner when there is one."""
        project = project_of(principal, tenant, name)
        if project.status is not ProjectStatus.CLOSED:
            not_elsewhere(request, project, dead_owner_ok=True)
        return show(node.close(tenant, name))

    @app.put(p + "/type", tags=["projects"])
    def set_type(tenant: str, name: str, body: TypeBody, principal: Principal = principal_dep) -> dict[str, Any]:
        """Switch between AUTO, EPHEMERAL and PERMANENT."""
        visible(principal, tenant, name)
        return show(node.projects.set_lifecycle_type(tenant, name, body.lifecycle_type))

    @app.put(p + "/placement", tags=["projects"])
    def set_placement(
        tenant: str, name: str, body: PlacementBody, principal: Principal = principal_dep
    ) -> dict[str, Any]:
        """Set the placement selector (label = value) and score."""
        visible(principal, tenant, name)
        return show(node.projects.set_placement(tenant, name, body.selector, body.score))

    @app.post(p + "/checkpoint", tags=["projects"])
    def checkpoint(request: Request, tenant: str, name: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """Checkpoint the project's folder now (it runs here, or is brought here first)."""
        visible(principal, tenant, name)
        served(request, tenant, name)
        result = node.checkpoint(tenant, name)
        data = result.to_dict() if hasattr(result, "to_dict") else {}
        return dict(data)

    # ------------------------------------------------------------------ sessions

    @app.post(p + "/sessions", status_code=201, tags=["sessions"])
    def create_session(tenant: str, name: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """A new, unbound session of the project."""
        return _session_dict(node.projects.create_session(project_of(principal, tenant, name)))

    @app.get(p + "/sessions", tags=["sessions"])
    def list_sessions(tenant: str, name: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """The project's sessions."""
        project = project_of(principal, tenant, name)
        return {"sessions": [_session_dict(s) for s in node.projects.sessions(project)]}

    @app.post(PREFIX + "/sessions/{session_id}/bind", tags=["sessions"])
    def bind_session(
        request: Request, session_id: str, body: BindBody, principal: Principal = principal_dep
    ) -> dict[str, Any]:
        """Bind the session to a client connection on the pod that runs its project (409 already-bound)."""
        session = node.projects.session(session_id)
        project = node.projects.by_id(session.project_id)
        if not principal.sees(project.tenant):
            raise NotFoundError(f"no session {session_id}", code="session-not-found")
        running = served(request, project.tenant, project.name)
        bound = node.projects.bind_session(session_id, body.connection_id, node.pod.pod_id, running.generation)
        return _session_dict(bound)

    @app.post(PREFIX + "/sessions/{session_id}/unbind", tags=["sessions"])
    def unbind_session(
        request: Request, session_id: str, body: BindBody, principal: Principal = principal_dep
    ) -> dict[str, Any]:
        """Release the session from the client connection it is bound to, on the pod that runs its project.

        Idempotent; a session bound to another connection is 409 ``already-bound`` (a client releases only
        its own binding).
        """
        session = node.projects.session(session_id)
        project = node.projects.by_id(session.project_id)
        if not principal.sees(project.tenant):
            raise NotFoundError(f"no session {session_id}", code="session-not-found")
        running = served(request, project.tenant, project.name)
        return _session_dict(node.projects.unbind_session(session_id, body.connection_id, running.generation))

    # ------------------------------------------------------------------ files

    @app.get(p + "/files", tags=["files"])
    def list_files(
        request: Request, tenant: str, name: str, path: str = "", principal: Principal = principal_dep
    ) -> dict[str, Any]:
        """The entries of a folder of the project's workspace folder (symlinks listed, never followed)."""
        visible(principal, tenant, name)
        _parts(path)
        project = served(request, tenant, name)
        return {"path": path, "entries": list_folder(folder(project), path)}

    @app.get(p + "/files/{path:path}", tags=["files"], response_class=StreamingResponse)
    def read_file(
        request: Request, tenant: str, name: str, path: str, principal: Principal = principal_dep
    ) -> Response:
        """A file's bytes."""
        visible(principal, tenant, name)
        _parts(path)
        project = served(request, tenant, name)
        fd, size = open_file(folder(project), path)
        return StreamingResponse(
            _chunks(fd), media_type="application/octet-stream", headers={"Content-Length": str(size)}
        )

    @app.put(p + "/files/{path:path}", tags=["files"], responses={413: {"description": "larger than 64 MiB"}})
    async def write(request: Request, tenant: str, name: str, path: str, principal: Principal = principal_dep) -> Any:
        """Write a file from the request body (at most 64 MiB); parents are created, the file replaced whole."""
        visible(principal, tenant, name)
        _parts(path)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_FILE_BYTES:
            raise PayloadTooLargeError(f"the body holds {declared} bytes", limit=MAX_FILE_BYTES)
        await run_in_threadpool(served, request, tenant, name)  # redirected before the body is read
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_FILE_BYTES:
                raise PayloadTooLargeError("the body is larger than the limit", limit=MAX_FILE_BYTES)

        def guarded() -> bool:
            """Served here still, and no suspend, hand-over or close under way: then written (the gate)."""
            project = node.projects.get(tenant, name)
            with node.gate.writing(project.id, project.ref):
                return write_file(folder(served(request, tenant, name)), path, bytes(data))

        created = await run_in_threadpool(guarded)
        return SafeJSONResponse(
            {"path": path, "size": len(data), "created": created}, status_code=201 if created else 200
        )

    @app.delete(p + "/files/{path:path}", status_code=204, tags=["files"])
    def delete_file(
        request: Request, tenant: str, name: str, path: str, principal: Principal = principal_dep
    ) -> Response:
        """Delete a file or symlink (the link, not its target), or an empty folder."""
        visible(principal, tenant, name)
        _parts(path)
        project = node.projects.get(tenant, name)
        with node.gate.writing(project.id, project.ref):
            delete_path(folder(served(request, tenant, name)), path)
        return Response(status_code=204)

    # ------------------------------------------------------------------ snapshots

    def snapshot_visible(principal: Principal, snapshot_id: str) -> Any:
        snap = node.store.snapshots.get(snapshot_id)
        if principal.unrestricted:
            return snap
        with node.store.db.transaction(write=False) as tx:
            row = tx.one("project_by_workspace", {"w": snap.workspace_id})
        if row is None or not principal.sees(row["tenant"]):
            raise NotFoundError(
                f"no snapshot {snapshot_id!r}",
                code="snapshot-not-found",
                hint="list snapshots with `tenure snapshot list WORKSPACE`",
                snapshot=snapshot_id,
            )
        return snap

    @app.get(p + "/snapshots", tags=["snapshots"])
    def list_snapshots(tenant: str, name: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """The project's snapshots, oldest first; ``head`` marks the workspace's head."""
        project = project_of(principal, tenant, name)
        head = node.store.workspaces.workspace(project.workspace_id).head_snapshot_id
        snaps = node.store.snapshots.list(project.workspace_id)
        return {"snapshots": [dict(s.to_dict(), head=s.id == head) for s in snaps]}

    @app.get(p + "/history", tags=["projects"])
    def project_history(
        tenant: str,
        name: str,
        limit: int = Query(100, ge=1, le=1000, description="at most this many events"),
        before: float | None = Query(
            None, allow_inf_nan=False, description="only events before this store-clock time (paging back)"
        ),
        principal: Principal = principal_dep,
    ) -> dict[str, Any]:
        """The project's ownership timeline, newest first: claims, takeovers, brings, suspends, drift, …"""
        project = project_of(principal, tenant, name)
        events = node.lifecycle.timeline.history(project.id, limit=limit, before=before)
        return {"project": project.ref, "events": [e.to_dict() for e in events]}

    @app.get(PREFIX + "/snapshots/{snapshot_id}", tags=["snapshots"])
    def show_snapshot(snapshot_id: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """One snapshot record."""
        return dict(snapshot_visible(principal, snapshot_id).to_dict())

    @app.post(PREFIX + "/snapshots/{snapshot_id}/verify", tags=["snapshots"])
    def verify_snapshot(
        snapshot_id: str,
        sample: float = Query(
            1.0, gt=0.0, le=1.0, allow_inf_nan=False, description="fraction of data objects to re-hash"
        ),
        principal: Principal = principal_dep,
    ) -> dict[str, Any]:
        """Re-hash the snapshot's objects; a damaged READY snapshot becomes DEGRADED (``ok`` false)."""
        snap = snapshot_visible(principal, snapshot_id)
        return dict(node.workspaces.verify(snap.id, sample=sample).to_dict())

    # ------------------------------------------------------------------ pods

    def reconcile_counts() -> dict[str, int]:
        report = node.reconcile_report
        counts = getattr(report, "counts", None) or {}
        return {str(verdict): int(n) for verdict, n in sorted(counts.items())}

    def pod_dict(pod_id: str) -> dict[str, Any]:
        pod = node.pods.get(pod_id)
        live = dict((row.id, alive) for row, alive in node.pods.list_with_liveness(node.config.liveness_ttl))
        return dict(pod.to_dict(), live=live.get(pod.id, False), this=pod.id == node.pod.pod_id)

    @app.get(PREFIX + "/pods", tags=["pods"])
    def list_pods() -> dict[str, Any]:
        """Every pod row with whether it is live (heard from within the liveness TTL)."""
        return {
            "pods": [
                dict(pod.to_dict(), live=live, this=pod.id == node.pod.pod_id)
                for pod, live in node.pods.list_with_liveness(node.config.liveness_ttl)
            ]
        }

    @app.get(PREFIX + "/pods/{pod_id}", tags=["pods"])
    def show_pod(pod_id: str) -> dict[str, Any]:
        """One pod row; for this pod, ``reconcile``: its last restart reconciliation's counts per verdict."""
        data = pod_dict(pod_id)
        data["reconcile"] = reconcile_counts() if data["this"] else None
        return data

    @app.post(PREFIX + "/pods/{pod_id}/drain", status_code=202, tags=["pods"])
    def drain(request: Request, pod_id: str, principal: Principal = principal_dep) -> Response:
        """Drain this pod (202; it hands every project over, then stops), or 307 to the pod named."""
        if not principal.unrestricted:
            raise ForbiddenError("draining a pod needs an admin or cluster token", pod=pod_id)
        if pod_id != node.pod.pod_id:
            node.pods.get(pod_id)
            endpoint = node.pods.resolve_endpoint(pod_id, node.config.liveness_ttl)
            if endpoint is None:
                raise ConflictError(
                    f"pod {pod_id} is not live",
                    code="pod-not-live",
                    pod=pod_id,
                    hint="a silent pod's projects move once their leases run out",
                )
            raise here(request, endpoint)
        start_drain(node)
        return SafeJSONResponse({"pod_id": node.pod.pod_id, "status": "DRAINING"}, status_code=202)

    # ------------------------------------------------------------------ mounts of this host

    discarding = threading.Lock()

    def mount_of(principal: Principal, mount_id: str) -> Mount:
        """A mount record of this host; a tenant token's only for its tenant's projects (others: not found)."""
        mount = node.lifecycle.mounts.store.get(mount_id)
        if principal.unrestricted:
            return mount
        tenant, sep, _ = (mount.project_ref or "").partition("/")
        if not sep or not principal.sees(tenant):
            raise NotFoundError(
                f"no mount {mount_id} on this host",
                code="mount-not-found",
                mount=mount_id,
                hint="list this host's mounts with GET /api/v1/mounts",
            )
        return mount

    def preserved(mount: Mount) -> str:
        """The mount's preserved folder: a real folder (not a symlink) right under ``<data>/preserved/``."""
        folder = mount.preserved_folder
        root = os.path.realpath(os.path.join(node.config.data_dir, "preserved"))
        if (
            folder
            and os.path.isdir(folder)
            and not os.path.islink(folder)
            and os.path.dirname(os.path.realpath(folder)) == root
        ):
            return folder
        raise ConflictError(
            f"mount {mount.id} has no preserved delta on this host",
            code="no-preserved-delta",
            mount=mount.id,
            hint="GET /api/v1/mounts lists the mounts with a preserved folder",
        )

    @app.get(PREFIX + "/mounts", tags=["mounts"])
    def list_mounts(principal: Principal = principal_dep) -> dict[str, Any]:
        """This host's mount records (a tenant token: its tenant's), with status, verdict and preserved folder."""
        found = []
        for mount in node.lifecycle.mounts.store.list():
            tenant, sep, _ = (mount.project_ref or "").partition("/")
            if principal.unrestricted or (sep and principal.sees(tenant)):
                found.append(mount.to_dict())
        return {"mounts": found}

    @app.get(PREFIX + "/mounts/{mount_id}", tags=["mounts"])
    def show_mount(mount_id: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """One mount record of this host."""
        return mount_of(principal, mount_id).to_dict()

    @app.get(PREFIX + "/mounts/{mount_id}/files", tags=["mounts"])
    def list_mount_files(mount_id: str, path: str = "", principal: Principal = principal_dep) -> dict[str, Any]:
        """The entries of a folder of the mount's preserved delta (symlinks listed, never followed)."""
        _parts(path)
        folder = preserved(mount_of(principal, mount_id))
        return {"mount": mount_id, "path": path, "entries": list_folder(folder, path)}

    @app.get(PREFIX + "/mounts/{mount_id}/files/{path:path}", tags=["mounts"], response_class=StreamingResponse)
    def read_mount_file(mount_id: str, path: str, principal: Principal = principal_dep) -> Response:
        """A file's bytes from the mount's preserved delta."""
        _parts(path)
        fd, size = open_file(preserved(mount_of(principal, mount_id)), path)
        return StreamingResponse(
            _chunks(fd), media_type="application/octet-stream", headers={"Content-Length": str(size)}
        )

    @app.post(PREFIX + "/mounts/{mount_id}/discard", tags=["mounts"])
    def discard_mount(mount_id: str, principal: Principal = principal_dep) -> dict[str, Any]:
        """Delete the mount's preserved delta now, and its record (it cannot be recovered afterwards)."""
        with discarding:
            folder = preserved(mount_of(principal, mount_id))
            shutil.rmtree(folder)
            node.lifecycle.mounts.store.delete(mount_id)
        return {"mount": mount_id, "discarded": folder}

    from tenure.serve.cluster_api import add_cluster_routes

    add_cluster_routes(app, node, principal_dep, ForbiddenError)
    return app


def start_drain(node: Node) -> None:
    """Drain ``node`` in the background: through its ``on_drain_requested`` hook (the daemon then exits), or
    :meth:`Node.drain` in a thread."""
    hook: Callable[[], None] | None = node.on_drain_requested
    if hook is not None:
        hook()
        return

    def run() -> None:
        try:
            node.drain()
        except Exception:  # noqa: BLE001 - logged; the pod's leases then end by expiry
            log.exception("drain failed", extra={"tenure": {"pod": node.pod.pod_id}})

    threading.Thread(target=run, name="tenure-drain", daemon=True).start()
