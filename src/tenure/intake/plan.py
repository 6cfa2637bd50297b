"""Planning an advance: validate a request and derive the next generation.

Pure functions of the current package, the request and the clock; no I/O.
:func:`make_request` checks the caller's input (step id, details, artifacts,
pointers, BLOCKED reason and retry time); :func:`plan_advance` asks the
machine for the transition and computes the next manifest, the checkpoint
artifact and the files to add — all of which are written together in one
generation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .archive import check_entry_name
from .canonical import MANIFEST, canonical_json, request_hash, sha256_hex, to_utc_text
from .config import MAX_GENERATION, IntakeConfig, Limits
from .errors import PackageRejectedError, RequestRejectedError
from .machine import IntakeMachine
from .package import CHECKPOINT_DIR, EncodedManifest, Package, checkpoint_path

__all__ = ["AdvanceRequest", "Plan", "make_request", "plan_advance"]

_POINTER = re.compile(r"^[a-z][a-z0-9_.-]*$")
_RESERVED_POINTER = "lifecycle_checkpoint"


@dataclass(frozen=True)
class AdvanceRequest:
    """A validated advance request; ``hash`` identifies it for idempotence."""

    target: str
    step_id: str
    details: Mapping[str, Any]
    artifacts: Mapping[str, bytes]
    pointers: Mapping[str, str]
    reason: str | None
    retry_at: datetime | None

    @property
    def hash(self) -> str:
        return request_hash(
            {
                "target": self.target,
                "details": self.details,
                "artifacts": {p: sha256_hex(b) for p, b in sorted(self.artifacts.items())},
                "pointers": dict(self.pointers),
                "retry": None
                if self.retry_at is None
                else {"reason": self.reason, "retry_at": to_utc_text(self.retry_at)},
            }
        )


@dataclass(frozen=True)
class Plan:
    """The next generation: its manifest and every file it adds.

    ``encoded`` is the manifest's canonical form when the plan has it (the
    writer stores it as it is); the manifest shares the members it keeps
    with the current generation's, which nobody changes.
    """

    manifest: dict[str, Any]
    additions: dict[str, bytes]
    checkpoint: dict[str, Any]
    encoded: EncodedManifest | None = field(default=None, compare=False)


def make_request(
    machine: IntakeMachine,
    config: IntakeConfig,
    target: Any,
    *,
    step_id: Any,
    details: Any = None,
    artifacts: Mapping[str, bytes] | None = None,
    pointers: Mapping[str, str] | None = None,
    reason: str | None = None,
    retry_at: datetime | None = None,
) -> AdvanceRequest:
    """Validate the caller's request (raises RequestRejectedError with a code)."""
    state = machine.state(target).value
    if not isinstance(step_id, str) or not step_id.strip() or len(step_id) > 65536:
        raise RequestRejectedError(
            "advance needs a stable, non-blank step_id (at most 65536 characters)", code="step-id-required"
        )
    details = _check_details({} if details is None else details, config)
    artifacts = _check_artifacts(dict(artifacts or {}), config)
    pointers = _check_pointers(dict(pointers or {}))
    _check_block(state, reason, retry_at)
    return AdvanceRequest(
        target=state,
        step_id=step_id,
        details=details,
        artifacts=artifacts,
        pointers=pointers,
        reason=reason,
        retry_at=retry_at,
    )


def _check_details(details: Any, config: IntakeConfig) -> dict[str, Any]:
    if not isinstance(details, Mapping):
        raise RequestRejectedError("details must be a JSON object", code="details-invalid")
    try:
        encoded = canonical_json(details)
    except (TypeError, ValueError) as error:
        raise RequestRejectedError(f"details are not plain JSON: {error}", code="details-invalid") from None
    if len(encoded) > config.limits.manifest_bytes // 2:
        raise RequestRejectedError(
            f"details are too large for a checkpoint (limit {config.limits.manifest_bytes // 2} bytes)",
            code="details-invalid",
        )
    parsed: dict[str, Any] = json.loads(encoded)
    return parsed


def _check_artifacts(artifacts: dict[str, bytes], config: IntakeConfig) -> dict[str, bytes]:
    for path, data in artifacts.items():
        if not isinstance(path, str) or not isinstance(data, (bytes, bytearray)):
            raise RequestRejectedError("artifacts map relative paths to bytes", code="artifact-invalid")
        try:
            check_entry_name(path, config.limits)
        except PackageRejectedError as error:
            raise RequestRejectedError(
                f"artifact path {path!r}: {error.message}", code="artifact-invalid", path=path
            ) from None
        if path.endswith("/"):
            raise RequestRejectedError(f"artifact path {path!r} names a folder", code="artifact-invalid")
        if path == MANIFEST or path.startswith(CHECKPOINT_DIR) or path == CHECKPOINT_DIR[:-1]:
            raise RequestRejectedError(
                f"{path} is reserved to the lifecycle service", code="artifact-reserved", path=path
            )
    return {p: bytes(b) for p, b in artifacts.items()}


def _check_pointers(pointers: dict[str, str]) -> dict[str, str]:
    for name, target in pointers.items():
        if name == _RESERVED_POINTER:
            raise RequestRejectedError(
                "artifacts.lifecycle_checkpoint is maintained by the lifecycle service",
                code="artifact-reserved",
                pointer=name,
            )
        if not isinstance(name, str) or not _POINTER.match(name) or not isinstance(target, str):
            raise RequestRejectedError(
                f"artifact pointer {name!r} must be a lower-case name mapped to a path",
                code="artifact-invalid",
                pointer=str(name),
            )
        if target.startswith(CHECKPOINT_DIR):
            raise RequestRejectedError(
                f"pointer {name} may not point into {CHECKPOINT_DIR}", code="artifact-reserved", pointer=name
            )
    return pointers


