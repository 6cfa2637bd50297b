"""Native non-blocking locks with real processes (I-79..I-85, I-80 BUSY)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tenure.intake import CheckpointStore, InboxProcessor, ResultKind, Workspace
from tenure.intake.fsio import FileLock
from tests.support.intake import SRC, put

HOLD = (
    "import sys\n"
    "from tenure.intake import Workspace\n"
    "ws = Workspace(sys.argv[1])\n"
    "lock = ws.worker_lock() if sys.argv[2] == 'worker' else ws.case_lock(sys.argv[2])\n"
    "assert lock.acquire()\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)

RAW_FLOCK = (
    "import fcntl, sys\n"
    "fh = open(sys.argv[1], 'a')\n"
    "fcntl.flock(fh, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


class Holder:
    """A child process holding a lock until told to stop or killed."""

    def __init__(self, code: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the child holds the lock
        assert line.strip() == "locked", line

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_i79_locks_are_native_flock(ws: Workspace) -> None:
    holder = Holder(RAW_FLOCK, str(ws.locks / "worker.lock"))
    try:
        assert not ws.worker_lock().acquire()
    finally:
        holder.stop()
    lock = ws.worker_lock()
    assert lock.acquire()
    lock.release()


def test_i80_second_worker_refused_at_once(ws: Workspace) -> None:
    put(ws, "a.zip")
    holder = Holder(HOLD, str(ws.root), "worker")
    try:
        started = time.monotonic()
        results = InboxProcessor(ws).poll()
        elapsed = time.monotonic() - started
    finally:
        holder.stop()
    assert [r.kind for r in results] == [ResultKind.BUSY]
    assert results[0].code == "worker-busy"
    assert elapsed < 5
    assert (ws.inbox / "a.zip").exists()


def test_i81_case_lock_keyed_on_case_only(ws: Workspace) -> None:
    put(ws, "1.zip", "case-A", "pkg-1")
    put(ws, "2.zip", "case-A", "pkg-2")
    put(ws, "3.zip", "case-B", "pkg-1")
    holder = Holder(HOLD, str(ws.root), "case-A")
    try:
        results = InboxProcessor(ws).poll()
    finally:
        holder.stop()
    assert [(r.case_id, r.package_id, r.kind) for r in results] == [
        ("case-A", "pkg-1", ResultKind.BUSY),
        ("case-A", "pkg-2", ResultKind.BUSY),
        ("case-B", "pkg-1", ResultKind.ACCEPTED),
    ]


def test_i82_no_stealing_however_old(ws: Workspace) -> None:
    holder = Holder(HOLD, str(ws.root), "worker")
    try:
        lock_file = ws.locks / "worker.lock"
        os.utime(lock_file, (0, 0))  # held "since 1970"
        assert not ws.worker_lock().acquire()
        assert [r.kind for r in InboxProcessor(ws).poll()] == [ResultKind.BUSY]
    finally:
        holder.stop()


def test_i83_busy_case_yields_at_once(ws: Workspace) -> None:
    put(ws, "a.zip")
    holder = Holder(HOLD, str(ws.root), "case-A")
    try:
        started = time.monotonic()
        [result] = InboxProcessor(ws).poll()
        assert time.monotonic() - started < 5
    finally:
        holder.stop()
    assert result.kind is ResultKind.BUSY and result.code == "case-busy"


def test_i84_crashed_holder_releases_lock(ws: Workspace) -> None:
    holder = Holder(HOLD, str(ws.root), "worker")
    assert not ws.worker_lock().acquire()
    holder.kill()
    lock = ws.worker_lock()
    assert lock.acquire()
    lock.release()


def test_i85_lock_files_never_deleted(ws: Workspace) -> None:
    put(ws, "a.zip")
    InboxProcessor(ws).poll()
    inodes = {p.name: p.stat().st_ino for p in ws.locks.iterdir()}
    CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    InboxProcessor(Workspace(ws.root)).poll()
    assert {p.name: p.stat().st_ino for p in ws.locks.iterdir()} == inodes
    assert len(inodes) == 2


def test_file_lock_excludes_within_one_process(tmp_path: Path) -> None:
    first, second = FileLock(tmp_path / "l.lock"), FileLock(tmp_path / "l.lock")
    assert first.acquire() and not second.acquire()
    first.release()
    assert second.acquire()
    second.release()


WAIT_THEN_POLL = (
    "import sys, os, time, json\n"
    "go = sys.argv[2]\n"
    "deadline = time.monotonic() + 30\n"
    "while not os.path.exists(go):\n"
    "    assert time.monotonic() < deadline, 'no go signal'\n"
    "from tenure.intake import Workspace, InboxProcessor\n"
    "ws = Workspace(sys.argv[1])\n"
    "res = InboxProcessor(ws).poll(max_jobs=100)\n"
    "print(json.dumps([r.to_dict() for r in res]))\n"
)


def test_two_workers_never_admit_twice(ws: Workspace, tmp_path: Path) -> None:
    for i in range(30):
        put(ws, f"{i:02d}.zip", f"case-{i}")
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": SRC}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WAIT_THEN_POLL, str(ws.root), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    go.write_text("go")
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out))
    accepted = [r["case_id"] for out in outputs for r in out if r["kind"] == "ACCEPTED"]
    assert sorted(accepted) == sorted(f"case-{i}" for i in range(30))
    for out in outputs:
        busy = [r for r in out if r["kind"] == "BUSY"]
        assert not busy or len(out) == 1
    store = CheckpointStore(ws)
    assert all(store.generations(f"case-{i}", "pkg-1") == [1] for i in range(30))
