"""A project's lineage as a client holds it (ADR 0042): the check behind ``Tenure-If-Lineage``.

Light on purpose, like :mod:`tenure.pod.documents`: the CLI's in-process mode makes the same check without
loading the pod runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tenure.errors import ConflictError
from tenure.projects.records import Project

__all__ = ["IF_LINEAGE", "LineageChangedError", "expect_lineage"]

#: The request header that carries the lineage a client holds.
IF_LINEAGE = "Tenure-If-Lineage"


class LineageChangedError(ConflictError):
    """A request made under one lineage reached a project that has started another (``Tenure-If-Lineage``)."""

    code = "lineage-changed"
    http_status = 412
    default_hint = (
        "writes acknowledged since your last checkpoint may be missing; the preserved deltas listed hold what"
        " the former owner had not checkpointed (POST /api/v1/mounts/ID/recover) — read the project again and"
        " send its new lineage"
    )


def expect_lineage(project: Project, if_lineage: int | None, preserved: Callable[[], Iterable[Any]]) -> None:
    """Refuse with ``lineage-changed`` (412) when ``if_lineage`` is given and is not the project's lineage; the
    refusal lists the project's preserved deltas, ``preserved()`` (read only then: the store's records, ADR
    0044, as :meth:`tenure.projects.preserved.PreservedDelta.to_dict` gives them)."""
    if if_lineage is None or if_lineage == project.lineage:
        return
    raise LineageChangedError(
        f"project {project.ref} is at lineage {project.lineage}, not {if_lineage}",
        project=project.ref,
        lineage=project.lineage,
        expected=if_lineage,
        preserved=list(preserved()),
    )
