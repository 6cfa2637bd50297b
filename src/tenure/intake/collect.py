"""Collecting what the intake no longer needs (I-132, ADR 0110).

:func:`collect` removes, under the worker lock and each case's lock:

* **superseded generations**: a generation of a package folder that the
  newest generation does not reference. The newest generation references
  itself and every generation its links reach (stored format v2: each link
  names an earlier generation by file name and fingerprint, and the whole
  history is read along them); a v1 generation links nowhere. A generation
  that ended a span links past the run before it, which is then
  unreferenced. The newest generation is never removed, and nothing is
  removed from a folder whose chain does not load in full (its error is
  reported instead);
* **temporary files** (``.tmp-*``) left by writes that died, in the case
  folders, ``cache/``, the quarantine folders and ``runtime/``: every one
  is written under a lock this pass holds, so whoever wrote it is gone.

Cache copies and quarantine folders are kept (inputs' evidence). Poll and
advance never remove a generation (I-96): only this explicit operation does.

Crash safety: the referenced set is computed from the fully validated chain
before anything is removed, and only unreferenced files are removed, oldest
first, then the folder is synced. A crash at any point (``intake.gc.*``)
leaves every referenced generation in place; the next collection removes
what is left. Removing an unreferenced generation never changes what any
referenced one reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure.faults import crash_point, register

from .errors import LifecycleError
from .fsio import TMP_PREFIX, FileLock, fsync_dir, remove_abandoned_temp, remove_files
from .package import generation_name
from .storage import CaseStorage
from .workspace import Workspace

__all__ = ["collect", "Collected", "CRASH_POINTS"]

PLANNED = register("intake.gc.planned", "collect: a folder's referenced generations known; nothing removed yet")
REMOVED = register(
    "intake.gc.removed",
    "collect: one more unreferenced generation removed (TENURE_CRASH_SKIP picks how many); folder not synced",
)
SYNCED = register("intake.gc.synced", "collect: a folder's removals made durable")
CRASH_POINTS = (PLANNED, REMOVED, SYNCED)


@dataclass
class Collected:
    """What one collection removed, and the folders it left alone with why."""

    generations: list[str] = field(default_factory=list)
    temporary: int = 0
    folders: int = 0
    #: case folder -> error code (a chain that does not load, a busy case): nothing removed there
    skipped: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "generations": list(self.generations),
            "temporary": self.temporary,
            "folders": self.folders,
            "skipped": dict(self.skipped),
        }


def collect(workspace: Workspace) -> Collected:
    """Remove unreferenced generations and abandoned temporary files; raises BusyError if a worker is active."""
    report = Collected()
    storage = CaseStorage(workspace)
    with workspace.locked():  # the worker lock; a stale runtime summary (and its batch's temp files) is cleared
        report.temporary += remove_abandoned_temp(workspace.cache)
        for folder in _dirs(workspace.quarantine):
            report.temporary += remove_abandoned_temp(folder)
        report.temporary += _runtime_temp(workspace)
        for folder in workspace.case_dirs():
            report.folders += 1
            lock = FileLock(workspace.locks / f"case-{folder.parent.name}.lock")  # the case lock, by its hash
            if not lock.acquire():
                report.skipped[str(folder)] = "case-busy"
                continue
            try:
                report.temporary += remove_abandoned_temp(folder)
                report.generations.extend(_collect_folder(storage, folder))
            except LifecycleError as error:
                report.skipped[str(folder)] = error.code
            finally:
                lock.release()
    return report


def _collect_folder(storage: CaseStorage, folder: Path) -> list[str]:
    numbers = storage.generations(folder)
    if len(numbers) < 2:
        return []
    newest = storage.load_generation(folder, numbers[-1])  # the whole chain, validated; raises if damaged
    referenced = set(storage.referenced(newest))
    doomed = [n for n in numbers if n not in referenced and n < newest.generation]
    crash_point(PLANNED)
    removed = []
    for number in doomed:
        path = folder / generation_name(number)
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(str(path))
        crash_point(REMOVED)
    if removed:
        fsync_dir(folder)
        crash_point(SYNCED)
    return removed


def _dirs(folder: Path) -> list[Path]:
    try:
        return [p for p in sorted(folder.iterdir()) if p.is_dir() and not p.is_symlink()]
    except FileNotFoundError:
        return []


def _runtime_temp(workspace: Workspace) -> int:
    """``runtime/.tmp-*`` left by an atomic write that died (written under the worker lock, held here).

    The hard-link probe of ``Workspace()`` (``.tmp-*.probe``) is written
    without a lock and is left alone; it removes itself.
    """
    runtime = workspace.runtime_file.parent
    names = [
        n
        for n in os.listdir(runtime)
        if n.startswith(TMP_PREFIX) and not n.endswith((".probe", ".probe.link")) and (runtime / n).is_file()
    ]
    return remove_files(runtime, names)
