"""kill -9 at every step of the commit sequence, in real processes
(I-87..I-95, SPEC §3.5): the next poll or advance repairs local metadata,
never writes a second generation, never loses an admitted package and never
acknowledges an input that was not published."""

from __future__ import annotations

import json
import os

import pytest

from tenure.faults import POINTS
from tenure.intake import CheckpointStore, InboxProcessor, ResultKind, State, Workspace
from tenure.intake.collect import CRASH_POINTS as COLLECT_POINTS
from tenure.intake.commit import CRASH_POINTS
from tests.support.intake import ADVANCE, POLL, put, run_python, to_building

#: admission is a group commit (ADR 0109), here a batch of one
BEFORE_PUBLISH = [
    "intake.admit.cached",
    "intake.batch.staged",
    "intake.batch.runtime-written",
    "intake.batch.synced",
]
AFTER_PUBLISH = [
    "intake.batch.generation-named",
    "intake.batch.durable",
    "intake.batch.runtime-cleared",
    "intake.admit.before-ack",
]
#: the batch's points tested with several inputs in tests/integration/intake/test_group_commit.py
BATCH_ONLY = ["intake.batch.acknowledged"]
#: the collector's points, tested in tests/integration/intake/test_format_v2.py
#: (test_i132_crash_during_collect_loses_nothing)
COLLECT_ONLY = list(COLLECT_POINTS)


def test_every_intake_crash_point_has_a_crash_test() -> None:
    import tenure.intake.inbox  # noqa: F401 - registers the admission points

    covered = (
        set(BEFORE_PUBLISH)
        | set(AFTER_PUBLISH)
        | set(BATCH_ONLY)
        | set(COLLECT_ONLY)
        | set(CRASH_POINTS)
        | {"intake.quarantine.copied", "intake.quarantine.reported", "intake.admit.ack-renamed"}
    )
    assert {p for p in POINTS if p.startswith("intake.")} == covered
    assert set(CRASH_POINTS) <= covered


def crash(code: str, *args: str, point: str) -> None:
    result = run_python(code, *args, env={"TENURE_CRASH_AT": point})
    assert result.returncode == -9, (point, result.returncode, result.stderr)


def generation_files(ws: Workspace, case: str = "case-A") -> list[str]:
    folder = ws.case_dir(case, "pkg-1")
    return sorted(n for n in os.listdir(folder) if n.startswith("g")) if folder.exists() else []


def assert_repaired(ws: Workspace, generation: int) -> None:
    folder = ws.case_dir("case-A", "pkg-1")
    index = json.loads((folder / "current.json").read_text())
    assert index["generation"] == generation
    assert ws.read_runtime() is None


@pytest.mark.parametrize("point", BEFORE_PUBLISH + AFTER_PUBLISH)
def test_i92_i93_crash_during_admission(ws: Workspace, point: str) -> None:
    inbox_file = put(ws, "a.zip")
    crash(POLL, str(ws.root), point=point)
    published = point in AFTER_PUBLISH
    assert generation_files(ws) == (["g00000001.zip"] if published else [])
    assert inbox_file.exists(), "never acknowledged before publication"
    if point in ("intake.batch.runtime-written", "intake.batch.synced", "intake.batch.generation-named"):
        assert ws.read_runtime()["case_id"] == "case-A"

    results = InboxProcessor(ws).poll()
    assert [r.kind for r in results] == [ResultKind.DUPLICATE if published else ResultKind.ACCEPTED]
    assert generation_files(ws) == ["g00000001.zip"]
    assert not inbox_file.exists()
    assert_repaired(ws, 1)
    assert CheckpointStore(ws).current("case-A", "pkg-1").state is State.VALIDATED
    tmp = [p for p in ws.case_dir("case-A", "pkg-1").iterdir() if p.name.startswith(".tmp-")]
    assert tmp == [], "the retry removes what the crashed writer left"


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_i92_i93_crash_during_advance(ws: Workspace, point: str) -> None:
    to_building(ws)
    crash(ADVANCE, str(ws.root), "case-A", "pkg-1", "INTERPRETING", "interpret", point=point)
    published = CRASH_POINTS.index(point) >= CRASH_POINTS.index("intake.commit.published")
    expected = ["g00000001.zip", "g00000002.zip"] + (["g00000003.zip"] if published else [])
    assert generation_files(ws) == expected
    store = CheckpointStore(ws)
    assert store.generation("case-A", "pkg-1") == (3 if published else 2)

    package = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="interpret")
    assert package.generation == 3 and package.state is State.INTERPRETING
    assert generation_files(ws) == ["g00000001.zip", "g00000002.zip", "g00000003.zip"]
    assert_repaired(ws, 3)


