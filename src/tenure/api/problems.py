"""Problem documents: every error the API answers, as ``application/problem+json`` (RFC 9457).

A problem carries tenure's stable ``code``, a ``hint``, whether it is ``retryable`` and its ``context``; its
status is the error family's (:func:`tenure.errors.http_status`). A 401 says ``WWW-Authenticate: Bearer``,
a 503 says when to retry (``Retry-After``). JSON documents never hold a lone surrogate (a file name that is
not UTF-8 is sent as ``\\udcNN`` text), so every document is valid UTF-8.
"""

from __future__ import annotations

import json
import math
import re
from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse, Response

from tenure.errors import InvalidInputError, TenureError, http_status

__all__ = [
    "CrossOriginRefusedError",
    "MAX_FILE_BYTES",
    "PROBLEM",
    "PROBLEM_RESPONSES",
    "PayloadTooLargeError",
    "ProjectUnavailableError",
    "SafeJSONResponse",
    "UnauthorizedError",
    "internal",
    "problem",
    "problem_of",
]

PROBLEM = "application/problem+json"
#: the largest file a PUT may write
MAX_FILE_BYTES = 64 * 1024 * 1024


class UnauthorizedError(TenureError):
    code = "unauthorized"
    http_status = 401
    default_hint = "send Authorization: Bearer <token> (create one with `tenure token create`)"


class CrossOriginRefusedError(TenureError):
    """While the API is open (no token exists), a request addressed to a name that is not loopback (DNS
    rebinding) or sent by a page of another origin (a cross-site form or fetch)."""

    code = "cross-origin-refused"
    http_status = 403
    default_hint = (
        "call the API at http://127.0.0.1:PORT or http://localhost:PORT, from a client that sends no Origin"
        " or from the pod's own dashboard; or create an API token (`tenure token create --admin`) and send it"
        " as Authorization: Bearer <token>"
    )


class ProjectUnavailableError(TenureError):
    """The project's owner cannot be reached yet (its pod is silent, its lease still valid), or no pod fits."""

    code = "project-unavailable"
    retryable = True
    http_status = 503
    default_hint = "retry after the number of seconds in Retry-After"

    def __init__(self, message: str, *, retry_after: float, **context: Any) -> None:
        super().__init__(message, **context)
        self.retry_after = max(1, math.ceil(retry_after))
        self.context["retry_after"] = self.retry_after


class PayloadTooLargeError(InvalidInputError):
    code = "payload-too-large"
    http_status = 413
    default_hint = f"a file written through the API holds at most {MAX_FILE_BYTES // (1024 * 1024)} MiB"


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


def problem_of(exc: TenureError) -> Response:
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


def internal() -> Response:
    return problem(500, "internal", "an unexpected error occurred", hint="see the pod's log and report it")


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
            (412, "Tenure-If-Lineage names another lineage than the project's (lineage-changed)"),
            (413, "body too large"),
            (422, "the request does not match the schema (invalid-request)"),
            (500, "internal error (never a traceback)"),
            (503, "not available here now: Retry-After says when to try again"),
        )
    },
    307: {"description": "the project runs on another live pod: Location is its endpoint"},
}
