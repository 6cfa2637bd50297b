"""Planted bugs, for the verification kit only: ``python -m tenure.verify.planted BUG -- <tenure CLI args>``.

The launcher patches this process, then runs the normal CLI exactly as ``python -m tenure.cli.main`` would
(through :mod:`runpy`: the kit's layer does not import the CLI's). Nothing in the product imports this module
and no product option reaches it: a planted bug exists only in a pod ``tenure verify cluster --plant-bug BUG``
started through this launcher, to show the kit catching a real fencing bug in running pods (ADR 0024).

``skip-generation-check`` — the fencing generation is checked nowhere:

* the store accepts a checkpoint from a writer whose generation is not the workspace's current one: the
  fencing statements ``workspace_begin_checkpoint``, ``snapshot_mark_validating`` and ``workspace_publish``
  take "this generation or a newer one is current, with a live lease" for "this generation is current, with a
  live lease of it" (they are rewritten when the query files are loaded);
* the pod trusts its own memory instead of the store's lease: it serves a project it runs and once claimed
  (``Ownership.holds``, and the owner its routing reads with the project, ``Ownership.project_with_owner``),
  never notices its leases were taken (the beat's lost counter is frozen, so no drift
  check runs), and checkpoints under the generation it brought the project under.

A pod that was paused or cut from PostgreSQL past its TTL then answers a write and a checkpoint of a project
another pod has taken over, and the checkpoint is acknowledged under its older generation — a ``stale-write``.
"""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

__all__ = ["BUGS", "main", "plant"]


def _skip_generation_check() -> None:
    from tenure.projects.lifecycle import LifecycleService
    from tenure.projects.ownership import Ownership, Renewal
    from tenure.store.queries import STORE, Query, load

    # the store: "generation :g is current" becomes "generation :g or a newer one is current"
    rewrites = {
        "workspace_begin_checkpoint": ((r"writer_generation = :g", "writer_generation >= :g"),),
        "workspace_publish": ((r"writer_generation = :g", "writer_generation >= :g"),),
        # the ticket's own generation term dropped, and the snapshot's compared as "not newer than the current"
        "snapshot_mark_validating": ((r" AND generation = :g(?=\s)", ""), (r"generation = \(", "generation <= (")),
    }
    lease_term = (r"l\.generation = :g", "l.generation >= :g")
    queries = load(STORE)
    for blocks in (queries.portable, *queries.dialects.values()):
        assert isinstance(blocks, dict)
        for name, terms in rewrites.items():
            query = blocks.get(name)
            if query is None:
                continue
            sql = query.sql
            for pattern, repl in (*terms, lease_term):
                sql = re.sub(pattern, repl, sql)
            if sql == query.sql:
                raise RuntimeError(f"planted bug: the fencing statement {name!r} no longer reads as expected")
            blocks[name] = Query(query.name, query.doc, sql, query.source)

    # the pod: its own memory of a claim stands in for the store's lease
    claimed: set[tuple[str, str]] = set()
    claim, adopt, holds = Ownership.claim, Ownership.adopt, Ownership.holds
    claim_to_bring, project_with_owner = Ownership.claim_to_bring, Ownership.project_with_owner

    def remember(project: Any, pod_id: str) -> Any:
        if project is not None:
            claimed.add((project.id, pod_id))
        return project

    def claim_remembered(self: Ownership, tenant: str, name: str, pod_id: str, *args: Any, **kw: Any) -> Any:
        return remember(claim(self, tenant, name, pod_id, *args, **kw), pod_id)

    def claim_to_bring_remembered(self: Ownership, tenant: str, name: str, pod_id: str, *a: Any, **kw: Any) -> Any:
        done = claim_to_bring(self, tenant, name, pod_id, *a, **kw)
        if done is not None:
            remember(done.project, pod_id)
        return done

    def project_with_owner_remembered(self: Ownership, tenant: str, name: str, lease_ttl: float) -> Any:
        project, owner = project_with_owner(self, tenant, name, lease_ttl)
        mine = [pod for (project_id, pod) in claimed if project_id == project.id]
        if mine:  # the pod that claimed it once believes it still holds it
            owner = replace(owner, pod_id=mine[-1], live=True, expires_in=owner.expires_in or lease_ttl)
        return project, owner

    def adopt_remembered(self: Ownership, tenant: str, name: str, pod_id: str, *args: Any, **kw: Any) -> Any:
        return remember(adopt(self, tenant, name, pod_id, *args, **kw), pod_id)

    def holds_remembered(self: Ownership, project_id: str, pod_id: str, lease_ttl: float) -> bool:
        return (project_id, pod_id) in claimed or holds(self, project_id, pod_id, lease_ttl)

    first: dict[str, int] = {}
    renew = Ownership.renew_leases

    def renew_unaware(self: Ownership, pod_id: str) -> Renewal | None:
        renewal = renew(self, pod_id)
        if renewal is None:
            return None
        return replace(renewal, lost=first.setdefault(pod_id, renewal.lost))  # takeovers go unnoticed

    checkpoint_running = LifecycleService.checkpoint_running

    def checkpoint_remembered(self: LifecycleService, project: Any, **kw: Any) -> Any:
        generation = self.registry.generation(project.id)
        if generation is not None:
            project = replace(project, generation=generation)  # the generation it was brought under here
        return checkpoint_running(self, project, **kw)

    Ownership.claim = claim_remembered  # type: ignore[method-assign]
    Ownership.claim_to_bring = claim_to_bring_remembered  # type: ignore[method-assign]
    Ownership.project_with_owner = project_with_owner_remembered  # type: ignore[method-assign]
    Ownership.adopt = adopt_remembered  # type: ignore[method-assign]
    Ownership.holds = holds_remembered  # type: ignore[method-assign]
    Ownership.renew_leases = renew_unaware  # type: ignore[method-assign]
    LifecycleService.checkpoint_running = checkpoint_remembered  # type: ignore[method-assign]


#: every bug the launcher can plant
BUGS: dict[str, Callable[[], None]] = {"skip-generation-check": _skip_generation_check}


def plant(bug: str) -> None:
    """Patch this process with ``bug``."""
    if bug not in BUGS:
        raise SystemExit(f"unknown planted bug {bug!r}; one of {', '.join(sorted(BUGS))}")
    BUGS[bug]()


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[1] != "--":
        raise SystemExit("usage: python -m tenure.verify.planted BUG -- <tenure CLI arguments>")
    plant(args[0])
    sys.argv = ["tenure", *args[2:]]
    runpy.run_module("tenure.cli.main", run_name="__main__", alter_sys=True)


if __name__ == "__main__":  # pragma: no cover
    main()
