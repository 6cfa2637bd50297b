"""Store conformance: the same tests against SQLite and PostgreSQL (fixture ``store``)."""

from __future__ import annotations

import threading
import time

import pytest

from tenure.errors import (
    ConflictError,
    IdempotencyConflictError,
    IllegalTransitionError,
    InvalidInputError,
    NotFoundError,
    StaleGenerationError,
)
from tenure.states import LeaseState, SnapshotState, WorkspaceState
from tenure.store import LeaseHeldError, LeaseLostError, Store


def publish(store: Store, lease, key: str, root: str = "r" * 64):  # type: ignore[no-untyped-def]
    ticket = store.workspaces.begin_checkpoint(lease, key)
    if ticket.already_published:
        return ticket.already_published
    store.workspaces.mark_uploaded(ticket, root, 1, 10, 10, [])
    return store.workspaces.publish(lease, ticket)


def test_migrations_are_idempotent(store: Store) -> None:
    from tenure.store.migrate import migrate, migrations

    assert migrate(store.db) == []
    with store.db.transaction() as tx:
        versions = {r["version"] for r in tx.execute("migrations_applied")}
    assert versions == {m.version for m in migrations()}


def test_every_store_has_an_identity_of_its_own(store: Store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import re

    from tenure.store import open_store

    identity = store.identity()
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", identity)
    again = open_store(store.url)
    other = open_store(f"sqlite:///{tmp_path}/other.db")
    assert again.identity() == identity != other.identity()
    again.close()
    other.close()


def test_create_goes_through_creating_to_idle(store: Store) -> None:
    ws = store.workspaces.create("alpha")
    assert ws.state is WorkspaceState.IDLE and ws.version == 0 and ws.head_snapshot_id is None
    with pytest.raises(ConflictError) as info:
        store.workspaces.create("alpha")
    assert info.value.code == "workspace-exists"


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "a\nb", "x" * 129, "-lead", "spa ce", "a\\b"])
def test_invalid_names_are_rejected_and_nothing_is_written(store: Store, bad: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        store.workspaces.create(bad)
    assert info.value.code == "invalid-name"
    assert store.workspaces.workspaces() == []


def test_s47_each_writer_gets_a_fresh_lease_at_a_higher_generation(store: Store) -> None:
    store.workspaces.create("w")
    first = store.workspaces.acquire("w", "a", 30)
    assert first.state is LeaseState.ACTIVE and first.generation == 1
    store.workspaces.release(first)
    second = store.workspaces.acquire("w", "b", 30)
    assert second.generation == 2 and second.id != first.id
    leases = store.workspaces.leases(second.workspace_id)
    assert [(lease.generation, lease.state) for lease in leases] == [(1, LeaseState.RELEASED), (2, LeaseState.ACTIVE)]


def test_a_live_lease_of_another_holder_is_refused_with_the_holder(store: Store) -> None:
    store.workspaces.create("w")
    store.workspaces.acquire("w", "pod-a", 30)
    with pytest.raises(LeaseHeldError) as info:
        store.workspaces.acquire("w", "pod-b", 30)
    assert info.value.context["holder"] == "pod-a"


def test_takeover_revokes_the_old_lease_and_fences_its_checkpoint(store: Store) -> None:
    store.workspaces.create("w")
    old = store.workspaces.acquire("w", "pod-a", 30)
    ticket = store.workspaces.begin_checkpoint(old, "k")
    assert store.workspaces.workspace("w").state is WorkspaceState.CHECKPOINTING
    new = store.workspaces.acquire("w", "pod-b", 30, takeover=True)
    ws = store.workspaces.workspace("w")
    assert ws.state is WorkspaceState.MOUNTED and ws.writer_generation == new.generation == 2
    assert store.workspaces.lease(ws.id, 1).state is LeaseState.REVOKED  # type: ignore[union-attr]
    # kept for a retry under its key (S-33), but the former writer can no longer touch it
    assert store.snapshots.get(ticket.snapshot_id).state is SnapshotState.UPLOADING
    with pytest.raises(StaleGenerationError):
        store.workspaces.mark_uploaded(ticket, "r" * 64, 1, 1, 1, [])


def test_s33_a_retry_under_the_same_key_after_a_takeover_completes_that_checkpoint_once(store: Store) -> None:
    store.workspaces.create("w")
    old = store.workspaces.acquire("w", "pod-a", 30)
    first = store.workspaces.begin_checkpoint(old, "k")
    store.workspaces.mark_uploaded(first, "a" * 64, 1, 1, 1, [])  # crashed after the upload, before publish
    new = store.workspaces.acquire("w", "pod-b", 30, takeover=True)
    retry = store.workspaces.begin_checkpoint(new, "k")
    assert retry.snapshot_id == first.snapshot_id and retry.resumed and retry.generation == new.generation
    assert store.workspaces.workspace("w").state is WorkspaceState.CHECKPOINTING
    store.workspaces.mark_uploaded(retry, "b" * 64, 2, 2, 2, [])  # the folder as it is now
    published = store.workspaces.publish(new, retry)
    assert published.id == first.snapshot_id and published.root_oid == "b" * 64
    assert published.state is SnapshotState.READY and published.generation == new.generation
    again = store.workspaces.begin_checkpoint(new, "k")
    assert again.already_published is not None and again.already_published.id == published.id
    assert store.workspaces.workspace("w").head_snapshot_id == published.id


@pytest.mark.parametrize("when", ["before", "after"])
def test_s33_the_former_writer_cannot_upload_into_a_checkpoint_a_new_writer_adopted(store: Store, when: str) -> None:
    store.workspaces.create("w")
    old = store.workspaces.acquire("w", "pod-a", 30)
    first = store.workspaces.begin_checkpoint(old, "k")
    new = store.workspaces.acquire("w", "pod-b", 30, takeover=True)
    retry = store.workspaces.begin_checkpoint(new, "k")
    assert retry.snapshot_id == first.snapshot_id and retry.resumed
    if when == "after":  # the new writer's root is recorded first: the former one must not replace it
        store.workspaces.mark_uploaded(retry, "b" * 64, 2, 2, 2, [])
    with pytest.raises(StaleGenerationError):
        store.workspaces.mark_uploaded(first, "a" * 64, 1, 1, 1, [])
    with pytest.raises(StaleGenerationError):  # nor fail it on its own closure check
        store.workspaces.fail_snapshot(first.snapshot_id, "1 objects missing after upload", generation=old.generation)
    snap = store.snapshots.get(first.snapshot_id)
    assert snap.root_oid == ("b" * 64 if when == "after" else None)
    assert snap.state is (SnapshotState.VALIDATING if when == "after" else SnapshotState.UPLOADING)
    store.workspaces.mark_uploaded(retry, "b" * 64, 2, 2, 2, [])
    with pytest.raises(StaleGenerationError):  # the same root as recorded: still fenced, though nothing would change
        store.workspaces.mark_uploaded(first, "b" * 64, 2, 2, 2, [])
    published = store.workspaces.publish(new, retry)
    assert published.state is SnapshotState.READY and published.root_oid == "b" * 64


def test_fail_snapshot_fails_the_current_writers_checkpoint(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "pod-a", 30)
    ticket = store.workspaces.begin_checkpoint(lease, "k")
    store.workspaces.mark_uploaded(ticket, "a" * 64, 1, 1, 1, [])
    store.workspaces.fail_snapshot(ticket.snapshot_id, "1 objects missing after upload", generation=ticket.generation)
    snap = store.snapshots.get(ticket.snapshot_id)
    assert snap.state is SnapshotState.FAILED and snap.error == "1 objects missing after upload"


def test_a_new_key_after_a_takeover_fails_the_former_writers_unfinished_checkpoint(store: Store) -> None:
    store.workspaces.create("w")
    old = store.workspaces.acquire("w", "pod-a", 30)
    first = store.workspaces.begin_checkpoint(old, "k")
    new = store.workspaces.acquire("w", "pod-b", 30, takeover=True)
    store.workspaces.begin_checkpoint(new, "other")
    assert store.snapshots.get(first.snapshot_id).state is SnapshotState.FAILED
    with pytest.raises(IdempotencyConflictError):
        store.workspaces.begin_checkpoint(new, "k")


def test_expired_lease_can_be_taken_and_becomes_expired(store: Store) -> None:
    store.workspaces.create("w")
    old = store.workspaces.acquire("w", "pod-a", 0.05)
    deadline = time.monotonic() + 5
    while store.workspaces.now() <= old.expires_at and time.monotonic() < deadline:
        time.sleep(0.01)
    new = store.workspaces.acquire("w", "pod-b", 30)
    assert new.generation == 2
    assert store.workspaces.lease(new.workspace_id, 1).state is LeaseState.EXPIRED  # type: ignore[union-attr]
    assert not store.workspaces.renew(old, 30)


def test_s48_stale_generation_publish_changes_nothing(store: Store) -> None:
    store.workspaces.create("w")
    a = store.workspaces.acquire("w", "a", 30)
    ticket = store.workspaces.begin_checkpoint(a, "ka")
    store.workspaces.mark_uploaded(ticket, "a" * 64, 1, 1, 1, [])
    b = store.workspaces.acquire("w", "b", 30, takeover=True)
    b_snap = publish(store, b, "kb", "b" * 64)
    before = store.workspaces.workspace("w")
    with pytest.raises(StaleGenerationError) as info:
        store.workspaces.publish(a, ticket)
    assert info.value.context["current_generation"] == 2
    after = store.workspaces.workspace("w")
    assert after == before and after.head_snapshot_id == b_snap.id
    with pytest.raises(StaleGenerationError):
        store.workspaces.begin_checkpoint(a, "ka2")


def test_s35_repeated_idempotency_key_returns_the_first_result(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    first = publish(store, lease, "same")
    version = store.workspaces.workspace("w").version
    again = publish(store, lease, "same", "z" * 64)
    assert again.id == first.id and again.root_oid == first.root_oid
    assert store.workspaces.workspace("w").version == version
    assert len(store.snapshots.list(first.workspace_id)) == 1


def test_s35_publish_retried_after_commit_is_a_no_op(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    ticket = store.workspaces.begin_checkpoint(lease, "k")
    store.workspaces.mark_uploaded(ticket, "r" * 64, 1, 1, 1, [])
    first = store.workspaces.publish(lease, ticket)
    version = store.workspaces.workspace("w").version
    assert store.workspaces.publish(lease, ticket).id == first.id
    assert store.workspaces.workspace("w").version == version


def test_s33_resume_uses_the_same_snapshot_and_expected_version(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    ticket = store.workspaces.begin_checkpoint(lease, "k")
    resumed = store.workspaces.begin_checkpoint(lease, "k")
    assert resumed.resumed and resumed.snapshot_id == ticket.snapshot_id
    assert resumed.expected_version == ticket.expected_version
    with pytest.raises(ConflictError) as info:
        store.workspaces.begin_checkpoint(lease, "other")
    assert info.value.code == "checkpoint-in-progress"


def test_idempotency_key_of_a_failed_checkpoint_is_refused(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    ticket = store.workspaces.begin_checkpoint(lease, "k")
    store.workspaces.abandon_checkpoint(lease, ticket, error="disk on fire")
    with pytest.raises(IdempotencyConflictError):
        store.workspaces.begin_checkpoint(lease, "k")


def test_s44_publish_needs_a_live_lease(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 0.2)
    ticket = store.workspaces.begin_checkpoint(lease, "k")
    store.workspaces.mark_uploaded(ticket, "r" * 64, 1, 1, 1, [])
    deadline = time.monotonic() + 5
    while store.workspaces.now() <= lease.expires_at and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(LeaseLostError):
        store.workspaces.publish(lease, ticket)
    assert store.workspaces.workspace("w").head_snapshot_id is None


def test_s45_final_checkpoint_may_publish_while_releasing(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    store.workspaces.begin_release(lease)
    snap = publish(store, lease, "final")
    store.workspaces.finish_release(lease)
    ws = store.workspaces.workspace("w")
    assert ws.head_snapshot_id == snap.id and ws.state is WorkspaceState.IDLE
    assert store.workspaces.lease(ws.id, 1).state is LeaseState.RELEASED  # type: ignore[union-attr]


def test_s16_fork_only_from_ready(store: Store) -> None:
    store.workspaces.create("base")
    lease = store.workspaces.acquire("base", "a", 30)
    snap = publish(store, lease, "k")
    fork = store.workspaces.create("fork", snap.id)
    assert fork.head_snapshot_id == snap.id and fork.base_snapshot_id == snap.id
    store.snapshots.move(snap.id, SnapshotState.DEGRADED)
    with pytest.raises(ConflictError) as info:
        store.workspaces.create("fork2", snap.id)
    assert info.value.code == "snapshot-not-ready"
    with pytest.raises(NotFoundError):
        store.workspaces.create("fork3", "s-doesnotexist")


def test_dispose_spares_a_snapshot_that_is_another_live_workspaces_head(store: Store) -> None:
    store.workspaces.create("base")
    lease = store.workspaces.acquire("base", "a", 30)
    older = publish(store, lease, "k1", "1" * 64)
    head = publish(store, lease, "k2", "2" * 64)
    fork = store.workspaces.create("fork", head.id)
    store.workspaces.dispose("base", lease.generation)
    assert store.workspaces.workspace("base").state is WorkspaceState.DELETED
    assert store.snapshots.get(head.id).state is SnapshotState.READY, "the fork's head was disposed of"
    assert store.snapshots.get(older.id).state is SnapshotState.DELETING
    _, roots = store.snapshots.mark()
    assert "2" * 64 in roots and "1" * 64 not in roots
    assert store.workspaces.workspace("fork").head_snapshot_id == head.id == fork.head_snapshot_id
    store.workspaces.dispose("base", lease.generation)  # repeated: the fork's head still stays
    assert store.snapshots.get(head.id).state is SnapshotState.READY


def test_snapshot_moves_are_guarded(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    ticket = store.workspaces.begin_checkpoint(lease, "k")
    with pytest.raises(IllegalTransitionError):
        store.snapshots.move(ticket.snapshot_id, SnapshotState.READY)


def test_head_cannot_be_deleted_and_prune_keeps_head_and_pins(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    snaps = [publish(store, lease, f"k{i}", str(i) * 64) for i in range(5)]
    with pytest.raises(ConflictError) as info:
        store.snapshots.delete(snaps[-1].id)
    assert info.value.code == "snapshot-is-head"
    store.snapshots.pin_snapshot(snaps[0].id, "op", kind="keep")
    doomed = store.snapshots.prune(snaps[0].workspace_id, keep_last=1)
    assert {s.id for s in doomed} == {s.id for s in snaps[1:4]}
    states = {s.id: s.state for s in store.snapshots.list(snaps[0].workspace_id)}
    assert states[snaps[0].id] is SnapshotState.READY and states[snaps[4].id] is SnapshotState.READY


def test_s18_s19_deleting_stays_readable_until_gc_marks_it(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    old = publish(store, lease, "k1", "1" * 64)
    publish(store, lease, "k2", "2" * 64)
    pin = store.snapshots.pin_snapshot(old.id, "reader")
    store.snapshots.delete(old.id)
    _, roots = store.snapshots.mark()
    assert "1" * 64 in roots and store.snapshots.get(old.id).state is SnapshotState.DELETING
    store.snapshots.unpin(pin)
    _, roots = store.snapshots.mark()
    assert "1" * 64 not in roots and store.snapshots.get(old.id).state is SnapshotState.DELETED
    with pytest.raises(ConflictError) as info:
        store.snapshots.pin_snapshot(old.id, "late reader")
    assert info.value.code == "snapshot-not-readable"


def test_upload_pins_protect_objects_until_released(store: Store) -> None:
    pid = store.snapshots.pin_objects("uploader", ["a" * 64, "b" * 64], 60)
    mark_time, _ = store.snapshots.mark()
    with store.snapshots.sweep_lock(mark_time) as (pinned, new_roots):
        assert pinned == {"a" * 64, "b" * 64} and new_roots == set()
    store.snapshots.unpin(pid)
    with store.snapshots.sweep_lock(mark_time) as (pinned, _):
        assert pinned == set()


def test_roots_published_after_the_mark_are_reported_to_the_sweep(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    before = publish(store, lease, "k1", "1" * 64)
    mark_time, roots = store.snapshots.mark()
    assert roots == [before.root_oid]
    publish(store, lease, "k2", "2" * 64)
    with store.snapshots.sweep_lock(mark_time) as (_, new_roots):
        assert "2" * 64 in new_roots


def test_expiry_undo_within_grace_and_delete_only_without_live_writer(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    assert store.workspaces.expire("w").state is WorkspaceState.EXPIRING
    with pytest.raises(IllegalTransitionError, match="writer"):
        store.workspaces.delete_expired("w")
    assert store.workspaces.undo_expiry("w", grace_s=60).state is WorkspaceState.IDLE
    store.workspaces.revoke("w")
    since = store.workspaces.expire("w").expiring_since
    deadline = time.monotonic() + 5
    while store.workspaces.now() <= since and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.001)
    with pytest.raises(IllegalTransitionError, match="grace"):
        store.workspaces.undo_expiry("w", grace_s=0)
    assert store.workspaces.delete_expired("w").state is WorkspaceState.DELETED
    assert lease.generation == 1


def test_s51_readers_never_see_a_moved_head_while_checkpointing(store: Store) -> None:
    store.workspaces.create("w")
    lease = store.workspaces.acquire("w", "a", 30)
    stop = threading.Event()
    bad: list[tuple[object, ...]] = []

    def reader() -> None:
        while not stop.is_set():
            ws = store.workspaces.workspace("w")
            if ws.state is WorkspaceState.CHECKPOINTING and ws.pending_version != ws.version:
                bad.append((ws.state, ws.version, ws.pending_version))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    heads = []
    for i in range(30):
        ticket = store.workspaces.begin_checkpoint(lease, f"k{i}")
        mid = store.workspaces.workspace("w")
        assert mid.state is WorkspaceState.CHECKPOINTING and mid.head_snapshot_id == (heads[-1] if heads else None)
        store.workspaces.mark_uploaded(ticket, f"{i:064d}", 1, 1, 1, [])
        heads.append(store.workspaces.publish(lease, ticket).id)
    stop.set()
    for t in threads:
        t.join()
    assert not bad
    assert store.workspaces.workspace("w").head_snapshot_id == heads[-1]


def test_every_named_query_prepares_on_this_dialect(store: Store) -> None:
    """Each block the store can run on this dialect is valid SQL against the migrated schema."""
    import re

    queries = store.db.queries
    failures = []
    for name in sorted(queries.names()):
        try:
            sql = queries.sql(store.db.dialect, name)
        except KeyError:
            continue  # the other dialect's block
        if store.db.dialect == "postgres" and sql.lstrip().upper().startswith("CREATE"):
            continue  # EXPLAIN takes no DDL on PostgreSQL
        params = {p: None for p in re.findall(r"(?<!:):([a-zA-Z_]\w*)", sql)}
        try:
            with store.db.sql_transaction() as tx:
                tx.execute_sql("EXPLAIN " + sql, params)
        except Exception as exc:  # noqa: BLE001 - collect every failure
            failures.append(f"{name}: {exc}")
    assert failures == []
