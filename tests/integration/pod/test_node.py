"""The pod runtime (tenure serve) in process, on a real store: start-up order, boot pull, drift both
ways, single-flight bring and drain (SPEC §6, project-lifecycle §3–§5, P-75…P-82, P-131)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tenure.errors import TenureError
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import DataFolderLockedError, PodRuntime, ServeConfig
from tenure.projects import LifecycleType, Project, ProjectStore
from tenure.projects.lifecycle import EnginesStartRequested, EnginesStopRequested
from tenure.projects.ownership import Ownership
from tenure.projects.pods import PodRegistry
from tenure.states import PodState, ProjectStatus
from tenure.store import Store
from tests.support.runtime import stop_all
from tests.support.store import wait_past

T = "acme"


@dataclass
class CountingEngine:
    """Records the events it gets; ``fail_start`` makes every start raise."""

    starts: list[str] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    fail_start: bool = False
    gate: threading.Event | None = None

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_start:
            raise RuntimeError("engine refuses to start")
        self.starts.append(event.project_name)

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        self.stops.append(event.project_name)


@pytest.fixture
def objects_dir(tmp_path: Path) -> str:
    return str(tmp_path / "objects")


def make_node(
    store: Store, tmp_path: Path, objects_dir: str, name: str, engine: CountingEngine | None = None, **options: object
) -> PodRuntime:
    settings: dict[str, object] = {"self_pull": False, "beat_interval": 0.05, "lease_ttl": 60.0}
    settings.update(options)
    config = ServeConfig(data_dir=str(tmp_path / name), listen=f"127.0.0.1:{8470 + len(name)}", **settings)  # type: ignore[arg-type]
    return PodRuntime(config, store, LocalObjectStore(objects_dir), engines=[engine] if engine else [])


def started(nodes: list[PodRuntime], node: PodRuntime) -> PodRuntime:
    """``node``, started, and stopped at the end of the test (with ``nodes``)."""
    nodes.append(node)
    node.start()
    return node


@pytest.fixture
def nodes(store: Store, tmp_path: Path, objects_dir: str) -> Iterator[list[PodRuntime]]:
    made: list[PodRuntime] = []
    yield made
    stop_all(made)


def test_start_up_order_ends_running_and_ready(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    node = make_node(store, tmp_path, objects_dir, "a")
    nodes.append(node)
    assert not node.ready
    node.start()
    assert node.ready
    assert PodRegistry(store).get(node.pod.pod_id).status == PodState.RUNNING.value
    with pytest.raises(TenureError) as refused:
        PodRegistry(store).transition(node.pod.pod_id, PodState.STARTING, PodState.RUNNING)
    assert refused.value.code == "pod-status-conflict", "the pod machine is guarded in the store"


def test_second_pod_on_one_data_folder_is_refused(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    first = started(nodes, make_node(store, tmp_path, objects_dir, "a"))
    second = make_node(store, tmp_path, objects_dir, "a")
    with pytest.raises(DataFolderLockedError) as refused:
        second.start()
    assert refused.value.code == "data-dir-locked"
    assert first.pod.pod_id in refused.value.message
    assert PodRegistry(store).get(second.pod.pod_id).status == PodState.STOPPED.value, "a failed start is STOPPED"


def test_boot_pull_brings_matching_projects_up_to_the_score_cap(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    projects = ProjectStore(store)
    for i in range(4):
        projects.create(T, f"p{i}", lifecycle_type=LifecycleType.PERMANENT)
        projects.set_placement(T, f"p{i}", {}, 10.0)
    projects.create(T, "gpu", lifecycle_type=LifecycleType.PERMANENT)
    projects.set_placement(T, "gpu", {"gpu": "yes"}, 1.0)
    projects.create(T, "auto-idle")  # AUTO without demand needs no owner
    engine = CountingEngine()
    started(nodes, make_node(store, tmp_path, objects_dir, "a", engine, self_pull=True, capacity=20.0, pull_factor=1.5))
    assert len(engine.starts) == 2, "min(1.5 × 20, headroom 20) = 20 → two projects of score 10"
    assert "gpu" not in engine.starts and "auto-idle" not in engine.starts
    for name in engine.starts:
        assert projects.get(T, name).status is ProjectStatus.RUNNING


def test_p77_beside_a_live_pod_the_boot_pull_takes_one_and_a_half_fair_shares_and_leaves_the_rest(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """ADR 0052: 40 projects of score 1 need an owner; a live pod of capacity 100 holds nothing; a second pod
    of capacity 100 boots. Its fair share is 100 × 40 / 200 = 20, so it takes 1.5 × 20 = 30 and leaves 10."""
    started(nodes, make_node(store, tmp_path, objects_dir, "a", CountingEngine(), capacity=100.0))
    projects = ProjectStore(store)
    for i in range(40):
        projects.create(T, f"p{i:02}", lifecycle_type=LifecycleType.PERMANENT)
    engine = CountingEngine()
    started(nodes, make_node(store, tmp_path, objects_dir, "b", engine, self_pull=True, capacity=100.0))
    assert len(engine.starts) == 30, "1.5 × the fair share 20, not the headroom 100"
    assert Ownership(store).score_needing_owner(60.0) == 10.0


def test_p77_a_fair_share_smaller_than_one_project_still_brings_one(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """Beside a live pod of capacity 100, a pod of capacity 10 has a share of 10 × 2 / 110 of two projects;
    1.5 × that is under one project's score, yet it brings one (and leaves the other)."""
    started(nodes, make_node(store, tmp_path, objects_dir, "a", CountingEngine(), capacity=100.0))
    projects = ProjectStore(store)
    for name in ("p", "q"):
        projects.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
    engine = CountingEngine()
    started(nodes, make_node(store, tmp_path, objects_dir, "b", engine, self_pull=True, capacity=10.0))
    assert len(engine.starts) == 1


