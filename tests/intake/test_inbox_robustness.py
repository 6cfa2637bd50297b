"""A poll never loses an upload and never lets one input hold up the rest.

* the original is renamed to a private name before it is compared and
  removed, so a producer that publishes a new file under the same name in
  that moment publishes a new input (the old code hashed and then unlinked by
  name, removing the new upload);
* an acknowledgement cut short by a crash is recovered: the original goes
  back into the inbox and is judged again;
* an input that ends ERROR (an infrastructure fault) does not count toward
  ``max_jobs`` and is polled after the others next time;
* whatever an input's bytes make the reader do, the input ends QUARANTINED
  with a code, never ERROR;
* inbox names that are not UTF-8 are quarantined with a valid UTF-8 report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tenure.faults import at
from tenure.intake import InboxProcessor, ResultKind, Workspace
from tenure.intake.inbox import ACK_PREFIX, ACK_RENAMED
from tests.intake.intake_support import put


def test_upload_published_while_the_original_is_acknowledged_is_kept(ws: Workspace) -> None:
    first = put(ws, "a.zip", package="pkg-1")
    newer = put(ws, "newer.zip", package="pkg-2").read_bytes()
    (ws.inbox / "newer.zip").unlink()

    def producer_republishes() -> None:
        tmp = ws.inbox / ".upload"
        tmp.write_bytes(newer)
        os.replace(tmp, first)  # the producer's atomic publish under the same name

    with at(ACK_RENAMED, producer_republishes):
        [result] = InboxProcessor(ws).poll()
    assert result.kind is ResultKind.ACCEPTED and result.package_id == "pkg-1"
    assert first.read_bytes() == newer, "the new upload is still in the inbox"
    [second] = InboxProcessor(ws).poll()
    assert second.kind is ResultKind.ACCEPTED and second.package_id == "pkg-2"
    assert list(ws.inbox.iterdir()) == []


def test_original_replaced_before_acknowledgement_goes_back(ws: Workspace) -> None:
    first = put(ws, "a.zip", package="pkg-1")
    newer = put(ws, "b.zip", package="pkg-2").read_bytes()
    (ws.inbox / "b.zip").unlink()
    with at("intake.admit.before-ack", lambda: first.write_bytes(newer)):
        [result] = InboxProcessor(ws).poll()
    assert result.code == "input-changed"
    assert first.read_bytes() == newer
    assert not [p for p in ws.inbox.iterdir() if p.name.startswith(ACK_PREFIX)]


def test_acknowledgement_cut_short_is_recovered_and_judged_again(ws: Workspace) -> None:
    put(ws, "a.zip")
    [result] = InboxProcessor(ws).poll()
    assert result.kind is ResultKind.ACCEPTED
    # what a pass that died between the private rename and the removal leaves
    put(ws, "tmp.zip").rename(ws.inbox / f"{ACK_PREFIX}0123abcd")
    [again] = InboxProcessor(ws).poll()
    assert again.kind is ResultKind.DUPLICATE
    assert again.input_path is not None and again.input_path.name == "recovered-0123abcd"
    assert list(ws.inbox.iterdir()) == []


def test_abandoned_temporary_files_are_removed_under_the_worker_lock(ws: Workspace) -> None:
    (ws.cache / ".tmp-deadbeef.zip").write_bytes(b"partial")
    folder = ws.quarantine / "20260101T000000000000Z-x"
    folder.mkdir()
    (folder / ".tmp-cafe").write_bytes(b"{")
    InboxProcessor(ws).poll()
    assert not (ws.cache / ".tmp-deadbeef.zip").exists()
    assert not (folder / ".tmp-cafe").exists()


def test_inputs_that_failed_do_not_starve_the_others(ws: Workspace) -> None:
    bad = put(ws, "a-first.zip", package="pkg-bad")
    good = put(ws, "b-second.zip", package="pkg-good")

    def observer(event: str, path: Path) -> None:
        if event == "cached" and path == bad:
            raise OSError(5, "Input/output error")

    results = InboxProcessor(ws, observer=observer).poll(max_jobs=1)
    assert [(r.input_path, r.kind) for r in results] == [(bad, ResultKind.ERROR), (good, ResultKind.ACCEPTED)]
    assert bad.exists(), "an infrastructure fault leaves the input pending"
    late = put(ws, "0-early.zip", package="pkg-late")
    results = InboxProcessor(ws, observer=observer).poll(max_jobs=1)
    assert [(r.input_path, r.kind) for r in results] == [(late, ResultKind.ACCEPTED)], (
        "the input that failed before is polled after the others, and the budget ran out first"
    )
    [final] = InboxProcessor(ws).poll()
    assert final.kind is ResultKind.ACCEPTED and final.input_path == bad
    assert json.loads((ws.root / "runtime" / "failed.json").read_text()) == {}


@pytest.mark.parametrize("failure", [RecursionError("deep"), NotImplementedError("zip 9.9"), KeyError("x")])
def test_reader_failure_caused_by_the_bytes_is_quarantined_not_error(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    """Stands in for a reader bug some future hostile input finds: the input still ends with a code."""
    import tenure.intake.inbox as inbox

    def broken_reader(*args: object, **kwargs: object) -> object:
        raise failure

    put(ws, "a.zip")
    monkeypatch.setattr(inbox, "read_package", broken_reader)
    [result] = InboxProcessor(ws).poll()
    assert (result.kind, result.code) == (ResultKind.QUARANTINED, "unreadable-package")
    assert list(ws.inbox.iterdir()) == []


def test_inbox_name_that_is_not_utf8_is_quarantined_with_a_utf8_report(ws: Workspace) -> None:
    name = os.fsdecode(b"\xff\xfebad.zip")
    (ws.inbox / name).write_bytes(b"not a zip at all")
    [result] = InboxProcessor(ws).poll()
    assert (result.kind, result.code) == (ResultKind.QUARANTINED, "not-a-zip")
    [folder] = ws.quarantine.iterdir()
    report = json.loads((folder / "validation_error.json").read_bytes().decode("utf-8"))
    assert report["input_name"] == "\\xff\\xfebad.zip"
    assert list(ws.inbox.iterdir()) == []
