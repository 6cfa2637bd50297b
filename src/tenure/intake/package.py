"""Package format v1: reading and fully validating a package archive.

A package is a zip holding ``manifest.json`` and the package's files. The
manifest (``manifest-v1.schema.json``) is authoritative for identity,
generation, analysis revision, state and routing. Lifecycle checkpoints are
immutable JSON artifacts at ``history/checkpoints/<sha256 of step id>.json``
(``checkpoint-v1.schema.json``); ``artifacts.lifecycle_checkpoint`` points at
the latest and each links to its predecessor.

:func:`read_package` validates everything: the archive structure and limits
(:mod:`.archive`), the manifest against the shipped schema and its own
rules, every file's content (checksums), and the checkpoint chain — paths,
cycles, state values, generation/revision order, identity, agreement with
the manifest for a matching generation, and that no checkpoint file is
unreachable. Checkpoint reads are capped at ``limits.manifest_bytes``.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .archive import CHECKPOINT_PREFIX, SafeArchive, check_entry_name, open_archive
from .canonical import MANIFEST, canonical_json, fingerprint, parse_aware, sha256_hex, step_hash, strict_json_loads
from .config import IntakeConfig, Limits
from .errors import PackageRejectedError
from .machine import IntakeMachine, intake_machine
from .schema import CHECKPOINT_SCHEMA, MANIFEST_SCHEMA, schema_errors

__all__ = ["Package", "Checkpoint", "read_package", "CHECKPOINT_DIR", "checkpoint_path", "validate_manifest"]

CHECKPOINT_DIR = CHECKPOINT_PREFIX
_CHECKPOINT_PATH = re.compile(r"^history/checkpoints/([0-9a-f]{64})\.json$")


def checkpoint_path(step_id: str) -> str:
    """Where the checkpoint of ``step_id`` lives inside a package."""
    return f"{CHECKPOINT_DIR}{step_hash(step_id)}.json"


@dataclass(frozen=True)
class Checkpoint:
    """One validated checkpoint artifact."""

    path: str
    data: Mapping[str, Any]

    @property
    def step_id(self) -> str:
        return str(self.data["step_id"])

    @property
    def generation(self) -> int:
        return int(self.data["generation"])

    @property
    def analysis_revision(self) -> int:
        return int(self.data["analysis_revision"])

    @property
    def state(self) -> str:
        return str(self.data["state"])

    @property
    def previous_state(self) -> str:
        return str(self.data["previous_state"])

    @property
    def previous(self) -> str | None:
        value = self.data["previous"]
        return None if value is None else str(value)

    @property
    def request_hash(self) -> str:
        return str(self.data["request_hash"])

    @property
    def source(self) -> tuple[int, str]:
        """The source receipt: (input generation, input content fingerprint)."""
        return int(self.data["source"]["generation"]), str(self.data["source"]["fingerprint"])

    @property
    def resume_state(self) -> str | None:
        value = self.data["resume_state"]
        return None if value is None else str(value)

    @property
    def created_at(self) -> datetime:
        return parse_aware(str(self.data["created_at"]))

    @property
    def details(self) -> Mapping[str, Any]:
        return dict(self.data["details"])


@dataclass(frozen=True)
class Package:
    """A fully validated package (one generation, or an input archive)."""

    path: Path
    manifest: Mapping[str, Any]
    state: Any
    #: every file except manifest.json -> sha256 hex of its bytes
    entry_hashes: Mapping[str, str]
    #: every file except manifest.json -> (CRC-32, size) as stored in the zip
    crcs: Mapping[str, tuple[int, int]]
    fingerprint: str
    #: the checkpoint chain, latest first
    chain: tuple[Checkpoint, ...]
    #: manifest.json is the last entry and there are no folder entries
    appendable: bool = False
    #: the zip's file entries (central-directory order) as read when validated
    zip_entries: tuple[zipfile.ZipInfo, ...] = field(default=(), repr=False, compare=False)
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update({cp.path: i for i, cp in enumerate(self.chain)})

    @property
    def case_id(self) -> str:
        return str(self.manifest["case_id"])

    @property
    def package_id(self) -> str:
        return str(self.manifest["package_id"])

    @property
    def generation(self) -> int:
        return int(self.manifest["generation"])

    @property
    def analysis_revision(self) -> int:
        return int(self.manifest["analysis_revision"])

    @property
    def routing(self) -> str:
        return str(self.manifest["routing"])

    @property
    def retry_count(self) -> int:
        return int(self.manifest["retry_count"])

    @property
    def blocked(self) -> Mapping[str, Any] | None:
        value = self.manifest["blocked"]
        return None if value is None else dict(value)

    @property
    def retry_at(self) -> datetime | None:
        blocked = self.blocked
        return None if blocked is None else parse_aware(str(blocked["retry_at"]))

    @property
    def resume_state(self) -> str | None:
        blocked = self.blocked
        return None if blocked is None else str(blocked["resume_state"])

    @property
    def files(self) -> list[str]:
        return sorted([*self.entry_hashes, MANIFEST])

    @property
    def protected_files(self) -> list[str]:
        return [str(p) for p in self.manifest["protected_files"]]

    @property
    def latest(self) -> Checkpoint | None:
        return self.chain[0] if self.chain else None

    def checkpoint_at(self, path: str) -> Checkpoint | None:
        index = self._index.get(path)
        return None if index is None else self.chain[index]

    def has_receipt(self, generation: int, content: str) -> bool:
        """Whether a checkpoint records this input generation and fingerprint."""
        return any(cp.source == (generation, content) for cp in self.chain)

    def receipt_generations(self) -> dict[int, str]:
        return {cp.source[0]: cp.source[1] for cp in self.chain}

    def read(self, name: str) -> bytes:
        """The bytes of one file of this package."""
        with zipfile.ZipFile(self.path) as zf:
            return zf.read(name)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (no detailed progress)."""
        return {
            "case_id": self.case_id,
            "package_id": self.package_id,
            "generation": self.generation,
            "analysis_revision": self.analysis_revision,
            "state": self.state.value,
            "routing": self.routing,
            "retry_count": self.retry_count,
            "blocked": self.blocked,
            "checkpoints": len(self.chain),
            "latest_step": self.latest.step_id if self.latest else None,
            "fingerprint": self.fingerprint,
            "path": str(self.path),
        }


