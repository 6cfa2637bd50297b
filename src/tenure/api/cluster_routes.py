"""The cluster routes of the pod API (ADR 0023): the master, demand, and placement requests.

* ``GET /api/v1/cluster/master`` — who holds the master role, at which epoch, live or not;
* ``GET /api/v1/cluster/demand`` — the projects no pod has room for (pending placement), for an
  autoscaler (a tenant token sees its tenant's only);
* ``POST /api/v1/cluster/place`` — the master asks this pod to bring a project under its epoch
  (admin or cluster token): 202 once checked, the bring runs in the background; 409 ``stale-epoch``
  for an epoch older than the newest seen or one the store holds no placement for. With
  ``projects`` (up to :data:`PLACE_BATCH_MAX`) instead of ``tenant`` and ``name``, a page of
  placements in one request (ADR 0053): 202 with ``accepted`` and ``refused`` (each with its code);
* ``POST /api/v1/cluster/wake`` — run the master's tick now (a draining pod after each release; admin
  or cluster token): 202 with ``master`` true when this pod holds the role (a RUNNING pod takes it
  first when it is free), false when it does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Query
from pydantic import BaseModel, Field

from tenure.errors import InvalidInputError
from tenure.pod.tokens import Principal

if TYPE_CHECKING:
    from tenure.pod.runtime import PodRuntime

__all__ = ["add_cluster_routes", "PlaceBody", "PlaceItem", "PLACE_BATCH_MAX"]


#: the most projects one placement request may carry (a master's page)
PLACE_BATCH_MAX = 500


class PlaceItem(BaseModel):
    tenant: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)


class PlaceBody(BaseModel):
    """One project (``tenant`` and ``name``), or several (``projects``, ADR 0053), placed under ``epoch``."""

    tenant: str | None = Field(default=None, min_length=1, max_length=200)
    name: str | None = Field(default=None, min_length=1, max_length=200)
    epoch: int
    projects: list[PlaceItem] | None = Field(default=None, max_length=PLACE_BATCH_MAX)


def add_cluster_routes(app: FastAPI, node: PodRuntime, principal_dep: Any, forbidden: type[Exception]) -> None:
    """Register the cluster routes on ``app`` (see the module docstring)."""
    prefix = "/api/v1/cluster"

    @app.get(prefix + "/master", tags=["cluster"])
    def master(principal: Principal = principal_dep) -> dict[str, Any]:
        """The master lease: holder pod, epoch, whether it is live by the store clock, seconds left; on the
        master, its last tick (a tenant token sees only its own tenant's placements in it)."""
        data = node.master.cluster.master().to_dict()
        data["this"] = data["pod_id"] == node.pod.pod_id and node.master.is_master
        report = node.master.last_tick
        tick = report.to_dict() if report is not None and data["this"] else None
        if tick is not None and not principal.unrestricted:
            tick["placements"] = [p for p in tick["placements"] if principal.sees(p["project"].split("/", 1)[0])]
        data["last_tick"] = tick
        return data

    @app.get(prefix + "/pending", tags=["cluster"])
    @app.get(prefix + "/demand", tags=["cluster"], deprecated=True, description="The old name of /cluster/pending.")
    def demand(
        principal: Principal = principal_dep, limit: int = Query(default=1000, ge=1, le=10000)
    ) -> dict[str, Any]:
        """Projects pending placement that still need an owner (P-89): what an autoscaler should add room for."""
        projects = node.ownership.find_pending_placement(node.config.lease_ttl, limit=limit)
        if not principal.unrestricted:
            projects = [p for p in projects if principal.sees(p.tenant)]
        pending = [
            {
                "project": p.ref,
                "tenant": p.tenant,
                "name": p.name,
                "score": p.placement_score,
                "selector": p.placement_selector,
                "pending_since": p.pending_since,
            }
            for p in projects
        ]
        return {"pending": pending, "count": len(pending), "score": sum(p["score"] for p in pending)}

    @app.post(prefix + "/wake", status_code=202, tags=["cluster"])
    def wake(principal: Principal = principal_dep) -> dict[str, Any]:
        """Run the master's tick now: projects were released for a hand-over (ADR 0049)."""
        if not principal.unrestricted:
            raise forbidden("wake-ups need an admin or cluster token")
        return {"pod_id": node.pod.pod_id, "master": node.master.wake()}

    @app.post(prefix + "/place", status_code=202, tags=["cluster"])
    def place(body: PlaceBody, principal: Principal = principal_dep) -> dict[str, Any]:
        """The master's request to bring a project here under its epoch (checked against the store)."""
        if not principal.unrestricted:
            raise forbidden("placement requests need an admin or cluster token")
        if body.projects is not None:
            if body.tenant is not None or body.name is not None:
                raise InvalidInputError("a placement request names one project (tenant, name) or several (projects)")
            items = [(item.tenant, item.name) for item in body.projects]
            answers = node.accept_placements(items, body.epoch)
            refused = [
                {"project": f"{tenant}/{name}", "code": error.code, "detail": error.message}
                for (tenant, name), error in zip(items, answers, strict=True)
                if error is not None
            ]
            accepted = [
                f"{tenant}/{name}" for (tenant, name), error in zip(items, answers, strict=True) if error is None
            ]
            return {"pod_id": node.pod.pod_id, "epoch": body.epoch, "accepted": accepted, "refused": refused}
        if body.tenant is None or body.name is None:
            raise InvalidInputError("a placement request names one project (tenant, name) or several (projects)")
        project = node.accept_placement(body.tenant, body.name, body.epoch)
        return {"project": project.ref, "pod_id": node.pod.pod_id, "epoch": body.epoch, "accepted": True}
