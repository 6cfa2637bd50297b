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

Stored generations (``stored=True``) may be in stored generation format v2
(ADR 0110): besides the package's files, the zip holds the generation record
:data:`GENERATION_RECORD` and only the checkpoints this generation wrote;
the earlier ones are the history of the generation the record links to
(file name, generation and fingerprint), passed in as ``linked``. The
:class:`Package` read is the same logical package either way: its
``entry_hashes``, ``chain`` and ``fingerprint`` cover the whole history.
A generation without the record (format v1) is a complete package.
"""

from __future__ import annotations

import functools
import hashlib
import re
import zipfile
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from .archive import CHECKPOINT_PREFIX, Entry, SafeArchive, check_entry_name, entry_chunks, open_archive
from .canonical import (
    GENERATION_RECORD,
    MANIFEST,
    canonical_json,
    canonical_parts,
    join_parts,
    parse_aware,
    sha256_hex,
    step_hash,
    strict_json_loads,
)
from .config import IntakeConfig, Limits
from .errors import PackageRejectedError, StorageCorruptError
from .history import History, fingerprint_record
from .machine import IntakeMachine, intake_machine
from .schema import CHECKPOINT_SCHEMA, MANIFEST_SCHEMA, schema_errors

__all__ = [
    "Package",
    "EncodedManifest",
    "Checkpoint",
    "Link",
    "read_package",
    "read_link",
    "chain_files",
    "CHECKPOINT_DIR",
    "GENERATION_RECORD",
    "STORED_FORMAT",
    "checkpoint_path",
    "validate_manifest",
    "generation_name",
]

CHECKPOINT_DIR = CHECKPOINT_PREFIX
_CHECKPOINT_PATH = re.compile(r"^history/checkpoints/([0-9a-f]{64})\.json$")
#: the stored generation record (format v2), :data:`~tenure.intake.canonical.GENERATION_RECORD`: in the namespace
#: reserved to the lifecycle service, so no producer file can have its name, and a v1 reader refuses a v2
#: generation (an orphan) instead of misreading it
#: ``format`` and ``format_version`` of the generation record
RECORD_FORMAT = "tenure-intake-generation"
STORED_FORMAT = 2
_GENERATION_FILE = re.compile(r"^g(\d{8})\.zip$")
_FINGERPRINT = re.compile(r"^sha256:[0-9a-f]{64}$")


def generation_name(generation: int) -> str:
    """The file name of a stored generation."""
    return f"g{generation:08d}.zip"


def checkpoint_path(step_id: str) -> str:
    """Where the checkpoint of ``step_id`` lives inside a package."""
    return f"{CHECKPOINT_DIR}{step_hash(step_id)}.json"


@dataclass(frozen=True)
class Checkpoint:
    """One validated checkpoint artifact."""

    path: str
    data: Mapping[str, Any]
    #: sha256 hex of the checkpoint file's bytes
    sha256: str = field(default="", compare=False)

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
class Link:
    """Where a v2 generation's history continues: an earlier generation of the same package folder."""

    file: str
    generation: int
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "generation": self.generation, "fingerprint": self.fingerprint}


class Files(Mapping[str, str]):
    """Every file of a package except ``manifest.json`` → sha256 hex: its own files and its history's checkpoints.

    ``payload`` is every file that is not a checkpoint (the producer's files
    and the artifacts); the checkpoints come from the history, which a v2
    generation shares with the generation it links to.
    """

    __slots__ = ("payload", "history")

    def __init__(self, payload: Mapping[str, str], history: History) -> None:
        self.payload = payload
        self.history = history

    def __getitem__(self, name: str) -> str:
        value = self.payload.get(name)
        if value is not None:
            return value
        checkpoint = self.history.get(name)
        if checkpoint is None:
            raise KeyError(name)
        return checkpoint.sha256

    def __contains__(self, name: object) -> bool:
        return name in self.payload or name in self.history

    def __iter__(self) -> Iterator[str]:
        yield from self.payload
        for checkpoint in self.history:
            yield checkpoint.path

    def __len__(self) -> int:
        return len(self.payload) + len(self.history)


