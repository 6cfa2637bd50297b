"""The child process of a durability check: runs one durable path (optionally mutated) and says what to check.

``python -m tests.integration.durability.child CONFIG.json`` where the config names the
``scenario``, an optional ``mutant``, the ``workdir`` (empty), the
``recorder`` (``strace``: the parent traces this process; ``inprocess``:
record here with :class:`InProcessRecorder` and write the events to
``events_out``) and ``spec_out``, where the scopes, acknowledgement points
and crash windows of the run are written (see :mod:`tests.integration.durability.rules`).

Every scenario does its setup, then calls :meth:`Work.begin` (which applies
the mutant, then marks ``begin``), runs the durable path and marks the
acknowledgement once it returned.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.integration.durability.rules import Ack, Scope, Window
from tests.integration.durability.trace import InProcessRecorder, dump_events, mark


@dataclass
class Spec:
    scopes: list[Scope] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Work:
    dir: str
    recorder: str
    mutant: str | None

    def path(self, *parts: str) -> str:
        return os.path.join(self.dir, *parts)

    def begin(self, label: str = "begin") -> None:
        if self.mutant is not None:
            MUTANTS[self.mutant][1]()
            self.mutant = None
        mark(label)


# ------------------------------------------------------------------------------------------ helpers


def payloads(count: int) -> list[tuple[str, bytes]]:
    """``count`` encoded objects, two of them in the same prefix folder."""
    from tenure.objects import encode

    items = [encode(f"object {i}".encode() * (i + 1)) for i in range(count - 1)]
    prefixes = {oid[:2] for oid, _ in items}
    n = 0
    while True:
        oid, payload = encode(f"neighbour {n}".encode())
        if oid[:2] in prefixes:
            return items + [(oid, payload)]
        n += 1


def small_tree(root: str, big: bool = False) -> None:
    os.makedirs(os.path.join(root, "sub", "deeper"))
    for rel, size in (("a.txt", 100), ("sub/b.bin", 70_000), ("sub/deeper/c.txt", 10), ("empty", 0)):
        with open(os.path.join(root, rel), "wb") as fh:
            fh.write(os.urandom(size))
    if big:
        with open(os.path.join(root, "big.bin"), "wb") as fh:
            fh.write(os.urandom(3_000_000))
        os.symlink("a.txt", os.path.join(root, "link"))
        os.link(os.path.join(root, "a.txt"), os.path.join(root, "hard"))


def crashed_writer(final: str, payload: bytes) -> None:
    """What a writer that died after its rename, before any fsync, leaves: a file only in the page cache."""
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = f"{final}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    os.write(fd, payload)
    os.close(fd)
    os.rename(tmp, final)


# ------------------------------------------------------------------------------------------ scenarios


def _put_many_acknowledged(work: Work, root: str, store: Any, items: list[tuple[str, bytes]]) -> Spec:
    """``put_many`` in the open window, acknowledged once it returns; the window covers every object's final
    name."""
    new = store.put_many(items)
    mark("ack")
    finals = tuple(store._path(oid) for oid, _ in items)
    return Spec(
        [Scope(root, work.dir, (os.path.join(root, "tmp"),))],
        [Ack("ack")],
        [Window("begin", "ack", finals)],
        {"new": new},
    )


def put(work: Work) -> Spec:
    from tenure.objects.local import LocalObjectStore

    root = work.path("data", "objects")
    items = payloads(6)
    work.begin()
    store = LocalObjectStore(root)  # inside the window: the store makes its own folders durable
    return _put_many_acknowledged(work, root, store, items)


def put_existing(work: Work) -> Spec:
    from tenure.objects.local import LocalObjectStore

    root = work.path("data", "objects")
    items = payloads(4)
    store = LocalObjectStore(root)
    crashed_writer(store._path(items[0][0]), items[0][1])
    crashed_writer(store._path(items[-1][0]), items[-1][1])  # shares its prefix folder with another object
    work.begin()
    return _put_many_acknowledged(work, root, store, items)


def checkpoint(work: Work) -> Spec:
    return _checkpoint(work, crashed_writer_left=0)


def checkpoint_existing(work: Work) -> Spec:
    """A checkpoint whose objects a crashed writer already left, unsynced, in the store."""
    return _checkpoint(work, crashed_writer_left=2)


def _checkpoint(work: Work, crashed_writer_left: int) -> Spec:
    from tenure.fsio import make_dirs_durable
    from tenure.objects.local import LocalObjectStore
    from tenure.snapshots import build_tree
    from tenure.store import open_store
    from tenure.store.workspaces import WorkspaceStore
    from tenure.workspaces import WorkspaceService

    data = work.path("data")
    make_dirs_durable(data)
    src = work.path("src")
    small_tree(src)
    db = os.path.join(data, "tenure.db")
    store = open_store(f"sqlite:///{db}")
    objects = LocalObjectStore(os.path.join(data, "objects"))
    if crashed_writer_left:
        scratch = LocalObjectStore(work.path("scratch"))
        for oid in sorted(build_tree(src, scratch).objects)[:crashed_writer_left]:
            crashed_writer(objects._path(oid), scratch.get(oid))
    service = WorkspaceService(store, objects, data)
    service.create("w")
    publish = WorkspaceStore.publish

    def marked_publish(self: WorkspaceStore, *args: Any, **kwargs: Any) -> Any:
        mark("publish")
        result = publish(self, *args, **kwargs)
        mark("published")
        return result

    WorkspaceStore.publish = marked_publish  # type: ignore[method-assign]
    work.begin()
    result = service.checkpoint("w", src)
    mark("ack")
    store.close()
    root = os.path.join(data, "objects")
    # Under strace the publish point is the commit's own fsync of the SQLite file; the in-process
    # recorder cannot see SQLite's calls, so there it is the moment publish is called.
    sync_of = (db, db + "-wal", db + "-journal") if work.recorder == "strace" else ()
    return Spec(
        [Scope(root, work.dir, (os.path.join(root, "tmp"),))],
        [Ack("publish", sync_of), Ack("ack")],
        facts={"state": result.snapshot.state.value, "files": result.snapshot.files},
    )


def restore(work: Work) -> Spec:
    from tenure.fsio import make_dirs_durable
    from tenure.objects.local import LocalObjectStore
    from tenure.snapshots import build_tree, restore_tree

    objects = LocalObjectStore(work.path("objects"))
    src = work.path("src")
    small_tree(src, big=True)
    root = build_tree(src, objects).root
    index_dir = work.path("index")
    make_dirs_durable(index_dir)
    dest, index = work.path("out", "new"), os.path.join(index_dir, "new.idx")
    work.begin()
    result = restore_tree(root, objects, dest, index_path=index, workers=2)
    mark("ack")
    return Spec([Scope(dest, work.dir), Scope(index, index_dir)], [Ack("ack")], facts={"files": result.files})


def gc_delete(work: Work) -> Spec:
    from tenure.objects.local import LocalObjectStore

    root = work.path("data", "objects")
    items = payloads(6)
    store = LocalObjectStore(root)
    store.put_many(items)
    doomed = [oid for oid, _ in items[2:]]
    work.begin()
    removed = store.delete_many(doomed)
    mark("ack")
    return Spec(
        [Scope(root, work.dir, (os.path.join(root, "tmp"),))],
        [Ack("ack")],
        [Window("begin", "ack", tuple(store._path(oid) for oid in doomed))],
        {"removed": removed},
    )


def atomic_write(work: Work) -> Spec:
    from tenure.fsio import atomic_write as write
    from tenure.fsio import make_dirs_durable

    folder = work.path("conf")
    make_dirs_durable(folder)
    target = os.path.join(folder, "settings.json")
    work.begin("begin1")
    write(target, b"1" * 1000)
    mark("ack1")
    mark("begin2")
    write(target, b"2" * 5000)
    mark("ack2")
    return Spec(
        [Scope(target, folder)],
        [Ack("ack1"), Ack("ack2")],
        [Window("begin1", "ack1", (target,)), Window("begin2", "ack2", (target,))],
    )


# The intake (``tenure.intake``): its scenarios work in ``<workdir>/intake``. The workspace's layout and the
# inputs are made in the setup and flushed with one syncfs: what was there before the operation began is on
# disk, and only what the operation does is judged.


def _intake_setup(work: Work, config: Any = None) -> Any:
    from tenure.intake import Workspace

    return Workspace(work.path("intake"), config)


def _put_package(ws: Any, name: str) -> str:
    from tenure.intake.pack import new_manifest, write_package

    path = ws.inbox / name
    write_package(path, new_manifest("case-A", "pkg-1"), {"input/report.txt": b"case-A/pkg-1"})
    return str(path)


def _on_disk(ws: Any) -> None:
    from tenure.fsio import sync_filesystem

    sync_filesystem(ws.root)


def _mark_publish() -> None:
    """Mark ``publish`` and ``published`` around :meth:`CaseStorage.publish` (the generation is durable at the
    second)."""
    from tenure.intake.storage import CaseStorage

    publish = CaseStorage.publish

    def marked_publish(self: CaseStorage, *args: Any, **kwargs: Any) -> Any:
        mark("publish")
        result = publish(self, *args, **kwargs)
        mark("published")
        return result

    CaseStorage.publish = marked_publish  # type: ignore[method-assign]
    publish_many = CaseStorage.publish_many

    def marked_publish_many(self: CaseStorage, *args: Any, **kwargs: Any) -> Any:
        mark("publish")
        result = publish_many(self, *args, **kwargs)
        mark("published")
        return result

    CaseStorage.publish_many = marked_publish_many  # type: ignore[method-assign]


def _only(folder: str) -> str:
    names = os.listdir(folder)
    assert len(names) == 1, names
    return os.path.join(folder, names[0])


def _acknowledged(work: Work, ws: Any, act: Callable[[], Any]) -> Any:
    """The workspace on disk and ``publish`` marked; then ``act`` in the window, acknowledged once it returns."""
    _on_disk(ws)
    _mark_publish()
    work.begin()
    done = act()
    mark("ack")
    return done


def intake_admission(work: Work) -> Spec:
    """A valid package in the inbox is admitted: cached, stored as a case generation, indexed, removed."""
    from tenure.intake import InboxProcessor

    ws = _intake_setup(work)
    original = _put_package(ws, "in.zip")
    results = _acknowledged(work, ws, lambda: InboxProcessor(ws).poll())
    cases, cache, inbox, runtime = str(ws.cases), str(ws.cache), str(ws.inbox), str(ws.runtime_file)
    folder = str(ws.case_dir("case-A", "pkg-1"))
    root = str(ws.root)
    stored = (_only(cache), os.path.join(folder, "g00000001.zip"), os.path.join(folder, "current.json"))
    return Spec(
        [Scope(cache, root), Scope(cases, root), Scope(runtime, root), Scope(inbox, root)],
        [
            Ack("published", scopes=(cases,)),
            Ack("begin", removal_of=(os.path.join(inbox, ".tenure-ack-"),), scopes=(cache, cases, runtime)),
            Ack("ack"),
        ],
        [Window("begin", "ack", (*stored, original))],
        {"results": [(r.kind.value, r.code) for r in results]},
    )


def intake_admission_batch(work: Work) -> Spec:
    """Three valid packages admitted by one group commit (ADR 0109): stored and synced together, then each
    input removed."""
    from tenure.intake import InboxProcessor

    ws = _intake_setup(work)
    originals = [_put_case(ws, f"in-{i}.zip", f"case-{i}") for i in range(3)]
    results = _acknowledged(work, ws, lambda: InboxProcessor(ws).poll())
    cases, cache, inbox, runtime = str(ws.cases), str(ws.cache), str(ws.inbox), str(ws.runtime_file)
    root = str(ws.root)
    stored = [os.path.join(cache, name) for name in sorted(os.listdir(cache))]
    for i in range(3):
        folder = str(ws.case_dir(f"case-{i}", "pkg-1"))
        stored += [os.path.join(folder, "g00000001.zip"), os.path.join(folder, "current.json")]
    return Spec(
        [Scope(cache, root), Scope(cases, root), Scope(runtime, root), Scope(inbox, root)],
        [
            Ack("published", scopes=(cases,)),
            Ack("begin", removal_of=(os.path.join(inbox, ".tenure-ack-"),), scopes=(cache, cases, runtime)),
            Ack("ack"),
        ],
        [Window("begin", "ack", (*stored, *originals))],
        {"results": [(r.kind.value, r.code) for r in results]},
    )


def _put_case(ws: Any, name: str, case: str) -> str:
    from tenure.intake.pack import new_manifest, write_package

    path = ws.inbox / name
    write_package(path, new_manifest(case, "pkg-1"), {"input/report.txt": case.encode()})
    return str(path)


def intake_quarantine(work: Work) -> Spec:
    """An input that is no package is cached, then quarantined (package.zip linked to the cached copy)."""
    from tenure.intake import InboxProcessor

    ws = _intake_setup(work)
    original = os.path.join(ws.inbox, "bad.zip")
    with open(original, "wb") as fh:
        fh.write(b"not a zip")
    _on_disk(ws)
    work.begin()
    results = InboxProcessor(ws).poll()
    mark("ack")
    cache, quarantine, inbox, root = str(ws.cache), str(ws.quarantine), str(ws.inbox), str(ws.root)
    folder = _only(quarantine)
    finals = (_only(cache), os.path.join(folder, "package.zip"), os.path.join(folder, "validation_error.json"))
    return Spec(
        [Scope(cache, root), Scope(quarantine, root), Scope(inbox, root)],
        [Ack("begin", removal_of=(os.path.join(inbox, ".tenure-ack-"),), scopes=(cache, quarantine)), Ack("ack")],
        [Window("begin", "ack", (*finals, original))],
        {"results": [(r.kind.value, r.code) for r in results]},
    )


def intake_quarantine_large(work: Work) -> Spec:
    """An input over the size limit is renamed into quarantine (never cached); its report follows."""
    from tenure.intake import InboxProcessor, IntakeConfig, Limits

    ws = _intake_setup(work, IntakeConfig(limits=Limits(archive_bytes=100)))
    original = os.path.join(ws.inbox, "big.zip")
    with open(original, "wb") as fh:
        fh.write(b"x" * 1000)
    _on_disk(ws)
    work.begin()
    results = InboxProcessor(ws).poll()
    mark("ack")
    quarantine, inbox, root = str(ws.quarantine), str(ws.inbox), str(ws.root)
    folder = _only(quarantine)
    return Spec(
        [Scope(quarantine, root), Scope(inbox, root)],
        # the input leaves the inbox by its rename; that becomes durable at the inbox's fsync
        [Ack("begin", sync_of=(inbox,), scopes=(quarantine,)), Ack("ack")],
        [Window("begin", "ack", (os.path.join(folder, "package.zip"), original))],
        {"results": [(r.kind.value, r.code) for r in results], "cached": os.listdir(ws.cache)},
    )


def intake_advance(work: Work) -> Spec:
    """A stored package advances one step: a new generation, the index, the runtime summary."""
    from tenure.intake import CheckpointStore, InboxProcessor

    ws = _intake_setup(work)
    _put_package(ws, "in.zip")
    admitted = [(r.kind.value, r.code) for r in InboxProcessor(ws).poll()]
    package = _acknowledged(
        work, ws, lambda: CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="s")
    )
    cases, runtime, root = str(ws.cases), str(ws.runtime_file), str(ws.root)
    folder = str(ws.case_dir("case-A", "pkg-1"))
    finals = (os.path.join(folder, "g00000002.zip"), os.path.join(folder, "current.json"))
    return Spec(
        [Scope(cases, root), Scope(runtime, root)],
        [Ack("published", scopes=(cases,)), Ack("ack")],
        [Window("begin", "ack", finals)],
        {"admitted": admitted, "generation": package.generation, "state": package.state.value},
    )


def intake_commit_new_folder(work: Work) -> Spec:
    """The commit sequence on top of a package read from the inbox (admission one at a time): commit() creates
    the case folder and stores generation 1 there, holding its whole history."""
    from tenure.intake.canonical import utc_now
    from tenure.intake.commit import commit
    from tenure.intake.machine import intake_machine
    from tenure.intake.package import read_package
    from tenure.intake.plan import make_request, plan_advance
    from tenure.intake.storage import CaseStorage

    ws = _intake_setup(work)
    incoming = read_package(ws.inbox / os.path.basename(_put_package(ws, "in.zip")), ws.config)
    machine = intake_machine(ws.config.phases)
    request = make_request(machine, ws.config, "VALIDATED", step_id=f"admission:{incoming.fingerprint}")
    now = utc_now()
    plan = plan_advance(incoming, request, machine, now, ws.config.limits)
    folder = ws.case_dir("case-A", "pkg-1")
    package = _acknowledged(work, ws, lambda: commit(ws, incoming, plan, folder, now))
    cases, runtime, root = str(ws.cases), str(ws.runtime_file), str(ws.root)
    stored = CaseStorage(ws).load_current("case-A", "pkg-1")
    finals = (os.path.join(folder, "g00000001.zip"), os.path.join(folder, "current.json"))
    return Spec(
        [Scope(cases, root), Scope(runtime, root)],
        [Ack("published", scopes=(cases,)), Ack("ack")],
        [Window("begin", "ack", finals)],
        {
            "generation": package.generation,
            "state": package.state.value,
            "link": package.link.file if package.link else None,
            "reads_back": stored is not None and stored.fingerprint == package.fingerprint,
        },
    )


def _intake_spans(work: Work, advances: int) -> Any:
    """An intake whose case has ``advances`` advances after admission, in spans of 2 (ADR 0110)."""
    from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig

    ws = _intake_setup(work, IntakeConfig(chain_span=2))
    _put_package(ws, "in.zip")
    InboxProcessor(ws).poll()
    store = CheckpointStore(ws)
    for i in range(advances):
        store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id=f"s{i}")
    _on_disk(ws)
    return ws, store


def intake_advance_span(work: Work) -> Spec:
    """An advance that closes a span (stored format v2): the new generation carries the run's checkpoints."""
    ws, store = _intake_spans(work, 1)
    _mark_publish()
    work.begin()
    package = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="closes")
    mark("ack")
    cases, runtime, root = str(ws.cases), str(ws.runtime_file), str(ws.root)
    folder = str(ws.case_dir("case-A", "pkg-1"))
    finals = (os.path.join(folder, "g00000003.zip"), os.path.join(folder, "current.json"))
    return Spec(
        [Scope(cases, root), Scope(runtime, root)],
        [Ack("published", scopes=(cases,)), Ack("ack")],
        [Window("begin", "ack", finals)],
        {"generation": package.generation, "link": package.link.file if package.link else None},
    )


