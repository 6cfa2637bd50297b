"""Every durable path keeps the persistence rules, and no crash state shows a truncated file.

Each test runs one durable path in a child process under a recorder (strace,
and the in-process fallback), replays the recorded calls on the model of
:mod:`tests.integration.durability.rules` and checks rules (a)–(d) at every rename, link
and acknowledgement, then (for object puts, deletes, ``atomic_write`` and the
intake) every crash state between the start of the operation and its
acknowledgement.
"""

from __future__ import annotations

import os

import pytest

from tests.integration.durability.harness import Run, run_scenario
from tests.integration.durability.rules import ack_positions
from tests.integration.durability.trace import FSYNC, LINK, MARK, MKDIR, SYNCFS, UNLINK

#: scenario → the least each run must have recorded (so a parser that sees nothing cannot pass)
EXPECTED = {
    "put": {"rename into scope": 6, "fsync": 6, "mkdir": 6},
    "checkpoint": {"rename into scope": 3, "fsync": 3},
    "restore": {"rename into scope": 2, "syncfs": 1, "symlink": 1, "link": 1},
    "gc-delete": {"unlink": 4},
    "atomic-write": {"rename into scope": 2, "fsync": 4},
    "intake-admission": {"link into scope": 2, "rename into scope": 4, "fsync": 8, "unlink": 2},
    "intake-admission-batch": {"link into scope": 6, "rename into scope": 8, "unlink": 6},
    "intake-quarantine": {"link into scope": 2, "rename into scope": 2, "fsync": 5, "mkdir": 1},
    "intake-quarantine-large": {"rename into scope": 2, "fsync": 4, "mkdir": 1},
    "intake-advance": {"link into scope": 1, "rename into scope": 3, "fsync": 5},
    "intake-advance-span": {"link into scope": 1, "rename into scope": 3, "fsync": 5},
    "intake-commit-new-folder": {"link into scope": 1, "rename into scope": 3, "fsync": 5, "mkdir": 2},
    "intake-collect": {"unlink": 2, "fsync": 1},
}
#: intake scenario → what its operation reported
INTAKE = {
    "intake-admission": {"results": [["ACCEPTED", None]]},
    "intake-admission-batch": {"results": [["ACCEPTED", None]] * 3},
    "intake-quarantine": {"results": [["QUARANTINED", "not-a-zip"]]},
    "intake-quarantine-large": {"results": [["QUARANTINED", "archive-too-large"]], "cached": []},
    "intake-advance": {"admitted": [["ACCEPTED", None]], "generation": 2, "state": "BUILDING_CASE"},
    "intake-advance-span": {"generation": 3, "link": "g00000001.zip"},
    "intake-commit-new-folder": {"generation": 1, "state": "VALIDATED", "link": None, "reads_back": True},
    "intake-collect": {
        "removed": ["g00000002.zip", "g00000004.zip"],
        "left": ["current.json", "g00000001.zip", "g00000003.zip", "g00000005.zip", "g00000006.zip"],
    },
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


@pytest.mark.parametrize("scenario", sorted(INTAKE))
def test_intake_path_keeps_the_persistence_rules(scenario: str, recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = run_scenario(scenario, recorder, str(tmp_path))
    _assert_clean(run, scenario)
    assert run.facts == INTAKE[scenario]


def test_intake_admission_stores_everything_before_it_removes_the_input(recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The acknowledgement is the unlink of the input under its private name, after the publication; the
    inbox is synced after it."""
    run = run_scenario("intake-admission", recorder, str(tmp_path))
    _assert_clean(run, "intake-admission")
    marks = {e.label: i for i, e in enumerate(run.events) if e.kind == MARK}
    points, problems = ack_positions(run.events, run.acks)
    assert problems == []
    removal = next(i for i, labels in points.items() if any("unlink" in label for label in labels))
    assert run.events[removal].kind == UNLINK
    assert os.path.basename(run.events[removal].path or "").startswith(".tenure-ack-")
    assert marks["published"] < removal < marks["ack"]
    inbox = os.path.dirname(run.events[removal].path or "")
    assert any(e.kind == FSYNC and e.path == inbox for e in run.events[removal : marks["ack"]])
    links = [e.path2 for e in run.events[marks["begin"] :] if e.kind == LINK]
    assert sum(os.path.basename(p or "") == "g00000001.zip" for p in links) == 1


def test_intake_group_commit_syncs_every_generation_before_it_removes_any_input(recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ADR 0109: three inputs, one batch. Every generation and the case folder entry naming it are durable
    (fsynced, or covered by a syncfs) before the first input leaves the inbox; each input is removed
    exactly once, and the inbox is synced once after the last removal."""
    run = run_scenario("intake-admission-batch", recorder, str(tmp_path))
    _assert_clean(run, "intake-admission-batch")
    marks = {e.label: i for i, e in enumerate(run.events) if e.kind == MARK}
    after = run.events[marks["begin"] :]
    removals = [i for i, e in enumerate(after) if e.kind == UNLINK and ".tenure-ack-" in (e.path or "")]
    links = [i for i, e in enumerate(after) if e.kind == LINK and (e.path2 or "").endswith("g00000001.zip")]
    assert len(removals) == 3 and len(links) == 3
    assert max(links) < min(removals)
    for i in links:
        folder = os.path.dirname(after[i].path2 or "")
        assert any((e.kind == FSYNC and e.path == folder) or e.kind == SYNCFS for e in after[i : min(removals)]), (
            f"{folder} not synced before the first input was removed"
        )
    inbox = os.path.dirname(after[removals[0]].path or "")
    inbox_syncs = [i for i, e in enumerate(after) if e.kind == FSYNC and e.path == inbox]
    assert len(inbox_syncs) == 1 and inbox_syncs[0] > max(removals)


def test_intake_quarantine_syncs_its_folders_before_the_input_leaves_the_inbox(recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The new folder's parent is synced after its mkdir; an oversized input, moved there, is durable in its
    new folder before its removal from the inbox is."""
    run = run_scenario("intake-quarantine-large", recorder, str(tmp_path))
    _assert_clean(run, "intake-quarantine-large")
    begin = next(i for i, e in enumerate(run.events) if e.kind == MARK and e.label == "begin")
    after = run.events[begin:]
    made = next(i for i, e in enumerate(after) if e.kind == MKDIR)
    folder = after[made].path or ""
    quarantine, inbox = os.path.dirname(folder), os.path.join(os.path.dirname(os.path.dirname(folder)), "inbox")
    synced = [e.path for e in after[made:] if e.kind == FSYNC]
    assert synced[0] == quarantine
    assert synced.index(folder) < synced.index(inbox)
