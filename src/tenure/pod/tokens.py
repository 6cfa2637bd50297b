"""Bearer tokens of the HTTP API.

A token is a random secret (``tnr_`` + 43 URL-safe characters) shown once
when it is created; the store keeps only its SHA-256 hex. Each token is
exactly one of (a token asked with two scopes is refused):

* **tenant-scoped** — sees and touches only that tenant's projects;
* **admin** — sees everything;
* **cluster** — what pods send each other; accepted like admin.

While no token was ever created, the API of a pod listening on a loopback
address is open; once one exists (revoked ones count), every request but the
health probes needs one. A pod's own cluster token for calls to other pods
comes from ``TENURE_CLUSTER_TOKEN`` or the file named by
``TENURE_CLUSTER_TOKEN_FILE`` (:func:`cluster_token`).
"""

from __future__ import annotations

import builtins
import hashlib
import os
import secrets
from dataclasses import dataclass
from typing import Any

from tenure.errors import ConfigurationError, InvalidInputError, NotFoundError
from tenure.store import Store, validate_name
from tenure.store.workspaces import new_id

__all__ = ["TokenStore", "Principal", "TokenInfo", "cluster_token", "SECRET_PREFIX", "CLUSTER_LABEL"]

#: the label of the cluster credential's token (``tenure token list`` shows it; its secret never)
CLUSTER_LABEL = "cluster credential (provisioned by the pods)"

SECRET_PREFIX = "tnr_"


@dataclass(frozen=True)
class Principal:
    """Who a request acts as."""

    token_id: str | None
    tenant: str | None
    admin: bool
    cluster: bool

    def sees(self, tenant: str) -> bool:
        """Whether this principal may see and touch the projects of ``tenant``."""
        return self.admin or self.cluster or self.tenant == tenant

    @property
    def unrestricted(self) -> bool:
        return self.admin or self.cluster


#: The principal of a request to an open API (loopback listen, no token created yet).
OPEN = Principal(token_id=None, tenant=None, admin=True, cluster=False)