def intake_collect(work: Work) -> Spec:
    """The collector removes the generations the newest no longer references (I-132)."""
    ws, store = _intake_spans(work, 5)
    folder = str(ws.case_dir("case-A", "pkg-1"))
    work.begin()
    report = store.collect()
    mark("ack")
    return Spec(
        [Scope(str(ws.cases), str(ws.root))],
        [Ack("ack")],
        [Window("begin", "ack", tuple(report.generations))],
        {"removed": sorted(os.path.basename(p) for p in report.generations), "left": sorted(os.listdir(folder))},
    )


SCENARIOS: dict[str, Callable[[Work], Spec]] = {
    "put": put,
    "put-existing": put_existing,
    "checkpoint": checkpoint,
    "checkpoint-existing": checkpoint_existing,
    "restore": restore,
    "gc-delete": gc_delete,
    "atomic-write": atomic_write,
    "intake-admission": intake_admission,
    "intake-admission-batch": intake_admission_batch,
    "intake-quarantine": intake_quarantine,
    "intake-quarantine-large": intake_quarantine_large,
    "intake-advance": intake_advance,
    "intake-advance-span": intake_advance_span,
    "intake-commit-new-folder": intake_commit_new_folder,
    "intake-collect": intake_collect,
}


# ------------------------------------------------------------------------------------------ mutants