def test_crash_while_the_original_holds_its_private_name(ws: Workspace) -> None:
    """The next poll puts the original back and judges it again: DUPLICATE, nothing lost or written twice."""
    inbox_file = put(ws, "a.zip")
    crash(POLL, str(ws.root), point="intake.admit.ack-renamed")
    assert generation_files(ws) == ["g00000001.zip"]
    [private] = [p for p in ws.inbox.iterdir()]
    assert private.name.startswith(".tenure-ack-") and not inbox_file.exists()
    [result] = InboxProcessor(ws).poll()
    assert result.kind is ResultKind.DUPLICATE
    assert generation_files(ws) == ["g00000001.zip"]
    assert list(ws.inbox.iterdir()) == []


def test_i95_temp_files_are_not_generations(ws: Workspace) -> None:
    to_building(ws)
    crash(
        ADVANCE, str(ws.root), "case-A", "pkg-1", "INTERPRETING", "interpret", point="intake.commit.generation-written"
    )
    folder = ws.case_dir("case-A", "pkg-1")
    leftovers = [p for p in folder.iterdir() if p.name.startswith(".tmp-")]
    assert len(leftovers) == 1  # a complete, validated but unpublished zip
    assert CheckpointStore(ws).current("case-A", "pkg-1").generation == 2
    CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="interpret")
    assert [p for p in folder.iterdir() if p.name.startswith(".tmp-")] == [], "provably abandoned: removed"


@pytest.mark.parametrize("point", ["intake.quarantine.copied", "intake.quarantine.reported"])
def test_i95_crash_during_quarantine(ws: Workspace, point: str) -> None:
    bad = ws.inbox / "bad.zip"
    bad.write_bytes(b"not a zip")
    crash(POLL, str(ws.root), point=point)
    assert bad.exists()
    [partial] = list(ws.quarantine.iterdir())
    assert (partial / "validation_error.json").exists() == (point == "intake.quarantine.reported")
    [result] = InboxProcessor(ws).poll()
    assert result.kind is ResultKind.QUARANTINED and result.code == "not-a-zip"
    assert not bad.exists()
    complete = [q for q in ws.quarantine.iterdir() if (q / "validation_error.json").exists()]
    assert len(complete) >= 1 and list(ws.cases.iterdir()) == []


def test_i87_validation_happens_before_any_write(ws: Workspace) -> None:
    to_building(ws)
    folder = ws.case_dir("case-A", "pkg-1")
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    runtime = ws.runtime_file.stat().st_mtime_ns
    result = run_python(
        ADVANCE,
        str(ws.root),
        "case-A",
        "pkg-1",
        "REPORTING",
        "skip",
        env={"TENURE_CRASH_AT": "intake.commit.validated"},
    )
    assert result.returncode == 1 and "transition-skip" not in result.stdout
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert ws.runtime_file.stat().st_mtime_ns == runtime


def test_i96_nothing_is_collected(ws: Workspace) -> None:
    to_building(ws)
    (ws.inbox / "bad").write_bytes(b"x")
    InboxProcessor(ws).poll()
    CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    assert generation_files(ws) == ["g00000001.zip", "g00000002.zip", "g00000003.zip"]
    assert len(list(ws.cache.iterdir())) == 2 and len(list(ws.quarantine.iterdir())) == 1