@dataclass(frozen=True)
class EncodedManifest:
    """A manifest and its canonical JSON, member by member (:func:`~tenure.intake.canonical.canonical_parts`).

    What the writer stores is ``stored`` (the canonical form and a newline);
    reading the generation back compares the stored bytes with it instead of
    parsing and encoding the manifest again. :meth:`derive` makes the next
    generation's from this one, encoding only the members that changed.
    """

    value: Mapping[str, Any]
    parts: Mapping[str, bytes]
    stored: bytes

    @classmethod
    def of(cls, manifest: Mapping[str, Any], parts: Mapping[str, bytes] | None = None) -> EncodedManifest:
        parts = canonical_parts(manifest) if parts is None else parts
        return cls(manifest, parts, join_parts(parts) + b"\n")

    @classmethod
    def of_package(cls, package: Package) -> EncodedManifest:
        return cls.of(package.manifest, package.manifest_parts)

    def derive(self, manifest: Mapping[str, Any], changed: Iterable[str]) -> EncodedManifest:
        """The encoding of ``manifest``, which holds this one's members except those named in ``changed``."""
        parts = dict(self.parts)
        for key in changed:
            parts[key] = canonical_json(manifest[key])
        if parts.keys() != manifest.keys():
            return EncodedManifest.of(manifest)
        return EncodedManifest.of(manifest, parts)


@dataclass(frozen=True)
class Package:
    """A fully validated package (one generation, or an input archive).

    Whatever the stored generation format, it is the whole logical package
    (package format v1): ``entry_hashes``, ``files``, ``chain`` and
    ``fingerprint`` include every earlier checkpoint.
    """

    path: Path
    manifest: Mapping[str, Any]
    state: Any
    #: every file except manifest.json -> sha256 hex of its bytes (the whole history's checkpoints included)
    entry_hashes: Files
    #: the entries of this zip file except manifest.json and the generation record -> (CRC-32, size)
    crcs: Mapping[str, tuple[int, int]]
    fingerprint: str
    #: the checkpoint history, oldest first
    history: History
    #: the zip's file entries (central-directory order, which is the order of their records) as read when validated
    zip_entries: tuple[Entry, ...] = field(default=(), repr=False, compare=False)
    #: stored generation format: 1 (a complete package) or 2 (a generation record; see ADR 0110)
    stored_format: int = 1
    #: format v2: the generation this one's history continues in (None: it holds its whole history)
    link: Link | None = None
    #: format v2: generations since the last one that starts a span (0: this one does; see ADR 0110)
    tail: int = 0
    #: the manifest's canonical JSON member by member (see :class:`EncodedManifest`); a Package's manifest is
    #: read-only, and the next generation's shares the members it keeps
    manifest_parts: Mapping[str, bytes] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def chain(self) -> tuple[Checkpoint, ...]:
        """The checkpoint chain, latest first."""
        return self.history.newest_first()

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
        return self.history.latest

    def checkpoint_at(self, path: str) -> Checkpoint | None:
        return self.history.get(path)

    def has_receipt(self, generation: int, content: str) -> bool:
        """Whether a checkpoint records this input generation and fingerprint."""
        return any(cp.source == (generation, content) for cp in self.history)

    def receipt_generations(self) -> dict[int, str]:
        return {cp.source[0]: cp.source[1] for cp in self.history}

    def own_checkpoints(self) -> list[str]:
        """The checkpoint files this zip holds (all of them, unless it is a v2 generation with a link)."""
        return [name for name in self.crcs if name.startswith(CHECKPOINT_DIR)]

    @functools.cached_property
    def _entries(self) -> dict[str, Entry]:
        return {entry.filename: entry for entry in self.zip_entries}

    def read(self, name: str) -> bytes:
        """The bytes of one file of this package (a v2 generation reads earlier checkpoints along its links).

        A file of this zip is read with the entry recorded when it was
        validated (its size and CRC-32 checked again), without parsing the
        zip's directory once more.
        """
        if name == GENERATION_RECORD:
            raise KeyError(name)
        entry = self._entries.get(name)
        if entry is not None:
            with open(self.path, "rb") as fh:
                return b"".join(entry_chunks(fh, entry))
        if self.link is None or name not in self.history:
            raise KeyError(name)
        for path in chain_files(self):
            if path != self.path:
                with zipfile.ZipFile(path) as zf:
                    if name in zf.NameToInfo:
                        return zf.read(name)
        raise KeyError(name)

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
            "checkpoints": len(self.history),
            "latest_step": self.latest.step_id if self.latest else None,
            "fingerprint": self.fingerprint,
            "path": str(self.path),
        }


