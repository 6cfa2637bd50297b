"""The ownership façade: enforce a placement decision, never make one.

* :meth:`OwnershipFacade.claim_for_local_pod` — claim or raise
  :class:`ClaimRejectedError` naming the holder;
* :meth:`OwnershipFacade.claim_to_bring` — the same for a bring: the claim,
  step 1a and the workspace read in one transaction;
* :meth:`OwnershipFacade.claim_or_redirect` — claim, or say where the live
  holder is, or that it is dead but its lease not yet expired (retry after).

Owning is not running: neither touches the activation registry, the
workspace or the engines. Only bring does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from tenure.defaults import LEASE_TTL_S, LIVENESS_TTL_S
from tenure.errors import ConflictError
from tenure.projects.ownership import Claimed, Owner, Ownership
from tenure.projects.pods import PodIdentity, PodRegistry
from tenure.projects.records import Project
from tenure.projects.store import ProjectStore
from tenure.store import Store


class ClaimRejectedError(ConflictError):
    """Another live pod holds the project's lease; ``context`` names the holder."""

    code = "claim-rejected"
    retryable = True
    default_hint = "the project is owned elsewhere; ask its holder or wait for the lease to expire"


@dataclass(frozen=True)
class ClaimResult:
    """Exactly one field is set: the claimed project, the live holder's endpoint, or seconds to wait."""

    project: Project | None = None
    redirect: str | None = None
    retry_after: float | None = None


class OwnershipFacade:
    """Claims for one pod. The only place a refused claim becomes :class:`ClaimRejectedError`."""

    def __init__(
        self, store: Store, pod: PodIdentity, *, lease_ttl: float = LEASE_TTL_S, liveness_ttl: float = LIVENESS_TTL_S
    ) -> None:
        self.pod = pod
        self.lease_ttl = lease_ttl
        self.liveness_ttl = liveness_ttl
        self.ownership = Ownership(store)
        self.projects = ProjectStore(store)
        self.pods = PodRegistry(store)

    def claim_for_local_pod(self, tenant: str, name: str, *, lease_ttl: float | None = None) -> Project:
        """Claim the project for this pod (free, self, or expired) or raise naming the holder."""
        ttl = self.lease_ttl if lease_ttl is None else lease_ttl
        project = self.ownership.claim(tenant, name, self.pod.pod_id, self.pod.node_name, self.pod.endpoint, ttl)
        if project is None:
            self._reject(tenant, name, ttl)
        return project

    def claim_to_bring(self, tenant: str, name: str, *, lease_ttl: float | None = None, expiry_grace: float) -> Claimed:
        """A bring's claim (:meth:`Ownership.claim_to_bring`: the claim, an expiry undone within
        ``expiry_grace``, the sessions unbound, the workspace read back, in one transaction) or raise
        naming the holder."""
        ttl = self.lease_ttl if lease_ttl is None else lease_ttl
        claimed = self.ownership.claim_to_bring(
            tenant, name, self.pod.pod_id, self.pod.node_name, ttl, expiry_grace=expiry_grace
        )
        if claimed is None:
            self._reject(tenant, name, ttl)
        return claimed

    def _reject(self, tenant: str, name: str, ttl: float) -> NoReturn:
        """Raise for a refused claim, naming the holder (read with the project, one transaction)."""
        _, owner = self.ownership.project_with_owner(tenant, name, ttl)
        raise ClaimRejectedError(
            f"project {tenant}/{name} is held by pod {owner.pod_id} ({owner.node})",
            holder=owner.pod_id,
            node=owner.node,
            project=f"{tenant}/{name}",
        )

    def claim_or_redirect(self, tenant: str, name: str) -> ClaimResult:
        """Claim, or say where the live holder is, or how long until a dead holder's lease expires."""
        project = self.ownership.claim(
            tenant, name, self.pod.pod_id, self.pod.node_name, self.pod.endpoint, self.lease_ttl
        )
        if project is not None:
            return ClaimResult(project=project)
        _, owner = self.ownership.project_with_owner(tenant, name, self.lease_ttl)
        return self.holder_answer(owner)

    def holder_answer(self, owner: Owner) -> ClaimResult:
        """Where a request for a project another pod holds goes: the holder's endpoint while its pod is live,
        else the seconds until its lease runs out (then it may be claimed). The one place this is decided."""
        endpoint = self.pods.resolve_endpoint(owner.pod_id, self.liveness_ttl) if owner.pod_id else None
        if endpoint is not None:
            return ClaimResult(redirect=endpoint)
        return ClaimResult(retry_after=max(0.0, owner.expires_in or 0.0))
