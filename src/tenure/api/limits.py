"""Bounded request bodies: a JSON body (every request but a file upload) holds at most :data:`JSON_BODY_MAX`.

An ASGI layer in front of the app. A request whose ``Content-Length`` says more is answered 413
``payload-too-large`` before a byte of its body is read; one without it (chunked) is counted as it arrives
and stopped at the limit, so a client can make the pod hold no more than the limit for it. File uploads
(``PUT /api/v1/projects/{tenant}/{name}/files/{path}``) have their own limit, checked by their route.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure.api.problems import PayloadTooLargeError, problem_of

__all__ = ["BodyLimit", "JSON_BODY_MAX"]

#: the most bytes a request body other than a file upload may hold
JSON_BODY_MAX = 1 << 20

_UPLOAD = re.compile(r"^/api/v1/projects/[^/]+/[^/]+/files/.+")


def _too_large(size: str) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"the request body holds {size} bytes, more than the {JSON_BODY_MAX} this request may send",
        limit=JSON_BODY_MAX,
        hint="send a smaller body (files go through PUT …/files/{path})",
    )


class BodyLimit:
    """ASGI middleware: every request body except a file upload's is at most :data:`JSON_BODY_MAX` bytes."""

    def __init__(self, app: ASGIApp, *, limit: int = JSON_BODY_MAX) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "PUT" and _UPLOAD.match(scope["path"])):
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers") or []:
            if key == b"content-length":
                declared = value.decode("latin-1").strip()
                if not declared.isdigit() or int(declared) > self.limit:
                    await problem_of(_too_large(declared[:20]))(scope, receive, send)
                    return
        seen = 0
        refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # answered here, at once; the app's own answer to the failed read is dropped
                    refused = True
                    await problem_of(_too_large(f"over {self.limit}"))(scope, receive, send)
                    raise _too_large(f"over {self.limit}")
            return message

        async def guarded(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, counted, guarded)