def _patch(module: str, name: str, value: Any) -> Any:
    """Replace ``module.name`` with ``value``; return what was there."""
    target = importlib.import_module(module)
    real = getattr(target, name)
    setattr(target, name, value)
    return real


def _no_file_fsync() -> None:
    _patch("tenure.objects.local", "fsync_file", lambda fd: None)


def _no_object_folder_fsync() -> None:
    import tenure.fsio

    def fsync_dir(folder: str) -> None:  # the root still is, the prefix folders are not
        if len(os.path.basename(folder)) != 2:
            tenure.fsio.fsync_dir(folder)

    _patch("tenure.objects.local", "fsync_dir", fsync_dir)


def _no_object_folder_fsync_nor_sync() -> None:
    """Without the folder fsync only the checkpoint's object-store sync would still cover the objects."""
    _no_object_folder_fsync()
    _no_object_store_sync()


def _no_object_store_sync() -> None:
    from tenure.objects.local import LocalObjectStore

    LocalObjectStore.sync = lambda self: None  # type: ignore[method-assign]


def _no_restore_syncfs() -> None:
    _patch("tenure.snapshots.restore", "sync_filesystem", lambda path: None)


def _no_atomic_write_folder_fsync() -> None:
    _patch("tenure.fsio", "fsync_dir", lambda folder: None)