@dataclass(frozen=True)
class TokenInfo:
    """A token's record, never its secret or hash."""

    id: str
    tenant: str | None
    admin: bool
    cluster: bool
    label: str
    created_at: float
    revoked_at: float | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TokenInfo:
        return cls(
            id=row["id"],
            tenant=row["tenant"],
            admin=bool(row["admin"]),
            cluster=bool(row["cluster"]),
            label=row["label"],
            created_at=row["created_at"],
            revoked_at=row["revoked_at"],
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


class TokenStore:
    """Create, revoke, list and verify API tokens in the control-plane store."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self._seen_any = False

    def create(self, tenant: str | None, admin: bool, cluster: bool, label: str = "") -> tuple[str, str]:
        """A new token; returns ``(token_id, secret)``. The secret is not stored and cannot be shown again."""
        if tenant is not None:
            validate_name("tenant", tenant)
        scopes = [name for name, on in (("tenant", tenant is not None), ("admin", admin), ("cluster", cluster)) if on]
        if not scopes:
            raise InvalidInputError(
                "a token needs a scope: a tenant, admin or cluster",
                code="invalid-token-scope",
                hint="pass --tenant T, --admin or --cluster",
            )
        if len(scopes) > 1:  # admin and cluster see every tenant: with a tenant, the tenant would mean nothing
            raise InvalidInputError(
                f"a token has exactly one scope, not {' and '.join(scopes)}: an admin or cluster token sees every"
                " tenant, so it cannot also be scoped to one",
                code="invalid-token-scope",
                scopes=scopes,
                hint="pass one of --tenant T (that tenant's projects only), --admin or --cluster",
            )
        token_id = new_id("tok-")
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        with self.db.transaction() as tx:
            tx.execute(
                "api_token_insert",
                {"id": token_id, "h": _hash(secret), "t": tenant, "a": int(admin), "c": int(cluster), "l": label},
            )
        self._seen_any = True
        return token_id, secret

    def get(self, token_id: str) -> TokenInfo:
        with self.db.transaction(write=False) as tx:
            row = tx.one("api_token_by_id", {"id": token_id})
        if row is None:
            raise NotFoundError(
                f"no API token {token_id}",
                code="token-not-found",
                token=token_id,
                hint="list tokens with `tenure token list`",
            )
        return TokenInfo.from_row(row)

    def revoke(self, token_id: str) -> TokenInfo:
        """Revoke a token (idempotent); ``token-not-found`` for an unknown id."""
        with self.db.transaction() as tx:
            tx.execute("api_token_revoke", {"id": token_id})
        return self.get(token_id)

    def list(self) -> builtins.list[TokenInfo]:
        with self.db.transaction(write=False) as tx:
            rows = tx.execute("api_tokens_all")
        return [TokenInfo.from_row(r) for r in rows]

    def verify(self, secret: str) -> Principal | None:
        """The principal of a token secret, or ``None`` when it is unknown or revoked."""
        if not secret.startswith(SECRET_PREFIX) or len(secret) > 256:
            return None
        with self.db.transaction(write=False) as tx:
            row = tx.one("api_token_by_hash", {"h": _hash(secret)})
        if row is None:
            return None
        return Principal(row["id"], row["tenant"], bool(row["admin"]), bool(row["cluster"]))

    def cluster_credential(self, *, provision: bool = True) -> str | None:
        """The secret pods send each other (ADR 0048): the store's cluster credential, provisioned by the
        first pod that asks once tokens exist (a cluster-scoped token, labelled so, its secret kept for the
        pods and never printed). ``None`` while no token exists: the API is open and needs none."""
        with self.db.transaction(write=False) as tx:
            row = tx.one("cluster_credential_get", {})
        if row is not None:
            return str(row["secret"])
        if not provision or not self.any_exist():
            return None
        token_id, secret = self.create(None, admin=False, cluster=True, label=CLUSTER_LABEL)
        with self.db.transaction() as tx:
            tx.execute("cluster_credential_insert", {"id": token_id, "s": secret})
            row = tx.one("cluster_credential_get", {})
        assert row is not None
        if row["token_id"] != token_id:  # another pod provisioned at the same moment: its credential stands
            self.revoke(token_id)
        return str(row["secret"])

    def rotate_cluster_credential(self) -> TokenInfo:
        """A new cluster credential for every pod (each reads it again at its next refused request); the old
        token is revoked. Its info (never the secret)."""
        token_id, secret = self.create(None, admin=False, cluster=True, label=CLUSTER_LABEL)
        with self.db.transaction() as tx:
            old = tx.one("cluster_credential_get", {})
            if old is None:
                tx.execute("cluster_credential_insert", {"id": token_id, "s": secret})
            else:
                tx.execute("cluster_credential_replace", {"id": token_id, "s": secret})
        if old is not None:
            self.revoke(str(old["token_id"]))
        return self.get(token_id)

    def revoke_all(self) -> int:
        """Delete every token (revoked ones too) and the cluster credential: a pod started afterwards has an
        open API again (loopback only, as before any token). How many tokens went."""
        with self.db.transaction() as tx:
            tx.execute("cluster_credential_delete", {})
            gone = tx.count("api_tokens_delete_all", {})
        self._seen_any = False
        return gone

    def any_exist(self) -> bool:
        """Whether any token was ever created (revoked ones too). Once true it stays true (cached)."""
        if self._seen_any:
            return True
        with self.db.transaction(write=False) as tx:
            self._seen_any = tx.one("api_token_any") is not None
        return self._seen_any


def cluster_token() -> str | None:
    """This pod's cluster token for calls to other pods: ``TENURE_CLUSTER_TOKEN``, else the file
    ``TENURE_CLUSTER_TOKEN_FILE`` names (its content, stripped), else ``None``."""
    value = os.environ.get("TENURE_CLUSTER_TOKEN")
    if value:
        return value.strip()
    path = os.environ.get("TENURE_CLUSTER_TOKEN_FILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the cluster token file {path}: {exc.strerror}",
            code="bad-cluster-token-file",
            path=path,
            hint="point TENURE_CLUSTER_TOKEN_FILE at a readable file holding the token",
        ) from exc
