"""The lifecycle service in-process (project-lifecycle §5, §6, SPEC §9), on SQLite and PostgreSQL.

Engines are real classes that record what they see. The order of durable
writes is recorded by triggers on the store's own tables (a test-only audit
table), so a test can compare store writes and engine events on one
timeline without replacing anything in the store.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tenure.errors import IntegrityError, InvalidInputError
from tenure.projects import (
    ActivationRegistry,
    ClaimRejectedError,
    EngineFailedError,
    EnginesStartRequested,
    EnginesStopRequested,
    Kind,
    LifecycleConfig,
    LifecycleService,
    Ownership,
    OwnershipFacade,
    PodIdentity,
    PodRegistry,
    Project,
    ProjectClosedError,
    ProjectStore,
    StatusConflictError,
    SystemProjectError,
)
from tenure.states import ProjectStatus, SnapshotState, WorkspaceState
from tenure.store import LeaseLostError, Store
from tests.support.projects import TTL, T
from tests.support.trees import describe

S = ProjectStatus
SHORT = 0.05  # a lease TTL policy under which any claim older than a moment has expired


# ----------------------------------------------------------------- audit: store writes and events on one timeline

_SQLITE_AUDIT = [
    "CREATE TABLE test_audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL)",
    "CREATE TRIGGER audit_claim AFTER UPDATE ON projects WHEN NEW.home_pod_id IS NOT NULL"
    " AND NEW.home_pod_id IS NOT OLD.home_pod_id BEGIN INSERT INTO test_audit (what) VALUES ('claim'); END",
    "CREATE TRIGGER audit_renew AFTER UPDATE ON projects WHEN NEW.home_pod_id IS NOT NULL"
    " AND NEW.home_pod_id IS OLD.home_pod_id AND NEW.claimed_at IS NOT OLD.claimed_at"
    " BEGIN INSERT INTO test_audit (what) VALUES ('renew'); END",
    "CREATE TRIGGER audit_release AFTER UPDATE ON projects WHEN OLD.home_pod_id IS NOT NULL"
    " AND NEW.home_pod_id IS NULL BEGIN INSERT INTO test_audit (what) VALUES ('release'); END",
    "CREATE TRIGGER audit_generation AFTER UPDATE ON projects WHEN NEW.generation IS NOT OLD.generation"
    " BEGIN INSERT INTO test_audit (what) VALUES ('generation'); END",
    "CREATE TRIGGER audit_status AFTER UPDATE ON projects WHEN NEW.status IS NOT OLD.status"
    " BEGIN INSERT INTO test_audit (what) VALUES ('status:' || NEW.status); END",
    "CREATE TRIGGER audit_unbind AFTER UPDATE ON sessions WHEN OLD.bound_connection_id IS NOT NULL"
    " AND NEW.bound_connection_id IS NULL BEGIN INSERT INTO test_audit (what) VALUES ('unbind'); END",
    "CREATE TRIGGER audit_bind AFTER UPDATE ON sessions WHEN NEW.bound_connection_id IS NOT NULL"
    " AND NEW.bound_connection_id IS NOT OLD.bound_connection_id"
    " BEGIN INSERT INTO test_audit (what) VALUES ('bind'); END",
    "CREATE TRIGGER audit_ws AFTER UPDATE ON workspaces WHEN NEW.state IS NOT OLD.state"
    " BEGIN INSERT INTO test_audit (what) VALUES ('ws:' || NEW.state); END",
    "CREATE TRIGGER audit_head AFTER UPDATE ON workspaces WHEN NEW.head_snapshot_id IS NOT OLD.head_snapshot_id"
    " BEGIN INSERT INTO test_audit (what) VALUES ('head'); END",
    "CREATE TRIGGER audit_snap AFTER UPDATE ON snapshots WHEN NEW.state IS NOT OLD.state"
    " BEGIN INSERT INTO test_audit (what) VALUES ('snap:' || NEW.state); END",
]

_PG_AUDIT = [
    "CREATE TABLE test_audit (seq BIGSERIAL PRIMARY KEY, what TEXT NOT NULL)",
    """CREATE FUNCTION test_audit_projects() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
         IF NEW.home_pod_id IS NOT NULL AND NEW.home_pod_id IS DISTINCT FROM OLD.home_pod_id THEN
           INSERT INTO test_audit (what) VALUES ('claim'); END IF;
         IF NEW.home_pod_id IS NOT NULL AND NEW.home_pod_id IS NOT DISTINCT FROM OLD.home_pod_id
            AND NEW.claimed_at IS DISTINCT FROM OLD.claimed_at THEN
           INSERT INTO test_audit (what) VALUES ('renew'); END IF;
         IF OLD.home_pod_id IS NOT NULL AND NEW.home_pod_id IS NULL THEN
           INSERT INTO test_audit (what) VALUES ('release'); END IF;
         IF NEW.generation IS DISTINCT FROM OLD.generation THEN
           INSERT INTO test_audit (what) VALUES ('generation'); END IF;
         IF NEW.status IS DISTINCT FROM OLD.status THEN
           INSERT INTO test_audit (what) VALUES ('status' || chr(58) || NEW.status); END IF;
         RETURN NEW; END $$""",
    "CREATE TRIGGER audit_projects AFTER UPDATE ON projects FOR EACH ROW EXECUTE FUNCTION test_audit_projects()",
    """CREATE FUNCTION test_audit_sessions() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
         IF OLD.bound_connection_id IS NOT NULL AND NEW.bound_connection_id IS NULL THEN
           INSERT INTO test_audit (what) VALUES ('unbind'); END IF;
         IF NEW.bound_connection_id IS NOT NULL AND NEW.bound_connection_id IS DISTINCT FROM OLD.bound_connection_id
           THEN INSERT INTO test_audit (what) VALUES ('bind'); END IF;
         RETURN NEW; END $$""",
    "CREATE TRIGGER audit_sessions AFTER UPDATE ON sessions FOR EACH ROW EXECUTE FUNCTION test_audit_sessions()",
    """CREATE FUNCTION test_audit_workspaces() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
         IF NEW.state IS DISTINCT FROM OLD.state THEN
           INSERT INTO test_audit (what) VALUES ('ws' || chr(58) || NEW.state); END IF;
         IF NEW.head_snapshot_id IS DISTINCT FROM OLD.head_snapshot_id THEN
           INSERT INTO test_audit (what) VALUES ('head'); END IF;
         RETURN NEW; END $$""",
    "CREATE TRIGGER audit_workspaces AFTER UPDATE ON workspaces FOR EACH ROW EXECUTE FUNCTION test_audit_workspaces()",
    """CREATE FUNCTION test_audit_snapshots() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
         IF NEW.state IS DISTINCT FROM OLD.state THEN
           INSERT INTO test_audit (what) VALUES ('snap' || chr(58) || NEW.state); END IF;
         RETURN NEW; END $$""",
    "CREATE TRIGGER audit_snapshots AFTER UPDATE ON snapshots FOR EACH ROW EXECUTE FUNCTION test_audit_snapshots()",
]


class Audit:
    """The test-only audit table: what the store wrote, interleaved with what engines saw."""

    def __init__(self, store: Store) -> None:
        self.store = store
        with store.db.sql_transaction() as tx:
            for sql in _PG_AUDIT if tx.dialect == "postgres" else _SQLITE_AUDIT:
                tx.execute_sql(sql)
        self.mark = 0

    def note(self, what: str) -> None:
        with self.store.db.sql_transaction() as tx:
            tx.execute_sql("INSERT INTO test_audit (what) VALUES (:w)", {"w": what})

    def reset(self) -> None:
        """Forget what was recorded so far."""
        with self.store.db.sql_transaction(write=False) as tx:
            rows = tx.execute_sql("SELECT COALESCE(MAX(seq), 0) AS m FROM test_audit")
        self.mark = int(rows[0]["m"]) if rows else 0

    def log(self, *kinds: str) -> list[str]:
        """Entries since the last reset, optionally only those whose kind (before ':') is listed."""
        with self.store.db.sql_transaction(write=False) as tx:
            rows = tx.execute_sql("SELECT what FROM test_audit WHERE seq > :m ORDER BY seq", {"m": self.mark})
        out = [r["what"] for r in rows]
        return [w for w in out if w.split(":")[0] in kinds] if kinds else out


# --------------------------------------------------------------------------- folders


def write(folder: str, rel: str, data: bytes, *, executable: bool = False) -> None:
    path = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    if executable:
        os.chmod(path, 0o755)


def fill(folder: str, tag: str) -> None:
    """A small tree with the awkward parts: nesting, an executable, a symlink, an empty folder."""
    write(folder, "README.md", f"project {tag}\n".encode())
    write(folder, "src/main.py", b"print('hi')\n" * 50)
    write(folder, "bin/run.sh", b"#!/bin/sh\necho run\n", executable=True)
    write(folder, "data/blob.bin", bytes(range(256)) * 300)
    os.makedirs(os.path.join(folder, "empty", "nested"), exist_ok=True)
    os.symlink("src/main.py", os.path.join(folder, "link-to-main"))


# --------------------------------------------------------------------------- pods and engines


class RecordingEngine:
    """A real engine: it records each event with the status and folder it saw, and can be told to fail."""

    def __init__(self, store: Store, audit: Audit | None) -> None:
        self.store = store
        self.audit = audit
        self.events: list[tuple[str, Any, ProjectStatus, bool]] = []
        self.fail_start = False
        self.fail_stop = False
        self.stop_gate: threading.Event | None = None
        self.seen_folders: list[dict[str, Any]] = []
        self.held_at_start: list[bool] = []
        self.pod_id = ""

    def _record(self, kind: str, event: Any, folder: str) -> None:
        project = ProjectStore(self.store).get(event.tenant_id, event.project_name)
        self.events.append((kind, event, project.status, os.path.isdir(folder)))
        self.seen_folders.append(describe(folder) if os.path.isdir(folder) else {})
        if self.audit is not None:
            self.audit.note(kind)

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        self._record("start", event, folder)
        project = ProjectStore(self.store).get(event.tenant_id, event.project_name)
        self.held_at_start.append(Ownership(self.store).holds(project.id, self.pod_id, TTL))
        if self.fail_start:
            raise RuntimeError("engine refuses to start")

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        self._record("stop", event, folder)
        if self.stop_gate is not None:
            self.stop_gate.wait(10)
        if self.fail_stop:
            raise RuntimeError("engine refuses to stop")

    def kinds(self) -> list[str]:
        return [e[0] for e in self.events]


class Pod:
    """One simulated pod: identity, its own data folder, one recording engine, one lifecycle service."""

    def __init__(
        self,
        store: Store,
        objects: Any,
        data_dir: str,
        name: str,
        audit: Audit | None,
        *,
        ttl: float = TTL,
        stop_timeout: float = 5.0,
        identity: PodIdentity | None = None,
    ) -> None:
        self.store, self.objects, self.data_dir, self.name, self.audit = store, objects, data_dir, name, audit
        self.identity = identity or PodIdentity.fresh(name, f"http://{name}:8470")
        self.engine = RecordingEngine(store, audit)
        self.engine.pod_id = self.identity.pod_id
        self.config = LifecycleConfig(lease_ttl=ttl, engine_stop_timeout=stop_timeout)
        self.registry = ActivationRegistry()
        self.service = LifecycleService(
            store, objects, data_dir, self.identity, config=self.config, engines=[self.engine], registry=self.registry
        )

    @property
    def pod_id(self) -> str:
        return self.identity.pod_id

    def restarted(self, *, ttl: float = TTL) -> Pod:
        """The same host after a crash: same data folder and node name, a fresh pod id, an empty registry."""
        return Pod(
            self.store,
            self.objects,
            self.data_dir,
            self.name,
            self.audit,
            ttl=ttl,
            identity=PodIdentity.fresh(self.identity.node_name, self.identity.endpoint),
        )

    def folder(self, project: Project) -> str:
        return self.service.folder(project)


class World:
    def __init__(self, store: Store, objects: Any, root: str) -> None:
        self.store, self.objects, self.root = store, objects, root
        self.audit = Audit(store)
        self.projects = ProjectStore(store)
        self.ownership = Ownership(store)

    def pod(self, name: str, **kw: Any) -> Pod:
        return Pod(self.store, self.objects, os.path.join(self.root, f"data-{name}"), name, self.audit, **kw)

    def create(self, name: str = "p", **kw: Any) -> Project:
        return self.projects.create(T, name, **kw)

    def get(self, name: str = "p") -> Project:
        return self.projects.get(T, name)

    def owner(self, name: str = "p") -> str | None:
        owner = self.ownership.owner(self.get(name).id, TTL)
        return owner.pod_id if owner.live else None

    def head(self, name: str = "p") -> str | None:
        return self.store.workspaces.workspace(self.get(name).workspace_id).head_snapshot_id

    def wait_past(self, seconds: float) -> None:
        start = self.store.workspaces.now()
        while self.store.workspaces.now() - start <= seconds:
            time.sleep(seconds / 4)


@pytest.fixture
def world(store: Store, objects: Any, tmp_path: Any) -> Iterator[World]:
    yield World(store, objects, str(tmp_path))


def take_over(world: World, pod: Pod) -> None:
    """Make every lease older than a moment count as expired for ``pod`` (the TTL is policy, P-33)."""
    world.wait_past(SHORT * 2)
    pod.config.lease_ttl = SHORT


def back_to_normal(pod: Pod) -> None:
    pod.config.lease_ttl = TTL


def reach(world: World, pod: Pod, status: ProjectStatus, name: str = "p") -> Project:
    """Bring a fresh project to ``status`` with real operations (failing engines for the transient ones)."""
    project = world.create(name)
    if status is S.INIT:
        return project
    if status is S.RECOVERING:
        pod.engine.fail_start = True
        with pytest.raises(EngineFailedError):
            pod.service.bring(T, name)
        pod.engine.fail_start = False
        return world.get(name)
    pod.service.bring(T, name)
    fill(pod.folder(project), name)
    if status is S.RUNNING:
        return world.get(name)
    if status is S.SUSPENDING:
        pod.engine.fail_stop = True
        with pytest.raises(EngineFailedError):
            pod.service.suspend(T, name)
        pod.engine.fail_stop = False
        return world.get(name)
    if status is S.SUSPENDED:
        pod.service.suspend(T, name)
        return world.get(name)
    raise AssertionError(status)


NON_CLOSED = [S.INIT, S.RECOVERING, S.RUNNING, S.SUSPENDING, S.SUSPENDED]


# --------------------------------------------------------------------------- bring: P-40..P-49


def test_p40_p44_p45_bring_runs_claim_unbind_recovering_init_start_running_in_order(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    session = world.projects.create_session(project)
    world.projects.bind_session(session.id, "conn-1", "dead-pod", project.generation)
    world.audit.reset()
    brought = a.service.bring(T, "p")
    assert world.audit.log("claim", "renew", "unbind", "status", "start") == [
        "claim",
        "unbind",
        "status:RECOVERING",
        "start",
        "status:RUNNING",
    ]
    # step 4 sees step 3 done and the status still RECOVERING (P-44, P-133)
    ((kind, event, status_seen, folder_existed),) = a.engine.events
    assert (kind, status_seen, folder_existed) == ("start", S.RECOVERING, True)
    assert event == EnginesStartRequested(T, "p") and a.engine.held_at_start == [True]
    # P-45: RUNNING, held by the caller, and running here
    assert brought.status is S.RUNNING and brought == world.get()
    assert world.owner() == a.pod_id and project.id in a.registry
    assert world.projects.session(session.id).bound_connection_id is None
    assert os.path.isdir(a.folder(project))


def test_p43_p44_the_engine_starts_on_the_restored_head(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    project = world.create()
    a.service.bring(T, "p")
    fill(a.folder(project), "v1")
    expected = describe(a.folder(project))
    a.service.suspend(T, "p")
    b.service.bring(T, "p")
    assert b.engine.seen_folders == [expected]
    assert b.engine.events[0][2] is S.RECOVERING


def test_p43_bring_without_a_snapshot_creates_an_empty_workspace(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    a.service.bring(T, "p")
    assert describe(a.folder(project)) == {} and world.head() is None
    assert a.engine.seen_folders == [{}]


def test_p41_bring_is_rejected_when_another_pod_holds_the_lease_and_nothing_else_happens(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    project = world.create()
    session = world.projects.create_session(project)
    world.projects.bind_session(session.id, "conn-1", "somewhere", project.generation)
    assert world.ownership.claim(T, "p", b.pod_id, "b", None, TTL) is not None
    before = world.get()
    world.audit.reset()
    with pytest.raises(ClaimRejectedError) as info:
        a.service.bring(T, "p")
    assert info.value.code == "claim-rejected" and info.value.context["holder"] == b.pod_id
    assert world.audit.log() == []
    assert world.get() == before and world.owner() == b.pod_id
    assert world.projects.session(session.id).bound_connection_id == "conn-1"
    assert a.engine.events == [] and project.id not in a.registry
    assert not os.path.exists(a.folder(project))


def test_p42_step_1a_unbinds_every_session_and_is_idempotent(world: World) -> None:
    a = world.pod("a")
    project, other = world.create(), world.create("q")
    sessions = [world.projects.create_session(project) for _ in range(3)]
    foreign = world.projects.create_session(other)
    for i, s in enumerate(sessions[:2]):
        world.projects.bind_session(s.id, f"conn-{i}", "dead", project.generation)
    world.projects.bind_session(foreign.id, "conn-q", "elsewhere", other.generation)
    a.service.bring(T, "p")
    assert [s.bound_connection_id for s in world.projects.sessions(project)] == [None, None, None]
    assert world.projects.session(foreign.id).bound_connection_id == "conn-q"
    # a second full bring (suspend, then bring) with nothing bound: no error, same result
    a.service.suspend(T, "p")
    world.audit.reset()
    a.service.bring(T, "p")
    assert "unbind" not in world.audit.log()
    assert [s.bound_connection_id for s in world.projects.sessions(project)] == [None, None, None]
    assert world.projects.unbind_sessions(world.get()) == 0


def test_p46_p48_repeated_bring_on_the_owner_only_renews_the_lease(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    brought = a.service.bring(T, "p")
    session = world.projects.create_session(brought)
    world.projects.bind_session(session.id, "client-1", a.pod_id, brought.generation)
    fill(a.folder(project), "live")
    live = describe(a.folder(project))
    world.audit.reset()
    again = a.service.bring(T, "p")
    assert world.audit.log() == ["renew"]
    assert a.engine.kinds() == ["start"]
    assert again.status is S.RUNNING and again.generation == brought.generation
    assert world.projects.session(session.id).bound_connection_id == "client-1"
    assert describe(a.folder(project)) == live


def test_p47_p18_running_but_not_in_this_registry_runs_the_full_sequence(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    a.service.bring(T, "p")
    fill(a.folder(project), "x")
    # the same pod id with an empty registry (a holder that never brought it here, e.g. after claim-or-raise)
    same = Pod(world.store, world.objects, a.data_dir, "a", world.audit, identity=a.identity)
    assert project.id not in same.registry and world.get().status is S.RUNNING
    world.audit.reset()
    same.service.bring(T, "p")
    assert world.audit.log("claim", "renew", "status", "start") == [
        "renew",
        "status:RECOVERING",
        "start",
        "status:RUNNING",
    ]
    assert same.engine.kinds() == ["start"] and project.id in same.registry


def test_p47_p55_a_claim_without_bring_is_not_running_and_the_next_bring_is_complete(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    project = world.create()
    a.service.bring(T, "p")
    session = world.projects.create_session(project)
    world.projects.bind_session(session.id, "client-a", a.pod_id, world.get().generation)
    take_over(world, b)
    facade = OwnershipFacade(world.store, b.identity, lease_ttl=SHORT)
    world.audit.reset()
    owned = facade.claim_for_local_pod(T, "p")
    # P-55: owning is not running
    assert world.audit.log("claim", "status", "unbind", "start") == ["claim"]
    assert owned.status is S.RUNNING and project.id not in b.registry and b.engine.events == []
    assert not os.path.exists(b.folder(project))
    back_to_normal(b)
    world.audit.reset()
    b.service.bring(T, "p")
    assert world.audit.log("claim", "renew", "unbind", "status", "start") == [
        "renew",
        "unbind",
        "status:RECOVERING",
        "start",
        "status:RUNNING",
    ]
    assert project.id in b.registry and world.owner() == b.pod_id


def test_p49_reconnect_after_pod_death_rebinds_without_already_bound(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    brought = a.service.bring(T, "p")
    session = world.projects.create_session(project)
    world.projects.bind_session(session.id, "client-1", a.pod_id, brought.generation)
    b = world.pod("b")  # pod a dies without any cleanup
    take_over(world, b)
    b.service.bring(T, "p")
    generation = world.get().generation
    assert generation == brought.generation + 1
    rebound = world.projects.bind_session(session.id, "client-1-reconnect", b.pod_id, generation)
    assert (rebound.bound_connection_id, rebound.bound_pod_id) == ("client-1-reconnect", b.pod_id)


def test_p49_without_bring_the_stale_binding_would_refuse_the_reconnect(world: World) -> None:
    from tenure.projects import AlreadyBoundError

    a = world.pod("a")
    project = world.create()
    brought = a.service.bring(T, "p")
    session = world.projects.create_session(project)
    world.projects.bind_session(session.id, "client-1", a.pod_id, brought.generation)
    with pytest.raises(AlreadyBoundError):
        world.projects.bind_session(session.id, "client-2", "pod-b", brought.generation)


@pytest.mark.parametrize("start", NON_CLOSED, ids=lambda s: s.name)
def test_p10_bring_from_each_non_closed_status_ends_running_on_the_caller(world: World, start: ProjectStatus) -> None:
    a = world.pod("a")
    project = reach(world, a, start)
    assert project.status is start
    starts_before = a.engine.kinds().count("start")
    brought = a.service.bring(T, "p")
    assert brought.status is S.RUNNING and world.get().status is S.RUNNING and brought.error is None
    assert world.owner() == a.pod_id and project.id in a.registry
    if start is S.RUNNING:  # already running here: only the lease is renewed (P-46)
        assert a.engine.kinds().count("start") == starts_before
    else:
        assert a.engine.kinds().count("start") == starts_before + 1
        assert a.engine.events[-1][2] is S.RECOVERING
    assert os.path.isdir(a.folder(project))
    if start in (S.RUNNING, S.SUSPENDING, S.SUSPENDED):
        assert "README.md" in describe(a.folder(project))


@pytest.mark.parametrize("start", [S.RUNNING, S.SUSPENDING, S.RECOVERING], ids=lambda s: s.name)
def test_p10_p52_p70_bring_by_another_pod_after_the_holder_died(world: World, start: ProjectStatus) -> None:
    a = world.pod("a")
    project = reach(world, a, start)
    b = world.pod("b")
    take_over(world, b)
    brought = b.service.bring(T, "p")
    assert brought.status is S.RUNNING and world.owner() == b.pod_id and project.id in b.registry
    assert brought.generation == project.generation + 1
    # no checkpoint was taken on a: b starts on the last head (none here)
    assert describe(b.folder(project)) == {}


# --------------------------------------------------------------------------- P-133: engine start failure


def test_p133_engine_start_failure_leaves_recovering_and_the_next_bring_retries(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    a.engine.fail_start = True
    with pytest.raises(EngineFailedError) as info:
        a.service.bring(T, "p")
    assert info.value.code == "engine-failed"
    failed = world.get()
    assert failed.status is S.RECOVERING and "engine start failed" in (failed.error or "")
    assert project.id not in a.registry and world.owner() == a.pod_id
    a.engine.fail_start = False
    world.audit.reset()
    brought = a.service.bring(T, "p")
    # P-123: already RECOVERING, so step 2 is skipped (no self-loop)
    assert world.audit.log("status", "start") == ["start", "status:RUNNING"]
    assert brought.status is S.RUNNING and brought.error is None and project.id in a.registry
    assert a.engine.kinds() == ["start", "start"]


# --------------------------------------------------------------------------- suspend: P-11, P-57..P-63


def test_p38_suspend_returns_the_row_as_stored(world: World) -> None:
    a = world.pod("a")
    reach(world, a, S.RUNNING)
    assert a.service.suspend(T, "p") == world.get()


def test_p57_p58_suspend_runs_its_steps_in_order_and_leaves_no_folder(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    a.service.bring(T, "p")
    fill(a.folder(project), "v1")
    content = describe(a.folder(project))
    world.audit.reset()
    suspended = a.service.suspend(T, "p")
    assert world.audit.log("status", "stop", "head", "release") == [
        "status:SUSPENDING",
        "stop",
        "head",
        "status:SUSPENDED",
        "release",
    ]
    ((kind, event, status_seen, folder_existed),) = a.engine.events[1:]
    assert (kind, status_seen, folder_existed) == ("stop", S.SUSPENDING, True)
    assert event == EnginesStopRequested(T, "p") and a.engine.seen_folders[-1] == content
    assert suspended.status is S.SUSPENDED and world.get().status is S.SUSPENDED
    assert not os.path.exists(a.folder(project)) and project.id not in a.registry
    assert world.ownership.owner(project.id, TTL).pod_id is None
    head = world.store.snapshots.get(world.head())  # type: ignore[arg-type]
    assert head.state is SnapshotState.READY


@pytest.mark.parametrize("start", NON_CLOSED, ids=lambda s: s.name)
def test_p11_suspend_from_each_non_closed_status_ends_suspended(world: World, start: ProjectStatus) -> None:
    a = world.pod("a")
    project = reach(world, a, start)
    events_before = list(a.engine.kinds())
    world.audit.reset()
    suspended = a.service.suspend(T, "p")
    assert suspended.status is S.SUSPENDED and world.get().status is S.SUSPENDED
    assert not os.path.exists(a.folder(project)) and project.id not in a.registry
    new_events = a.engine.kinds()[len(events_before) :]
    log = world.audit.log("status", "claim", "head")
    if start is S.INIT:  # P-63: straight to SUSPENDED, no workspace work, no event
        assert new_events == [] and log == ["status:SUSPENDED"] and world.head() is None
    elif start is S.SUSPENDED:  # P-59: no-op
        assert new_events == [] and world.audit.log() == [] and suspended == project
    elif start is S.RECOVERING:  # P-69: complete the bring first, then suspend
        assert new_events == ["start", "stop"]
        assert log == ["status:RUNNING", "status:SUSPENDING", "head", "status:SUSPENDED"]
    elif start is S.SUSPENDING:  # P-60, P-71: restart from step 2, no SUSPENDING self-loop
        assert new_events == ["stop"] and log == ["head", "status:SUSPENDED"]
    else:
        assert new_events == ["stop"] and log == ["status:SUSPENDING", "head", "status:SUSPENDED"]


def test_p59_p61_suspend_twice_is_a_no_op_the_second_time(world: World) -> None:
    a = world.pod("a")
    reach(world, a, S.SUSPENDED)
    before = world.get()
    world.audit.reset()
    assert a.service.suspend(T, "p") == before
    assert world.audit.log() == [] and a.engine.kinds() == ["start", "stop"]


def test_p62_suspend_on_closed_raises_status_conflict_and_changes_nothing(world: World) -> None:
    a = world.pod("a")
    reach(world, a, S.RUNNING)
    a.service.close(T, "p")
    before = world.get()
    world.audit.reset()
    with pytest.raises(StatusConflictError) as info:
        a.service.suspend(T, "p")
    assert info.value.code == "status-conflict"
    assert world.get() == before and world.audit.log() == []


def test_suspend_while_another_live_pod_holds_is_rejected(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    project = reach(world, a, S.RUNNING)
    before = world.get()
    world.audit.reset()
    with pytest.raises(ClaimRejectedError) as info:
        b.service.suspend(T, "p")
    assert info.value.context["holder"] == a.pod_id
    assert world.get() == before and world.audit.log() == [] and b.engine.events == []
    assert os.path.isdir(a.folder(project))


def test_engine_stop_timeout_leaves_suspending_and_the_next_suspend_completes(world: World) -> None:
    a = world.pod("a", stop_timeout=0.2)
    project = reach(world, a, S.RUNNING)
    content = describe(a.folder(project))
    gate = threading.Event()
    a.engine.stop_gate = gate
    began = time.monotonic()
    with pytest.raises(EngineFailedError) as info:
        a.service.suspend(T, "p")
    assert time.monotonic() - began < 5
    assert "stays SUSPENDING" in info.value.message
    stuck = world.get()
    assert stuck.status is S.SUSPENDING and "timed out" in (stuck.error or "")
    # no checkpoint while an engine may still be writing
    assert world.head() is None and describe(a.folder(project)) == content
    gate.set()
    a.engine.stop_gate = None
    done = a.service.suspend(T, "p")
    assert done.status is S.SUSPENDED and done.error is None
    assert a.engine.kinds() == ["start", "stop", "stop"]
    restored = os.path.join(world.root, "check")
    a.service.workspaces.restore(project.workspace_id, restored)
    assert describe(restored) == content


# --------------------------------------------------------------------------- close: P-12, P-64..P-67, P-120, P-13


@pytest.mark.parametrize("start", NON_CLOSED, ids=lambda s: s.name)
def test_p12_p65_close_from_each_non_closed_status_without_a_stop_event(world: World, start: ProjectStatus) -> None:
    a = world.pod("a")
    project = reach(world, a, start)
    events_before = list(a.engine.kinds())
    closed = a.service.close(T, "p", "archive")
    assert closed.status is S.CLOSED and closed.project_group == "archive" and closed == world.get()
    assert a.engine.kinds() == events_before
    assert not os.path.exists(a.folder(project)) and project.id not in a.registry
    assert world.store.workspaces.workspace(project.workspace_id).state is WorkspaceState.DELETED
    assert all(
        s.state in (SnapshotState.DELETING, SnapshotState.FAILED)
        for s in world.store.snapshots.list(project.workspace_id)
    )


def test_p64_close_fences_then_disposes_then_closes(world: World) -> None:
    a = world.pod("a")
    reach(world, a, S.SUSPENDED)
    a.service.bring(T, "p")
    world.audit.reset()
    a.service.close(T, "p")
    log = [w for w in world.audit.log("generation", "ws", "snap", "status", "stop")]
    assert log[0] == "generation" and log[-1] == "status:CLOSED"
    assert "ws:DELETED" in log and "snap:DELETING" in log and "stop" not in log
    assert log.index("ws:DELETED") < log.index("status:CLOSED")
    assert log.index("snap:DELETING") < log.index("status:CLOSED")


def test_p66_close_on_running_does_not_stop_engines_and_their_folder_is_gone(world: World) -> None:
    a = world.pod("a")
    project = reach(world, a, S.RUNNING)
    folder = a.folder(project)
    a.service.close(T, "p")
    assert "stop" not in a.engine.kinds()
    with pytest.raises(FileNotFoundError):  # an engine's next workspace access fails
        with open(os.path.join(folder, "src", "more.py"), "wb") as fh:
            fh.write(b"x")


def test_p120_close_on_a_closed_project_is_a_no_op(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    reach(world, a, S.RUNNING)
    closed = a.service.close(T, "p", "archive")
    world.audit.reset()
    assert a.service.close(T, "p", "other") == closed
    assert b.service.close(T, "p") == closed
    assert world.audit.log() == [] and world.get().project_group == "archive"


def test_p13_nothing_leaves_closed(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    reach(world, a, S.SUSPENDED)
    a.service.close(T, "p")
    before = world.get()
    world.audit.reset()
    for pod in (a, b):
        with pytest.raises(ProjectClosedError) as info:
            pod.service.bring(T, "p")
        assert info.value.code == "project-closed"
        with pytest.raises(StatusConflictError):
            pod.service.suspend(T, "p")
        with pytest.raises(ProjectClosedError):
            world.ownership.claim(T, "p", pod.pod_id, pod.name, None, TTL)
        with pytest.raises(ProjectClosedError):
            OwnershipFacade(world.store, pod.identity).claim_for_local_pod(T, "p")
    assert world.get() == before and world.audit.log() == []
    assert a.engine.kinds() == ["start", "stop"] and b.engine.events == []


def test_p67_p118_close_of_a_system_project_is_refused_before_anything_happens(world: World) -> None:
    a = world.pod("a")
    project = world.create("hub", kind=Kind.SYSTEM)
    a.service.bring(T, "hub")
    fill(a.folder(project), "hub")
    content = describe(a.folder(project))
    before = world.get("hub")
    world.audit.reset()
    with pytest.raises(SystemProjectError) as info:
        a.service.close(T, "hub")
    assert info.value.code == "system-project"
    assert world.get("hub") == before and world.audit.log() == []
    assert describe(a.folder(project)) == content and project.id in a.registry
    assert world.store.workspaces.workspace(project.workspace_id).state is not WorkspaceState.DELETED


# --------------------------------------------------------------------------- migration: P-02, P-43, P-58


def test_p02_p43_p58_workspace_survives_suspend_and_bring_on_another_pod(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    assert a.data_dir != b.data_dir and a.pod_id != b.pod_id
    project = world.create()
    sessions = [world.projects.create_session(project) for _ in range(2)]
    a.service.bring(T, "p")
    fill(a.folder(project), "migrate")
    on_a = describe(a.folder(project))
    a.service.suspend(T, "p")
    assert not os.path.exists(a.folder(project))
    b.service.bring(T, "p")
    assert describe(b.folder(project)) == on_a
    assert {s.id for s in world.projects.sessions(project)} == {s.id for s in sessions}
    # and back again, after a change on b
    write(b.folder(project), "src/main.py", b"changed on b\n")
    on_b = describe(b.folder(project))
    b.service.suspend(T, "p")
    a.service.bring(T, "p")
    assert describe(a.folder(project)) == on_b


def test_p02_after_losing_the_lease_the_new_pod_gets_the_last_checkpoint(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    a.service.bring(T, "p")
    fill(a.folder(project), "v1")
    checkpointed = describe(a.folder(project))
    a.service.suspend(T, "p")
    a.service.bring(T, "p")
    write(a.folder(project), "uncommitted.txt", b"only on a")
    b = world.pod("b")  # a stops renewing (dies); its folder stays on its host
    take_over(world, b)
    b.service.bring(T, "p")
    assert describe(b.folder(project)) == checkpointed
    assert os.path.exists(os.path.join(a.folder(project), "uncommitted.txt"))


# --------------------------------------------------------------------------- workspace init adopts, never overwrites


def running_again_after_a_checkpoint(world: World) -> tuple[Pod, Project]:
    """Pod a holding p RUNNING again after a suspend whose final checkpoint holds the sample folder v1."""
    a = world.pod("a")
    project = world.create()
    a.service.bring(T, "p")
    fill(a.folder(project), "v1")
    a.service.suspend(T, "p")
    a.service.bring(T, "p")
    return a, project


def test_workspace_init_keeps_a_folder_whose_base_is_the_head_with_its_uncommitted_change(world: World) -> None:
    a, project = running_again_after_a_checkpoint(world)
    write(a.folder(project), "src/uncommitted.py", b"work in progress\n")
    local = describe(a.folder(project))
    restarted = a.restarted()  # crash: same host and folder, new pod id, empty registry
    take_over(world, restarted)
    restarted.service.bring(T, "p")
    assert describe(restarted.folder(project)) == local
    assert not os.path.exists(os.path.join(a.data_dir, "preserved"))
    assert restarted.engine.seen_folders == [local]


def test_workspace_init_moves_an_older_folder_to_preserved_and_restores_the_head(world: World) -> None:
    a, project = running_again_after_a_checkpoint(world)
    write(a.folder(project), "src/uncommitted.py", b"a's work in progress\n")
    stale_local = describe(a.folder(project))
    b = world.pod("b")  # a dies; b takes over, changes, checkpoints: the head moves on
    take_over(world, b)
    b.service.bring(T, "p")
    write(b.folder(project), "src/main.py", b"b's version\n")
    head_content = describe(b.folder(project))
    b.service.suspend(T, "p")
    restarted = a.restarted()
    restarted.service.bring(T, "p")
    assert describe(restarted.folder(project)) == head_content
    preserved_root = os.path.join(a.data_dir, "preserved")
    kept = os.listdir(preserved_root)
    assert len(kept) == 1
    assert describe(os.path.join(preserved_root, kept[0])) == stale_local


def test_two_preservations_within_one_second_both_survive(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    project = world.create()
    a.service.bring(T, "p")
    write(a.folder(project), "f.txt", b"v0")
    a.service.suspend(T, "p")
    host = a
    host.service.bring(T, "p")
    seconds: list[int] = []
    for round_ in range(8):
        # the host writes, then dies; b takes over and moves the head on; the restarted host brings again,
        # finds its folder based on an older head and must preserve it
        write(host.folder(project), "local.txt", f"uncommitted {round_}".encode())
        host = host.restarted()
        take_over(world, b)
        b.service.bring(T, "p")
        write(b.folder(project), "f.txt", f"v{round_ + 1}".encode())
        b.service.suspend(T, "p")
        seconds.append(int(time.time()))
        host.service.bring(T, "p")
        if len(seconds) >= 2 and seconds[-1] == seconds[-2]:
            break
    else:
        pytest.skip("no two preservations fell into one second")
    kept = os.listdir(os.path.join(a.data_dir, "preserved"))
    assert len(kept) == len(seconds)


# --------------------------------------------------------------------------- façade: P-53, P-54, P-55, P-114


def test_p53_claim_for_local_pod_raises_claim_rejected_naming_the_holder(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    world.create()
    owned = OwnershipFacade(world.store, a.identity).claim_for_local_pod(T, "p")
    assert owned.status is S.INIT and world.owner() == a.pod_id
    with pytest.raises(ClaimRejectedError) as info:
        OwnershipFacade(world.store, b.identity).claim_for_local_pod(T, "p")
    assert info.value.context["holder"] == a.pod_id and info.value.context["node"] == "a"
    assert info.value.retryable


def test_p54_claim_or_redirect_points_at_a_live_holder_or_says_when_to_retry(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    world.create()
    pods = PodRegistry(world.store)
    pods.register(a.identity)
    assert OwnershipFacade(world.store, a.identity).claim_or_redirect(T, "p").project is not None
    answer = OwnershipFacade(world.store, b.identity).claim_or_redirect(T, "p")
    assert answer.project is None and answer.redirect == "http://a:8470"
    # the holder stops heartbeating: its lease is still valid but it is not live (two clocks, P-25/P-26)
    world.wait_past(0.6)
    dead = OwnershipFacade(world.store, b.identity, liveness_ttl=0.5).claim_or_redirect(T, "p")
    assert dead.project is None and dead.redirect is None
    assert dead.retry_after is not None and 0 < dead.retry_after <= TTL
    assert pods.heartbeat(a.pod_id)
    again = OwnershipFacade(world.store, b.identity, liveness_ttl=0.5).claim_or_redirect(T, "p")
    assert again.redirect == "http://a:8470"


# --------------------------------------------------------------------------- drift and closed projects


def test_p35_p99_a_closed_project_does_not_hide_drift(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    for name in ("p1", "p2", "p3"):
        world.create(name)
        a.service.bring(T, name)
    assert world.ownership.renew_leases(a.pod_id) is not None  # a beats: its losses are counted from now on
    a.service.close(T, "p3")
    take_over(world, b)
    b.service.bring(T, "p1")  # a loses p1
    renewal = world.ownership.renew_leases(a.pod_id)
    assert renewal is not None and renewal.lost >= 1, "the takeover and the close moved a's lost counter"
    held = {p.id for p in world.ownership.find_by_home_pod_id(a.pod_id)}
    assert len(held) < len(a.registry.ids()), "a holds fewer projects than its registry runs: drift"


# --------------------------------------------------------------------------- hardening: lost leases, damaged heads


def test_bring_on_a_pod_whose_own_lease_ran_out_but_was_not_taken_over_starts_no_second_engine(world: World) -> None:
    a = world.pod("a")
    world.create()
    brought = a.service.bring(T, "p")
    take_over(world, a)  # a's own lease counts as expired now; nobody else claimed it
    world.audit.reset()
    again = a.service.bring(T, "p")
    assert a.engine.kinds() == ["start"], "the engines already running here were started a second time"
    assert world.audit.log("claim", "renew", "unbind", "status", "start") == ["renew"]
    assert again.status is S.RUNNING and again.generation == brought.generation


def test_bring_after_the_lease_moved_on_stops_the_stale_engines_before_starting_again(world: World) -> None:
    a, b = world.pod("a"), world.pod("b")
    project = world.create()
    a.service.bring(T, "p")
    take_over(world, b)
    OwnershipFacade(world.store, b.identity, lease_ttl=SHORT).claim_for_local_pod(T, "p")  # b owns, a still runs
    b.service.ownership.release_lease(T, "p", b.pod_id)
    a.engine.events.clear()
    a.service.bring(T, "p")
    assert a.engine.kinds() == ["stop", "start"]
    assert project.id in a.registry and world.owner() == a.pod_id


def test_suspend_without_a_live_writer_lease_keeps_the_folder_and_raises(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    brought = a.service.bring(T, "p")
    fill(a.folder(project), "unsaved")
    content = describe(a.folder(project))
    lease = world.store.workspaces.lease(project.workspace_id, brought.generation)
    assert lease is not None
    world.store.workspaces.release(lease)  # the writer lease ended while the project stayed RUNNING here
    with pytest.raises(LeaseLostError):
        a.service.suspend(T, "p")
    assert describe(a.folder(project)) == content, "uncommitted data was discarded without a checkpoint"
    assert world.get().status is S.SUSPENDING


def test_bring_with_a_degraded_head_records_the_error_and_offers_the_newest_ready_snapshot(world: World) -> None:
    a = world.pod("a")
    project = world.create()
    a.service.bring(T, "p")
    write(a.folder(project), "old.txt", b"first version\n")
    a.service.suspend(T, "p")
    older = world.head()
    a.service.bring(T, "p")
    write(a.folder(project), "new.txt", b"only in the newer head " * 64)
    older_content = {k: v for k, v in describe(a.folder(project)).items() if k != "new.txt"}
    a.service.suspend(T, "p")
    head = world.head()
    assert head is not None and older is not None and head != older
    lost = damage_unique_objects(world, head, older)
    assert lost, "the newer head must own at least one object the older snapshot lacks"
    report = a.service.workspaces.verify(head)
    assert report.snapshot.state is SnapshotState.DEGRADED
    with pytest.raises(IntegrityError) as raised:
        a.service.bring(T, "p")
    assert raised.value.context["newest_ready"] == older
    recorded = world.get()
    assert recorded.status is S.RECOVERING and recorded.error and older in recorded.error
    assert f"--from-snapshot {older}" in raised.value.hint
    brought = a.service.bring(T, "p", from_snapshot=older)
    assert brought.status is S.RUNNING
    assert describe(a.folder(project)) == older_content


def test_bring_from_a_snapshot_refuses_one_that_is_not_ready_or_of_another_workspace(world: World) -> None:
    a = world.pod("a")
    world.create("p")
    other = world.create("q")
    a.service.bring(T, "q")
    write(a.folder(other), "q.txt", b"q\n")
    a.service.suspend(T, "q")
    foreign = world.head("q")
    assert foreign is not None
    with pytest.raises(InvalidInputError) as raised:
        a.service.bring(T, "p", from_snapshot=foreign)
    assert raised.value.code == "foreign-snapshot"


def damage_unique_objects(world: World, head: str, older: str) -> list[str]:
    """Delete from the object store every object the head reaches that ``older`` does not."""
    from tenure.snapshots import tree_closure

    objects = world.objects
    head_root = world.store.snapshots.get(head).root_oid
    older_root = world.store.snapshots.get(older).root_oid
    assert head_root and older_root
    unique = sorted(tree_closure(head_root, objects) - tree_closure(older_root, objects) - {head_root})
    objects.delete_many(unique)
    return unique


# --------------------------------------------------------------------------- bring of an EXPIRING workspace


def test_bring_of_a_suspended_project_whose_workspace_is_expiring_undoes_the_expiry(world: World) -> None:
    """A bring is a use: the EXPIRING workspace goes back to IDLE, then MOUNTED, and the head comes back whole."""
    from tenure.workspaces.expiry import expire_idle

    a = world.pod("a")
    project = reach(world, a, S.SUSPENDED)
    ws = world.store.workspaces.workspace(project.workspace_id)
    world.wait_past(0.05)
    assert ws.name in expire_idle(world.store, 0.01, 3600.0).expired
    assert world.store.workspaces.workspace(ws.id).state is WorkspaceState.EXPIRING
    b = world.pod("b")
    brought = b.service.bring(T, "p")
    assert brought.status is S.RUNNING
    after = world.store.workspaces.workspace(ws.id)
    assert (after.state, after.expiring_since) == (WorkspaceState.MOUNTED, None)
    reference = os.path.join(world.root, "reference")
    fill(reference, "p")

    def kinds_and_contents(folder: str) -> dict[str, Any]:
        return {path: (entry[0], entry[-1]) for path, entry in describe(folder).items()}

    assert kinds_and_contents(b.folder(brought)) == kinds_and_contents(reference), "the head is back whole"


def test_bring_past_the_expiry_grace_is_refused_with_a_code_and_changes_nothing(world: World) -> None:
    from tenure.errors import TenureError
    from tenure.workspaces.expiry import expire_idle

    a = world.pod("a")
    project = reach(world, a, S.SUSPENDED)
    world.wait_past(0.05)
    assert expire_idle(world.store, 0.01, 3600.0).expired
    b = world.pod("b")
    b.config.expiry_grace = 0.0
    world.wait_past(0.01)
    with pytest.raises(TenureError) as refused:
        b.service.bring(T, "p")
    assert refused.value.code == "expiry-grace-over"
    after = world.get("p")
    assert (after.status, after.generation) == (S.SUSPENDED, project.generation)
    assert world.store.workspaces.workspace(project.workspace_id).state is WorkspaceState.EXPIRING