def read_package(
    path: Path, config: IntakeConfig | None = None, *, base: Package | None = None, stored: bool = False
) -> Package:
    """Open and fully validate the package at ``path``, or raise PackageRejectedError.

    ``stored``: ``path`` is a generation in managed storage, read under
    :meth:`~tenure.intake.config.Limits.stored` (the limits plus room for the
    intake's own manifest fields and checkpoints); an input is read under
    the limits as configured.

    ``base`` is a package already validated whose entries were copied into
    this one: entries with the same CRC and size reuse its content hashes,
    and the chain walk stops where it reaches the base's latest checkpoint.
    """
    config = config or IntakeConfig()
    limits = config.limits.stored() if stored else config.limits
    machine = intake_machine(config.phases)
    with open_archive(path, limits) as arch:
        manifest = _read_manifest(arch, limits)
        state = validate_manifest(manifest, machine, arch.names)
        crcs = {n: (i.CRC, i.file_size) for n, i in arch.infos.items() if n != MANIFEST}
        chain = _read_chain(arch, manifest, machine, limits, base, crcs)
        hashes = _entry_hashes(arch, crcs, base)
        appendable = arch.local_order()[-1] == MANIFEST and not arch.has_folders()
        entries = tuple(arch.infos.values())
    hashes_with_manifest = {**hashes, MANIFEST: sha256_hex(canonical_json(manifest))}
    return Package(
        path=path,
        manifest=manifest,
        state=state,
        entry_hashes=hashes,
        crcs=crcs,
        fingerprint=fingerprint(hashes_with_manifest),
        chain=tuple(chain),
        appendable=appendable,
        zip_entries=entries,
    )


def _read_manifest(arch: SafeArchive, limits: Limits) -> dict[str, Any]:
    if MANIFEST not in arch.infos:
        raise PackageRejectedError("the archive has no manifest.json at its root", code="missing-manifest")
    if arch.size(MANIFEST) > limits.manifest_bytes:
        raise PackageRejectedError(
            f"manifest.json is {arch.size(MANIFEST)} bytes (limit {limits.manifest_bytes})", code="manifest-too-large"
        )
    try:
        manifest = strict_json_loads(arch.read(MANIFEST))
    except (ValueError, UnicodeDecodeError) as error:
        raise PackageRejectedError(f"manifest.json is not valid JSON: {error}", code="invalid-manifest") from None
    if len(canonical_json(manifest)) > limits.manifest_bytes:
        raise PackageRejectedError(
            f"manifest.json is over {limits.manifest_bytes} bytes in canonical form (how it is stored)",
            code="manifest-too-large",
        )
    problems = schema_errors(MANIFEST_SCHEMA, manifest)
    if problems:
        raise PackageRejectedError(
            "manifest.json does not match manifest-v1.schema.json: " + "; ".join(problems),
            code="invalid-manifest",
            problems=problems,
        )
    return dict(manifest)


