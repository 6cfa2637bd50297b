"""The HTTP API every pod serves (docs/api.md), versioned under ``/api/v1``.

Thin by rule: each handler parses its request, makes one call on :class:`~tenure.pod.ops.ProjectOps` and
answers what it returned. An operation that must run on the project's owner (bring, checkpoint, files,
session bind) may return :class:`~tenure.pod.ops.Elsewhere`, answered 307 to the live owner's endpoint
with the same path and query, or :class:`~tenure.pod.ops.Later`, answered 503 with ``Retry-After`` while
the owner's pod is silent but its lease has not run out (:func:`answer`).

Errors are ``application/problem+json`` documents carrying the same stable codes as the CLI; the error
family decides the status (:mod:`tenure.api.problems`). Who a request is, and the open loopback mode, is
:mod:`tenure.api.auth`.

The mount endpoints answer for this pod's host only: its mount store and the preserved deltas under
``<data>/preserved/`` (read with the same path checks as the workspace files, never outside that folder).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, TypeVar
from urllib.parse import quote

from fastapi import Body, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from tenure.api.auth import RequestGate, loopback_listen, principal_of
from tenure.api.dashboard import mount_dashboard
from tenure.api.limits import BodyLimit
from tenure.api.problems import (
    MAX_FILE_BYTES,
    PROBLEM_RESPONSES,
    PayloadTooLargeError,
    ProjectUnavailableError,
    SafeJSONResponse,
    problem,
    problem_of,
)
from tenure.errors import TenureError
from tenure.fsio import tmp_name, write_all
from tenure.pod.ops import Elsewhere, ForbiddenError, Later, ProjectOps, ProjectSpec
from tenure.pod.runtime import UPLOADS, PodRuntime
from tenure.pod.tokens import Principal, TokenStore
from tenure.projects.records import LifecycleType
from tenure.states import ProjectStatus
from tenure.workspaces import files
from tenure.workspaces.files import CHUNK

__all__ = ["create_app", "answer", "MAX_FILE_BYTES", "PREFIX"]

PREFIX = "/api/v1"
T = TypeVar("T")
_principal = Depends(principal_of)
_OPTIONAL_BODY = Body(default=None)
#: a mutating request made under a lineage the client holds (412 lineage-changed when the project's differs)
_IF_LINEAGE = Header(
    None,
    alias="Tenure-If-Lineage",
    description="the project's lineage the client holds; refused with 412 lineage-changed when it differs",
)
#: a write answered only once it is inside a published checkpoint
_DURABLE = Query(False, description="answer only once the write is inside a published checkpoint (named)")
LINEAGE = "Tenure-Lineage"


class _Change:
    """How a file write or deletion is asked for: ``?durable=true``, ``Tenure-If-Lineage``."""

    def __init__(self, durable: bool = _DURABLE, if_lineage: int | None = _IF_LINEAGE) -> None:
        self.durable = durable
        self.if_lineage = if_lineage


_CHANGE = Depends(_Change)
_P = PREFIX + "/projects/{tenant}/{name}"


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


class RecoverBody(BaseModel):
    to: str | None = Field(
        default=None,
        description="an absolute, new or empty folder of this pod's host, outside its data folder (admin token)",
    )
    into_project: bool = Field(
        default=False, description="write the delta's changed files back into the running project instead"
    )


class AutosaveBody(BaseModel):
    seconds: float | None = Field(
        description="checkpoint the running project at most this often while its folder changes; 0 off; null"
        " the pod's default (tenure serve --autosave)",
        allow_inf_nan=False,
    )


class DemandBody(BaseModel):
    source: str = Field(default="api", description="who needs the project (1-64 letters, digits, . _ : -)")
    expires_in: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="seconds until it ends by itself (null: until removed)"
    )


class TypeBody(BaseModel):
    lifecycle_type: LifecycleType


class PlacementBody(BaseModel):
    selector: dict[str, str] = Field(default_factory=dict)
    score: float = 1.0


class BindBody(BaseModel):
    connection_id: str = Field(min_length=1, max_length=256)


# ---------------------------------------------------------------------- answers


class _Redirect(Exception):
    """Answer 307 to ``location`` (another pod's endpoint, same path and query)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def answer(request: Request, result: T | Elsewhere | Later) -> T:
    """``result`` as it is, or, for :class:`Elsewhere` / :class:`Later`, the redirect / 503 raised."""
    if isinstance(result, Elsewhere):
        path = request.scope.get("raw_path") or quote(request.scope["path"]).encode()
        query = request.scope.get("query_string") or b""
        tail = path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        raise _Redirect(result.endpoint.rstrip("/") + tail)
    if isinstance(result, Later):
        raise ProjectUnavailableError(result.message, retry_after=result.retry_after, project=result.project)
    return result


def lineage(response: Response, doc: T) -> T:
    """``doc`` (a project's document, or an answer about one), its lineage also as the Tenure-Lineage header."""
    if isinstance(doc, dict) and isinstance(doc.get("lineage"), int):
        response.headers[LINEAGE] = str(doc["lineage"])
    return doc


def _stream(fd: int, size: int, headers: dict[str, str] | None = None) -> StreamingResponse:
    def chunks() -> Iterator[bytes]:
        try:
            while chunk := os.read(fd, CHUNK):
                yield chunk
        finally:
            os.close(fd)

    return StreamingResponse(
        chunks(), media_type="application/octet-stream", headers={"Content-Length": str(size), **(headers or {})}
    )


# ---------------------------------------------------------------------- the app


def create_app(node: PodRuntime, *, tokens: TokenStore | None = None) -> FastAPI:
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
    app.add_middleware(BodyLimit)  # inside the gate: an unauthenticated request is refused before its size is
    app.add_middleware(RequestGate, node=node, tokens=token_store, loopback=loopback_listen(node.config.listen))
    mount_dashboard(app)  # the pages at / and /ui/…, in front of the auth gate (docs/serve.md, "Dashboard")
    _error_handlers(app)
    ops = ProjectOps(node)
    _probes(app, node)
    _project_routes(app, ops)
    _checkpoint_routes(app, ops)
    _session_routes(app, ops)
    _file_routes(app, ops)
    _file_write_routes(app, ops)
    _snapshot_routes(app, ops)
    _pod_routes(app, ops)
    _mount_routes(app, ops)
    from tenure.api.cluster_routes import add_cluster_routes

    add_cluster_routes(app, node, _principal, ForbiddenError)
    return app


def _error_handlers(app: FastAPI) -> None:
    async def on_tenure_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, TenureError)
        return problem_of(exc)

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


