"""A store and its object store belong together (SPEC §9): library tests on both backends.

The store records the identity of the object store it is first used with;
any other object store (or one without an identity) is refused with
``object-store-mismatch`` before anything is written, and the usual one
keeps working. The other way round, the object store records the store that
first bound it; another store is refused with ``object-store-taken`` before
anything is written (ADR 0040).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tenure.objects.identity import IDENTITY_FILE, STORE_FILE
from tenure.objects.local import LocalObjectStore
from tenure.store import Snapshot, Store
from tenure.workspaces import ObjectStoreMismatchError, WorkspaceService, bind_object_store
from tenure.workspaces.binding import ObjectStoreTakenError, recorded_binding
from tests.integration.identity.helpers import Backend
from tests.support.trees import read_tree, write_tree


def test_another_object_store_is_refused_before_anything_is_written(backend: Backend, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src)
    store, objects = backend.store(), backend.objects()
    service = WorkspaceService(store, objects, str(tmp_path / "data"))
    service.create("notes")
    first = service.checkpoint("notes", str(src)).snapshot
    identity = objects.identity()
    assert identity is not None and recorded_binding(store) is not None
    assert recorded_binding(store).identity == identity  # type: ignore[union-attr]

    (src / "new.txt").write_bytes(b"written while the other object store was given")
    other = backend.objects(backend.other_objects_url)
    other_before = {oid for oid, _ in other.list_ids()}
    with pytest.raises(ObjectStoreMismatchError) as refused:
        WorkspaceService(store, other, str(tmp_path / "data"))
    error = refused.value
    assert error.code == "object-store-mismatch" and error.exit_code == 2
    assert identity in error.message and error.context["expected_identity"] == identity
    assert error.context["found_identity"] == other.identity()
    assert error.context["found_url"] in error.message and error.context["expected_url"] in error.message
    assert {oid for oid, _ in other.list_ids()} == other_before  # nothing stored there
    if backend.kind == "folder":
        assert not os.path.exists(backend.other_objects_url[len("file://") :])  # not even created
    assert store.workspaces.workspace("notes").head_snapshot_id == first.id
    assert len(store.snapshots.list(first.workspace_id)) == 1
    other.close()

    # Back on the usual object store everything works: checkpoint, verify, restore.
    again = WorkspaceService(store, backend.objects(), str(tmp_path / "data"))
    second = again.checkpoint("notes", str(src)).snapshot
    assert again.verify(second.id).ok
    again.restore("notes", str(tmp_path / "out"))
    assert read_tree(tmp_path / "out") == read_tree(src)
    store.close()


def test_an_object_store_with_an_identity_is_recorded_by_a_new_store(backend: Backend, tmp_path: Path) -> None:
    objects = backend.objects()
    identity = objects.ensure_identity()
    assert objects.ensure_identity() == identity  # written once
    store = backend.store()
    assert recorded_binding(store) is None
    assert bind_object_store(store, objects, create=False) == identity
    binding = recorded_binding(store)
    assert binding is not None and binding.identity == identity
    store.close()


def test_the_first_binding_stays(backend: Backend, tmp_path: Path) -> None:
    """Two object stores bound to one store in turn: the second is refused, the first still accepted."""
    store = backend.store()
    first, second = backend.objects(), backend.objects(backend.other_objects_url)
    assert bind_object_store(store, first) == first.identity()
    with pytest.raises(ObjectStoreMismatchError):
        bind_object_store(store, second)
    assert bind_object_store(store, first) == first.identity()
    store.close()


def test_an_object_store_bound_by_one_store_is_refused_to_another_before_anything_is_written(
    backend: Backend, tmp_path: Path
) -> None:
    src, theirs = tmp_path / "src", tmp_path / "theirs"
    write_tree(src)
    write_tree(theirs)
    (theirs / "only-theirs.txt").write_bytes(b"content the first store has never seen")
    store, objects = backend.store(), backend.objects()
    service = WorkspaceService(store, objects, str(tmp_path / "data"))
    service.create("notes")
    snap = service.checkpoint("notes", str(src)).snapshot
    bound = objects.bound_store()
    assert bound is not None and bound.identity == store.identity()

    other = backend.store(backend.other_store_url)
    assert other.identity() != store.identity()
    before = {oid for oid, _ in objects.list_ids()}
    for create in (False, True):  # at service creation (any command) and at a checkpoint's binding
        with pytest.raises(ObjectStoreTakenError) as refused:
            bind_object_store(other, backend.objects(), create=create)
        error = refused.value
        assert error.code == "object-store-taken" and error.exit_code == 2
        assert error.context["bound_store"] == store.identity() and store.identity() in error.message
        assert error.context["store_identity"] == other.identity()
    assert recorded_binding(other) is None and {oid for oid, _ in objects.list_ids()} == before
    assert objects.bound_store() == bound

    # The store it belongs to keeps working, its gc included.
    again = WorkspaceService(store, backend.objects(), str(tmp_path / "data"))
    again.gc(grace_s=0)
    assert again.verify(snap.id).ok
    again.restore("notes", str(tmp_path / "out"))
    assert read_tree(tmp_path / "out") == read_tree(src)
    other.close()
    store.close()


def _notes_checked_in_then_unbound(backend: Backend, tmp_path: Path) -> tuple[Store, Snapshot]:
    """Workspace notes checked in from a sample folder, then its object store made to name no store (as one an
    earlier tenure bound)."""
    src = tmp_path / "src"
    write_tree(src)
    store = backend.store()
    service = WorkspaceService(store, backend.objects(), str(tmp_path / "data"))
    service.create("notes")
    snap = service.checkpoint("notes", str(src)).snapshot
    backend.drop_bound_store()
    return store, snap


def test_an_object_store_an_earlier_tenure_bound_is_recorded_by_its_own_store_only(
    backend: Backend, tmp_path: Path
) -> None:
    """The object store of a store an earlier tenure bound names no store; that store records itself there on its
    next run. Another store is refused before that (the objects there are not its own) and after (they are the
    first store's)."""
    store, snap = _notes_checked_in_then_unbound(backend, tmp_path)
    objects = backend.objects()
    assert objects.bound_store() is None and recorded_binding(store) is not None

    other = backend.store(backend.other_store_url)
    with pytest.raises(ObjectStoreTakenError) as refused:
        WorkspaceService(other, objects, str(tmp_path / "other-data"))
    assert refused.value.context["bound_store"] is None and "none of this store's snapshots" in refused.value.message
    assert objects.bound_store() is None and recorded_binding(other) is None  # nothing written, in either

    mine = WorkspaceService(store, backend.objects(), str(tmp_path / "data"))  # its next run records itself
    assert objects.bound_store().identity == store.identity()  # type: ignore[union-attr]
    assert mine.verify(snap.id).ok
    with pytest.raises(ObjectStoreTakenError):
        WorkspaceService(other, objects, str(tmp_path / "other-data"))
    other.close()
    store.close()


def test_an_unbound_store_binds_an_object_store_naming_no_store_that_holds_its_snapshots(
    backend: Backend, tmp_path: Path
) -> None:
    """The binding row deleted by hand to rebind (docs/operations.md), the object store naming no store: the
    store's own snapshots are there, so it binds it again."""
    store, snap = _notes_checked_in_then_unbound(backend, tmp_path)
    with store.db.sql_transaction() as tx:
        tx.execute_sql("DELETE FROM object_store_binding")
    objects = backend.objects()
    assert bind_object_store(store, objects, create=False) == objects.identity()
    assert objects.bound_store().identity == store.identity()  # type: ignore[union-attr]
    assert WorkspaceService(store, objects, str(tmp_path / "data")).verify(snap.id).ok
    store.close()


def test_of_two_stores_binding_one_new_object_store_the_first_keeps_it(backend: Backend, tmp_path: Path) -> None:
    first, second = backend.store(), backend.store(backend.other_store_url)
    objects = backend.objects()
    assert bind_object_store(first, objects) == objects.identity()
    with pytest.raises(ObjectStoreTakenError):
        bind_object_store(second, backend.objects())
    assert bind_object_store(first, backend.objects()) == objects.identity()
    assert recorded_binding(second) is None
    first.close()
    second.close()


def test_a_store_left_unbound_by_an_empty_object_folder_is_bound_by_its_first_checkpoint(tmp_path: Path) -> None:
    """A command that only reads creates no object folder; the first checkpoint writes the identity."""
    store_url = f"sqlite:///{tmp_path}/tenure.db"
    from tenure.store import open_store

    store = open_store(store_url)
    objects = LocalObjectStore(str(tmp_path / "objects"))
    service = WorkspaceService(store, objects, str(tmp_path / "data"))
    assert service.object_store_id is None and not os.path.exists(tmp_path / "objects")
    service.create("w")
    src = tmp_path / "src"
    write_tree(src)
    service.checkpoint("w", str(src))
    assert objects.identity() is not None and service.object_store_id == objects.identity()
    assert recorded_binding(store).identity == objects.identity()  # type: ignore[union-attr]
    with pytest.raises(ObjectStoreMismatchError):
        WorkspaceService(store, LocalObjectStore(str(tmp_path / "elsewhere")), str(tmp_path / "data"))
    store.close()


def test_an_object_folder_from_before_identities_is_adopted(tmp_path: Path) -> None:
    """A data folder written before identities (objects, no identity file, no binding) is adopted on first use."""
    from tenure.store import open_store

    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    objects = LocalObjectStore(str(tmp_path / "objects"))
    service = WorkspaceService(store, objects, str(tmp_path / "data"))
    service.create("w")
    src = tmp_path / "src"
    write_tree(src)
    snap = service.checkpoint("w", str(src)).snapshot
    # Make it look as it did before identities existed.
    os.unlink(tmp_path / "objects" / IDENTITY_FILE)
    os.unlink(tmp_path / "objects" / STORE_FILE)
    with store.db.sql_transaction() as tx:
        tx.execute_sql("DELETE FROM object_store_binding")
    store.close()

    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    objects = LocalObjectStore(str(tmp_path / "objects"))
    adopted = WorkspaceService(store, objects, str(tmp_path / "data"))
    identity = objects.identity()
    assert identity is not None and adopted.object_store_id == identity
    assert recorded_binding(store).identity == identity  # type: ignore[union-attr]
    assert objects.bound_store().identity == store.identity()  # type: ignore[union-attr]
    assert adopted.verify(snap.id).ok
    adopted.restore("w", str(tmp_path / "out"))
    assert read_tree(tmp_path / "out") == read_tree(src)
    store.close()


@pytest.mark.postgres
def test_a_postgres_object_store_has_its_identity_from_its_migration() -> None:
    from tenure.objects import open_object_store
    from tests.conftest import new_pg_schema_url

    url = new_pg_schema_url()
    first = open_object_store(url)
    identity = first.identity()
    assert identity is not None
    second = open_object_store(url)  # opening again (migrations already applied) keeps it
    assert second.identity() == identity == second.ensure_identity()
    other = open_object_store(new_pg_schema_url())
    assert other.identity() not in (None, identity)
    for o in (first, second, other):
        o.close()