def _record_of(zf: zipfile.ZipFile) -> tuple[int, Link | None] | None:
    """(generation, link) from a stored generation's record, or None for a v1 generation (no record)."""
    if GENERATION_RECORD not in zf.NameToInfo:
        return None
    record = _parse_record(zf.read(GENERATION_RECORD))
    return record["generation"], _link_of(record)


def chain_files(package: Package) -> Iterator[Path]:
    """The files holding ``package``'s history: its own, then each one its links reach (oldest last)."""
    yield package.path
    link, referrer = package.link, package.path
    while link is not None:
        target = package.path.parent / link.file
        try:
            with zipfile.ZipFile(target) as zf:
                record = _record_of(zf)
        except FileNotFoundError:
            raise StorageCorruptError(
                f"{referrer} continues in {link.file}, which is missing",
                path=str(referrer),
                cause="generation-link-missing",
                missing=link.file,
            ) from None
        yield target
        link, referrer = (record[1] if record is not None else None), target


def read_link(path: Path, config: IntakeConfig | None = None) -> tuple[int, Link | None] | None:
    """Only the generation record of a stored generation: (its generation, its link), or None for format v1.

    Read through the safe archive reader under the stored limits; the
    generation is validated in full when it is loaded.
    """
    limits = (config or IntakeConfig()).limits.stored()
    with open_archive(path, limits) as arch:
        if GENERATION_RECORD not in arch.infos:
            return None
        record = _read_record(arch, limits)
    return record["generation"], _link_of(record)


def _link_of(record: Mapping[str, Any]) -> Link | None:
    base = record["base"]
    return None if base is None else Link(str(base["file"]), int(base["generation"]), str(base["fingerprint"]))


