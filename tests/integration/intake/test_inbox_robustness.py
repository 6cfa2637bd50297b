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
* inbox names that are not UTF-8 are quarantined with a valid UTF-8 report;
* an inbox name that is no regular file (a FIFO, a socket, a folder) is
  quarantined by a rename, never opened.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from tenure.faults import at
from tenure.intake import InboxProcessor, PollResult, ResultKind, Workspace
from tenure.intake.inbox import ACK_PREFIX, ACK_RENAMED
from tests.support.intake import put


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


def _make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    else:
        path.mkdir()
        (path / "inside.zip").write_bytes(b"whatever a folder holds")


@pytest.mark.parametrize(("kind", "described"), [("fifo", "FIFO"), ("socket", "socket"), ("folder", "folder")])
def test_input_that_is_not_a_regular_file_is_quarantined_by_a_rename(ws: Workspace, kind: str, described: str) -> None:
    """A FIFO, a socket or a folder in the inbox ends QUARANTINED not-a-regular-file, next to a valid package
    admitted in the same pass: moved whole into its quarantine folder, never opened (a FIFO nobody writes to
    would block a reader forever), and nothing is left in the inbox for the next pass."""
    special = ws.inbox / f"special-{kind}"
    _make_special(special, kind)
    put(ws, "valid.zip")
    results = _poll_in_a_thread(ws)
    assert [(r.input_path.name if r.input_path else None, r.kind, r.code) for r in results] == [
        ("special-" + kind, ResultKind.QUARANTINED, "not-a-regular-file"),
        ("valid.zip", ResultKind.ACCEPTED, None),
    ]
    assert list(ws.inbox.iterdir()) == []
    folder = Path(results[0].paths["quarantine"])
    assert sorted(os.listdir(folder)) == ["input", "validation_error.json"]
    moved = folder / "input"
    assert {"fifo": stat.S_ISFIFO, "socket": stat.S_ISSOCK, "folder": stat.S_ISDIR}[kind](os.lstat(moved).st_mode)
    report = json.loads((folder / "validation_error.json").read_text())
    assert (report["code"], report["input_kind"], report["input_name"]) == (
        "not-a-regular-file",
        described,
        f"special-{kind}",
    )
    assert [r.kind for r in InboxProcessor(ws).poll() if r.input_path is not None] == []


def test_input_that_turns_into_a_fifo_before_it_is_opened_is_quarantined(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name held a regular file when it was looked at and a FIFO when it was opened: the open does not
    wait for a writer, and the input is quarantined as what it is."""
    fifo = ws.inbox / "swapped.zip"
    os.mkfifo(fifo)
    real_lstat = os.lstat
    regular = real_lstat(put(ws, "valid.zip"))

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        return regular if os.fspath(path) == os.fspath(fifo) else real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    results = _poll_in_a_thread(ws)
    monkeypatch.undo()
    assert [(r.kind, r.code) for r in results] == [
        (ResultKind.QUARANTINED, "not-a-regular-file"),
        (ResultKind.ACCEPTED, None),
    ]
    assert list(ws.inbox.iterdir()) == []


def _poll_in_a_thread(ws: Workspace) -> list[PollResult]:
    """One poll, given 30 s; a poll stuck on a FIFO is released (by opening its write end) and fails the test."""
    found: list[list[PollResult]] = []
    worker = threading.Thread(target=lambda: found.append(InboxProcessor(ws).poll()), daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():
        for folder, _dirs, names in os.walk(ws.root):
            for name in names:
                path = os.path.join(folder, name)
                if stat.S_ISFIFO(os.lstat(path).st_mode):
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
        pytest.fail("the poll waited on a FIFO")
    return found[0]
