"""Frozen value objects built from store rows.

A record's fields are named after its row's columns: :func:`record_from_row`
reads each field from the column of its name (through the conversion the
record names for it), :func:`record_dict` gives the fields back by name, an
enum as its value. The records of the layers above (projects, mounts) are
built the same way.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

from tenure.states import LeaseState, SnapshotState, WorkspaceState

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")


@functools.cache
def _fields_of(cls: type[DataclassInstance]) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, f.default) for f in fields(cls))


def record_from_row(cls: type[_R], row: Mapping[str, Any], **convert: Callable[[Any], Any]) -> _R:
    """A ``cls`` whose every field is the column of its name, through ``convert[field]`` where one is given.

    A field with a default takes it when the row has no such column.
    """
    values = {name: row[name] if default is MISSING or name in row else default for name, default in _fields_of(cls)}
    for name, to in convert.items():
        values[name] = to(values[name])
    return cls(**values)


def record_dict(record: DataclassInstance, without: Collection[str] = ()) -> dict[str, Any]:
    """The fields of ``record`` by name, in their order, but those named in ``without``; an enum as its value."""
    out: dict[str, Any] = {}
    for name, _ in _fields_of(type(record)):
        if name not in without:
            value = getattr(record, name)
            out[name] = value.value if isinstance(value, enum.Enum) else value
    return out


def optional(to: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``to`` for a column that may be NULL (which stays ``None``)."""
    return lambda value: None if value is None else to(value)


class Record:
    """The base of a frozen dataclass record: read from its row, shown by field.

    ``conversions`` names, per field, what turns its column's value into the
    field's (an enum, ``int``, ``json.loads``…); every other field takes the
    column's value as it is.
    """

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    conversions: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        return record_from_row(cls, row, **cls.conversions)

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


#: What a workspace does not show (``to_dict``): its unfinished checkpoint, and when its expiry began.
_WORKSPACE_HIDDEN = frozenset({"pending_snapshot_id", "pending_key", "pending_version", "expiring_since"})


@dataclass(frozen=True)
class Workspace(Record):
    id: str
    name: str
    state: WorkspaceState
    head_snapshot_id: str | None
    base_snapshot_id: str | None
    version: int
    writer_generation: int
    pending_snapshot_id: str | None
    pending_key: str | None
    pending_version: int | None
    expiring_since: float | None
    created_at: float
    updated_at: float

    conversions = {"state": WorkspaceState, "version": int, "writer_generation": int, "pending_version": optional(int)}

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self, without=_WORKSPACE_HIDDEN)


@dataclass(frozen=True)
class WriterLease(Record):
    id: str
    workspace_id: str
    generation: int
    state: LeaseState
    holder: str
    issued_at: float
    expires_at: float

    conversions = {"generation": int, "state": LeaseState}


@dataclass(frozen=True)
class Snapshot(Record):
    id: str
    workspace_id: str
    parent_id: str | None
    root_oid: str | None
    state: SnapshotState
    generation: int
    idempotency_key: str | None
    files: int
    bytes_read: int
    bytes_new: int
    skipped: tuple[tuple[str, str], ...]
    error: str | None
    created_at: float
    updated_at: float
    #: why it was taken (``CHECKPOINT_REASONS``); ``None`` for snapshots written before reasons were kept
    reason: str | None = None

    conversions = {
        "state": SnapshotState,
        "generation": int,
        "files": int,
        "bytes_read": int,
        "bytes_new": int,
        "skipped": lambda text: tuple(tuple(x) for x in json.loads(text)),
    }

    def to_dict(self) -> dict[str, Any]:
        return {**record_dict(self), "skipped": [list(s) for s in self.skipped]}


#: Why a checkpoint is taken: asked for (API, CLI), autosave, a durable write's group commit, a suspend, a
#: drain's hand-over, restart reconciliation settling a folder, a preserved delta's own snapshot (lost work
#: uploaded outside its project's head line, ADR 0044).
CHECKPOINT_REASONS = ("manual", "autosave", "durable", "suspend", "drain", "reconcile", "preserved")


@dataclass(frozen=True)
class CheckpointTicket:
    """What a writer needs to finish (or resume) one checkpoint."""

    workspace_id: str
    snapshot_id: str
    idempotency_key: str
    expected_version: int
    parent_id: str | None
    generation: int
    resumed: bool
    already_published: Snapshot | None = None
