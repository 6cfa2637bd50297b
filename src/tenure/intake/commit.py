"""The commit sequence shared by ``advance`` and inbox admission.

1. (caller) validate input, lineage and the transition under the locks;
2. write the coarse runtime summary atomically;
3. publish the fully validated next generation through PackageWriter
   (stored format v2: it holds its own checkpoint and links to the one
   before, ADR 0110; on top of a package read from elsewhere, such as an
   input, it holds its whole history and the case folder is created);
4. update the local index, then clear the runtime summary to null;
5. (admission only, caller) acknowledge the inbox original after checking
   that its bytes still match the cached snapshot.

A crash before step 3 leaves at most a ``.tmp-*`` file, never a generation;
the retry removes it when it loads the case under the case lock
(:meth:`CaseStorage.load_dir` with ``repair``) and repeats the operation. After step 3 the published generation and
its embedded receipt prove completion; a retry finds them, repairs the index
and runtime file, and writes no second generation. Each step boundary is a
named crash point (:mod:`tenure.faults`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from tenure.faults import crash_point, register

from .fsio import make_dirs_durable
from .package import Package
from .plan import Plan
from .storage import CaseStorage
from .workspace import Workspace
from .writer import PackageWriter

__all__ = ["commit", "CRASH_POINTS"]

VALIDATED = register("intake.commit.validated", "step 1 done: request validated under the locks; nothing written")
RUNTIME_WRITTEN = register(
    "intake.commit.runtime-written", "step 2 done: runtime summary written; no new generation yet"
)
GENERATION_WRITTEN = register(
    "intake.commit.generation-written", "step 3 half done: validated temporary zip fsynced, not yet named"
)
PUBLISHED = register("intake.commit.published", "step 3 done: generation published; index and runtime stale")
INDEX_WRITTEN = register("intake.commit.index-written", "step 4 half done: index updated; runtime summary still set")
RUNTIME_CLEARED = register("intake.commit.runtime-cleared", "step 4 done: runtime cleared; inbox not yet acknowledged")

CRASH_POINTS = (VALIDATED, RUNTIME_WRITTEN, GENERATION_WRITTEN, PUBLISHED, INDEX_WRITTEN, RUNTIME_CLEARED)


def commit(workspace: Workspace, base: Package, plan: Plan, folder: Path, started_at: datetime) -> Package:
    """Steps 2–4 for ``plan`` on top of ``base``; returns the published generation."""
    storage = CaseStorage(workspace)
    crash_point(VALIDATED)
    latest = base.latest
    workspace.write_runtime(
        Workspace.job_summary(
            base.case_id,
            base.package_id,
            input_generation=base.generation,
            analysis_revision=base.analysis_revision,
            target=plan.manifest["state"],
            started_at=started_at,
            last_checkpoint_at=latest.created_at if latest else None,
        )
    )
    crash_point(RUNTIME_WRITTEN)
    try:
        # the folder and each new parent's entry are durable before a generation is named in it (the temporary
        # files of a dead writer went when the caller loaded base)
        make_dirs_durable(folder)
        writer = PackageWriter(workspace.config)
        if base.path.parent == folder:
            layout = storage.layout(base)  # format v2: link to base, or close a span (ADR 0110)
            written = writer.write(
                folder,
                plan.manifest,
                base=base,
                additions={**layout.carried, **plan.additions},
                stored=True,
                linked=layout.linked,
                anchor=layout.anchor,
                encoded=plan.encoded,
            )
        else:  # a package read from elsewhere (an input): a generation only links within its own folder
            written = writer.write(
                folder, plan.manifest, base=base, additions=plan.additions, stored=True, encoded=plan.encoded
            )
        crash_point(GENERATION_WRITTEN)
        published = storage.publish(written, folder)
    except BaseException:
        workspace.write_runtime(None)  # nothing was published; the job is over
        raise
    crash_point(PUBLISHED)
    storage.write_index(folder, published)
    crash_point(INDEX_WRITTEN)
    workspace.write_runtime(None)
    crash_point(RUNTIME_CLEARED)
    return published
