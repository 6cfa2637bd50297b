"""The CLI against a running pod: ``--url URL`` (env ``TENURE_URL``) and ``--token`` (env ``TENURE_TOKEN``).

Project, session and snapshot commands then go to the pod's HTTP API
(docs/api.md) instead of acting in-process. Redirects to the pod that owns
a project (307) are followed by hand, so the bearer token is sent again to
the new host (HTTP clients drop it across hosts on purpose) — but only to an
origin the cluster vouches for: the ``--url`` pod's own, one of the pods'
endpoints that ``GET /api/v1/pods`` lists for the token, or one named in
``TENURE_TRUSTED_ORIGINS`` (comma-separated ``scheme://host:port``). A
redirect anywhere else stops with ``redirect-untrusted`` and sends nothing
there. An API error comes back as the same one-line error with the same
stable code as the in-process command; a 503 says when to retry.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import click

from tenure.errors import ConfigurationError, StoreError, family_for_status

__all__ = ["Remote", "remote", "project_path", "origin_of"]

_MAX_REDIRECTS = 5


class Remote:
    """A small client for one pod's API (and the pods it redirects to)."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 300.0) -> None:
        import httpx

        self.base = url.rstrip("/") + "/"
        self.token = token
        self._client = httpx.Client(timeout=timeout, follow_redirects=False)
        env = os.environ.get("TENURE_TRUSTED_ORIGINS", "")
        self._trusted = {origin_of(self.base)} | {origin_of(o) for o in env.split(",") if o.strip()}
        self._pod_origins: set[str] | None = None

    def close(self) -> None:
        self._client.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """One API call; redirects followed with the token; errors raised as tenure errors."""
        import httpx

        url = urljoin(self.base, path.lstrip("/"))
        headers = dict(headers or {}, **({"authorization": f"Bearer {self.token}"} if self.token else {}))
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                response = self._client.request(method, url, json=json, params=params, headers=headers)
            except httpx.HTTPError as exc:
                raise StoreError(
                    f"cannot reach the pod at {url}: {exc}",
                    code="pod-unreachable",
                    hint="check --url / TENURE_URL and that tenure serve runs there",
                    url=url,
                ) from None
            if response.status_code in (301, 302, 303, 307, 308) and "location" in response.headers:
                url = urljoin(url, response.headers["location"])
                params = None  # the Location carries the query
                if self.token and not self.trusts(url):
                    raise ConfigurationError(
                        f"the pod redirected to {origin_of(url)[:200]}, which is no pod of this cluster:"
                        " the token is not sent there",
                        code="redirect-untrusted",
                        hint="if it is one of your pods, add its origin to TENURE_TRUSTED_ORIGINS",
                        origin=origin_of(url)[:200],
                    )
                continue
            return _answer(response)
        raise StoreError(f"too many redirects from {self.base}", code="redirect-loop", url=url)

    def trusts(self, url: str) -> bool:
        """Whether the token may go to ``url``: its origin is the ``--url`` pod's, a listed pod's endpoint
        (``GET /api/v1/pods``, asked once), or one of ``TENURE_TRUSTED_ORIGINS``."""
        origin = origin_of(url)
        if origin in self._trusted:
            return True
        if self._pod_origins is None:
            self._pod_origins = self._listed_pods()
        return origin in self._pod_origins

    def _listed_pods(self) -> set[str]:
        import httpx

        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = self._client.get(urljoin(self.base, "api/v1/pods"), headers=headers)
            pods = response.json().get("pods", []) if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return set()
        return {origin_of(str(p["endpoint"])) for p in pods if isinstance(p, dict) and p.get("endpoint")}


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port spelled out), lowercased: what a token is bound to."""
    parts = urlsplit(url.strip())
    scheme = (parts.scheme or "http").lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        return url.strip().lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def _answer(response: Any) -> Any:
    if response.status_code < 400:
        if response.status_code == 204 or not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.content
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    code = str(problem.get("code") or f"http-{response.status_code}")
    message = str(problem.get("detail") or problem.get("title") or response.text[:200] or response.reason_phrase)
    hint = problem.get("hint") or ""
    if response.status_code == 503 and "retry-after" in response.headers:
        hint = (hint + "; " if hint else "") + f"retry in {response.headers['retry-after']} s"
    family = family_for_status(response.status_code)
    error = family(message, code=code, hint=hint, **dict(problem.get("context") or {}))
    raise error


def remote(ctx: click.Context) -> Remote | None:
    """The API client when ``--url`` / ``TENURE_URL`` is given, else None (the command acts in-process)."""
    root = ctx.find_root()
    url = root.obj.get("url")
    if not url:
        return None
    if "remote" not in root.obj:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"--url {url!r} is not an http(s) URL", code="bad-url", hint="e.g. --url http://127.0.0.1:8470"
            )
        client = Remote(url, root.obj.get("token"))
        root.obj["remote"] = client
        root.call_on_close(client.close)
    client = root.obj["remote"]
    assert isinstance(client, Remote)
    return client


def project_path(tenant: str, name: str, *rest: str) -> str:
    """``/api/v1/projects/{tenant}/{name}/...`` with each part quoted."""
    parts = [quote(tenant, safe=""), quote(name, safe=""), *rest]
    return "/api/v1/projects/" + "/".join(parts)