def _bad_manifest(message: str, code: str = "invalid-manifest") -> PackageRejectedError:
    return PackageRejectedError(message, code=code)


def validate_manifest(manifest: Mapping[str, Any], machine: IntakeMachine, names: list[str]) -> Any:
    """The rules of a schema-valid manifest; returns its state member."""
    state_name = manifest["state"]
    if state_name not in {s.value for s in machine.states}:
        raise _bad_manifest(f"manifest state {state_name!r} is not a state of the machine")
    state = machine.state(state_name)
    if manifest["history"]["revisions"] != manifest["analysis_revision"]:
        raise _bad_manifest("history.revisions must equal analysis_revision")
    _check_blocked(manifest, machine)
    pointer = manifest["artifacts"]["lifecycle_checkpoint"]
    if state_name == "NEW":
        if manifest["generation"] != 0 or manifest["analysis_revision"] != 0 or pointer:
            raise _bad_manifest("a NEW package has generation 0, revision 0 and no checkpoint")
    elif manifest["generation"] < 1 or pointer is None:
        raise _bad_manifest(f"a {state_name} package has generation >= 1 and a checkpoint")
    present = set(names)
    for key, target in manifest["artifacts"].items():
        if key == "lifecycle_checkpoint":
            continue
        _check_reference(str(target), present, f"artifacts.{key}")
        if str(target).startswith(CHECKPOINT_DIR):
            raise _bad_manifest(f"artifacts.{key} points into the reserved {CHECKPOINT_DIR}")
    for protected in manifest["protected_files"]:
        _check_reference(str(protected), present, "protected_files")
    return state


def _check_reference(target: str, present: set[str], where: str) -> None:
    try:
        check_entry_name(target, Limits())
    except PackageRejectedError:
        raise _bad_manifest(f"{where} names an unsafe path {target!r}") from None
    if target not in present or target == MANIFEST:
        raise _bad_manifest(f"{where} names {target!r}, which is not a file of the package", code="invalid-package")


def _check_blocked(manifest: Mapping[str, Any], machine: IntakeMachine) -> None:
    blocked = manifest["blocked"]
    if (manifest["state"] == "BLOCKED") != (blocked is not None):
        raise _bad_manifest("blocked is set exactly when the state is BLOCKED")
    if blocked is None:
        return
    try:
        parse_aware(blocked["retry_at"])
    except ValueError:
        raise _bad_manifest("blocked.retry_at must be an ISO 8601 time with an offset") from None
    if blocked["resume_state"] not in machine.active:
        raise _bad_manifest(f"blocked.resume_state {blocked['resume_state']!r} is not an active state")


# --------------------------------------------------------------------------- the chain


def _read_chain(
    arch: SafeArchive,
    manifest: Mapping[str, Any],
    machine: IntakeMachine,
    limits: Limits,
    base: Package | None,
    crcs: Mapping[str, tuple[int, int]],
) -> list[Checkpoint]:
    chain: list[Checkpoint] = []
    seen: set[str] = set()
    later: Checkpoint | None = None
    path: str | None = manifest["artifacts"]["lifecycle_checkpoint"]
    while path is not None:
        if path in seen:
            raise PackageRejectedError(
                f"checkpoint {path} is reached twice: the chain has a cycle", code="checkpoint-cycle", entry=path
            )
        reused = base.checkpoint_at(path) if base is not None else None
        if reused is not None and base is not None and crcs.get(path) == base.crcs.get(path):
            _check_order(reused, manifest, later)
            rest = base.chain[base.chain.index(reused) :]
            chain.extend(rest)
            seen.update(cp.path for cp in rest)
            break
        seen.add(path)
        checkpoint = _load_checkpoint(arch, path, limits)
        _check_checkpoint(checkpoint, manifest, machine)
        _check_order(checkpoint, manifest, later)
        chain.append(checkpoint)
        later, path = checkpoint, checkpoint.previous
    orphans = sorted(n for n in arch.names if n.startswith(CHECKPOINT_DIR) and n not in seen)
    if orphans:
        code = "checkpoint-orphan" if _CHECKPOINT_PATH.match(orphans[0]) else "checkpoint-path"
        raise PackageRejectedError(f"{orphans[0]} is not part of the checkpoint chain", code=code, entry=orphans[0])
    return chain


