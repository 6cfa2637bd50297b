"""Nothing a paused or cut-off pod holds can block a takeover; every PostgreSQL connection has limits (ADR 0045).

A pod stopped between its renewal and its COMMIT (SIGSTOP, a paused VM, a
partition) keeps its transaction open. The claim of one of its projects
must not wait on anything that transaction holds: the former holder's loss
is a row of its own (``pod_losses``), never its ``pods`` row. Each race is
two connections interleaved at a named point — right after a named
statement of the real renewal, or each statement of the beat left open by
hand; whether the claim waited on a lock is read from
``pg_stat_activity``, never guessed with a sleep.

What a pod can still hold up — a row of its project it was writing when it
stopped — is bounded: the claim gives up at ``lock_timeout``
(``store-unavailable``, retryable) and the server ends the stopped pod's
transaction at ``idle_in_transaction_session_timeout``. A peer that stops
answering fails a call within the configured limits instead of hanging
(``tests/support/pgproxy.py``), and the pool recovers by itself.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from tenure.defaults import LEASE_TTL_S
from tenure.errors import ConfigurationError, StoreError
from tenure.objects.postgres import SCHEMA as OBJECTS
from tenure.projects import LifecycleType, Ownership, ProjectStore
from tenure.projects.ownership import Renewal
from tenure.projects.pods import PodIdentity, PodRegistry
from tenure.states import PodState, ProjectStatus
from tenure.store import Store
from tenure.store.postgres import HELD_OPEN, LONG_RUNNING, UNREACHABLE_CHECKOUT_S, PgSettings, PostgresConnector
from tenure.store.queries import STORE, load, state_params
from tests.support.pgproxy import FAST, StallingProxy
from tests.support.projects import TTL, T
from tests.support.store import wait_past

#: the lease TTL of the takeovers here: the holder's lease has run out once this much store time passed
S_TTL = 0.2
#: "promptly": a claim that does not wait on anyone takes milliseconds
PROMPT_S = 0.5

#: the paused pod's connections: ordinary limits, so its open transaction outlives the race
HOLDER = PgSettings(statement_timeout=5.0, lock_timeout=2.0, idle_in_transaction_timeout=10.0, tcp_user_timeout=2.0)
#: the claimant's: a claim that waits gives up after 2 s instead of hanging (the race sees it wait long before)
TAKER = PgSettings(statement_timeout=5.0, lock_timeout=2.0, idle_in_transaction_timeout=10.0, tcp_user_timeout=2.0)


class Paused(Exception):
    """The paused pod never commits: its transaction ends in a rollback."""


# ---------------------------------------------------------------------- stores, pods, waiting


def with_app_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["application_name"] = name
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


@contextmanager
def opened(url: str, settings: PgSettings, *, migrate: bool = True, **kwargs: Any) -> Iterator[Store]:
    store = Store(PostgresConnector(url, settings=settings, **kwargs), auto_migrate=migrate)
    try:
        yield store
    finally:
        store.close()


def beating(store: Store) -> str:
    """A registered pod that has beaten once: its claims are bound to its pod lease."""
    identity = PodIdentity.fresh("n")
    PodRegistry(store).register(identity)
    assert Ownership(store).renew_leases(identity.pod_id) == Renewal(lost=0, status="RUNNING")
    return identity.pod_id


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    took: float = 0.0

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class Taker:
    """Pod B: a store of its own on the same database, its connections tagged so their waits can be seen."""

    def __init__(self, url: str, settings: PgSettings = TAKER) -> None:
        self.url = url
        self.name = f"tenure-taker-{uuid.uuid4().hex[:8]}"
        self.store = Store(PostgresConnector(with_app_name(url, self.name), settings=settings), auto_migrate=False)
        self.pod = beating(self.store)
        self.thread: threading.Thread | None = None
        self.outcome = Outcome()

    def claim(self, name: str = "p") -> Callable[[], Any]:
        return lambda: Ownership(self.store).claim(T, name, self.pod, "node-b", None, S_TTL)

    def start(self, call: Callable[[], Any]) -> str:
        """Run ``call`` on a thread of its own; return once it finished ("done") or waits on a lock
        ("blocked"), as ``pg_stat_activity`` says."""

        self.outcome = Outcome()

        def run() -> None:
            started = time.monotonic()
            try:
                self.outcome.value = call()
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                self.outcome.error = exc
            self.outcome.took = time.monotonic() - started

        self.thread = threading.Thread(target=run, name="taker")
        self.thread.start()
        deadline = time.monotonic() + 20
        with psycopg.connect(self.url, autocommit=True) as admin:
            while time.monotonic() < deadline:
                if not self.thread.is_alive():
                    return "done"
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                    (self.name,),
                ).fetchone()
                if row and row[0]:
                    return "blocked"
                self.thread.join(0.005)
        raise AssertionError("the claim neither finished nor waited on a lock")

    def join(self, timeout: float = 30) -> Outcome:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the claim never finished"
        return self.outcome

    def close(self) -> None:
        self.store.close()


@contextmanager
def taker(url: str, settings: PgSettings = TAKER) -> Iterator[Taker]:
    t = Taker(url, settings)
    try:
        yield t
    finally:
        t.close()


def holder_with_a_project(store: Store) -> tuple[str, Any]:
    """Pod A, beating, holding PERMANENT project p (pod-bound), its pod lease older than S_TTL by now."""
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    a = beating(store)
    project = Ownership(store).claim(T, "p", a, "node-a", None, TTL)
    assert project is not None
    wait_past(store, S_TTL)  # a stops beating (it is paused): its lease runs out under S_TTL
    return a, project


def assert_taken_and_lost(store: Store, a: str, b: str, project: Any, taken: Outcome, lost_before: int) -> None:
    """B holds p at the next generation; A's next beat finds its lost counter moved, and p no longer A's."""
    claimed = taken.get()
    assert claimed is not None and claimed.generation == project.generation + 1
    own = Ownership(store)
    assert own.owner(project.id, TTL).pod_id == b
    beat = own.renew_leases(a)
    assert beat is not None and beat.lost == lost_before + 1, "A's next beat must learn it lost p"
    assert own.find_by_home_pod_id(a) == []
    again = own.renew_leases(a)
    assert again is not None and again.lost == lost_before + 1, "counted once"


def call_within(call: Callable[[], Any], limit: float) -> Outcome:
    """``call()`` on a thread; the test fails (instead of hanging) if it has not returned within ``limit``."""
    outcome = Outcome()

    def run() -> None:
        started = time.monotonic()
        try:
            outcome.value = call()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            outcome.error = exc
        outcome.took = time.monotonic() - started

    thread = threading.Thread(target=run, name="call-within", daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"the call still hangs after {limit:g} s"
    return outcome


def until(check: Callable[[], bool], limit: float = 30.0) -> None:
    """Wait for ``check()`` to hold (polling the store's answer, not a synchronization)."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def answers(store: Store) -> bool:
    try:
        return bool(store.identity())
    except StoreError:
        return False


def show(conn: Any, name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


# ---------------------------------------------------------------------- a claim never waits on the paused pod


class _Interleaved:
    """A transaction of the store under test that runs ``action`` once, right after the statement ``name``."""

    def __init__(self, tx: Any, name: str, action: Callable[[], None], fired: list[str]) -> None:
        self._tx, self._name, self._action, self._fired = tx, name, action, fired

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._tx, attr)

    def _after(self, query: str) -> None:
        if query == self._name and not self._fired:
            self._fired.append(query)
            self._action()

    def execute(self, query: str, params: Any = None) -> Any:
        rows = self._tx.execute(query, params)
        self._after(query)
        return rows

    def one(self, query: str, params: Any = None) -> Any:
        row = self._tx.one(query, params)
        self._after(query)
        return row

    def count(self, query: str, params: Any = None) -> int:
        n = self._tx.count(query, params)
        self._after(query)
        return int(n)


@contextmanager
def after_statement(store: Store, name: str, action: Callable[[], None]) -> Iterator[None]:
    """While the block runs, the store's transactions call ``action`` (once) right after they run the
    named statement ``name``, inside the open transaction: the point where the pod is paused."""
    db = store.db
    real = db.transaction
    fired: list[str] = []

    @contextmanager
    def transaction(*, write: bool = True) -> Iterator[Any]:
        with real(write=write) as tx:
            yield _Interleaved(tx, name, action, fired)

    db.transaction = transaction  # type: ignore[method-assign]
    try:
        yield
    finally:
        del db.transaction  # type: ignore[attr-defined]  # the class's method again
    assert fired == [name], f"statement {name!r} never ran"


@pytest.mark.postgres
@pytest.mark.parametrize("end", ["commit", "rollback"])
@pytest.mark.parametrize("point", ["pod_renew_lease", "projects_bind_to_pod"])
def test_a_claim_never_waits_for_the_renewal_a_paused_pod_left_open(pg_url: str, point: str, end: str) -> None:
    """Pod A stops right after its renewal statement (or after binding, just before COMMIT); pod B claims
    A's expired project meanwhile. The claim completes at once; A, once it commits or rolls back and beats
    again, finds its lost counter moved."""
    with opened(pg_url, HOLDER) as store, taker(pg_url) as b:
        a, project = holder_with_a_project(store)
        own = Ownership(store)
        seen: list[str] = []

        def paused_here() -> None:
            seen.append(b.start(b.claim()))
            if end == "rollback":
                raise Paused

        with after_statement(store, point, paused_here):
            if end == "commit":
                held = own.renew_leases(a)
                assert held == Renewal(lost=0, status="RUNNING"), "its renewal ran before the takeover"
            else:
                with pytest.raises(Paused):
                    own.renew_leases(a)
        taken = b.join()
        assert seen == ["done"], "the claim waited on the paused pod's open renewal"
        assert taken.took < PROMPT_S, f"the claim took {taken.took:.3f} s"
        assert_taken_and_lost(store, a, b.pod, project, taken, lost_before=0)


#: every statement of a beat (PodRegistry.heartbeat, then Ownership.renew_leases), with its parameters
BEAT: dict[str, Callable[[str], dict[str, Any]]] = {
    "pod_heartbeat": lambda a: {
        "id": a,
        "score": 1.0,
        "running": 1,
        "refusing": None,
        **state_params(PodState.STOPPED),
    },
    "pod_renew_lease": lambda a: {"pod": a, **state_params(PodState.RUNNING, PodState.STOPPED)},
    "pod_losses_clear": lambda a: {"pod": a},
    "projects_bind_to_pod": lambda a: {"pod": a, **state_params(ProjectStatus.CLOSED)},
}


@pytest.mark.postgres
@pytest.mark.parametrize("end", ["commit", "rollback"])
@pytest.mark.parametrize("statement", list(BEAT))
def test_each_statement_of_the_beat_left_open_holds_no_claim_back(pg_url: str, statement: str, end: str) -> None:
    """Each statement of the beat in turn, run by pod A in a transaction it leaves open."""
    with opened(pg_url, HOLDER) as store, taker(pg_url) as b:
        a, project = holder_with_a_project(store)
        with pytest.raises(Paused) if end == "rollback" else _nothing():
            with store.db.transaction() as tx:
                tx.execute(statement, BEAT[statement](a))
                how = b.start(b.claim())
                if end == "rollback":
                    raise Paused
        taken = b.join()
        assert how == "done", f"the claim waited on the pod's open {statement}"
        assert taken.took < PROMPT_S, f"the claim took {taken.took:.3f} s"
        assert_taken_and_lost(store, a, b.pod, project, taken, lost_before=0)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@pytest.mark.postgres
def test_a_pod_paused_inside_its_whole_beat_holds_no_claim_of_any_of_its_projects_back(pg_url: str) -> None:
    """The whole beat in one open transaction, and a claim of each of A's projects from another pod."""
    with opened(pg_url, HOLDER) as store, taker(pg_url) as b:
        ps, own = ProjectStore(store), Ownership(store)
        a = beating(store)
        names = [f"p{i}" for i in range(4)]
        for name in names:
            ps.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
            assert own.claim(T, name, a, "node-a", None, TTL) is not None
        wait_past(store, S_TTL)
        hows = []
        with store.db.transaction() as tx:
            for statement, params in BEAT.items():
                tx.execute(statement, params(a))
            for name in names:
                hows.append(b.start(b.claim(name)))
                assert b.join().get() is not None
                assert b.outcome.took < PROMPT_S
        assert hows == ["done"] * len(names)
        beat = own.renew_leases(a)
        assert beat is not None and beat.lost == len(names), "every loss counted, once"
        assert own.find_by_home_pod_id(a) == []


# ---------------------------------------------------------------------- what a paused pod can still hold is bounded


@pytest.mark.postgres
def test_a_claim_behind_a_lock_past_lock_timeout_is_store_unavailable_not_a_hang(pg_url: str) -> None:
    """A pod stopped in the middle of a write of its project's own row: the claim gives up at lock_timeout."""
    fast_taker = PgSettings(lock_timeout=0.3, statement_timeout=5.0, tcp_user_timeout=2.0)
    with opened(pg_url, HOLDER) as store, taker(pg_url, fast_taker) as b:
        holder_with_a_project(store)
        with store.db.transaction() as tx:
            tx.execute("project_holder_for_update", {"t": T, "n": "p"})
            taken = call_within(b.claim(), 10)
        assert isinstance(taken.error, StoreError), taken
        assert taken.error.code == "store-unavailable" and taken.error.retryable
        assert "lock_timeout" in str(taken.error)
        assert 0.25 < taken.took < 1.5, taken.took


@pytest.mark.postgres
def test_the_server_ends_a_paused_pods_open_transaction_and_the_claim_then_goes_through(pg_url: str) -> None:
    """idle_in_transaction_session_timeout: the stopped pod's transaction ends, its locks with it; the pod,
    when it resumes, gets store-unavailable (retryable) and its connector works again."""
    paused_holder = PgSettings(idle_in_transaction_timeout=0.5, statement_timeout=5.0, tcp_user_timeout=2.0)
    with opened(pg_url, paused_holder) as store, taker(pg_url) as b:
        a, project = holder_with_a_project(store)
        with pytest.raises(StoreError) as resumed:
            with store.db.transaction() as tx:
                tx.execute("project_holder_for_update", {"t": T, "n": "p"})
                taken = call_within(b.claim(), 10)  # A is stopped here, idle in its transaction
                tx.execute("project_status_and_type", {"t": T, "n": "p"})  # A resumes
        assert resumed.value.retryable
        assert taken.get() is not None and 0.4 < taken.took < 2.0, taken.took
        assert answers(store), "the connector works again"
        assert Ownership(store).owner(project.id, TTL).pod_id == b.pod


@pytest.mark.postgres
def test_a_statement_past_statement_timeout_is_store_unavailable(pg_url: str) -> None:
    with opened(pg_url, FAST) as store:
        with pytest.raises(StoreError) as caught:
            with store.db.sql_transaction() as tx:
                started = time.monotonic()
                tx.execute_sql("SELECT pg_sleep(5)")
        assert caught.value.code == "store-unavailable" and caught.value.retryable
        assert time.monotonic() - started < 1.5
        assert answers(store)


# ---------------------------------------------------------------------- a peer that stops answering


@pytest.mark.postgres
def test_a_peer_that_stops_answering_fails_a_call_within_the_limits_and_the_pool_recovers(pg_url: str) -> None:
    """Stalled while the pooled connection is idle: BEGIN gets no answer within tcp_user_timeout, the
    connection is dropped and the transaction begun again on a fresh one, which cannot connect within
    connect_timeout either: store-unavailable, not a hang. Once the peer answers again, so does the store."""
    # BEGIN's answer, the fresh connection's attempt, up to two checkout slices until the failed attempt
    # is seen, and slack
    bound = FAST.tcp_user_timeout + FAST.connect_timeout + 2 * UNREACHABLE_CHECKOUT_S + 1.5
    with StallingProxy.before(pg_url) as proxy, opened(proxy.url(pg_url), FAST, max_size=2) as store:
        assert answers(store)
        proxy.stall()
        failed = call_within(store.identity, 30)
        assert isinstance(failed.error, StoreError), failed
        assert failed.error.code == "store-unavailable" and failed.error.retryable
        assert failed.took < bound, failed.took
        proxy.resume()
        until(lambda: answers(store))
        with opened(proxy.url(pg_url), FAST, migrate=False) as other:
            assert answers(other)


@pytest.mark.postgres
def test_a_peer_that_stops_answering_mid_transaction_fails_the_statement_within_its_deadline(pg_url: str) -> None:
    """Stalled between two statements of a transaction: the second gets no answer within statement_timeout
    + tcp_user_timeout, its connection is dropped, and the caller gets store-unavailable."""
    bound = FAST.statement_timeout + FAST.tcp_user_timeout + 1.0
    with StallingProxy.before(pg_url) as proxy, opened(proxy.url(pg_url), FAST, max_size=2) as store:
        assert answers(store)
        marks: dict[str, float] = {}

        def transaction() -> None:
            with store.db.transaction() as tx:
                assert tx.one("store_identity") is not None
                proxy.stall()
                marks["stalled"] = time.monotonic()
                tx.one("store_identity")

        failed = call_within(transaction, 30)
        assert isinstance(failed.error, StoreError), failed
        assert failed.error.code == "store-unavailable" and failed.error.retryable
        assert "no answer" in str(failed.error)
        assert time.monotonic() - marks["stalled"] < bound + 0.5
        proxy.resume()
        until(lambda: answers(store))


@pytest.mark.postgres
def test_a_pooled_connection_the_server_ended_is_replaced_and_the_transaction_begun_again(pg_url: str) -> None:
    """The server ends the pool's idle connections (a restart, a failover, a proxy that dropped them): the
    next transaction finds its connection dead at BEGIN and begins again on a fresh one; a read-only one
    whose first statement finds it dead runs that statement again; a write transaction is not retried."""
    name = f"tenure-pool-{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(pg_url, autocommit=True)

    def end(pids: list[int]) -> None:
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        until(lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchall())

    def pool_backends() -> list[int]:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchall()
        return [int(r[0]) for r in rows]

    try:
        with opened(with_app_name(pg_url, name), FAST, max_size=3) as store:
            assert answers(store)
            end(pool_backends())
            assert store.identity(), "a read after the server ended every pooled connection"
            end(pool_backends())
            assert ProjectStore(store).create(T, "q").name == "q", "a write after the same"

            with store.db.transaction(write=False) as tx:
                end([tx.conn.info.backend_pid])  # type: ignore[attr-defined]
                assert tx.one("store_identity") is not None, "a read-only transaction's first statement, again"

            with pytest.raises(StoreError) as caught:
                with store.db.transaction() as tx:
                    end([tx.conn.info.backend_pid])  # type: ignore[attr-defined]
                    tx.execute("store_identity")
            assert caught.value.retryable, "a write transaction is not run again: retryable for its caller"
            assert answers(store)
    finally:
        admin.close()


# ---------------------------------------------------------------------- the limits are applied


@pytest.mark.postgres
def test_every_pooled_connection_carries_the_configured_limits(pg_url: str) -> None:
    with opened(pg_url, FAST, max_size=2) as store:
        db = store.db
        assert isinstance(db, PostgresConnector)
        conn = db.pool.getconn()
        try:
            assert show(conn, "statement_timeout") == "500ms"
            assert show(conn, "lock_timeout") == "300ms"
            assert show(conn, "idle_in_transaction_session_timeout") == "500ms"
            assert show(conn, "tcp_keepalives_idle") == "1"
            assert show(conn, "tcp_keepalives_interval") == "1"
            assert show(conn, "tcp_keepalives_count") == "2"
            assert show(conn, "tcp_user_timeout") == "500"  # milliseconds, shown without a unit
            params = conn.info.get_parameters()
            assert params["connect_timeout"] == "2"
            assert params["keepalives"] == "1"
            assert params["keepalives_idle"] == "1"
            assert params["keepalives_interval"] == "1"
            assert params["keepalives_count"] == "2"
            assert params["tcp_user_timeout"] == "500"
            assert show(conn, "search_path").startswith("t_"), "the URL's own options are kept"
        finally:
            db.pool.putconn(conn)
        with db.transaction() as tx:
            assert tx.execute_sql("SHOW statement_timeout") == [{"statement_timeout": "500ms"}]
            tx.execute("gc_lock_exclusive")  # a GC batch: long statements, long waits, held open while it deletes
            assert tx.execute_sql("SHOW statement_timeout") == [{"statement_timeout": "2s"}]
            assert tx.execute_sql("SHOW lock_timeout") == [{"lock_timeout": "2s"}]
            assert tx.execute_sql("SHOW idle_in_transaction_session_timeout") == [
                {"idle_in_transaction_session_timeout": "2s"}
            ]
        with db.transaction() as tx:
            tx.execute("gc_lock_shared")  # a pin waits behind a sweep batch, but is not held open
            assert tx.execute_sql("SHOW lock_timeout") == [{"lock_timeout": "2s"}]
            assert tx.execute_sql("SHOW idle_in_transaction_session_timeout") == [
                {"idle_in_transaction_session_timeout": "500ms"}
            ]
        with db.transaction() as tx:  # SET LOCAL: the next transaction is ordinary again
            assert tx.execute_sql("SHOW statement_timeout") == [{"statement_timeout": "500ms"}]


@pytest.mark.postgres
def test_the_limits_come_from_the_environment_and_the_url_wins(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENURE_PG_LOCK_TIMEOUT", "0.25")
    monkeypatch.setenv("TENURE_PG_STATEMENT_TIMEOUT", "7")
    monkeypatch.setenv("TENURE_PG_KEEPALIVES_IDLE", "3")
    monkeypatch.setenv("TENURE_PG_TCP_USER_TIMEOUT", "4.5")
    parts = urlsplit(pg_url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"{query['options']} -c statement_timeout=1234"
    query["tcp_user_timeout"] = "6000"
    url = urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))  # libpq reads no "+" as a space
    connector = PostgresConnector(url, max_size=1)
    try:
        conn = connector.pool.getconn()
        try:
            assert show(conn, "lock_timeout") == "250ms"
            assert show(conn, "statement_timeout") == "1234ms", "the URL's own -c wins"
            assert show(conn, "tcp_keepalives_idle") == "3"
            params = conn.info.get_parameters()
            assert params["keepalives_idle"] == "3" and params["tcp_user_timeout"] == "6000", "the URL's own wins"
        finally:
            connector.pool.putconn(conn)
        assert connector.settings.statement_timeout == pytest.approx(1.234)
        assert connector.settings.tcp_user_timeout == pytest.approx(6.0)
        assert connector.settings.lock_timeout == pytest.approx(0.25)
    finally:
        connector.close()


def test_settings_from_the_environment_are_checked() -> None:
    assert PgSettings.from_env({}) == PgSettings()
    got = PgSettings.from_env({"TENURE_PG_LOCK_TIMEOUT": "1.5", "TENURE_PG_KEEPALIVES_COUNT": "9"})
    assert got.lock_timeout == 1.5 and got.keepalives_count == 9
    assert PgSettings.from_env({"TENURE_PG_SESSION_OPTIONS": "off"}).session_options is False
    for name, value in [
        ("TENURE_PG_LOCK_TIMEOUT", "soon"),
        ("TENURE_PG_STATEMENT_TIMEOUT", "-1"),
        ("TENURE_PG_KEEPALIVES_COUNT", "2.5"),
        ("TENURE_PG_SESSION_OPTIONS", "maybe"),
    ]:
        with pytest.raises(ConfigurationError) as caught:
            PgSettings.from_env({name: value})
        assert caught.value.code == "configuration" and name in str(caught.value)


def test_the_defaults_find_a_dead_peer_in_seconds_and_end_a_paused_transaction_within_a_lease() -> None:
    d = PgSettings()
    assert d.keepalives_idle + d.keepalives_interval * d.keepalives_count <= LEASE_TTL_S / 2
    assert d.tcp_user_timeout <= LEASE_TTL_S / 2
    assert d.idle_in_transaction_timeout <= LEASE_TTL_S / 2, "well within the default lease TTL (ADR 0050)"
    assert d.lock_timeout < d.idle_in_transaction_timeout
    assert d.statement_timeout < d.long_statement_timeout
    conninfo, effective = PgSettings(session_options=False).conninfo("postgresql://u@h/db?connect_timeout=3")
    assert "options" not in conninfo and "keepalives_idle=2" in conninfo and effective.connect_timeout == 3


def test_every_long_running_statement_is_a_named_query() -> None:
    names = load(STORE).names() | load(OBJECTS).names()
    assert LONG_RUNNING - names == set() and HELD_OPEN <= LONG_RUNNING


# ---------------------------------------------------------------------- the lost signal, both dialects


def test_every_loss_between_two_beats_moves_the_counter_once_and_reaping_forgets_dead_pods(store: Store) -> None:
    ps, own = ProjectStore(store), Ownership(store)
    a, b = beating(store), beating(store)
    for name in ("p", "q", "r"):
        ps.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
        assert own.claim(T, name, a, "node-a", None, TTL) is not None
    wait_past(store, S_TTL)
    assert own.claim(T, "p", b, "node-b", None, S_TTL) is not None
    assert own.claim(T, "q", b, "node-b", None, S_TTL) is not None
    own.fence(ps.get(T, "r"), b, "node-b")
    assert own.renew_leases(a) == Renewal(lost=3, status="RUNNING")
    assert own.renew_leases(a) == Renewal(lost=3, status="RUNNING")
    assert own.claim(T, "p", a, "node-a", None, S_TTL) is None, "b's lease holds"
    wait_past(store, S_TTL)
    assert own.claim(T, "p", a, "node-a", None, S_TTL) is not None
    assert own.renew_leases(b) == Renewal(lost=1, status="RUNNING")
    # a loss of a pod whose row is reaped before it beats again is forgotten with the row
    wait_past(store, S_TTL)
    assert own.claim(T, "p", b, "node-b", None, S_TTL) is not None
    assert own.release_leases(b) == 3
    wait_past(store, 0.2)
    assert own.reap_pods(0.1) == 2, "a and b: silent, holding nothing"
    with store.db.sql_transaction(write=False) as tx:
        assert tx.execute_sql("SELECT COUNT(*) AS n FROM pod_losses") == [{"n": 0}]
