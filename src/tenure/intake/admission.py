"""Deciding what an incoming, valid package means against stored generations.

* a fresh NEW package for an unknown case/package → admitted (VALIDATED);
* a known input generation with the same fingerprint → DUPLICATE, also when
  the only evidence is a checkpoint's source receipt;
* a known generation with other content → conflict (quarantined);
* an older generation nobody recorded → stale (quarantined);
* a newer returning package → admitted as given, if it keeps the stored
  analysis revision, checkpoint lineage, history, artifacts and protected
  files; otherwise a conflict.
"""

from __future__ import annotations

import enum

from .errors import PackageConflictError
from .package import Package
from .storage import CaseStorage

__all__ = ["Admission", "classify", "check_returning"]


class Admission(enum.Enum):
    FRESH = "fresh"
    RETURNING = "returning"
    DUPLICATE = "duplicate"


def _conflict(message: str, code: str, incoming: Package) -> PackageConflictError:
    return PackageConflictError(
        message, code=code, case_id=incoming.case_id, package_id=incoming.package_id, generation=incoming.generation
    )


def classify(incoming: Package, current: Package | None, storage: CaseStorage) -> Admission:
    """What to do with ``incoming`` (raises PackageConflictError for a conflict)."""
    if incoming.state.value == "NEW":
        if current is None:
            return Admission.FRESH
        return _known(incoming, current.receipt_generations().get(0))
    if current is None:
        return Admission.RETURNING
    if incoming.generation > current.generation:
        check_returning(current, incoming)
        return Admission.RETURNING
    stored = storage.load_any(incoming.case_id, incoming.package_id, incoming.generation)
    known = stored.fingerprint if stored else current.receipt_generations().get(incoming.generation)
    return _known(incoming, known)


def _known(incoming: Package, known: str | None) -> Admission:
    if known is None:
        raise _conflict(
            f"generation {incoming.generation} is older than the stored package and was never seen here",
            "stale-package",
            incoming,
        )
    if known == incoming.fingerprint:
        return Admission.DUPLICATE
    raise _conflict(
        f"generation {incoming.generation} was already seen with other content", "generation-conflict", incoming
    )


def check_returning(current: Package, incoming: Package) -> None:
    """A newer generation must preserve what the stored one holds."""
    if incoming.analysis_revision < current.analysis_revision:
        raise _conflict(
            f"analysis revision {incoming.analysis_revision} is lower than the stored {current.analysis_revision}",
            "returning-revision-lowered",
            incoming,
        )
    latest = current.latest
    if latest is not None and (
        incoming.checkpoint_at(latest.path) is None
        or incoming.entry_hashes.get(latest.path) != current.entry_hashes[latest.path]
    ):
        raise _conflict(
            f"the chain does not extend the stored checkpoint {latest.path}", "returning-lineage-broken", incoming
        )
    for path in current.protected_files:
        if incoming.entry_hashes.get(path) != current.entry_hashes.get(path) or path not in incoming.protected_files:
            raise _conflict(
                f"protected file {path} was changed, removed or unprotected", "returning-protected-changed", incoming
            )
    kept = {p for p in current.entry_hashes if p.startswith("history/")}
    kept.update(str(t) for k, t in current.manifest["artifacts"].items() if k != "lifecycle_checkpoint")
    for path in sorted(kept):
        if incoming.entry_hashes.get(path) != current.entry_hashes.get(path):
            raise _conflict(f"earlier artifact {path} was removed or replaced", "returning-history-erased", incoming)