def _load_checkpoint(arch: SafeArchive, path: str, limits: Limits) -> Checkpoint:
    match = _CHECKPOINT_PATH.match(path)
    if match is None:
        raise PackageRejectedError(
            f"checkpoint link {path!r} is outside history/checkpoints/", code="checkpoint-path", entry=path[:200]
        )
    if path not in arch.infos:
        raise PackageRejectedError(f"checkpoint {path} is not in the package", code="checkpoint-missing", entry=path)
    if arch.size(path) > limits.manifest_bytes:
        raise PackageRejectedError(
            f"checkpoint {path} is {arch.size(path)} bytes (limit {limits.manifest_bytes})",
            code="checkpoint-too-large",
            entry=path,
        )
    try:
        data = strict_json_loads(arch.read(path))
    except (ValueError, UnicodeDecodeError) as error:
        raise PackageRejectedError(
            f"checkpoint {path} is not valid JSON: {error}", code="checkpoint-invalid", entry=path
        ) from None
    problems = schema_errors(CHECKPOINT_SCHEMA, data)
    if problems:
        raise PackageRejectedError(
            f"checkpoint {path} does not match checkpoint-v1.schema.json: " + "; ".join(problems),
            code="checkpoint-invalid",
            entry=path,
        )
    try:
        parse_aware(data["created_at"])
        if data["routing"]["retry_at"] is not None:
            parse_aware(data["routing"]["retry_at"])
    except ValueError as error:
        raise PackageRejectedError(f"checkpoint {path}: {error}", code="checkpoint-invalid", entry=path) from None
    if step_hash(data["step_id"]) != match.group(1):
        raise PackageRejectedError(
            f"checkpoint {path} is not named after its step id", code="checkpoint-path", entry=path
        )
    return Checkpoint(path=path, data=data)


def _check_checkpoint(cp: Checkpoint, manifest: Mapping[str, Any], machine: IntakeMachine) -> None:
    if (cp.data["case_id"], cp.data["package_id"]) != (manifest["case_id"], manifest["package_id"]):
        raise PackageRejectedError(
            f"checkpoint {cp.path} belongs to another case or package", code="checkpoint-identity", entry=cp.path
        )
    known = {s.value for s in machine.states}
    for name in (cp.state, cp.previous_state, cp.resume_state):
        if name is not None and name not in known:
            raise PackageRejectedError(
                f"checkpoint {cp.path} names unknown state {name!r}", code="checkpoint-state", entry=cp.path, state=name
            )


def _check_order(cp: Checkpoint, manifest: Mapping[str, Any], later: Checkpoint | None) -> None:
    if later is None:
        top_generation, top_revision = manifest["generation"], manifest["analysis_revision"]
        newest = cp.generation <= top_generation
    else:
        top_generation, top_revision = later.generation, later.analysis_revision
        newest = cp.generation < top_generation
    if not newest or cp.analysis_revision > top_revision:
        raise PackageRejectedError(
            f"checkpoint {cp.path} (generation {cp.generation}, revision {cp.analysis_revision}) is out of order",
            code="checkpoint-order",
            entry=cp.path,
        )
    if later is None and cp.generation == manifest["generation"]:
        _check_agreement(cp, manifest)


def _check_agreement(cp: Checkpoint, manifest: Mapping[str, Any]) -> None:
    blocked = manifest["blocked"] or {}
    routing = cp.data["routing"]
    expected = {
        "state": manifest["state"],
        "analysis_revision": manifest["analysis_revision"],
        "routing": manifest["routing"],
        "retry_count": manifest["retry_count"],
        "blocked_reason": blocked.get("reason"),
        "resume_state": blocked.get("resume_state"),
    }
    actual = {
        "state": cp.state,
        "analysis_revision": cp.analysis_revision,
        "routing": routing["destination"],
        "retry_count": routing["retry_count"],
        "blocked_reason": routing["blocked_reason"],
        "resume_state": cp.resume_state,
    }
    if blocked.get("retry_at") != routing["retry_at"]:
        expected["retry_at"], actual["retry_at"] = blocked.get("retry_at"), routing["retry_at"]
    wrong = sorted(k for k in expected if expected[k] != actual[k])
    if wrong:
        raise PackageRejectedError(
            f"latest checkpoint {cp.path} disagrees with the manifest on " + ", ".join(wrong),
            code="checkpoint-mismatch",
            entry=cp.path,
            fields=wrong,
        )


def _entry_hashes(arch: SafeArchive, crcs: Mapping[str, tuple[int, int]], base: Package | None) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for name, crc in crcs.items():
        if base is not None and base.crcs.get(name) == crc:
            hashes[name] = base.entry_hashes[name]
        else:
            hashes[name] = arch.sha256(name)
    return hashes
