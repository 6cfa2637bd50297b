"""Planted bugs, for the verification kit only: ``python -m tenure.verify.planted BUG -- <tenure CLI args>``.

The launcher patches this process, then runs the normal CLI exactly as ``python -m tenure.cli.main`` would
(through :mod:`runpy`: the kit's layer does not import the CLI's). Nothing in the product imports this module
and no product option reaches it: a planted bug exists only in a pod ``tenure verify cluster --plant-bug BUG``
started through this launcher, to show the kit catching a real bug in running pods (ADR 0024).

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

``durable-ack-early`` — a durable write is answered before its checkpoint is published: a
``PUT …?durable=true`` is served as a plain write (no checkpoint is waited for, none is started) and its
answer still says ``durable`` and names a snapshot, the project's head as it was before the write. The
snapshot the answer names lacks the bytes, and a takeover after a kill -9 or a pause before the project's
next checkpoint loses them: ``durable-write-lost``.

``lineage-ignored`` — the lineage never changes and is never checked: the claim's compare-and-swap
(``project_claim``) keeps the lineage whoever held the project and however it let go, and the pod does not
check ``Tenure-If-Lineage``. After a kill -9 or a pause past the TTL the new owner restores the last
checkpoint, which lacks the writes the former owner had not checkpointed, and still acknowledges a
checkpoint sent under the old lineage: ``lineage-checkpoint-misses-write``.
"""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

__all__ = ["BUGS", "main", "plant"]


def _rewrite_store_queries(rewrites: dict[str, tuple[tuple[str, str], ...]]) -> None:
    """Rewrite the store's named statements as they are loaded (every dialect's block of each name); a statement
    that no longer reads as expected stops the launcher instead of planting nothing."""
    from tenure.store.queries import STORE, Query, load

    queries = load(STORE)
    for blocks in (queries.portable, *queries.dialects.values()):
        assert isinstance(blocks, dict)
        for name, terms in rewrites.items():
            query = blocks.get(name)
            if query is None:
                continue
            sql = query.sql
            for pattern, repl in terms:
                sql = re.sub(pattern, repl, sql)
            if sql == query.sql:
                raise RuntimeError(f"planted bug: the statement {name!r} no longer reads as expected")
            blocks[name] = Query(query.name, query.doc, sql, query.source)


def _skip_generation_check() -> None:
    from tenure.projects.lifecycle import LifecycleService
    from tenure.projects.ownership import Ownership, Renewal

    # the store: "generation :g is current" becomes "generation :g or a newer one is current"
    lease_term = (r"l\.generation = :g", "l.generation >= :g")
    _rewrite_store_queries(
        {
            "workspace_begin_checkpoint": ((r"writer_generation = :g", "writer_generation >= :g"), lease_term),
            "workspace_publish": ((r"writer_generation = :g", "writer_generation >= :g"), lease_term),
            # the ticket's own generation term dropped, and the snapshot's compared as "not newer than the current"
            "snapshot_mark_validating": (
                (r" AND generation = :g(?=\s)", ""),
                (r"generation = \(", "generation <= ("),
                lease_term,
            ),
        }
    )

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


def _durable_ack_early() -> None:
    from tenure.pod.ops import ProjectOps

    if not callable(getattr(ProjectOps, "_made_durable", None)):
        raise RuntimeError("planted bug: ProjectOps._made_durable no longer exists")

    def made_durable_early(self: ProjectOps, tenant: str, name: str, durable: bool) -> dict[str, Any]:
        if not durable:
            return {"durable": False, "snapshot": None}
        project = self.pod.projects.get(tenant, name)
        head = self.pod.store.workspaces.workspace(project.workspace_id).head_snapshot_id
        return {"durable": True, "snapshot": head, "batch": 1}  # no checkpoint waited for: the head before it

    ProjectOps._made_durable = made_durable_early  # type: ignore[method-assign]


def _lineage_ignored() -> None:
    from tenure.pod.ops import ProjectOps

    # the claim keeps the lineage whoever held the project, however it let go
    _rewrite_store_queries(
        {"project_claim": ((r"lineage = CASE WHEN [^\n]*? THEN lineage ELSE lineage \+ 1 END", "lineage = lineage"),)}
    )
    if not callable(getattr(ProjectOps, "expect_lineage", None)):
        raise RuntimeError("planted bug: ProjectOps.expect_lineage no longer exists")

    def expect_any_lineage(self: ProjectOps, project: Any, if_lineage: int | None) -> None:
        return None  # Tenure-If-Lineage is not checked

    ProjectOps.expect_lineage = expect_any_lineage  # type: ignore[method-assign]


#: every bug the launcher can plant
BUGS: dict[str, Callable[[], None]] = {
    "skip-generation-check": _skip_generation_check,
    "durable-ack-early": _durable_ack_early,
    "lineage-ignored": _lineage_ignored,
}


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
