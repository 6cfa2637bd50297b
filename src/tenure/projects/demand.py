"""Demand: what makes a project need an owner (SPEC §9 "Words", ADR 0046).

A project is *in demand* — ``owner_required`` — while it has a session (bound or not: every bring unbinds
sessions, P-42), or a demand record that has not expired. Records come from three places:

* explicit demand, ``POST /api/v1/projects/{t}/{n}/demand`` (``tenure project demand``), from a named
  source, until removed or for a given time;
* a mutating request that needs the folder (a file write or delete, a checkpoint) on an AUTO project:
  source :data:`REQUEST_SOURCE`, for :data:`REQUEST_DEMAND_S`; written again only when the recorded one
  is within half of that of its end, so a busy project costs no transaction per request;
* an engine, through the :class:`DemandHandle` a pod gives engines that have an ``attach`` method.

What comes back on its own after its owner died: PERMANENT projects always, AUTO projects in demand;
EPHEMERAL projects never (they are suspended by their owner once neither a session nor demand is left);
HOMELESS projects never have an owner.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tenure.errors import InvalidInputError

if TYPE_CHECKING:
    from tenure.projects.store import ProjectStore

__all__ = ["REQUEST_SOURCE", "REQUEST_DEMAND_S", "DemandHandle", "check_demand_source"]

#: the source of request-made demand
REQUEST_SOURCE = "request"
#: how long a mutating request keeps an AUTO project in demand
REQUEST_DEMAND_S = 600.0
_SOURCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


def check_demand_source(source: str) -> str:
    """A demand source a client or an engine may name (``invalid-demand`` otherwise); tenure's own are
    refused."""
    if not isinstance(source, str) or not _SOURCE.fullmatch(source) or source == REQUEST_SOURCE:
        raise InvalidInputError(
            f"invalid demand source {source!r}",
            code="invalid-demand",
            hint="use 1-64 letters, digits, '.', '_', ':' or '-'; 'request' is tenure's own",
            source=str(source),
        )
    if source.startswith("session"):
        raise InvalidInputError(
            f"invalid demand source {source!r}: sessions are demand by themselves",
            code="invalid-demand",
            source=source,
        )
    return source


class DemandHandle:
    """What an engine may call to keep a project in demand (scheduled or pending work) and to let it go."""

    def __init__(self, projects: ProjectStore) -> None:
        self._projects = projects

    def need(self, tenant: str, name: str, source: str, expires_in: float | None = None) -> None:
        """The project needs an owner because of ``source`` (until :meth:`done`, or for ``expires_in`` s)."""
        self._projects.add_demand(tenant, name, check_demand_source(source), expires_in)

    def done(self, tenant: str, name: str, source: str) -> None:
        """``source`` no longer needs the project."""
        self._projects.remove_demand(tenant, name, check_demand_source(source))
