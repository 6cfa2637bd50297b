"""The kit itself: the strace parser, the in-process recorder and the model, on small known inputs."""

from __future__ import annotations

import builtins
import io
import os

import pytest

from tenure.fsio import atomic_write
from tenure.snapshots.fsutil import sync_filesystem
from tests.integration.durability.conftest import need_strace
from tests.integration.durability.rules import Ack, Scope, Window, check_rules, crash_violations
from tests.integration.durability.trace import (
    CLOSE,
    FSYNC,
    LINK,
    MARK,
    MARK_PREFIX,
    MKDIR,
    OPEN,
    RENAME,
    SYNCFS,
    UNLINK,
    WRITE,
    Event,
    InProcessRecorder,
    dump_events,
    load_events,
    mark,
    parse_strace,
)

LOG = f"""\
100 openat(AT_FDCWD</w>, "d/tmp-1", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0644) = 3</w/d/tmp-1>
100 write(3</w/d/tmp-1>, "ab\\"c"..., 40) = 40
100 pwrite64(3</w/d/tmp-1>, "x", 1, 0) = 1
101 fsync(4</w/d> <unfinished ...>
100 fsync(3</w/d/tmp-1>) = 0
101 <... fsync resumed>) = 0
100 close(3</w/d/tmp-1>) = 0
100 renameat2(AT_FDCWD</w>, "d/tmp-1", AT_FDCWD</w>, "/w/d/final", RENAME_NOREPLACE) = 0
100 rename("/w/d/a", "/w/d/b") = -1 ENOENT (No such file or directory)
100 newfstatat(AT_FDCWD</w>, "{MARK_PREFIX}ack", 0x7ffd, 0) = -1 ENOENT (No such file or directory)
100 unlinkat(5</w/d>, "old", 0) = 0
100 unlinkat(AT_FDCWD</w>, "gone", AT_REMOVEDIR) = 0
100 mkdirat(AT_FDCWD</w>, "new\\303\\251", 0777) = 0
100 syncfs(6</w/x (deleted)>) = 0
100 +++ exited with 0 +++
"""


def test_parser_reads_the_calls_that_matter() -> None:
    events = parse_strace(LOG)
    kinds = [(e.kind, e.path, e.path2) for e in events]
    assert kinds == [
        (OPEN, "/w/d/tmp-1", None),
        (WRITE, "/w/d/tmp-1", None),
        (WRITE, "/w/d/tmp-1", None),
        (FSYNC, "/w/d", None),  # placed where it started, before the file's fsync
        (FSYNC, "/w/d/tmp-1", None),
        (CLOSE, "/w/d/tmp-1", None),
        (RENAME, "/w/d/tmp-1", "/w/d/final"),
        (MARK, None, None),
        (UNLINK, "/w/d/old", None),
        ("rmdir", "/w/gone", None),
        (MKDIR, "/w/new\u00e9", None),
        (SYNCFS, "/w/x", None),
    ]
    assert events[0].creat and events[0].fd == 3 and not events[0].trunc
    assert (events[1].size, events[1].offset, events[2].offset) == (40, None, 0)
    assert events[7].label == "ack"
    assert load_events(dump_events(events)) == events


def test_in_process_recorder_sees_atomic_write_and_syncfs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "f")
    recorder = InProcessRecorder()
    recorder.install()
    try:
        mark("begin")
        atomic_write(target, b"data")
        sync_filesystem(str(tmp_path))
        mark("ack")
    finally:
        recorder.uninstall()
    assert InProcessRecorder.active is None and os.open.__module__ == "posix"
    ours = [e for e in recorder.events if e.kind == MARK or (e.path or "").startswith(str(tmp_path))]
    kinds = [e.kind for e in ours]
    assert kinds == [MARK, OPEN, WRITE, FSYNC, CLOSE, RENAME, OPEN, FSYNC, CLOSE, OPEN, SYNCFS, CLOSE, MARK]
    assert ours[5].path2 == target and ours[10].path == str(tmp_path)


