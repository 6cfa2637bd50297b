"""The dashboard every pod serves at ``/`` (docs/serve.md, "Dashboard").

Three static files shipped as package data (``tenure/api/web/``: one HTML page, its script and its
style sheet) and no data of their own: the script polls the JSON API (``/api/v1/pods``,
``/api/v1/projects``, ``/api/v1/cluster/master``, ``/api/v1/cluster/demand``, a project's
``/history``) every second with the bearer token the user typed, kept in the browser's
``sessionStorage``. So what a page shows is exactly what that token may see, and the pages themselves
are served without auth: :func:`mount_dashboard` puts them in front of the API's auth gate.

Paths: ``/`` (pods, demand, projects) and ``/ui/projects/{tenant}/{name}`` (one project and its
ownership timeline) answer the same HTML page, which picks its view from the path; the script and
the style sheet are under ``/ui/static/``. Every response carries a Content-Security-Policy that
allows scripts, styles and fetches from this origin only (no inline script, no inline handlers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["mount_dashboard", "CSP", "PAGE_PATHS"]

#: the pages' Content-Security-Policy: everything from this origin only, nothing inline, no framing
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: the route templates of the pages (the same HTML; the script reads the path)
PAGE_PATHS = ("/", "/ui/projects/{tenant}/{name}")
_Endpoint = Callable[[Request], Awaitable[Response]]
_ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _read(name: str) -> bytes:
    return files("tenure.api").joinpath("web", name).read_bytes()


class _Dashboard:
    """ASGI middleware in front of the API: answers ``/`` and ``/ui/…`` itself, passes the rest on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        page = _read("index.html")
        assets = {name: (_read(name), media) for name, media in _ASSETS.items()}

        async def serve_page(request: Request) -> Response:
            return Response(page, media_type="text/html; charset=utf-8", headers=_HEADERS)

        async def serve_asset(request: Request) -> Response:
            found = assets.get(request.path_params["file"])
            if found is None:
                return await not_found(request)
            body, media = found
            return Response(body, media_type=media, headers=_HEADERS)

        async def not_found(request: Request) -> Response:
            return PlainTextResponse("not found", status_code=404, headers=_HEADERS)

        self.router = Router(
            routes=[Route(path, serve_page, methods=["GET"]) for path in PAGE_PATHS]
            + [Route("/ui/static/{file}", serve_asset, methods=["GET"])],
            default=_asgi(not_found),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/" or path.startswith("/ui/")):
            await self.router(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _asgi(endpoint: _Endpoint) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)

    return app


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard's pages from ``app``, outside its auth (call after the API's own middleware)."""
    app.add_middleware(_Dashboard)