def _trust_existing_objects() -> None:
    """``put_many`` as it was: an object whose final file exists is acknowledged untouched."""
    from tenure.objects.local import LocalObjectStore

    def put_many(self: LocalObjectStore, items: Iterable[tuple[str, bytes]]) -> int:
        fresh = [(oid, payload) for oid, payload in items if not os.path.exists(self._path(oid))]
        return real(self, fresh) if fresh else 0

    real = LocalObjectStore.put_many
    LocalObjectStore.put_many = put_many  # type: ignore[method-assign]


def _object_root_not_durable() -> None:
    _patch("tenure.objects.local", "make_dirs_durable", lambda folder: os.makedirs(folder, exist_ok=True))


def _no_restore_parent_fsync() -> None:
    _patch("tenure.snapshots.restore", "fsync_dir", lambda folder: None)


def _no_delete_folder_fsync() -> None:
    _patch("tenure.objects.local", "fsync_dir", lambda folder: None)


def _intake_fsync_dir_skipping(name: str) -> Callable[[], None]:
    """A patch of the inbox processor's ``fsync_dir`` that skips the folder called ``name``; others are synced."""

    def patch() -> None:
        import tenure.intake.fsio

        def fsync_dir(folder: Any) -> None:
            if os.path.basename(os.fsdecode(folder)) != name:
                tenure.intake.fsio.fsync_dir(folder)

        _patch("tenure.intake.inbox", "fsync_dir", fsync_dir)

    return patch