def read_package(
    path: Path,
    config: IntakeConfig | None = None,
    *,
    base: Package | None = None,
    stored: bool = False,
    linked: Package | None = None,
    known: EncodedManifest | None = None,
) -> Package:
    """Open and fully validate the package at ``path``, or raise PackageRejectedError.

    ``stored``: ``path`` is a generation in managed storage, read under
    :meth:`~tenure.intake.config.Limits.stored` (the limits plus room for the
    intake's own manifest fields and checkpoints); an input is read under
    the limits as configured, and an input holding a generation record is
    refused (``stored-generation``).

    ``base`` is a package already validated whose entries were copied into
    this one: entries with the same CRC and size reuse its content hashes,
    and the chain walk stops where it reaches one of the base's checkpoints.

    ``linked``: for a v2 generation whose record links to an earlier
    generation, that generation, already validated (the caller resolves the
    link; ``generation-link-missing`` without it). The record must name it
    exactly (file, generation, fingerprint), its history is this one's up to
    this generation's own checkpoints, and every file of it that is not a
    checkpoint must be here with the same content.

    ``known``: the manifest the caller wrote into ``path`` (the writer's read
    back). When ``manifest.json`` holds exactly its stored bytes, it is that
    manifest, and it is not parsed and encoded again; the rules are checked
    on it all the same.
    """
    config = config or IntakeConfig()
    limits = config.limits.stored() if stored else config.limits
    machine = intake_machine(config.phases)
    with open_archive(path, limits) as arch:
        manifest, parts, canonical = _read_manifest(arch, limits, known)
        if GENERATION_RECORD in arch.infos and not stored:
            raise PackageRejectedError(
                f"{GENERATION_RECORD} marks a stored generation (format v2), which is not a complete package",
                code="stored-generation",
            )
        record = _read_record(arch, limits) if GENERATION_RECORD in arch.infos else None
        link = _link_of(record) if record is not None else None
        joined = _check_link(link, linked, manifest) if link is not None else None
        own = [n for n in arch.names if n != GENERATION_RECORD]
        present = _Present(set(own), joined.history if joined is not None else None)
        state = validate_manifest(manifest, machine, present)
        crcs = {n: (i.CRC, i.file_size) for n, i in arch.infos.items() if n != MANIFEST and n != GENERATION_RECORD}
        hashes = _entry_hashes(arch, crcs, base)
        history = _read_chain(arch, manifest, machine, limits, base, crcs, joined, hashes)
        entries = tuple(arch.entries())
    payload = {n: h for n, h in hashes.items() if not n.startswith(CHECKPOINT_DIR)}
    if joined is not None:
        _check_kept(joined, payload, path)
    if len(history) > limits.max_checkpoints:
        raise PackageRejectedError(
            f"the history has {len(history)} checkpoints (limit {limits.max_checkpoints})",
            code="too-many-checkpoints",
            limit=limits.max_checkpoints,
        )
    if record is not None:
        _check_record(record, manifest)
    return Package(
        path=path,
        manifest=manifest,
        state=state,
        entry_hashes=Files(payload, history),
        crcs=crcs,
        fingerprint=_fingerprint(payload, sha256_hex(canonical), history),
        history=history,
        zip_entries=entries,
        stored_format=STORED_FORMAT if record is not None else 1,
        link=link,
        tail=0 if record is None or record["anchor"] else (joined.tail + 1 if joined is not None else 0),
        manifest_parts=parts,
    )


class _Present(Container[str]):
    """The files a manifest may reference: this zip's, and the checkpoints of the history it continues."""

    __slots__ = ("own", "history")

    def __init__(self, own: set[str], history: History | None) -> None:
        self.own, self.history = own, history

    def __contains__(self, name: object) -> bool:
        return name in self.own or (self.history is not None and name in self.history)


def _fingerprint(payload: Mapping[str, str], manifest_hash: str, history: History) -> str:
    """:func:`~tenure.intake.canonical.fingerprint` of payload + manifest + history, without sorting the history.

    Every checkpoint path starts with ``history/checkpoints/`` and no other
    file's does, so in sorted order the checkpoints are one contiguous run:
    the other files sort either before or after all of them.
    """
    digest = hashlib.sha256(b"tenure-package-fingerprint-v1\n")
    history_done = False
    # record by record: the records of ten thousand long names would be ten mebibytes joined
    for name in sorted([*payload, MANIFEST]):
        if not history_done and name > CHECKPOINT_DIR:
            digest.update(history.block())
            history_done = True
        digest.update(fingerprint_record(name, manifest_hash if name == MANIFEST else payload[name]))
    if not history_done:
        digest.update(history.block())
    return "sha256:" + digest.hexdigest()


def _bad_link(message: str, code: str = "generation-link-mismatch", **context: Any) -> PackageRejectedError:
    return PackageRejectedError(message, code=code, **context)


def _read_record(arch: SafeArchive, limits: Limits) -> dict[str, Any]:
    if arch.size(GENERATION_RECORD) > limits.manifest_bytes:
        raise _bad_link(f"{GENERATION_RECORD} is too large", code="generation-record-invalid")
    return _parse_record(arch.read(GENERATION_RECORD))


