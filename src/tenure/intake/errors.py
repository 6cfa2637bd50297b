"""Intake errors: one family under :class:`tenure.errors.IntakeError`.

Every error the intake raises is a :class:`LifecycleError` (the intake
spec's name: ``except LifecycleError`` catches them all) with a stable
``code`` taken from :data:`CODES`, the catalogue that ``docs/intake.md``
lists. Each leaf also belongs to the family of :mod:`tenure.errors` that
says what kind of problem it is, so a caller that handles ``NotFoundError``
or ``ConflictError`` for the rest of tenure handles the intake's too, and
the CLI's exit code follows the family::

    LifecycleError (IntakeError)    family / exit code
    ├── PackageRejectedError        IntakeError, 7: the input archive or package
    │   │                           is invalid; poll quarantines it
    │   └── PackageConflictError    valid, but contradicts what is stored
    ├── RequestRejectedError        InvalidInputError, 2: an advance request
    │                               that can never succeed as made
    ├── TransitionRefusedError      IllegalTransitionError, 4: the machine
    │                               refuses the move
    ├── StepReusedError             IdempotencyConflictError, 4: a step id
    │                               reused for a different request
    ├── CaseNotFoundError           NotFoundError, 3: no stored generation
    ├── StorageCorruptError         IntegrityError, 6: managed storage failed
    │                               validation
    └── BusyError                   ConflictError, 4: a lock is held by
                                    another worker (retryable)

``PackageRejectedError`` is the only family poll turns into QUARANTINED; anything
else raised while admitting an input (and any ``OSError``) is an
infrastructure failure reported as ERROR with the input left pending.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tenure.errors import (
    ConflictError,
    IdempotencyConflictError,
    IllegalTransitionError,
    IntakeError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
)

__all__ = [
    "CODES",
    "LifecycleError",
    "PackageRejectedError",
    "PackageConflictError",
    "RequestRejectedError",
    "TransitionRefusedError",
    "StepReusedError",
    "CaseNotFoundError",
    "StorageCorruptError",
    "BusyError",
]

#: code -> (family, what to do). The stable catalogue of intake error codes.
CODES: dict[str, tuple[str, str]] = {
    # -- archive limits and hostile archives (PackageRejectedError)
    "archive-too-large": ("rejected", "split the package or raise limits.archive_bytes"),
    "not-a-zip": ("rejected", "deliver a zip archive (package format v1)"),
    "truncated-zip": ("rejected", "the archive is incomplete; publish the whole file atomically"),
    "too-many-entries": ("rejected", "reduce the number of files or raise limits.max_entries"),
    "uncompressed-too-large": ("rejected", "reduce the content or raise limits.uncompressed_bytes"),
    "compression-ratio": ("rejected", "an entry compresses suspiciously well; store it with less compression"),
    "manifest-too-large": ("rejected", "keep manifest.json under limits.manifest_bytes"),
    "path-too-deep": ("rejected", "flatten the package or raise limits.max_path_depth"),
    "path-too-long": ("rejected", "shorten the entry names or raise limits.max_path_bytes"),
    "unsafe-path": ("rejected", "use relative forward-slash entry names without '..'"),
    "duplicate-entry": ("rejected", "each entry name may appear once"),
    "symlink-entry": ("rejected", "store file content, not symbolic links"),
    "special-entry": ("rejected", "store regular files only"),
    "encrypted-entry": ("rejected", "deliver unencrypted entries"),
    "overlapping-entries": ("rejected", "the archive reuses bytes between entries (zip bomb); rebuild it"),
    "unsupported-compression": ("rejected", "use stored or deflate compression"),
    "corrupt-entry": ("rejected", "an entry fails its checksum; rebuild the archive"),
    "missing-manifest": ("rejected", "add manifest.json at the archive root"),
    "invalid-manifest": ("rejected", "fix manifest.json to match manifest-v1.schema.json"),
    "invalid-package": ("rejected", "fix the package so it agrees with its manifest"),
    "symlink-input": ("rejected", "publish regular files into the inbox, not symbolic links"),
    "not-a-regular-file": (
        "rejected",
        "publish regular files into the inbox, not folders, FIFOs, sockets or devices",
    ),
    "non-canonical-zip": (
        "rejected",
        "the archive holds bytes outside its listed entries (a prefix, a gap, a hidden or appended record); "
        "rebuild it with a standard zip tool",
    ),
    "header-mismatch": ("rejected", "an entry's local and central headers disagree; rebuild the archive"),
    "unsupported-zip-version": ("rejected", "build the archive with a zip tool that needs version 6.3 or lower"),
    "unsupported-zip-feature": ("rejected", "build the archive without patched or enhanced-deflate entries"),
    "bad-entry-name": ("rejected", "entry names flagged as UTF-8 must be valid UTF-8"),
    "path-conflict": ("rejected", "a path cannot be both a file and a folder"),
    "too-many-checkpoints": ("rejected", "the checkpoint chain is longer than limits.max_checkpoints"),
    "unreadable-package": ("rejected", "the package could not be read at all; rebuild it with a standard zip tool"),
    # -- checkpoint chain (PackageRejectedError; StorageCorruptError when in managed storage)
    "checkpoint-path": ("rejected", "checkpoints live at history/checkpoints/<sha256 of step id>.json"),
    "checkpoint-missing": ("rejected", "a checkpoint link points at a file that is not in the package"),
    "checkpoint-cycle": ("rejected", "the checkpoint links form a cycle; restore the original package"),
    "checkpoint-state": ("rejected", "a checkpoint names a state the machine does not know"),
    "checkpoint-order": ("rejected", "generation or revision goes backwards along the chain"),
    "checkpoint-identity": ("rejected", "a checkpoint belongs to another case or package"),
    "checkpoint-mismatch": ("rejected", "the latest checkpoint disagrees with the manifest"),
    "checkpoint-too-large": ("rejected", "a checkpoint exceeds limits.manifest_bytes"),
    "checkpoint-invalid": ("rejected", "fix the checkpoint to match checkpoint-v1.schema.json"),
    "checkpoint-orphan": ("rejected", "history/checkpoints holds a file the chain does not reach"),
    "stored-generation": (
        "rejected",
        "this is a stored generation file (format v2), not a package; deliver `tenure intake export` output",
    ),
    # -- stored generation format v2 (causes of StorageCorruptError; ADR 0110)
    "generation-link-missing": (
        "rejected",
        "a generation's history continues in a generation file that is missing; restore it from a backup",
    ),
    "generation-link-mismatch": (
        "rejected",
        "a generation's link does not match the generation file it names; restore the named files from a backup",
    ),
    "generation-record-invalid": (
        "rejected",
        "history/checkpoints/generation.json of a stored generation is damaged; restore the file from a backup",
    ),
    # -- conflicts with stored generations (PackageConflictError)
    "generation-conflict": (
        "conflict",
        "this generation is already stored with other content; deliver a new generation",
    ),
    "stale-package": ("conflict", "a newer generation is stored; deliver the current one or a newer one"),
    "returning-protected-changed": ("conflict", "a returning package must keep protected files byte-identical"),
    "returning-lineage-broken": ("conflict", "a returning package must extend the stored checkpoint chain"),
    "returning-revision-lowered": ("conflict", "a returning package may not lower the analysis revision"),
    "returning-history-erased": ("conflict", "a returning package must keep every earlier artifact and checkpoint"),
    # -- advance requests (RequestRejectedError, TransitionRefusedError, StepReusedError)
    "step-id-required": ("request", "pass a stable, non-blank step_id"),
    "step-id-reused": ("request", "use a new step_id for a different request"),
    "details-invalid": (
        "request",
        "details must be a JSON object of strings, numbers, booleans, null, lists and objects",
    ),
    "artifact-invalid": ("request", "artifact paths are safe relative paths outside reserved names"),
    "artifact-reserved": (
        "request",
        "history/checkpoints/, manifest.json and artifacts.lifecycle_checkpoint belong to the lifecycle service",
    ),
    "artifact-exists": ("request", "earlier content cannot be replaced; write the artifact under a new path"),
    "block-reason-required": ("request", "give a non-blank reason when blocking"),
    "retry-time-required": ("request", "give a timezone-aware retry time when blocking"),
    "retry-time-naive": ("request", "use a timezone-aware datetime (e.g. datetime.now(timezone.utc))"),
    "unknown-state": ("request", "use a state of the configured machine"),
    "transition-skip": ("transition", "advance one phase at a time"),
    "transition-regression": ("transition", "phases never go backwards; reopen a finished case instead"),
    "transition-not-allowed": ("transition", "see docs/machines/intake.md for the legal moves"),
    "resume-state-mismatch": ("transition", "a blocked case resumes only to the state it interrupted"),
    "resume-too-early": ("transition", "wait until the retry time has passed"),
    # -- storage and locks
    "case-not-found": ("storage", "check the case and package ids (tenure intake show)"),
    "storage-corrupt": ("storage", "managed storage failed validation; restore the named file from a backup"),
    "worker-busy": ("busy", "another worker holds the workspace; retry after it finishes"),
    "case-busy": ("busy", "another worker holds this case; retry later"),
    "no-hard-links": ("storage", "put the workspace on a local filesystem that supports hard links"),
    "no-intake": (
        "storage",
        "the path holds no intake (no inbox/); check it, or create one with `tenure intake init DIR`",
    ),
    "unexpected-block-fields": ("request", "reason and retry_at belong to a move to BLOCKED only"),
    "generation-limit": ("request", "the package reached the highest generation number; deliver it as a new package"),
    "manifest-limit": ("request", "the next manifest or checkpoint would exceed its size limit; add fewer pointers"),
    "io-error": ("infrastructure", "check permissions and free space of the workspace; the input stays pending"),
    "internal-error": ("infrastructure", "report this bug; the input stays pending"),
    "input-changed": ("notice", "the producer changed the inbox file while it was processed; it stays in the inbox"),
}


class LifecycleError(IntakeError):
    """Root of every intake error; ``code`` is one of :data:`CODES`."""

    code: ClassVar[str] = "intake"

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None, **context: Any) -> None:
        if code is not None and code not in CODES:
            raise ValueError(f"unknown intake error code {code!r}")
        known = code if code is not None else type(self).code
        if hint is None and known in CODES:
            hint = CODES[known][1]
        super().__init__(message, hint=hint, code=code, **context)


class PackageRejectedError(LifecycleError):
    """The input is invalid; poll quarantines it with this code."""


class PackageConflictError(PackageRejectedError):
    """A valid package that contradicts the stored generations."""


class RequestRejectedError(InvalidInputError, LifecycleError):
    """An advance request that can never succeed as made."""


class TransitionRefusedError(IllegalTransitionError, LifecycleError):
    """The intake machine refuses the move; context names state and target."""


class StepReusedError(IdempotencyConflictError, LifecycleError):
    """The step id was already used for a different request."""

    code = "step-id-reused"


class CaseNotFoundError(NotFoundError, LifecycleError):
    code = "case-not-found"


class StorageCorruptError(IntegrityError, LifecycleError):
    """A managed file failed validation; never silently rolled back."""

    code = "storage-corrupt"


class BusyError(ConflictError, LifecycleError):
    retryable = True