def _intake_publish_no_folder_fsync() -> None:
    _patch("tenure.intake.storage", "fsync_dir", lambda folder: None)


def _intake_commit_folder_not_durable() -> None:
    """Admission creates the new case folders without syncing their parents."""

    def create_dirs(folder: Any) -> list[Any]:
        os.makedirs(folder, exist_ok=True)
        return []

    _patch("tenure.intake.inbox", "_create_dirs", create_dirs)


def _intake_cache_no_fsync() -> None:
    _patch("tenure.intake.inbox", "fsync_file", lambda fd: None)


def _intake_commit_plain_mkdir() -> None:
    """commit() creates the package folder with a plain mkdir: the new folders' parents are not synced."""
    _patch("tenure.intake.commit", "make_dirs_durable", lambda folder: os.makedirs(folder, exist_ok=True))


def _intake_collect_no_folder_fsync() -> None:
    _patch("tenure.intake.collect", "fsync_dir", lambda folder: None)


def _intake_writer_no_fsync() -> None:
    _patch("tenure.intake.writer", "fsync_file", lambda fd: None)


#: name → (the scenario it runs in, the patch applied just before ``begin``)
MUTANTS: dict[str, tuple[str, Callable[[], None]]] = {
    "put-no-object-fsync": ("put", _no_file_fsync),
    "put-no-object-folder-fsync": ("put", _no_object_folder_fsync),
    "restore-no-syncfs": ("restore", _no_restore_syncfs),
    "atomic-write-no-folder-fsync": ("atomic-write", _no_atomic_write_folder_fsync),
    "put-trusts-existing-object": ("put-existing", _trust_existing_objects),
    "put-object-root-not-durable": ("put", _object_root_not_durable),
    "restore-no-parent-fsync": ("restore", _no_restore_parent_fsync),
    "delete-no-folder-fsync": ("gc-delete", _no_delete_folder_fsync),
    "checkpoint-no-object-folder-fsync": ("checkpoint", _no_object_folder_fsync_nor_sync),
    "checkpoint-trusts-found-objects": ("checkpoint-existing", _no_object_store_sync),
    "intake-publish-no-folder-fsync": ("intake-admission", _intake_publish_no_folder_fsync),
    "intake-commit-folder-not-durable": ("intake-admission", _intake_commit_folder_not_durable),
    "intake-cache-no-fsync": ("intake-admission", _intake_cache_no_fsync),
    "intake-quarantine-parent-not-synced": ("intake-quarantine", _intake_fsync_dir_skipping("quarantine")),
    "intake-ack-no-inbox-fsync": ("intake-admission", _intake_fsync_dir_skipping("inbox")),
    "intake-writer-no-fsync": ("intake-advance", _intake_writer_no_fsync),
    "intake-span-writer-no-fsync": ("intake-advance-span", _intake_writer_no_fsync),
    "intake-collect-no-folder-fsync": ("intake-collect", _intake_collect_no_folder_fsync),
    "intake-commit-plain-mkdir": ("intake-commit-new-folder", _intake_commit_plain_mkdir),
}


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as fh:
        config = json.load(fh)
    work = Work(config["workdir"], config["recorder"], config.get("mutant"))
    recorder = InProcessRecorder() if work.recorder == "inprocess" else None
    if recorder is not None:
        recorder.install()
    try:
        spec = SCENARIOS[config["scenario"]](work)
    finally:
        if recorder is not None:
            recorder.uninstall()
    if recorder is not None:
        with open(config["events_out"], "w", encoding="utf-8") as fh:
            json.dump(dump_events(recorder.events), fh)
    with open(config["spec_out"], "w", encoding="utf-8") as fh:
        json.dump(asdict(spec), fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
