"""A control-plane store and its object store belong together (SPEC §9).

Every object store carries an identity, written into it when it is created
(a local folder's ``tenure-objects.json``, the PostgreSQL object store's
``tenure_objects_identity`` row). The store records that identity, with the
object store's URL, the first time the two are used together
(``object_store_binding``); from then on an object store of any other
identity, or one without an identity, is refused with
``object-store-mismatch`` before anything is written. Without it, one run
with another ``--objects`` would publish a head whose objects live only
there, and every later run on the usual object store would find it damaged.

:func:`bind_object_store` is the one place this is decided. The workspace
service calls it when it is created, with ``create=False``: a mismatch is
refused, an object store that has an identity is recorded, and an object
store without one that already holds objects (a data folder from before
identities) is given one and adopted. Nothing is created for an object
store that is still empty, so a command that only reads creates nothing; and
a read-only object folder (or store) that cannot be written is left unbound
for now, so reading from it still works. A checkpoint calls it again with
``create=True`` before it stores anything: then the identity is written
(``object-store-read-only`` if the folder refuses it) and recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tenure.errors import ConfigurationError, TenureError
from tenure.objects import ObjectStore
from tenure.store import Store

#: Errors that leave a binding for later at creation: the object folder or the store refuses writes.
_DEFERRABLE = frozenset({"object-store-read-only", "store-read-only"})


class ObjectStoreMismatchError(ConfigurationError):
    """The object store given is not the one this store was first used with."""

    code = "object-store-mismatch"


@dataclass(frozen=True)
class Binding:
    """The object store a store is bound to: its identity and its URL when the two were first used together."""

    identity: str
    url: str


def redact(url: str) -> str:
    """``url`` without the password a PostgreSQL URL may carry."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def recorded_binding(store: Store) -> Binding | None:
    """The binding the store records, if it has one yet (a read-only transaction)."""
    with store.db.transaction(write=False) as tx:
        row = tx.one("object_store_binding")
    return None if row is None else Binding(str(row["identity"]), str(row["url"]))


def bind_object_store(store: Store, objects: ObjectStore, *, create: bool = True) -> str | None:
    """Check that ``objects`` is the object store ``store`` belongs with, binding the two on first use.

    Returns the identity, or ``None`` when the binding is left for later
    (``create`` False: see the module docstring). Raises
    :class:`ObjectStoreMismatchError` when the store is bound to another
    object store, before anything is written.
    """
    recorded = recorded_binding(store)
    found = objects.identity()
    if recorded is not None:
        if found != recorded.identity:
            raise _mismatch(store, objects, recorded, found)
        return found
    try:
        if found is None:
            if not create and next(iter(objects.list_ids()), None) is None:
                return None  # still empty: nothing to adopt, and a reading command creates nothing
            found = objects.ensure_identity()
        with store.db.transaction() as tx:
            tx.count("object_store_bind", {"identity": found, "url": redact(objects.url)})
            row = tx.one("object_store_binding")
    except TenureError as exc:
        if not create and exc.code in _DEFERRABLE:
            return None  # read-only: reads still work; a write binds first and says why it cannot
        raise
    assert row is not None
    bound = Binding(str(row["identity"]), str(row["url"]))
    if bound.identity != found:  # another process bound the store to another object store meanwhile
        raise _mismatch(store, objects, bound, found)
    return found


def _mismatch(store: Store, objects: ObjectStore, recorded: Binding, found: str | None) -> ObjectStoreMismatchError:
    given = redact(objects.url)
    what = (
        f"object store {found}"
        if found is not None
        else "an object store without an identity (a new or empty one, or one whose identity file is gone)"
    )
    return ObjectStoreMismatchError(
        f"the store {redact(store.url)} belongs with object store {recorded.identity} (first used at"
        f" {recorded.url}), but {given} is {what}; nothing was written",
        store=redact(store.url),
        expected_identity=recorded.identity,
        expected_url=recorded.url,
        found_identity=found,
        found_url=given,
        hint=f"use the object store this store was first used with: --objects {recorded.url} (or TENURE_OBJECTS),"
        f" or a store of its own for {given} (--data / --db); if that object store moved, point --objects"
        " at its new place: its identity file travels with it",
    )