def _check_block(state: str, reason: str | None, retry_at: datetime | None) -> None:
    if state != "BLOCKED":
        if reason is not None or retry_at is not None:
            raise RequestRejectedError(
                "reason and retry_at are only for a move to BLOCKED", code="unexpected-block-fields"
            )
        return
    if not isinstance(reason, str) or not reason.strip():
        raise RequestRejectedError("BLOCKED needs a non-blank reason", code="block-reason-required")
    if not isinstance(retry_at, datetime):
        raise RequestRejectedError("BLOCKED needs a retry time", code="retry-time-required")
    if retry_at.tzinfo is None or retry_at.utcoffset() is None:
        raise RequestRejectedError("the retry time must be timezone-aware", code="retry-time-naive")


def plan_advance(
    current: Package, request: AdvanceRequest, machine: IntakeMachine, now: datetime, limits: Limits | None = None
) -> Plan:
    """The next generation of ``current`` for ``request`` (raises if refused).

    Refused with ``generation-limit`` past generation 99,999,999 and with
    ``manifest-limit`` when the checkpoint would exceed ``manifest_bytes`` or
    the manifest the room a stored manifest has (:meth:`Limits.stored`).
    """
    limits = limits or Limits()
    source, target = current.state, machine.state(request.target)
    machine.check(source, target, {"now": now, "resume_state": current.resume_state, "retry_at": current.retry_at})
    if current.generation + 1 > MAX_GENERATION:
        raise RequestRejectedError(
            f"generation {current.generation} is the last one a package can have", code="generation-limit"
        )
    revision = current.analysis_revision
    if target.value == "BUILDING_CASE" and source.value == "VALIDATED" and revision == 0:
        revision = 1
    if target.value == "REOPENED":
        revision += 1
    blocked = None
    if target.value == "BLOCKED":
        assert request.retry_at is not None and request.reason is not None
        blocked = {"reason": request.reason, "retry_at": to_utc_text(request.retry_at), "resume_state": source.value}
    retry_count = current.retry_count + (1 if blocked else 0)
    routing = machine.routing(target)
    additions = _new_files(current, request)
    path = checkpoint_path(request.step_id)
    checkpoint = {
        "format": "tenure-checkpoint",
        "format_version": 1,
        "case_id": current.case_id,
        "package_id": current.package_id,
        "generation": current.generation + 1,
        "analysis_revision": revision,
        "previous_state": source.value,
        "state": target.value,
        "routing": {
            "destination": routing,
            "retry_count": retry_count,
            "blocked_reason": blocked["reason"] if blocked else None,
            "retry_at": blocked["retry_at"] if blocked else None,
        },
        "resume_state": blocked["resume_state"] if blocked else None,
        "step_id": request.step_id,
        "request_hash": request.hash,
        "source": {"generation": current.generation, "fingerprint": current.fingerprint},
        "previous": current.manifest["artifacts"]["lifecycle_checkpoint"],
        "created_at": to_utc_text(now),
        "details": dict(request.details),
    }
    additions[path] = canonical_json(checkpoint) + b"\n"
    if len(additions[path]) > limits.manifest_bytes:
        raise RequestRejectedError(
            f"the checkpoint would be {len(additions[path])} bytes (limit {limits.manifest_bytes}); "
            "pass smaller details or a shorter step id",
            code="manifest-limit",
        )
    # the members that change are new objects; the others (metadata, protected files) are shared, not copied
    changed = {
        "generation": current.generation + 1,
        "analysis_revision": revision,
        "state": target.value,
        "routing": routing,
        "retry_count": retry_count,
        "blocked": blocked,
        "history": {**current.manifest["history"], "revisions": revision},
        "artifacts": {**current.manifest["artifacts"], **request.pointers, _RESERVED_POINTER: path},
    }
    manifest = {**current.manifest, **changed}
    _check_pointer_targets(request.pointers, current.entry_hashes, additions)
    encoded = EncodedManifest.of_package(current).derive(manifest, changed)
    room = limits.stored().manifest_bytes
    if len(encoded.stored) > room:
        raise RequestRejectedError(
            f"the next manifest would exceed {room} bytes; add fewer artifact pointers", code="manifest-limit"
        )
    return Plan(manifest=manifest, additions=additions, checkpoint=checkpoint, encoded=encoded)


def _new_files(current: Package, request: AdvanceRequest) -> dict[str, bytes]:
    """Artifacts to add; identical re-additions are dropped, changes refused."""
    additions: dict[str, bytes] = {}
    for path, data in request.artifacts.items():
        existing = current.entry_hashes.get(path)
        if existing is None:
            additions[path] = data
        elif existing != sha256_hex(data):
            raise RequestRejectedError(
                f"{path} already exists with other content; earlier content is never replaced",
                code="artifact-exists",
                path=path,
            )
    return additions


def _check_pointer_targets(pointers: Mapping[str, str], files: Mapping[str, str], added: Mapping[str, bytes]) -> None:
    for name, target in pointers.items():
        if target not in files and target not in added:
            raise RequestRejectedError(
                f"pointer {name} names {target!r}, which is not a file of the package",
                code="artifact-invalid",
                pointer=name,
            )
