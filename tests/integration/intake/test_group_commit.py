"""Group commit of admission (ADR 0109): one poll stores a batch of inputs with one set of syncs.

kill -9 at every step of a batch of four inputs leaves each input admitted and
acknowledged, admitted and still in the inbox (the next poll says DUPLICATE,
never a second case), or untouched; the syncs per package fall with the batch
size; a batch is bounded by count and bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig, ResultKind, Workspace
from tenure.intake.storage import CaseStorage
from tests.support.intake import POLL, put, run_python

CASES = [f"case-{i}" for i in range(4)]

#: (crash point, how many times it passes first): every step of the batch, and the per-input steps at
#: the first, a middle and the last input
STEPS = [
    ("intake.admit.cached", 0),
    ("intake.admit.cached", 3),
    ("intake.batch.staged", 0),
    ("intake.batch.runtime-written", 0),
    ("intake.batch.synced", 0),
    ("intake.batch.generation-named", 0),
    ("intake.batch.generation-named", 2),
    ("intake.batch.generation-named", 3),
    ("intake.batch.durable", 0),
    ("intake.batch.runtime-cleared", 0),
    ("intake.admit.before-ack", 0),
    ("intake.admit.before-ack", 2),
    ("intake.admit.ack-renamed", 0),
    ("intake.admit.ack-renamed", 3),
    ("intake.batch.acknowledged", 0),
]


def _generations(ws: Workspace, case: str) -> list[str]:
    folder = ws.case_dir(case, "pkg-1")
    return sorted(n for n in os.listdir(folder) if n.startswith("g")) if folder.exists() else []


def _temporary(ws: Workspace) -> list[Path]:
    return [p for p in [*ws.cases.rglob(".tmp-*"), *ws.cache.glob(".tmp-*")] if p.is_file()]


@pytest.mark.parametrize(("point", "skip"), STEPS)
def test_i92_i93_crash_at_every_step_of_a_batch(ws: Workspace, point: str, skip: int) -> None:
    inputs = {case: put(ws, f"{i}.zip", case) for i, case in enumerate(CASES)}
    crashed = run_python(POLL, str(ws.root), env={"TENURE_CRASH_AT": point, "TENURE_CRASH_SKIP": str(skip)})
    assert crashed.returncode == -9, (point, skip, crashed.stderr)

    private = [p for p in ws.inbox.iterdir() if p.name.startswith(".tenure-ack-")]
    stored = {case for case in CASES if _generations(ws, case)}
    for case, path in inputs.items():
        assert _generations(ws, case) in ([], ["g00000001.zip"])
        if not path.exists():
            assert case in stored, f"{case} acknowledged before it was stored"
    assert len(private) <= 1 and len([c for c in CASES if not inputs[c].exists()]) <= len(stored)

    results = InboxProcessor(ws).poll()
    by_case = {r.case_id: r for r in results}
    for case in CASES:
        assert _generations(ws, case) == ["g00000001.zip"], "one case each, never a second"
        if inputs[case].exists() or case not in stored:
            expected = ResultKind.DUPLICATE if case in stored else ResultKind.ACCEPTED
            assert case in by_case and by_case[case].kind is expected, (case, results)
        assert CheckpointStore(ws).current(case, "pkg-1").state.value == "VALIDATED"
    assert list(ws.inbox.iterdir()) == [], "every input acknowledged once stored"
    assert _temporary(ws) == [], "the crashed batch's temporary files are removed"
    assert ws.read_runtime() is None


def _count_syncs(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    import tenure.intake.inbox as inbox
    import tenure.intake.storage as storage

    counts = {"fsync": 0, "syncfs": 0}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def syncfs(path: object) -> None:
        counts["syncfs"] += 1
        os.sync()

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(inbox, "sync_filesystem", syncfs)
    monkeypatch.setattr(storage, "sync_filesystem", syncfs)
    return counts


def _syncs_per_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, count: int, **config: int) -> float:
    ws = Workspace(tmp_path / name, IntakeConfig(**config))  # type: ignore[arg-type]
    for i in range(count):
        put(ws, f"{i:03d}.zip", f"case-{i}")
    counts = _count_syncs(monkeypatch)
    results = InboxProcessor(ws).poll()
    monkeypatch.undo()
    assert [r.kind for r in results] == [ResultKind.ACCEPTED] * count
    return (counts["fsync"] + counts["syncfs"]) / count


def test_syncs_per_package_fall_with_the_batch_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = _syncs_per_package(tmp_path, monkeypatch, "one", 16, batch_packages=1, syncfs_from=0)
    fsyncs = _syncs_per_package(tmp_path, monkeypatch, "fsync", 16, batch_packages=16, syncfs_from=0)
    grouped = _syncs_per_package(tmp_path, monkeypatch, "grouped", 16, batch_packages=16)
    assert one > fsyncs > grouped
    assert one >= 10 and fsyncs < 8 and grouped < 1, (one, fsyncs, grouped)


def test_a_batch_is_bounded_by_count_and_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    real = CaseStorage.publish_many

    def counting(self: CaseStorage, staged, also=()):  # type: ignore[no-untyped-def]
        sizes.append(len(staged))
        return real(self, staged, also)

    monkeypatch.setattr(CaseStorage, "publish_many", counting)
    ws = Workspace(tmp_path / "count", IntakeConfig(batch_packages=3))
    for i in range(7):
        put(ws, f"{i}.zip", f"case-{i}")
    assert len(InboxProcessor(ws).poll()) == 7
    assert sizes == [3, 3, 1]
    sizes.clear()
    ws = Workspace(tmp_path / "bytes", IntakeConfig(batch_bytes=1))
    for i in range(3):
        put(ws, f"{i}.zip", f"case-{i}")
    assert len(InboxProcessor(ws).poll()) == 3
    assert sizes == [1, 1, 1]


def test_one_case_twice_in_a_poll_is_stored_in_two_batches(ws: Workspace) -> None:
    put(ws, "a.zip", "case-A", "pkg-1")
    put(ws, "b.zip", "case-A", "pkg-2")
    put(ws, "c.zip", "case-A", "pkg-1")  # the same input again: a DUPLICATE of the first
    results = InboxProcessor(ws).poll()
    assert [r.kind for r in results] == [ResultKind.ACCEPTED, ResultKind.ACCEPTED, ResultKind.DUPLICATE]
    assert list(ws.inbox.iterdir()) == []


def test_results_keep_inbox_order_around_quarantined_inputs(ws: Workspace) -> None:
    put(ws, "0.zip", "case-0")
    (ws.inbox / "1.zip").write_bytes(b"not a zip")
    put(ws, "2.zip", "case-2")
    results = InboxProcessor(ws).poll()
    assert [(r.input_path.name if r.input_path else None, r.kind) for r in results] == [
        ("0.zip", ResultKind.ACCEPTED),
        ("1.zip", ResultKind.QUARANTINED),
        ("2.zip", ResultKind.ACCEPTED),
    ]


def test_a_failed_barrier_leaves_the_whole_batch_pending(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    import tenure.intake.inbox as inbox

    for i in range(3):
        put(ws, f"{i}.zip", f"case-{i}")

    def broken(self: object, files: object, folders: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(inbox.InboxProcessor, "_sync", broken)
    results = InboxProcessor(ws).poll()
    assert [(r.kind, r.code) for r in results] == [(ResultKind.ERROR, "io-error")] * 3
    assert len(list(ws.inbox.iterdir())) == 3 and _temporary(ws) == []
    assert all(not _generations(ws, f"case-{i}") for i in range(3))
    monkeypatch.undo()
    assert [r.kind for r in InboxProcessor(ws).poll()] == [ResultKind.ACCEPTED] * 3
