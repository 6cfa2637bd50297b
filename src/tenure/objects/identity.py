"""An object store's identity and the control-plane store it is bound to, each written once (tenure.objects.base).

Both records are written by whoever needs one first and never replaced:
:func:`write_once` reads the record, and only if there is none asks the
backend to create it — a create that keeps a record another writer made
first — then reads it back, so of writers racing every one returns the
first one's. A backend supplies two small primitives: read a record and
create one if it is absent.

A folder and a bucket keep the records as small JSON documents
(:data:`IDENTITY_FILE`, :data:`STORE_FILE`; :class:`JsonRecords` parses,
validates and encodes them); PostgreSQL keeps them as one-row tables
(:mod:`tenure.objects.postgres`). A document that is not one tenure wrote is
``bad-object-store-identity``.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from tenure.errors import ConfigurationError
from tenure.objects.base import BoundStore

T = TypeVar("T")

#: The identity document at the root of an object folder or bucket prefix (tenure.objects.base: identity).
IDENTITY_FILE = "tenure-objects.json"
#: The document naming the control-plane store an object store is bound to (tenure.objects.base: bound_store).
STORE_FILE = "tenure-objects-store.json"


class BadIdentityError(ConfigurationError):
    """The object folder's identity file is not one tenure wrote."""

    code = "bad-object-store-identity"
    default_hint = (
        "the identity file is damaged; restore it from a backup (the control-plane store records the"
        " identity it expects: see docs/operations.md)"
    )


def write_once(read: Callable[[], T | None], create: Callable[[], None]) -> T:
    """The record ``read`` finds, ``create``-d first if there is none.

    ``create`` must keep a record that is there already (another writer's), so that the read after it
    returns the first writer's record to every writer racing it.
    """
    found = read()
    if found is not None:
        return found
    create()
    found = read()
    assert found is not None
    return found


def _identity_of(record: object) -> str | None:
    found = record.get("identity") if isinstance(record, dict) else None
    return found if isinstance(found, str) and found else None


def _bound_store_of(record: object) -> BoundStore | None:
    if not isinstance(record, dict):
        return None
    store, url = record.get("store"), record.get("url")
    if not isinstance(store, str) or not store or not isinstance(url, str):
        return None
    return BoundStore(store, url)


def _encode(record: dict[str, object]) -> bytes:
    return json.dumps(record, indent=1).encode() + b"\n"


class JsonRecords(ABC):
    """``identity``, ``ensure_identity``, ``bound_store`` and ``bind_store`` of a backend that keeps both
    records as JSON documents (:data:`IDENTITY_FILE`, :data:`STORE_FILE`) and supplies the primitives."""

    @abstractmethod
    def _read_record(self, name: str, what: str) -> bytes | None:
        """The bytes of document ``name`` (``what`` it holds, for errors), ``None`` when there is none; never
        writes."""

    @abstractmethod
    def _create_record(self, name: str, body: bytes) -> None:
        """Document ``name`` written durably with ``body`` unless it exists (the one there stays)."""

    @abstractmethod
    def _bad_record(self, name: str, what: str) -> BadIdentityError:
        """The error for a document ``name`` that is not one tenure wrote."""

    def identity(self) -> str | None:
        """The UUID in ``tenure-objects.json``, or ``None`` when there is none yet; never writes."""
        return self._parsed(IDENTITY_FILE, "identity", _identity_of)

    def ensure_identity(self) -> str:
        """The identity, written first if there is none (:func:`write_once`: of racing writers the first stays)."""
        record = {"identity": str(uuid.uuid4()), "created_at": datetime.now(UTC).isoformat(), "format": 1}
        return write_once(self.identity, lambda: self._create_record(IDENTITY_FILE, _encode(record)))

    def bound_store(self) -> BoundStore | None:
        """The store named in ``tenure-objects-store.json``, ``None`` when none has bound it; never writes."""
        return self._parsed(STORE_FILE, "bound store", _bound_store_of)

    def bind_store(self, store: BoundStore) -> BoundStore:
        """``store`` recorded unless a store has bound the object store already (:func:`write_once`); the one
        recorded."""
        record = {"store": store.identity, "url": store.url, "bound_at": datetime.now(UTC).isoformat(), "format": 1}
        return write_once(self.bound_store, lambda: self._create_record(STORE_FILE, _encode(record)))

    def _parsed(self, name: str, what: str, parse: Callable[[object], T | None]) -> T | None:
        raw = self._read_record(name, what)
        if raw is None:
            return None
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        found = parse(record)
        if found is None:
            raise self._bad_record(name, what)
        return found