def _probes(app: FastAPI, node: PodRuntime) -> None:
    @app.get("/healthz", tags=["pod"])
    def healthz() -> dict[str, Any]:
        """200 while the process lives."""
        return {"ok": True, "pod_id": node.pod_id}

    @app.get("/readyz", tags=["pod"], responses={503: {"description": "not ready yet (or any more)"}})
    def readyz() -> Response:
        """200 only once the pod is RUNNING (start-up done, not draining) with room in its data folder;
        ``refusing`` says why a RUNNING pod is not ready (``disk-full: …``), else null."""
        body = {"ready": node.ready, "status": node.status.value, "pod_id": node.pod_id, "refusing": node.space.full}
        return SafeJSONResponse(body, status_code=200 if node.ready else 503)

    @app.get("/metrics", tags=["pod"])
    def metrics() -> Response:
        """Prometheus text format."""
        return Response(node.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _project_routes(app: FastAPI, ops: ProjectOps) -> None:
    @app.post(PREFIX + "/projects", status_code=201, tags=["projects"])
    def create_project(body: ProjectCreate, response: Response, principal: Principal = _principal) -> dict[str, Any]:
        """Create an INIT project."""
        spec = ProjectSpec(body.tenant, body.name, body.lifecycle_type, body.group, body.selector, body.score)
        return lineage(response, ops.create(principal, spec))

    @app.get(PREFIX + "/projects", tags=["projects"])
    def list_projects(
        tenant: str | None = None, status: ProjectStatus | None = None, principal: Principal = _principal
    ) -> dict[str, Any]:
        """Every project this token may see, optionally of one tenant and one status."""
        return {"projects": ops.projects(principal, tenant, status)}

    @app.get(_P, tags=["projects"])
    def show_project(tenant: str, name: str, response: Response, principal: Principal = _principal) -> dict[str, Any]:
        """A project with its owner (pod, live, seconds until its lease runs out), generation and lineage."""
        return lineage(response, ops.get(principal, tenant, name))

    @app.post(_P + "/bring", tags=["projects"])
    def bring(
        request: Request,
        tenant: str,
        name: str,
        response: Response,
        body: BringBody | None = _OPTIONAL_BODY,
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """Bring the project to RUNNING on this pod, or redirect to the pod that runs it."""
        snapshot = body.from_snapshot if body is not None else None
        return lineage(response, answer(request, ops.bring(principal, tenant, name, from_snapshot=snapshot)))

    @app.post(_P + "/suspend", tags=["projects"])
    def suspend(
        request: Request,
        tenant: str,
        name: str,
        response: Response,
        if_lineage: int | None = _IF_LINEAGE,
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """Suspend: engines stopped, checkpoint published, folder removed, lease released."""
        return lineage(response, answer(request, ops.suspend(principal, tenant, name, if_lineage=if_lineage)))

    @app.post(_P + "/close", tags=["projects"])
    def close(
        request: Request, tenant: str, name: str, response: Response, principal: Principal = _principal
    ) -> dict[str, Any]:
        """Close (terminal): workspace and snapshots disposed. Sent to the live owner when there is one."""
        return lineage(response, answer(request, ops.close(principal, tenant, name)))

    @app.put(_P + "/type", tags=["projects"])
    def set_type(
        tenant: str, name: str, body: TypeBody, response: Response, principal: Principal = _principal
    ) -> dict[str, Any]:
        """Switch between AUTO, EPHEMERAL and PERMANENT."""
        return lineage(response, ops.set_type(principal, tenant, name, body.lifecycle_type))

    @app.put(_P + "/autosave", tags=["projects"])
    def set_autosave(
        tenant: str, name: str, body: AutosaveBody, response: Response, principal: Principal = _principal
    ) -> dict[str, Any]:
        """Set the project's autosave policy: the recovery point of writes that are not durable."""
        return lineage(response, ops.set_autosave(principal, tenant, name, body.seconds))

    @app.put(_P + "/placement", tags=["projects"])
    def set_placement(
        tenant: str, name: str, body: PlacementBody, response: Response, principal: Principal = _principal
    ) -> dict[str, Any]:
        """Set the placement selector (label = value) and score."""
        return lineage(response, ops.set_placement(principal, tenant, name, body.selector, body.score))


def _checkpoint_routes(app: FastAPI, ops: ProjectOps) -> None:
    @app.post(_P + "/checkpoint", tags=["projects"])
    def checkpoint(
        request: Request,
        tenant: str,
        name: str,
        response: Response,
        if_lineage: int | None = _IF_LINEAGE,
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """Checkpoint the project's folder now (it runs here, or is brought here first).

        With ``Tenure-If-Lineage``: refused (412 ``lineage-changed``) when the project has started another
        lineage since, so a checkpoint acknowledged under a lineage holds every write made under it.
        """
        return lineage(response, answer(request, ops.checkpoint(principal, tenant, name, if_lineage=if_lineage)))

    @app.get(_P + "/history", tags=["projects"])
    def project_history(
        tenant: str,
        name: str,
        limit: int = Query(100, ge=1, le=1000, description="at most this many events"),
        before: float | None = Query(
            None, allow_inf_nan=False, description="only events before this store-clock time (paging back)"
        ),
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """The project's ownership timeline, newest first: claims, takeovers, brings, suspends, drift, …"""
        return ops.history(principal, tenant, name, limit=limit, before=before)


def _session_routes(app: FastAPI, ops: ProjectOps) -> None:
    @app.post(_P + "/sessions", status_code=201, tags=["sessions"])
    def create_session(tenant: str, name: str, principal: Principal = _principal) -> dict[str, Any]:
        """A new, unbound session of the project."""
        return ops.create_session(principal, tenant, name)

    @app.get(_P + "/sessions", tags=["sessions"])
    def list_sessions(tenant: str, name: str, principal: Principal = _principal) -> dict[str, Any]:
        """The project's sessions."""
        return {"sessions": ops.sessions(principal, tenant, name)}

    @app.post(PREFIX + "/sessions/{session_id}/bind", tags=["sessions"])
    def bind_session(
        request: Request,
        session_id: str,
        body: BindBody,
        if_lineage: int | None = _IF_LINEAGE,
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """Bind the session to a client connection on the pod that runs its project (409 already-bound)."""
        return answer(request, ops.bind_session(principal, session_id, body.connection_id, if_lineage=if_lineage))

    @app.post(PREFIX + "/sessions/{session_id}/unbind", tags=["sessions"])
    def unbind_session(
        request: Request, session_id: str, body: BindBody, principal: Principal = _principal
    ) -> dict[str, Any]:
        """Release the session from the client connection it is bound to, on the pod that runs its project.

        Idempotent; a session bound to another connection is 409 ``already-bound`` (a client releases only
        its own binding).
        """
        return answer(request, ops.unbind_session(principal, session_id, body.connection_id))

    @app.delete(PREFIX + "/sessions/{session_id}", tags=["sessions"])
    def delete_session(session_id: str, principal: Principal = _principal) -> dict[str, Any]:
        """Delete a session: its demand ends (an EPHEMERAL project not otherwise in use is then suspended)."""
        return ops.delete_session(principal, session_id)

    @app.get(_P + "/demand", tags=["projects"])
    def show_demand(tenant: str, name: str, principal: Principal = _principal) -> dict[str, Any]:
        """Why the project needs an owner: its demand sources, its session count, ``owner_required``."""
        return ops.demand(principal, tenant, name)

    @app.post(_P + "/demand", tags=["projects"])
    def add_demand(tenant: str, name: str, body: DemandBody, principal: Principal = _principal) -> dict[str, Any]:
        """The project needs an owner (it comes back on its own after a crash) until this is removed or ends."""
        return ops.add_demand(principal, tenant, name, body.source, body.expires_in)

    @app.delete(_P + "/demand", tags=["projects"])
    def remove_demand(tenant: str, name: str, source: str = "api", principal: Principal = _principal) -> dict[str, Any]:
        """The demand from ``source`` ends."""
        return ops.remove_demand(principal, tenant, name, source)


def _file_routes(app: FastAPI, ops: ProjectOps) -> None:
    @app.get(_P + "/files", tags=["files"])
    def list_files(
        request: Request, tenant: str, name: str, response: Response, path: str = "", principal: Principal = _principal
    ) -> dict[str, Any]:
        """The entries of a folder of the project's workspace folder (symlinks listed, never followed)."""
        return lineage(response, answer(request, ops.list_files(principal, tenant, name, path)))

    @app.get(_P + "/files/{path:path}", tags=["files"], response_class=StreamingResponse)
    def read_file(request: Request, tenant: str, name: str, path: str, principal: Principal = _principal) -> Response:
        """A file's bytes."""
        fd, size, at = answer(request, ops.open_file(principal, tenant, name, path))
        return _stream(fd, size, {LINEAGE: str(at)})


def _file_write_routes(app: FastAPI, ops: ProjectOps) -> None:
    @app.put(_P + "/files/{path:path}", tags=["files"], responses={413: {"description": "larger than 64 MiB"}})
    async def write(
        request: Request, tenant: str, name: str, path: str, how: _Change = _CHANGE, principal: Principal = _principal
    ) -> Any:
        """Write a file from the request body (at most 64 MiB); parents are created, the file replaced whole.

        ``durable=true``: answered only once the write is inside a published checkpoint, which ``snapshot``
        names (durable writes of a project share checkpoints); never 2xx when it could not be made durable.
        """
        ops.check_write(principal, tenant, name, path)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_FILE_BYTES:
            raise PayloadTooLargeError(f"the body holds {declared} bytes", limit=MAX_FILE_BYTES)
        # redirected, or refused for another lineage, before the body is read
        answer(request, await run_in_threadpool(ops.ready_to_write, principal, tenant, name, how.if_lineage))
        # streamed to a staged file (memory: one chunk, not the file), moved into place once complete
        try:
            staged, size = await _stage_upload(request, ops.pod.config.data_dir, path)
        except TenureError as exc:
            ops.pod.note_full(exc)  # disk-full: not ready, no new claims, until a probe fits
            raise
        write = ops.write_file
        try:
            done = answer(
                request,
                await run_in_threadpool(
                    lambda: write(principal, tenant, name, path, staged, durable=how.durable, if_lineage=how.if_lineage)
                ),
            )
        finally:
            _discard(staged)
        doc = dict(done, path=path, size=size)
        return SafeJSONResponse(
            doc, status_code=201 if done["created"] else 200, headers={LINEAGE: str(done["lineage"])}
        )

    @app.delete(_P + "/files/{path:path}", status_code=204, tags=["files"])
    def delete_file(
        request: Request, tenant: str, name: str, path: str, how: _Change = _CHANGE, principal: Principal = _principal
    ) -> Response:
        """Delete a file or symlink (the link, not its target), or an empty folder.

        204; with ``durable=true`` 200 and the snapshot the deletion is in, once it is published.
        """
        deleted = ops.delete_file(principal, tenant, name, path, durable=how.durable, if_lineage=how.if_lineage)
        done = answer(request, deleted)
        headers = {LINEAGE: str(done["lineage"])}
        if how.durable:
            return SafeJSONResponse(dict(done, path=path), headers=headers)
        return Response(status_code=204, headers=headers)


async def _stage_upload(request: Request, data_dir: str, path: str) -> tuple[files.StagedFile, int]:
    """The request body in a new file of the data folder's ``uploads`` folder (at most MAX_FILE_BYTES), and its
    size. A body over the limit, a client that goes away, a full data folder: the staged file is removed."""
    folder = os.path.join(data_dir, UPLOADS)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    staged = files.StagedFile(folder, tmp_name(".upload"))
    fd = os.open(staged.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    size = 0
    try:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    raise PayloadTooLargeError("the body is larger than the limit", limit=MAX_FILE_BYTES)
                if chunk:
                    await run_in_threadpool(write_all, fd, chunk)
        except OSError as exc:
            raise files.stage_error(exc, path) from None
        finally:
            os.close(fd)
    except BaseException:
        _discard(staged)
        raise
    return staged, size


def _discard(staged: files.StagedFile) -> None:
    try:
        os.unlink(staged.path)
    except FileNotFoundError:
        pass


def _snapshot_routes(app: FastAPI, ops: ProjectOps) -> None:
    @app.get(_P + "/snapshots", tags=["snapshots"])
    def list_snapshots(tenant: str, name: str, principal: Principal = _principal) -> dict[str, Any]:
        """The project's snapshots, oldest first; ``head`` marks the workspace's head."""
        return {"snapshots": ops.snapshots(principal, tenant, name)}

    @app.get(PREFIX + "/snapshots/{snapshot_id}", tags=["snapshots"])
    def show_snapshot(snapshot_id: str, principal: Principal = _principal) -> dict[str, Any]:
        """One snapshot record."""
        return ops.snapshot(principal, snapshot_id)

    @app.post(PREFIX + "/snapshots/{snapshot_id}/verify", tags=["snapshots"])
    def verify_snapshot(
        snapshot_id: str,
        sample: float = Query(
            1.0, gt=0.0, le=1.0, allow_inf_nan=False, description="fraction of data objects to re-hash"
        ),
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """Re-hash the snapshot's objects; a damaged READY snapshot becomes DEGRADED (``ok`` false)."""
        return ops.verify_snapshot(principal, snapshot_id, sample=sample)


def _pod_routes(app: FastAPI, ops: ProjectOps) -> None:
    node = ops.pod

    @app.get(PREFIX + "/pods", tags=["pods"])
    def list_pods() -> dict[str, Any]:
        """Every pod row with whether it is live (heard from within the liveness TTL) and its ``health``:
        ``live``, ``dead`` (not STOPPED, silent past the liveness TTL) or ``stopped``."""
        return {"pods": node.pods.with_health(ops.pods(), node.config.liveness_ttl)}

    @app.post(PREFIX + "/pods/prune", tags=["pods"])
    def prune_pods(
        older_than: float = Query(
            3600.0, ge=0.0, allow_inf_nan=False, description="seconds since the pod was last heard from"
        ),
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """Delete the rows of STOPPED and dead pods that hold no project, last heard from more than
        ``older_than`` seconds ago (admin or cluster token); never a live pod."""
        if not principal.unrestricted:
            raise ForbiddenError("pruning pods needs an admin or cluster token")
        pruned = node.ownership.prune_pods(older_than, node.config.liveness_ttl, keep=node.pod_id)
        return {"pruned": pruned, "older_than": older_than}

    @app.get(PREFIX + "/pods/{pod_id}", tags=["pods"])
    def show_pod(pod_id: str) -> dict[str, Any]:
        """One pod row with its ``health``; for this pod, ``reconcile``: its last restart reconciliation's counts
        per verdict."""
        return node.pods.with_health([ops.pod_row(pod_id)], node.config.liveness_ttl)[0]

    @app.post(PREFIX + "/pods/{pod_id}/drain", status_code=202, tags=["pods"])
    def drain(request: Request, pod_id: str, principal: Principal = _principal) -> Response:
        """Drain this pod (202; it hands every project over, then stops), or 307 to the pod named."""
        return SafeJSONResponse(answer(request, ops.drain(principal, pod_id)), status_code=202)


def _mount_routes(app: FastAPI, ops: ProjectOps) -> None:
    @app.get(PREFIX + "/mounts", tags=["mounts"])
    def list_mounts(principal: Principal = _principal) -> dict[str, Any]:
        """This host's mount records (a tenant token: its tenant's), with status, verdict and preserved folder."""
        return {"mounts": ops.mounts(principal)}

    @app.get(PREFIX + "/mounts/{mount_id}", tags=["mounts"])
    def show_mount(mount_id: str, principal: Principal = _principal) -> dict[str, Any]:
        """One mount record of this host."""
        return ops.mount(principal, mount_id)

    @app.get(PREFIX + "/mounts/{mount_id}/files", tags=["mounts"])
    def list_mount_files(mount_id: str, path: str = "", principal: Principal = _principal) -> dict[str, Any]:
        """The entries of a folder of the mount's preserved delta (symlinks listed, never followed)."""
        return ops.mount_files(principal, mount_id, path)

    @app.get(PREFIX + "/mounts/{mount_id}/files/{path:path}", tags=["mounts"], response_class=StreamingResponse)
    def read_mount_file(mount_id: str, path: str, principal: Principal = _principal) -> Response:
        """A file's bytes from the mount's preserved delta."""
        return _stream(*ops.open_mount_file(principal, mount_id, path))

    @app.post(PREFIX + "/mounts/{mount_id}/recover", tags=["mounts"])
    def recover_mount(
        request: Request,
        mount_id: str,
        body: RecoverBody,
        response: Response,
        if_lineage: int | None = _IF_LINEAGE,
        principal: Principal = _principal,
    ) -> dict[str, Any]:
        """Recover a preserved delta recorded in the store, from any pod: restored into a folder (``to``), or
        its changed files merged into the running project (``into_project``; sent to the pod that runs it)."""
        done = ops.recover_mount(principal, mount_id, to=body.to, into_project=body.into_project, if_lineage=if_lineage)
        return lineage(response, answer(request, done))

    @app.post(PREFIX + "/mounts/{mount_id}/discard", tags=["mounts"])
    def discard_mount(mount_id: str, principal: Principal = _principal) -> dict[str, Any]:
        """Delete the mount's preserved delta now, and its record (it cannot be recovered afterwards)."""
        return ops.discard_mount(principal, mount_id)
