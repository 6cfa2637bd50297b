"""The object-store contract every backend keeps.

* ``put_many`` stores each ``(oid, payload)`` and returns only once all of
  them are durable (the folder backend fsyncs files and their directories,
  the database backend commits). Objects are immutable: putting an oid that
  exists is a no-op, never an overwrite.
* ``get`` returns the payload or raises :class:`ObjectMissingError`; it never
  returns partial bytes.
* ``has_many`` answers for a whole batch in one round trip, so an
  incremental checkpoint asks once, not per object.
* ``list_ids`` yields every stored oid with its creation time (for GC).
* ``delete_many`` removes objects; missing ones are ignored.
* ``sync`` makes every stored object durable, including objects a crashed
  writer left behind without syncing them, which ``has_many`` reports as
  stored all the same; a checkpoint calls it once before it publishes.
* ``identity`` returns the identity written into the object store when it
  was created (a UUID), or ``None`` when it has none yet (an empty or
  missing folder, or one from before identities); it never writes.
  ``ensure_identity`` returns it, writing one first if there is none (two
  writers racing agree on one: :func:`tenure.objects.identity.write_once`,
  which every backend writes both records with). A control-plane store
  records the identity the first time the two are used together and
  refuses any other (:func:`tenure.workspaces.bind_object_store`).
* ``bound_store`` returns the control-plane store the object store is
  bound to (:class:`BoundStore`: that store's own identity and its URL,
  password redacted), or ``None`` when no store has bound it yet; it never
  writes. ``bind_store`` records one unless one is recorded already —
  written once and durably, so that of two stores racing the first one's
  stays — and returns the one recorded. The binding refuses an object store
  bound to another store, so one store's GC never sees objects of snapshots
  it does not know.
* ``set_aside`` takes ``(oid, payload)`` pairs of objects found corrupt and
  moves each one out of the way if its stored payload is still exactly that
  (the folder: into ``<root>/corrupt/``; PostgreSQL: into
  ``tenure_objects_corrupt``), so ``has_many`` and ``get`` no longer see it
  and the next ``put_many`` of that id stores it afresh. It returns how many
  were moved. A known-bad object is thereby a missing one.

Backends do not decompress or hash: :mod:`tenure.objects.codec` does that.
Backends do not encrypt either: an encrypted repository's key objects are
stored through this same interface under reserved names (``key.N``), and
:func:`open_object_store` unlocks it (:mod:`tenure.objects.crypto`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tenure.errors import ConfigurationError, IntegrityError, ObjectStoreError

if TYPE_CHECKING:
    from tenure.objects.crypto import KeySource


class ObjectMissingError(IntegrityError):
    """An object that a record references is not in the object store."""

    code = "object-missing"


class ObjectStoreReadOnlyError(ObjectStoreError):
    """The object folder refuses writes (permissions, a read-only mount)."""

    code = "object-store-read-only"
    retryable = False
    default_hint = "give this user write access to the object folder, or run only commands that read"


#: Where objects found corrupt are moved (``set_aside``: a folder's ``corrupt/``, a bucket prefix's); GC and
#: listings ignore it.
CORRUPT_FOLDER = "corrupt"


@dataclass(frozen=True)
class BoundStore:
    """The control-plane store an object store is bound to: that store's identity, and its URL when it bound it."""

    identity: str
    url: str


@runtime_checkable
class ObjectStore(Protocol):
    url: str

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        """Store payloads durably; return how many were new."""
        ...

    def get(self, oid: str) -> bytes: ...

    def has_many(self, oids: Iterable[str]) -> set[str]:
        """The subset of ``oids`` that is stored."""
        ...

    def list_ids(self) -> Iterator[tuple[str, datetime]]: ...

    def delete_many(self, oids: Iterable[str]) -> int: ...

    def sync(self) -> None:
        """Make every stored object durable (see the module docstring)."""
        ...

    def identity(self) -> str | None:
        """The identity written into the object store at creation, ``None`` if it has none; never writes."""
        ...

    def ensure_identity(self) -> str:
        """The identity, written first if there is none (durably; concurrent callers agree on one)."""
        ...

    def bound_store(self) -> BoundStore | None:
        """The control-plane store this object store is bound to, ``None`` if none has bound it; never writes."""
        ...

    def bind_store(self, store: BoundStore) -> BoundStore:
        """Record ``store`` unless one is recorded already (durably; of racing stores the first stays);
        return the one recorded."""
        ...

    def set_aside(self, corrupt: Iterable[tuple[str, bytes]]) -> int:
        """Move corrupt objects out of the way (see the module docstring); return how many were moved."""
        ...

    def close(self) -> None: ...


def open_object_store(url: str, key: KeySource | None = None) -> ObjectStore:
    """Open a backend from its URL (``file://…`` or ``postgresql://…``) and unlock it.

    An encrypted repository needs ``key`` (``key-required``, ``wrong-key``);
    an unencrypted one refuses one (``not-encrypted``): see
    :func:`tenure.objects.crypto.unlock`.
    """
    from tenure.objects.crypto import unlock

    store = open_backend(url)
    try:
        unlock(store, key)
    except BaseException:
        store.close()
        raise
    return store


def open_backend(url: str) -> ObjectStore:
    """The backend for a URL (``file://``, ``postgresql://``, ``s3://``), not unlocked: its codec is the plain one."""
    if url.startswith("file://"):
        from tenure.objects.local import LocalObjectStore, local_root

        return LocalObjectStore(local_root(url))
    if url.startswith(("postgresql://", "postgres://")):
        from tenure.objects.postgres import PostgresObjectStore

        return PostgresObjectStore(url)
    if url.startswith("s3://"):
        from tenure.objects.s3 import S3ObjectStore

        return S3ObjectStore(url)
    raise ConfigurationError(
        f"unsupported object store URL {url!r}",
        hint="use file:///path/to/folder, postgresql://host/db or s3://bucket/prefix?endpoint=…&region=…",
        code="bad-objects-url",
    )