def _parse_record(raw: bytes) -> dict[str, Any]:
    try:
        record = strict_json_loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise _bad_link(f"{GENERATION_RECORD} is not valid JSON: {error}", code="generation-record-invalid") from None
    base = record.get("base") if isinstance(record, dict) else None
    valid = (
        isinstance(record, dict)
        and set(record) == {"format", "format_version", "generation", "base", "anchor"}
        and record["format"] == RECORD_FORMAT
        and record["format_version"] == STORED_FORMAT
        and type(record["generation"]) is int
        and type(record["anchor"]) is bool
        and (
            base is None
            or (
                isinstance(base, dict)
                and set(base) == {"file", "generation", "fingerprint"}
                and type(base["generation"]) is int
                and 1 <= base["generation"] < record["generation"]
                and base["file"] == generation_name(base["generation"])
                and isinstance(base["fingerprint"], str)
                and _FINGERPRINT.match(base["fingerprint"]) is not None
            )
        )
        and (base is not None or record["anchor"])
    )
    if not valid:
        raise _bad_link(
            f"{GENERATION_RECORD} is not a {RECORD_FORMAT} record of format version {STORED_FORMAT}",
            code="generation-record-invalid",
        )
    return dict(record)


def _check_record(record: Mapping[str, Any], manifest: Mapping[str, Any]) -> None:
    if record["generation"] != manifest["generation"]:
        raise _bad_link(
            f"the generation record says generation {record['generation']}, the manifest {manifest['generation']}",
            code="generation-record-invalid",
        )


def _check_link(link: Link, linked: Package | None, manifest: Mapping[str, Any]) -> Package:
    """The generation ``link`` names, checked against what the record says of it."""
    if linked is None:
        raise _bad_link(
            f"this generation continues in {link.file}, which was not found",
            code="generation-link-missing",
            missing=link.file,
        )
    actual = (linked.case_id, linked.package_id, linked.generation, linked.path.name, linked.fingerprint)
    expected = (manifest["case_id"], manifest["package_id"], link.generation, link.file, link.fingerprint)
    if actual != expected:
        raise _bad_link(
            f"this generation continues in {link.file} (generation {link.generation}, {link.fingerprint}), "
            f"but that file holds generation {linked.generation} of {linked.case_id}/{linked.package_id} "
            f"with fingerprint {linked.fingerprint}",
            linked=link.file,
        )
    if linked.latest is None:
        raise _bad_link(f"{link.file} has no checkpoint for this generation to continue", linked=link.file)
    return linked


def _check_kept(linked: Package, payload: Mapping[str, str], path: Path) -> None:
    """A linked generation's files (not its checkpoints) are all here, unchanged."""
    for name, digest in linked.entry_hashes.payload.items():
        if payload.get(name) != digest:
            raise _bad_link(
                f"{path.name} lacks {name} of {linked.path.name}, the generation it continues, or changed it",
                entry=name,
            )


def _read_manifest(
    arch: SafeArchive, limits: Limits, known: EncodedManifest | None
) -> tuple[dict[str, Any], Mapping[str, bytes] | None, bytes]:
    """The manifest, its canonical JSON member by member (None unless it is an object) and as a whole."""
    if MANIFEST not in arch.infos:
        raise PackageRejectedError("the archive has no manifest.json at its root", code="missing-manifest")
    if arch.size(MANIFEST) > limits.manifest_bytes:
        raise PackageRejectedError(
            f"manifest.json is {arch.size(MANIFEST)} bytes (limit {limits.manifest_bytes})", code="manifest-too-large"
        )
    raw = arch.read(MANIFEST)
    parts: Mapping[str, bytes] | None
    if known is not None and raw == known.stored:
        manifest: Any = known.value
        parts, canonical = known.parts, raw[:-1]
    else:
        try:
            manifest = strict_json_loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise PackageRejectedError(f"manifest.json is not valid JSON: {error}", code="invalid-manifest") from None
        parts = canonical_parts(manifest) if isinstance(manifest, dict) else None
        canonical = join_parts(parts) if parts is not None else canonical_json(manifest)
    if len(canonical) > limits.manifest_bytes:
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
    return dict(manifest), parts, canonical


