"""Every durable path keeps the persistence rules, and no crash state shows a truncated file.

Each test runs one durable path in a child process under a recorder (strace,
and the in-process fallback), replays the recorded calls on the model of
:mod:`tests.durability.rules` and checks rules (a)–(d) at every rename and
acknowledgement, then (for object puts, deletes and ``atomic_write``) every
crash state between the start of the operation and its acknowledgement.
"""

from __future__ import annotations

import os

import pytest

from tests.durability.harness import Run, run_scenario
from tests.durability.rules import ack_positions
from tests.durability.trace import FSYNC, MARK, SYNCFS

#: scenario → the least each run must have recorded (so a parser that sees nothing cannot pass)
EXPECTED = {
    "put": {"rename into scope": 6, "fsync": 6, "mkdir": 6},
    "checkpoint": {"rename into scope": 3, "fsync": 3},
    "restore": {"rename into scope": 2, "syncfs": 1, "symlink": 1, "link": 1},
    "gc-delete": {"unlink": 4},
    "atomic-write": {"rename into scope": 2, "fsync": 4},
}


def _assert_clean(run: Run, scenario: str) -> None:
    assert run.violations == [], "\n".join(run.violations)
    assert run.crashes == [], "\n".join(run.crashes)
    for kind, least in EXPECTED.get(scenario, {}).items():
        assert run.counts.get(kind, 0) >= least, f"{kind}: {run.counts}"
    in_scope = (
        [p for p in run.model.unknown if any(s.covers(os.path.join(run.workdir, p)) for s in run.scopes)]
        if run.model
        else []
    )
    assert in_scope == [], "the trace never showed these created"


@pytest.mark.parametrize("scenario", ["put", "gc-delete", "atomic-write"])
def test_durable_path_keeps_the_persistence_rules(scenario: str, recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = run_scenario(scenario, recorder, str(tmp_path))
    _assert_clean(run, scenario)


def test_checkpoint_objects_are_durable_before_the_store_commits_the_publish(recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = run_scenario("checkpoint", recorder, str(tmp_path))
    _assert_clean(run, "checkpoint")
    assert run.facts["state"] == "READY"
    marks = {e.label: i for i, e in enumerate(run.events) if e.kind == MARK}
    points, problems = ack_positions(run.events, run.acks)
    assert problems == []
    publish_point = min(i for i, labels in points.items() if any("publish" in label for label in labels))
    assert marks["publish"] <= publish_point < marks["published"]
    if recorder == "strace":  # the publish point is the SQLite commit's own fsync
        assert run.events[publish_point].kind == FSYNC
        assert os.path.basename(run.events[publish_point].path or "").startswith("tenure.db")


def test_put_many_makes_an_existing_object_durable_before_acknowledging_it(recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A crashed writer left two objects whose file and folder entry were never synced; put_many syncs them."""
    run = run_scenario("put-existing", recorder, str(tmp_path))
    _assert_clean(run, "put-existing")
    assert run.facts["new"] == 2, "the existing objects are acknowledged, not written again"
    begin = next(i for i, e in enumerate(run.events) if e.kind == MARK and e.label == "begin")
    synced = {e.path for e in run.events[begin:] if e.kind == FSYNC}
    finals = run.windows[0].finals
    for left_behind in (finals[0], finals[-1]):
        assert left_behind in synced and os.path.dirname(left_behind) in synced


def test_restore_flushes_with_one_syncfs_not_per_file(recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = run_scenario("restore", recorder, str(tmp_path))
    _assert_clean(run, "restore")
    begin = next(i for i, e in enumerate(run.events) if e.kind == MARK and e.label == "begin")
    after = run.events[begin:]
    assert [e.kind for e in after].count(SYNCFS) == 1
    out = os.path.join(run.workdir, "out")
    assert [e.path for e in after if e.kind == FSYNC and e.path and e.path.startswith(out)] == [out], (
        "one fsync of the parent after the rename, none per file"
    )


def test_checkpoint_makes_objects_a_crashed_writer_left_durable_before_publishing(recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = run_scenario("checkpoint-existing", recorder, str(tmp_path))
    assert run.facts["state"] == "READY"
    assert run.violations == [], "\n".join(run.violations)
