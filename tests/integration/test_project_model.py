"""A model-based test of one project across three pods (project-lifecycle §3, §4, §5, §6).

Hypothesis drives bring / suspend / close / claim / renew / expire / crash /
write and the two engine failures across three simulated pods that share one
SQLite store; each pod has its own data folder, activation registry and
recording engine. A reference model of the spec's diagram predicts every
outcome. After each step the test compares status, generation, the lease
holder (through ``Ownership.owner``), every registry, the engine events, the
folders on each host, and checks that no two pods both run the project and
both hold its lease.

Time: the lease TTL is policy, read at each decision (P-33). All pods share
one policy; ``expire`` lowers it so that the current lease has expired, and
the next successful claim or renewal restores it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tenure.errors import TenureError
from tenure.objects.local import LocalObjectStore
from tenure.projects import (
    ActivationRegistry,
    ClaimRejectedError,
    EngineFailedError,
    EnginesStartRequested,
    EnginesStopRequested,
    LifecycleConfig,
    LifecycleService,
    Ownership,
    OwnershipFacade,
    PodIdentity,
    ProjectClosedError,
    ProjectStore,
    StatusConflictError,
)
from tenure.states import PROJECT, ProjectStatus
from tenure.store import open_store

S = ProjectStatus
T, NAME = "acme", "p"
TTL = 60.0
SHORT = 0.02
PODS = st.integers(min_value=0, max_value=2)


def event(what: str) -> None:
    """Label a step for ``--hypothesis-show-statistics`` (ignored in the scripted runs below)."""
    if currently_in_test_context():
        hypothesis_event(what)


class Engine:
    """Counts events; fails on request."""

    def __init__(self) -> None:
        self.starts = 0
        self.stops = 0
        self.fail_start = False
        self.fail_stop = False

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        self.starts += 1
        if self.fail_start:
            raise RuntimeError("start refused")

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        self.stops += 1
        if self.fail_stop:
            raise RuntimeError("stop refused")


@dataclass
class SimPod:
    identity: PodIdentity
    registry: ActivationRegistry
    engine: Engine
    service: LifecycleService
    data_dir: str


@dataclass
class Folder:
    """What the model expects on one host: the head the folder was based on, and its files."""

    base: int | None
    files: dict[str, bytes]


def files_of(folder: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                out[name] = fh.read()
    return out


class ProjectModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="tenure-model-")
        self.store = open_store(f"sqlite:///{self.tmp}/tenure.db")
        self.objects = LocalObjectStore(os.path.join(self.tmp, "objects"))
        self.policy = LifecycleConfig(lease_ttl=TTL, engine_stop_timeout=5.0)
        self.projects = ProjectStore(self.store)
        self.ownership = Ownership(self.store)
        self.project = self.projects.create(T, NAME)
        self.pods = [self._boot(i) for i in range(3)]
        # the reference model
        self.status = S.INIT
        self.holder: str | None = None
        self.expired = False
        self.generation = 0
        self.running = [False, False, False]
        self.running_gen = [0, 0, 0]  # the generation each pod's engines were started under
        self.starts = [0, 0, 0]
        self.stops = [0, 0, 0]
        self.folders: list[Folder | None] = [None, None, None]
        self.preserved = [0, 0, 0]
        self.archived = [0, 0, 0]
        self.head: int | None = None
        self.head_files: dict[str, bytes] = {}
        self.writes = 0
        self.steps = 0

    def teardown(self) -> None:
        for pod in self.pods:
            pod.service.trash.wait(10)
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ harness

    def _boot(self, i: int, node: str | None = None) -> SimPod:
        identity = PodIdentity.fresh(node or f"node-{i}", f"http://node-{i}:8470")
        registry = ActivationRegistry()
        engine = Engine()
        data_dir = os.path.join(self.tmp, f"data-{i}")
        service = LifecycleService(
            self.store, self.objects, data_dir, identity, config=self.policy, engines=[engine], registry=registry
        )
        return SimPod(identity, registry, engine, service, data_dir)

    def _folder(self, i: int) -> str:
        return self.pods[i].service.folder(self.project)

    def _expect(self, what: str, error: type[BaseException] | None, call) -> None:  # type: ignore[no-untyped-def]
        event(f"{what}: {error.__name__ if error else 'ok'}")
        if error is None:
            call()
            return
        with pytest.raises(error):
            call()

    # ------------------------------------------------------------------ model steps

    def _claimable(self, i: int) -> bool:
        return self.holder is None or self.holder == self.pods[i].identity.pod_id or self.expired

    def _claim(self, i: int) -> None:
        pod_id = self.pods[i].identity.pod_id
        if self.holder != pod_id:
            self.generation += 1
        self.holder = pod_id
        self.expired = False

    def _init_folder(self, i: int) -> None:
        current = self.folders[i]
        if current is not None and current.base == self.head:
            event("workspace init adopted the folder")
            return
        if current is not None:
            event("workspace init preserved an older folder")
            self.preserved[i] += 1
        self.folders[i] = Folder(self.head, dict(self.head_files))

    def _bring(self, i: int, *, fail_start: bool = False) -> type[TenureError] | None:
        """Advance the model through bring; return the error bring raises, if any."""
        pod_id = self.pods[i].identity.pod_id
        if self.status is S.CLOSED:
            return ProjectClosedError
        if (
            self.status is S.RUNNING
            and self.running[i]
            and self.holder == pod_id
            and self.running_gen[i] == self.generation
        ):
            self.expired = False
            return None  # the shortcut: running here under the current lease, only the lease is renewed
        if self.running[i]:
            self.stops[i] += 1  # engines left from an older lease are stopped before anything else
            self.running[i] = False
        if not self._claimable(i):
            return ClaimRejectedError
        self._claim(i)
        self.status = S.RECOVERING
        self._init_folder(i)
        self.starts[i] += 1
        if fail_start:
            return EngineFailedError
        self.status = S.RUNNING
        self.running[i] = True
        self.running_gen[i] = self.generation
        return None

    def _suspend(self, i: int, *, fail_stop: bool = False) -> type[TenureError] | None:
        if self.status is S.CLOSED:
            return StatusConflictError
        if self.status is S.SUSPENDED:
            return None
        if self.status is S.INIT:
            self.status = S.SUSPENDED
            return None
        if self.status is S.RECOVERING:
            error = self._bring(i)
            if error is not None:
                return error
        if not self._claimable(i):
            return ClaimRejectedError
        self._claim(i)
        self.status = S.SUSPENDING
        self.stops[i] += 1
        if fail_stop:
            return EngineFailedError
        folder = self.folders[i]
        if folder is not None:
            if self.head is None or folder.files != self.head_files:
                self.head = (self.head or 0) + 1
                self.head_files = dict(folder.files)
            self.folders[i] = None
        self.status = S.SUSPENDED
        self.running[i] = False
        self.holder = None
        self.expired = False
        return None

    # ------------------------------------------------------------------ rules

    @rule(i=PODS)
    def bring(self, i: int) -> None:
        self._bring_rule(i, fail_start=False)

    @rule(i=PODS)
    def bring_with_failing_engine(self, i: int) -> None:
        self._bring_rule(i, fail_start=True)

    def _bring_rule(self, i: int, *, fail_start: bool) -> None:
        pod = self.pods[i]
        event(f"bring from {self.status.name}")
        pod.engine.fail_start = fail_start
        try:
            self._expect("bring", self._bring(i, fail_start=fail_start), lambda: pod.service.bring(T, NAME))
        finally:
            pod.engine.fail_start = False
        self._sync_policy()

    @rule(i=PODS)
    def suspend(self, i: int) -> None:
        self._suspend_rule(i, fail_stop=False)

    @rule(i=PODS)
    def suspend_with_failing_engine(self, i: int) -> None:
        self._suspend_rule(i, fail_stop=True)

    def _suspend_rule(self, i: int, *, fail_stop: bool) -> None:
        pod = self.pods[i]
        event(f"suspend from {self.status.name}")
        pod.engine.fail_stop = fail_stop
        try:
            self._expect("suspend", self._suspend(i, fail_stop=fail_stop), lambda: pod.service.suspend(T, NAME))
        finally:
            pod.engine.fail_stop = False
        self._sync_policy()

    @precondition(lambda self: self.steps >= 6)  # CLOSED absorbs everything: close late, not first
    @rule(i=PODS)
    def close(self, i: int) -> None:
        pod = self.pods[i]
        event(f"close from {self.status.name}")
        if self.status is not S.CLOSED:
            self.generation += 1  # fence
            self.folders[i] = None
            self.running[i] = False
            self.status = S.CLOSED
            self.holder = None  # a CLOSED project has no owner
        closed = pod.service.close(T, NAME)
        assert closed.status is S.CLOSED

    @rule(i=PODS)
    def claim(self, i: int) -> None:
        pod = self.pods[i]
        facade = OwnershipFacade(self.store, pod.identity, lease_ttl=self.policy.lease_ttl)
        event(f"claim from {self.status.name}")
        if self.status is S.CLOSED:
            error: type[TenureError] | None = ProjectClosedError
        elif not self._claimable(i):
            error = ClaimRejectedError
        else:
            error = None
            self._claim(i)
        self._expect("claim", error, lambda: facade.claim_for_local_pod(T, NAME))
        self._sync_policy()

    @precondition(lambda self: self.status is not S.CLOSED)
    @rule(i=PODS)
    def renew(self, i: int) -> None:
        pod_id = self.pods[i].identity.pod_id
        holds = self.holder == pod_id
        if holds:
            self.expired = False
        renewal = self.ownership.renew_leases(pod_id)
        assert renewal is not None
        held = {p.id for p in self.ownership.find_by_home_pod_id(pod_id)}
        assert (self.project.id in held) is holds
        self._sync_policy()

    @precondition(lambda self: self.holder is not None and not self.expired)
    @rule()
    def expire(self) -> None:
        self.policy.lease_ttl = SHORT
        start = self.store.workspaces.now()
        while self.store.workspaces.now() - start <= 2 * SHORT:
            time.sleep(SHORT / 2)
        self.expired = True

    @rule(i=PODS)
    def crash(self, i: int) -> None:
        """The pod dies (no cleanup) and its host starts a new process: new pod id, empty registry."""
        old = self.pods[i]
        old.service.trash.wait(10)
        self.pods[i] = self._boot(i, old.identity.node_name)
        self.running[i] = False
        self.starts[i] = 0
        self.stops[i] = 0

    @precondition(lambda self: self.status is S.RUNNING)
    @rule(i=PODS)
    def write(self, i: int) -> None:
        folder = self.folders[i]
        if not self.running[i] or folder is None:
            return
        self.writes += 1
        name, data = f"f{self.writes % 3}.txt", f"write {self.writes}".encode()
        with open(os.path.join(self._folder(i), name), "wb") as fh:
            fh.write(data)
        folder.files[name] = data

    def _sync_policy(self) -> None:
        self.policy.lease_ttl = SHORT if self.expired else TTL

    # ------------------------------------------------------------------ invariants

    @invariant()
    def status_generation_and_holder_match_the_model(self) -> None:
        row = self.projects.get(T, NAME)
        assert row.status is self.status
        assert row.generation == self.generation
        owner = self.ownership.owner(self.project.id, self.policy.lease_ttl)
        assert owner.pod_id == self.holder
        assert owner.live is (self.holder is not None and not self.expired)

    @invariant()
    def registries_and_engine_events_match_the_model(self) -> None:
        for i, pod in enumerate(self.pods):
            assert (self.project.id in pod.registry) is self.running[i], f"pod {i}"
            assert (pod.engine.starts, pod.engine.stops) == (self.starts[i], self.stops[i]), f"pod {i}"

    @invariant()
    def never_two_pods_running_it_while_both_holding_it(self) -> None:
        both = [
            i
            for i, pod in enumerate(self.pods)
            if self.project.id in pod.registry
            and self.ownership.holds(self.project.id, pod.identity.pod_id, self.policy.lease_ttl)
        ]
        assert len(both) <= 1, both

    @invariant()
    def folders_on_every_host_match_the_model(self) -> None:
        for i in range(3):
            expected = self.folders[i]
            path = self._folder(i)
            if expected is None:
                assert not os.path.exists(path), f"pod {i} still has a folder"
            else:
                assert os.path.isdir(path), f"pod {i} has no folder"
                assert files_of(path) == expected.files, f"pod {i}"

    @invariant()
    def preserved_folders_are_counted_and_archived(self) -> None:
        """Init moved exactly the expected folders aside; archive them so names never collide."""
        for i, pod in enumerate(self.pods):
            root = os.path.join(pod.data_dir, "preserved")
            found = sorted(os.listdir(root)) if os.path.isdir(root) else []
            assert self.archived[i] + len(found) == self.preserved[i], f"pod {i}"
            for name in found:
                os.rename(os.path.join(root, name), os.path.join(self.tmp, f"archive-{i}-{uuid.uuid4().hex}"))
            self.archived[i] += len(found)

    @invariant()
    def the_status_is_one_the_machine_knows(self) -> None:
        assert self.status in set(PROJECT.states)
        self.steps += 1


ProjectModel.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestProjectModel = ProjectModel.TestCase


INVARIANTS = (
    "status_generation_and_holder_match_the_model",
    "registries_and_engine_events_match_the_model",
    "never_two_pods_running_it_while_both_holding_it",
    "folders_on_every_host_match_the_model",
    "preserved_folders_are_counted_and_archived",
    "the_status_is_one_the_machine_knows",
)


def run_script(steps: list[tuple[str, int | None]]) -> ProjectModel:
    """Drive the machine through fixed steps, checking every invariant after each one."""
    machine = ProjectModel()
    checks = [getattr(machine, name) for name in INVARIANTS]
    try:
        for check in checks:
            check()
        for name, arg in steps:
            rule_fn = getattr(machine, name)
            rule_fn() if arg is None else rule_fn(arg)
            for check in checks:
                check()
    finally:
        machine.teardown()
    return machine


SCRIPTS = {
    # pod 0 dies with a folder on disk; pod 1 takes over and checkpoints; pod 0's host comes back:
    # its folder is based on an older head, so it is preserved and the head restored
    "preserve-after-takeover": [
        ("bring", 0),
        ("write", 0),
        ("crash", 0),
        ("expire", None),
        ("bring", 1),
        ("write", 1),
        ("suspend", 1),
        ("bring", 0),
        ("suspend", 0),
    ],
    # the same host comes back while its folder's base is still the head: adopted with its change
    "adopt-after-crash": [
        ("bring", 0),
        ("suspend", 0),
        ("bring", 0),
        ("write", 0),
        ("crash", 0),
        ("expire", None),
        ("bring", 0),
        ("suspend", 0),
        ("bring", 2),
    ],
    # a paused pod keeps the project in its registry but no longer holds it after a takeover
    "paused-owner": [
        ("bring", 0),
        ("expire", None),
        ("bring", 1),
        ("bring", 0),
        ("expire", None),
        ("claim", 2),
        ("bring", 2),
        ("renew", 0),
        ("suspend", 1),
        ("suspend", 2),
    ],
    # crashes in the transient states, finished by other pods (P-68..P-71, in-process)
    "transient-states": [
        ("bring_with_failing_engine", 0),
        ("crash", 0),
        ("expire", None),
        ("suspend", 1),
        ("bring", 2),
        ("suspend_with_failing_engine", 2),
        ("expire", None),
        ("bring", 0),
        ("suspend_with_failing_engine", 0),
        ("suspend", 0),
        ("close", 1),
        ("bring", 2),
    ],
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_scripted_paths_agree_with_the_model(script: str) -> None:
    machine = run_script(SCRIPTS[script])
    if script.startswith("preserve"):
        assert machine.preserved[0] == 1
    if script.startswith("adopt"):
        assert machine.preserved == [0, 0, 0]