def _bad_manifest(message: str, code: str = "invalid-manifest") -> PackageRejectedError:
    return PackageRejectedError(message, code=code)


def validate_manifest(manifest: Mapping[str, Any], machine: IntakeMachine, names: Container[str]) -> Any:
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
    present = names if isinstance(names, (set, frozenset, _Present)) else set(cast(Iterable[str], names))
    for key, target in manifest["artifacts"].items():
        if key == "lifecycle_checkpoint":
            continue
        _check_reference(str(target), present, f"artifacts.{key}")
        if str(target).startswith(CHECKPOINT_DIR):
            raise _bad_manifest(f"artifacts.{key} points into the reserved {CHECKPOINT_DIR}")
    for protected in manifest["protected_files"]:
        _check_reference(str(protected), present, "protected_files")
    return state


def _check_reference(target: str, present: Container[str], where: str) -> None:
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
    linked: Package | None,
    hashes: Mapping[str, str],
) -> History:
    """Walk the chain from the manifest's pointer; return the whole history.

    The walk reads this zip's checkpoints. It stops at a checkpoint of the
    copy ``base`` that was copied unchanged (the rest of the chain is the
    base's), or — in a v2 generation with a link — where it leaves this zip,
    which must be at the ``linked`` generation's latest checkpoint (the rest
    is its history). Every checkpoint of this zip must be on the walk.
    """
    own: list[Checkpoint] = []  # newest first
    seen: set[str] = set()
    later: Checkpoint | None = None
    joined: History | None = None
    path: str | None = manifest["artifacts"]["lifecycle_checkpoint"]
    while path is not None:
        if path in seen:
            raise PackageRejectedError(
                f"checkpoint {path} is reached twice: the chain has a cycle", code="checkpoint-cycle", entry=path
            )
        if linked is not None and path not in arch.infos:
            joint = linked.latest
            assert joint is not None  # _check_link
            if path != joint.path:
                raise _bad_link(
                    f"the chain leaves this generation at {path}, but {linked.path.name}, the generation it "
                    f"continues, ends at {joint.path}",
                    entry=path,
                )
            _check_order(joint, manifest, later)
            joined = linked.history
            break
        reused = base.checkpoint_at(path) if base is not None and linked is None else None
        if reused is not None and base is not None and crcs.get(path) == base.crcs.get(path):
            _check_order(reused, manifest, later)
            joined = base.history.upto(path)
            break
        seen.add(path)
        checkpoint = _load_checkpoint(arch, path, limits)
        _check_checkpoint(checkpoint, manifest, machine)
        _check_order(checkpoint, manifest, later)
        own.append(checkpoint)
        later, path = checkpoint, checkpoint.previous
    if linked is not None and joined is None:
        raise _bad_link(
            f"the chain ends in this generation, but its record says it continues in {linked.path.name}",
            linked=linked.path.name,
        )
    mine = sorted(n for n in crcs if n.startswith(CHECKPOINT_DIR) and n not in seen)
    orphans = [n for n in mine if joined is None or n not in joined or linked is not None]
    if orphans:
        code = "checkpoint-orphan" if _CHECKPOINT_PATH.match(orphans[0]) else "checkpoint-path"
        raise PackageRejectedError(f"{orphans[0]} is not part of the checkpoint chain", code=code, entry=orphans[0])
    for checkpoint in own:
        if hashes.get(checkpoint.path) != checkpoint.sha256:  # pragma: no cover - one read of the same bytes
            raise PackageRejectedError(f"checkpoint {checkpoint.path} changed while read", code="corrupt-entry")
    own.reverse()
    return joined.extend(own) if joined is not None else History.of(own)


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
    raw = arch.read(path)
    try:
        data = strict_json_loads(raw)
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
    return Checkpoint(path=path, data=data, sha256=hashlib.sha256(raw).hexdigest())


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
