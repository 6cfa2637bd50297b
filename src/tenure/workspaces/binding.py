"""A control-plane store and its object store belong together (SPEC §9), both ways.

Every object store carries an identity, written into it when it is created
(a local folder's ``tenure-objects.json``, the PostgreSQL object store's
``tenure_objects_identity`` row). The store records that identity, with the
object store's URL, the first time the two are used together
(``object_store_binding``); from then on an object store of any other
identity, or one without an identity, is refused with
``object-store-mismatch`` before anything is written. Without it, one run
with another ``--objects`` would publish a head whose objects live only
there, and every later run on the usual object store would find it damaged.

The other way round, every store has an identity of its own (migration
0011), and the first store to bind an object store records it there, once
(``tenure-objects-store.json``, ``tenure_objects_store``). An object store
bound to another store is refused with ``object-store-taken``, before
anything is written: a store's GC deletes every object none of *its*
snapshots reaches, so two stores on one object store would each delete the
other's. A store bound by an earlier tenure records itself there on its next
run. An object store that has an identity and holds objects but names no
store was bound by an earlier tenure to some store; an unbound store binds
it only if it holds that store's own snapshots (their root trees), else
they are another store's objects, which this store's GC would delete (ADR
0040). An object folder without an identity (from before identities) is
adopted as before.

:func:`bind_object_store` is the one place this is decided. The workspace
service calls it when it is created, with ``create=False``: a mismatch is
refused, an object store that has an identity is recorded, and an object
store without one that already holds objects (a data folder from before
identities) is given one and adopted. Nothing is created for an object
store that is still empty, so a command that only reads creates nothing; and
a read-only object folder (or store) that cannot be written is left unbound
for now, so reading from it still works. A checkpoint calls it again with
``create=True`` before it stores anything: then the identity and the store
are written (``object-store-read-only`` if the folder refuses them) and
recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tenure.errors import ConfigurationError, TenureError
from tenure.objects import BoundStore, ObjectStore
from tenure.objects.codec import reserved
from tenure.store import Store

#: Errors that leave a binding for later at creation: the object folder or the store refuses writes.
_DEFERRABLE = frozenset({"object-store-read-only", "store-read-only"})
#: How many of the newest published snapshots are looked for in an object store that holds objects but names no store.
_ROOTS_ASKED = 16


class ObjectStoreMismatchError(ConfigurationError):
    """The object store given is not the one this store was first used with."""

    code = "object-store-mismatch"


class ObjectStoreTakenError(ConfigurationError):
    """The object store given belongs to another store (or holds another store's objects)."""

    code = "object-store-taken"


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
    object store, and :class:`ObjectStoreTakenError` when the object store
    belongs to another store, both before anything is written.
    """
    recorded = recorded_binding(store)
    found = objects.identity()
    if recorded is not None:
        if found != recorded.identity:
            raise _mismatch(store, objects, recorded, found)
        _bind_back(store, objects, create=create, trusted=True)  # bound by an earlier tenure: recorded now
        return found
    try:
        if found is None and not create and _holds_nothing(objects):
            return None  # still empty: nothing to adopt, and a reading command creates nothing
        if not _bind_back(store, objects, create=create, trusted=found is None):
            return None  # cannot be recorded yet (read-only): left unbound, reads still work
        if found is None:
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


def _bind_back(store: Store, objects: ObjectStore, *, create: bool, trusted: bool) -> bool:
    """Refuse an object store bound to another store; record ``store`` in it if it names none yet.

    ``trusted``: the store records this object store already, or the object
    store has no identity (a folder from before identities, adopted). Any
    other object store that names no store but holds objects is bound only
    if it holds this store's snapshots. Returns False when the record is
    left for later (``create`` False and the object store cannot be written).
    """
    me = BoundStore(store.identity(), redact(store.url))
    bound = objects.bound_store()
    if bound is None:
        if not trusted and not _holds_nothing(objects) and not _holds_snapshots_of(store, objects):
            raise _taken(store, objects, me, None)
        try:
            bound = objects.bind_store(me)
        except TenureError as exc:
            if not create and exc.code in _DEFERRABLE:
                return False
            raise
    if bound.identity != me.identity:
        raise _taken(store, objects, me, bound)
    return True


def _holds_nothing(objects: ObjectStore) -> bool:
    """No content object is stored (key objects of an encrypted object store do not count)."""
    return next((oid for oid, _ in objects.list_ids() if not reserved(oid)), None) is None


def _holds_snapshots_of(store: Store, objects: ObjectStore) -> bool:
    """The root tree of one of the store's newest published snapshots is in the object store."""
    roots = store.snapshots.newest_roots(_ROOTS_ASKED)
    return bool(roots) and bool(objects.has_many(roots))


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


def _taken(store: Store, objects: ObjectStore, me: BoundStore, bound: BoundStore | None) -> ObjectStoreTakenError:
    given = redact(objects.url)
    if bound is not None:
        whose = f"is bound to another store, {bound.identity} (first used from {bound.url})"
        use = f", or use the store it is bound to (--data / --db {bound.url})"
    else:
        whose = (
            "holds objects of another store (one an earlier tenure bound to it, before object stores recorded"
            " their store) and none of this store's snapshots"
        )
        use = "; the store it belongs to records itself there on its next run"
    return ObjectStoreTakenError(
        f"the object store {given} {whose}; this store, {me.url}, is {me.identity}; nothing was written",
        store=me.url,
        store_identity=me.identity,
        bound_store=None if bound is None else bound.identity,
        bound_url=None if bound is None else bound.url,
        objects_url=given,
        hint=f"give this store an object store of its own (--objects / TENURE_OBJECTS){use}: a store's gc deletes"
        " every object its own snapshots do not reach, so two stores on one object store delete each other's",
    )