def test_p77_alone_the_boot_pull_takes_everything_that_fits(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    projects = ProjectStore(store)
    for i in range(30):
        projects.create(T, f"p{i:02}", lifecycle_type=LifecycleType.PERMANENT)
    engine = CountingEngine()
    started(nodes, make_node(store, tmp_path, objects_dir, "b", engine, self_pull=True, capacity=100.0))
    assert len(engine.starts) == 30, "alone, its fair share is all 30"


def test_p106_each_beat_reports_the_stores_score_sum_even_for_a_score_changed_while_running(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    projects = ProjectStore(store)
    projects.create(T, "p")
    projects.create(T, "q")
    node = started(nodes, make_node(store, tmp_path, objects_dir, "a", CountingEngine()))
    node.bring(T, "p")
    node.bring(T, "q")
    node.beat()
    assert PodRegistry(store).get(node.pod.pod_id).score == 2.0
    projects.set_placement(T, "p", {}, 7.5)  # while it runs here
    node.beat()
    assert PodRegistry(store).get(node.pod.pod_id).score == 8.5, "Σ of the store's scores, not those at bring"


def test_the_data_folder_is_for_the_pods_own_user_only(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """Workspaces, preserved work and the SQLite store live there: mode 0700, even for a folder made 0755."""
    (tmp_path / "a").mkdir(mode=0o755)
    os.chmod(tmp_path / "a", 0o755)
    started(nodes, make_node(store, tmp_path, objects_dir, "a"))
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o700
    started(nodes, make_node(store, tmp_path, objects_dir, "fresh"))
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700


def test_concurrent_brings_of_one_project_share_one(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p")
    gate = threading.Event()
    engine = CountingEngine(gate=gate)
    node = started(nodes, make_node(store, tmp_path, objects_dir, "a", engine))
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(node.bring(T, "p"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    while len(node._inflight) == 0:  # the first bring is in flight (waiting in the engine)
        time.sleep(0.001)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert engine.starts == ["p"], "one bring, shared"
    assert len(results) == 4


def test_forward_drift_deactivates_a_project_taken_over_and_preserves_its_folder(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p")
    engine_a = CountingEngine()
    a = make_node(store, tmp_path, objects_dir, "a", engine_a, lease_ttl=0.3)
    b = make_node(store, tmp_path, objects_dir, "b", CountingEngine(), lease_ttl=0.3)
    nodes.extend([a, b])
    a.start()
    b.start()
    project = a.bring(T, "p")
    folder = a.lifecycle.folder(project)
    Path(folder, "work.txt").write_text("unsaved")
    wait_past(store, 0.35)  # a stops beating: its lease runs out
    b.bring(T, "p")
    a.beat()
    assert project.id not in a.registry, "deactivated within one beat"
    assert engine_a.stops == ["p"]
    assert not os.path.exists(folder)
    preserved = list((tmp_path / "a" / "preserved").iterdir())
    assert len(preserved) == 1 and (preserved[0] / "work.txt").read_text() == "unsaved"


def test_forward_drift_keeps_the_folder_of_a_project_closed_elsewhere_for_the_recovery_window(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """Close disposes the snapshots, so the folder on the pod that ran it is the only copy left: it is kept as a
    preserved delta a user can recover, and deleted when the recovery window ends."""
    ProjectStore(store).create(T, "p")
    a = make_node(store, tmp_path, objects_dir, "a", CountingEngine())
    b = make_node(store, tmp_path, objects_dir, "b")
    nodes.extend([a, b])
    a.start()
    b.start()
    project = a.bring(T, "p")
    folder = a.lifecycle.folder(project)
    Path(folder, "notes.txt").write_bytes(b"only here")
    b.close(T, "p")
    a.beat()
    assert project.id not in a.registry
    assert not os.path.exists(folder)
    [record] = a.lifecycle.mounts.store.list()
    assert (record.state.value, record.verdict) == ("CLOSED", "preserved-delta")
    assert record.preserved_folder is not None
    assert Path(record.preserved_folder, "notes.txt").read_bytes() == b"only here"
    a.config.recovery_window = 0.0
    a._last_delta_sweep = 0.0
    a.beat()
    assert a.lifecycle.mounts.store.list() == [], "the record goes with the delta"
    assert not os.path.exists(record.preserved_folder), "deleted once the recovery window ended"


def _a_holding_p_and_b(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> tuple[PodRuntime, PodRuntime, Project]:
    """Pods a (with an engine) and b on 0.3 s leases, both started, and project p brought on a."""
    ProjectStore(store).create(T, "p")
    a = make_node(store, tmp_path, objects_dir, "a", CountingEngine(), lease_ttl=0.3)
    b = make_node(store, tmp_path, objects_dir, "b", lease_ttl=0.3)
    nodes.extend([a, b])
    a.start()
    b.start()
    return a, b, a.bring(T, "p")


def test_forward_drift_settles_the_mount_through_the_classifier(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """A pod that finds its lease taken classifies its mount as a restart would: stale generation, fenced, its
    uncommitted file preserved, nothing published (S-62, S-81)."""
    a, b, project = _a_holding_p_and_b(store, tmp_path, objects_dir, nodes)
    Path(a.lifecycle.folder(project), "draft.txt").write_bytes(b"unpublished")
    wait_past(store, 0.4)
    taken = b.bring(T, "p")
    assert taken.generation > project.generation
    a.beat()
    assert project.id not in a.registry
    [record] = a.lifecycle.mounts.store.list()
    assert (record.state.value, record.verdict) == ("CLOSED", "preserved-delta")
    assert record.forced_reason is not None and "stale generation" in record.forced_reason
    assert Path(record.preserved_folder or "", "draft.txt").read_bytes() == b"unpublished"
    assert store.snapshots.list(project.workspace_id) == [], "the fenced mount published nothing"
    samples = [s for m in a.metrics.reconcile.collect() for s in m.samples if s.name.endswith("_total")]
    verdicts = {s.labels["verdict"]: s.value for s in samples}
    assert verdicts.get("stale-generation") == 1.0


def test_reverse_drift_brings_a_project_held_but_not_running(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    engine = CountingEngine()
    node = started(nodes, make_node(store, tmp_path, objects_dir, "a", engine))
    # claimed but never brought: what a bring that stopped after its claim leaves
    assert Ownership(store).claim(T, "p", node.pod.pod_id, node.pod.node_name, None, 60.0) is not None
    node.check_drift()
    node.beat()
    assert engine.starts == ["p"]
    project = ProjectStore(store).get(T, "p")
    assert project.status is ProjectStatus.RUNNING
    kinds = [e.kind for e in node.lifecycle.timeline.history(project.id)]
    assert "drift-reverse" in kinds and kinds.index("bring") < kinds.index("drift-reverse"), "newest first"


def test_reverse_drift_releases_the_lease_after_the_last_failed_retry(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    project = ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    node = started(
        nodes, make_node(store, tmp_path, objects_dir, "a", CountingEngine(fail_start=True), bring_backoff=0.0)
    )
    assert Ownership(store).claim(T, "p", node.pod.pod_id, node.pod.node_name, None, 60.0) is not None
    node.check_drift()
    for _ in range(node.config.bring_retries):
        node.beat()
    owner = Ownership(store).owner(project.id, 60.0)
    assert owner.pod_id is None, "released so another pod can take it"
    assert ProjectStore(store).get(T, "p").error, "the failure is recorded, never silently RUNNING"


def test_drain_hands_every_project_over_and_another_pod_brings_it_with_its_files(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    engine = CountingEngine()
    a = started(nodes, make_node(store, tmp_path, objects_dir, "a", engine))
    project = a.bring(T, "p")
    Path(a.lifecycle.folder(project), "kept.txt").write_text("state")
    assert a.drain() == [f"{T}/p"]
    assert engine.stops == ["p"], "engines stop before the checkpoint"
    assert PodRegistry(store).get(a.pod.pod_id).status == PodState.STOPPED.value
    after = ProjectStore(store).get(T, "p")
    assert after.status is ProjectStatus.RUNNING and Ownership(store).owner(after.id, 60.0).pod_id is None
    b = started(nodes, make_node(store, tmp_path, objects_dir, "b", self_pull=True))
    moved = ProjectStore(store).get(T, "p")
    assert Path(b.lifecycle.folder(moved), "kept.txt").read_text() == "state"


def test_drain_asked_through_the_store_is_seen_by_the_next_beat(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p")
    a = started(nodes, make_node(store, tmp_path, objects_dir, "a"))
    a.bring(T, "p")
    PodRegistry(store).transition(a.pod.pod_id, PodState.RUNNING, PodState.DRAINING)  # tenure pods drain
    a.beat()
    assert a.status is PodState.STOPPED
    assert Ownership(store).owner(ProjectStore(store).get(T, "p").id, 60.0).pod_id is None


def test_engines_started_before_one_that_fails_are_stopped(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p")
    first, failing = CountingEngine(), CountingEngine(fail_start=True)
    node = make_node(store, tmp_path, objects_dir, "a", first)
    node.lifecycle.engines.append(failing)
    nodes.append(node)
    node.start()
    with pytest.raises(TenureError) as failed:
        node.bring(T, "p")
    assert failed.value.code == "engine-failed"
    assert first.starts == ["p"] and first.stops == ["p"], "the engine that did start does not run on"
    assert ProjectStore(store).get(T, "p").status is ProjectStatus.RECOVERING


def test_a_hanging_engine_stop_does_not_hold_up_the_beat(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    release = threading.Event()

    class Hanging(CountingEngine):
        def stop(self, event: EnginesStopRequested, folder: str) -> None:
            release.wait(30)

    ProjectStore(store).create(T, "p")
    a = make_node(store, tmp_path, objects_dir, "a", Hanging(), engine_stop_timeout=0.2)
    b = make_node(store, tmp_path, objects_dir, "b")
    nodes.extend([a, b])
    a.start()
    b.start()
    project = a.bring(T, "p")
    b.close(T, "p")
    started = time.monotonic()
    a.beat()  # forward drift stops the engine: it hangs, the beat goes on after the stop timeout
    assert time.monotonic() - started < 10
    assert project.id not in a.registry
    release.set()


def test_p80_p81_pull_needs_its_own_pod_row_and_reads_it(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    engine = CountingEngine()
    node = make_node(store, tmp_path, objects_dir, "a", engine)
    nodes.append(node)
    assert node.pull() == [], "no pod row yet: nothing is pulled"
    node.start()
    PodRegistry(store).transition(node.pod.pod_id, PodState.RUNNING, PodState.DRAINING)
    assert node.pull() == [], "a DRAINING pod pulls nothing"
    assert engine.starts == []


def test_a_restart_on_the_same_data_folder_adopts_its_predecessors_projects_at_once(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """ADR 0020: the data-folder lock proves the predecessor dead; another data folder still waits."""
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    ProjectStore(store).create(T, "q")
    old = make_node(store, tmp_path, objects_dir, "a")  # lease TTL 60 s: nothing expires in this test
    old.start()
    first = old.bring(T, "p")
    old.bring(T, "q")
    Path(old.lifecycle.folder(first), "unsaved.txt").write_text("not checkpointed")
    old._unlock_data_folder()  # what the kernel does when the process dies: its leases stay live
    elsewhere = started(nodes, make_node(store, tmp_path, objects_dir, "c"))
    assert Ownership(store).claim(T, "p", elsewhere.pod.pod_id, "c", None, 60.0) is None, "another host waits"
    engine = CountingEngine()
    new = started(nodes, make_node(store, tmp_path, objects_dir, "a", engine))
    for name in ("p", "q"):
        project = ProjectStore(store).get(T, name)
        assert Ownership(store).owner(project.id, 60.0).pod_id == new.pod.pod_id
        assert project.status is ProjectStatus.RUNNING and project.id in new.registry
    assert ProjectStore(store).get(T, "p").generation == first.generation + 1, "a takeover: the generation rose"
    assert sorted(engine.starts) == ["p", "q"]
    assert Path(new.lifecycle.folder(first), "unsaved.txt").read_text() == "not checkpointed", "the folder adopted"
    assert PodRegistry(store).get(old.pod.pod_id).status == PodState.STOPPED.value


def test_forward_drift_records_a_folder_that_had_no_mount_record_so_it_is_listed_and_expires(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """A folder with no mount record (written before the host kept them) is still moved aside with a record:
    `tenure mounts` lists it and the recovery window ends it, instead of an orphan under preserved/."""
    a, b, project = _a_holding_p_and_b(store, tmp_path, objects_dir, nodes)
    Path(a.lifecycle.folder(project), "old.txt").write_bytes(b"from before the records")
    for record in a.lifecycle.mounts.store.list():
        a.lifecycle.mounts.store.delete(record.id)
    wait_past(store, 0.4)
    b.bring(T, "p")
    a.beat()
    [kept] = a.lifecycle.mounts.store.list()
    assert (kept.state.value, kept.verdict, kept.forced_reason) == (
        "CLOSED",
        "preserved-delta",
        "the lease was taken over",
    )
    assert Path(kept.preserved_folder or "", "old.txt").read_bytes() == b"from before the records"
    preserved = tmp_path / "a" / "preserved"
    assert [str(p) for p in preserved.iterdir()] == [kept.preserved_folder], "no orphan beside it"


def test_checkpoints_of_a_running_project_list_only_what_its_change_journal_names(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """ADR 0030: the first checkpoint walks (the journal starts), the next ones list the folders it names;
    every journal_walk_every-th walks; a project that stops running here loses its journal."""
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    a = started(nodes, make_node(store, tmp_path, objects_dir, "a", journal_walk_every=3))
    project = a.bring(T, "p")
    folder = Path(a.lifecycle.folder(project))
    for sub in ("x", "y", "z"):
        (folder / sub).mkdir()
        (folder / sub / "f.txt").write_text(sub)
    first = a.checkpoint(T, "p")
    assert first.walked and first.folders_listed == 4
    (folder / "y" / "f.txt").write_text("edited")
    second = a.checkpoint(T, "p")
    assert (second.walked, second.folders_listed) == (False, 1), "only y was named"
    third = a.checkpoint(T, "p")
    assert third.walked, "the third checkpoint of the project walks all the same"
    assert (folder / "y" / "f.txt").read_text() == "edited"
    assert len(a.journals) == 1
    a.suspend(T, "p")
    a.beat()
    assert len(a.journals) == 0, "suspended: its journal is closed"


def test_a_pod_with_change_journals_off_always_walks(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    a = started(nodes, make_node(store, tmp_path, objects_dir, "a", change_journal=False))
    project = a.bring(T, "p")
    Path(a.lifecycle.folder(project), "f.txt").write_text("x")
    assert a.checkpoint(T, "p").walked
    Path(a.lifecycle.folder(project), "f.txt").write_text("y")
    assert a.checkpoint(T, "p").walked
    assert len(a.journals) == 0


class SlowFor(CountingEngine):
    """Starts of the named projects wait on ``release``; ``entered`` counts the starts that are waiting."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names
        self.release = threading.Event()
        self.waiting = threading.Semaphore(0)

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        if event.project_name in self.names:
            self.waiting.release()
            self.release.wait(30)
        super().start(event, folder)


def test_a_periodic_pull_whose_bring_hangs_does_not_hold_up_the_renewal(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """The pull brings on a thread of its own: a bring that takes longer than the lease TTL (a large restore,
    a slow engine) must not stop the beat, or every lease bound to this pod would run out meanwhile."""
    ttl = 0.6
    projects = ProjectStore(store)
    projects.create(T, "held", lifecycle_type=LifecycleType.PERMANENT)
    engine = SlowFor({"slow"})
    a = started(
        nodes, make_node(store, tmp_path, objects_dir, "a", engine, lease_ttl=ttl, beat_interval=0.1, pull_every=0.1)
    )
    held = a.bring(T, "held")
    a.run_beats()
    try:
        projects.create(T, "slow", lifecycle_type=LifecycleType.PERMANENT)  # needs an owner: the pull takes it
        assert engine.waiting.acquire(timeout=10), "the pull's bring reached the engine"
        wait_past(store, 2 * ttl)
        owner = Ownership(store).owner(held.id, ttl)
        assert owner.pod_id == a.pod.pod_id and owner.live, "renewed while the pull's bring hung"
    finally:
        engine.release.set()


def test_a_long_boot_pull_renews_the_pods_lease_between_its_brings(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """Before RUNNING no beat thread runs; a boot pull longer than the TTL renews between brings, so the
    projects it brought first are still held when the pod starts serving."""
    ttl = 0.5

    class Slow(CountingEngine):
        def start(self, event: EnginesStartRequested, folder: str) -> None:
            time.sleep(0.2)  # slow work, not synchronization: four starts outlast the TTL
            super().start(event, folder)

    projects = ProjectStore(store)
    for i in range(4):
        projects.create(T, f"p{i}", lifecycle_type=LifecycleType.PERMANENT)
    a = make_node(
        store, tmp_path, objects_dir, "a", Slow(), self_pull=True, lease_ttl=ttl, beat_interval=0.1, bring_workers=1
    )
    nodes.append(a)
    a.start()
    assert sorted(a.registry.ids()) == sorted(projects.get(T, f"p{i}").id for i in range(4))
    for i in range(4):
        assert Ownership(store).owner(projects.get(T, f"p{i}").id, ttl).live, f"p{i} still held at RUNNING"


def test_a_pull_brings_a_page_side_by_side(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """A takeover of many projects is bounded by how fast they are brought: the pull's brings overlap (up to
    bring_workers at once) instead of running one after another."""
    projects = ProjectStore(store)
    for name in ("x", "y"):
        projects.create(T, name, lifecycle_type=LifecycleType.PERMANENT)
    engine = SlowFor({"x", "y"})
    a = started(nodes, make_node(store, tmp_path, objects_dir, "a", engine, bring_workers=2))
    pulled: list[object] = []
    puller = threading.Thread(target=lambda: pulled.extend(a.pull()))
    puller.start()
    try:
        assert engine.waiting.acquire(timeout=10) and engine.waiting.acquire(timeout=10), "both starts overlap"
    finally:
        engine.release.set()
        puller.join(30)
    assert sorted(engine.starts) == ["x", "y"] and len(pulled) == 2


def test_a_suspend_whose_engine_will_not_stop_is_finished_by_the_beat_never_left_suspending(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """Transient statuses never last forever: an engine stop that times out leaves the project SUSPENDING
    with engine-failed; the beat retries the suspend with backoff, and its last attempt stops the engines
    best effort and completes it — checkpoint published, folder gone, lease released."""
    release = threading.Event()

    class WontStop(CountingEngine):
        def stop(self, event: EnginesStopRequested, folder: str) -> None:
            release.wait(30)

    ProjectStore(store).create(T, "p")
    a = make_node(
        store, tmp_path, objects_dir, "a", WontStop(), engine_stop_timeout=0.1, bring_backoff=0.01, bring_retries=2
    )
    nodes.append(a)
    a.start()
    try:
        project = a.bring(T, "p")
        Path(a.lifecycle.folder(project), "kept.txt").write_text("kept")
        with pytest.raises(TenureError) as failed:
            a.suspend(T, "p")
        assert failed.value.code == "engine-failed"
        assert ProjectStore(store).get(T, "p").status is ProjectStatus.SUSPENDING
        deadline = time.monotonic() + 20
        while ProjectStore(store).get(T, "p").status is ProjectStatus.SUSPENDING and time.monotonic() < deadline:
            a.beat()
        after = ProjectStore(store).get(T, "p")
        assert after.status is ProjectStatus.SUSPENDED
        assert Ownership(store).owner(after.id, 60.0).pod_id is None
        assert not os.path.exists(a.lifecycle.folder(project))
        restored = tmp_path / "restored"
        a.workspaces.restore(project.workspace_id, str(restored))
        assert (restored / "kept.txt").read_text() == "kept"
    finally:
        release.set()


def test_a_checkpoint_on_a_pod_that_lost_the_project_is_fenced_not_published_under_the_new_owners_lease(
    store: Store, tmp_path: Path, objects_dir: str, nodes: list[PodRuntime]
) -> None:
    """A pod paused past its TTL still has the project in its registry when it resumes; a checkpoint asked of
    it then (accepted before the pause, or before its beat sees the loss) must run under the generation it
    brought the project under, so the store refuses it — never under the store's newest generation, whose
    writer lease belongs to the pod that took the project over."""
    ttl = 0.4
    ProjectStore(store).create(T, "p", lifecycle_type=LifecycleType.PERMANENT)
    a = make_node(store, tmp_path, objects_dir, "a", lease_ttl=ttl)
    b = make_node(store, tmp_path, objects_dir, "b", lease_ttl=ttl)
    nodes.extend([a, b])
    a.start()
    b.start()
    project = a.bring(T, "p")
    Path(a.lifecycle.folder(project), "a.txt").write_text("written on a before it lost the lease")
    wait_past(store, ttl + 0.05)  # a renews nothing: its lease runs out
    taken = b.bring(T, "p")
    assert taken.generation > project.generation
    Path(b.lifecycle.folder(taken), "b.txt").write_text("b")
    b.checkpoint(T, "p")
    head_before = store.workspaces.workspace(project.workspace_id).head_snapshot_id
    with pytest.raises(TenureError) as refused:
        a.checkpoint(T, "p")
    assert refused.value.code in ("stale-generation", "lease-lost")
    assert store.workspaces.workspace(project.workspace_id).head_snapshot_id == head_before, "nothing published"