def test_in_process_recorder_sees_files_the_builtin_open_writes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    real = builtins.open
    recorder = InProcessRecorder()
    recorder.install()
    try:
        with open(tmp_path / "f", "xb") as fh:
            fh.write(b"data")
            fh.flush()
            os.fsync(fh.fileno())
        (tmp_path / "g").write_bytes(b"more")
        with open(tmp_path / "f", "rb") as fh:
            assert fh.read() == b"data"
    finally:
        recorder.uninstall()
    assert builtins.open is real and io.open is real
    ours = [(e.kind, os.path.basename(e.path or "")) for e in recorder.events if e.kind != MARK]
    assert ours == [
        (OPEN, "f"),
        (WRITE, "f"),
        (FSYNC, "f"),
        (CLOSE, "f"),
        (OPEN, "g"),
        (WRITE, "g"),
        (CLOSE, "g"),
    ], "reads pass through unrecorded"
    assert recorder.events[0].creat and recorder.events[1].offset == 0


def _events(*events: Event) -> list[Event]:
    return [Event(MARK, label="begin"), *events, Event(MARK, label="ack")]


def test_model_requires_data_then_rename_then_folder_sync() -> None:
    w = "/w"
    good = _events(
        Event(OPEN, "/w/t", fd=3, creat=True),
        Event(WRITE, "/w/t", fd=3, size=5),
        Event(FSYNC, "/w/t", fd=3),
        Event(RENAME, "/w/t", "/w/f"),
        Event(OPEN, "/w", fd=4),
        Event(FSYNC, "/w", fd=4),
    )
    scope, ack, window = [Scope("/w/f", w)], [Ack("ack")], [Window("begin", "ack", ("/w/f",))]
    assert check_rules(good, w, scope, ack)[0] == []
    assert crash_violations(good, w, window) == []
    unsynced = [e for e in good if not (e.kind == FSYNC and e.path == "/w/t")]
    problems = check_rules(unsynced, w, scope, ack)[0]
    assert [p[:3] for p in problems] == ["(a)", "(a)"]  # at the rename, and still at the acknowledgement
    assert "0 of 5 bytes" in crash_violations(unsynced, w, window)[0]
    no_folder = [e for e in good if not (e.kind == FSYNC and e.path == w)]
    assert [p[:3] for p in check_rules(no_folder, w, scope, ack)[0]] == ["(b)"]
    covered = no_folder[:-1] + [Event(SYNCFS, "/w"), no_folder[-1]]
    assert check_rules(covered, w, scope, ack)[0] == []
    other_fs = check_rules(covered, w, scope, ack, same_fs=lambda path: path is None)[0]
    assert [p[:3] for p in other_fs] == ["(b)"], "a syncfs of another file system covers nothing here"


def test_ci_fails_where_strace_cannot_run_and_elsewhere_skips() -> None:
    need_strace(None, in_ci=True)
    with pytest.raises(pytest.fail.Exception, match="CI=true but strace is not installed"):
        need_strace("strace is not installed", in_ci=True)
    with pytest.raises(pytest.skip.Exception):
        need_strace("strace is not installed", in_ci=False)


def test_model_requires_data_before_a_link_and_judges_named_scopes_at_a_removal() -> None:
    w = "/w"
    events = _events(
        Event(OPEN, "/w/d/t", fd=3, creat=True),
        Event(WRITE, "/w/d/t", fd=3, size=5),
        Event(LINK, "/w/d/t", "/w/d/f"),
        Event(UNLINK, "/w/d/t"),
        Event(RENAME, "/w/in/x", "/w/in/.ack-1"),
        Event(UNLINK, "/w/in/.ack-1"),
    )
    events.insert(0, Event(OPEN, "/w/in/x", fd=5))  # the input, there before the operation began
    scopes = [Scope("/w/d", w), Scope("/w/in", w)]
    removal = Ack("begin", removal_of=("/w/in/.ack-",), scopes=("/w/d",))
    problems = check_rules(events, w, scopes, [removal])[0]
    assert [p[:3] for p in problems] == ["(a)", "(b)"], problems  # at the link; at the removal, its folder
    assert "before it was linked to d/f" in problems[0] and "the unlink of .ack-1" in problems[1]
    synced = events[:4] + [Event(FSYNC, "/w/d/t", fd=3)] + events[4:6] + [Event(OPEN, "/w/d", fd=4)]
    synced += [Event(FSYNC, "/w/d", fd=4)] + events[6:]
    assert check_rules(synced, w, scopes, [removal])[0] == [], "the inbox is not judged at the removal"
    assert [p[:3] for p in check_rules(synced, w, scopes, [removal, Ack("ack")])[0]] == ["(d)"]
    missing = check_rules(synced, w, scopes, [Ack("begin", removal_of=("/w/other",))])[0]
    assert missing == ["no unlink of /w/other… after mark 'begin'"]
