"""Fencing with real processes (S-48): a paused older writer can never publish."""

from __future__ import annotations

import json
import os
import signal

from tenure.store import open_store
from tests.support.procs import spawn, wait_for


def test_s48_sigstopped_older_writer_is_refused(store_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(store_url)
    store.workspaces.create("shared")
    a_ready, b_ready, go = (str(tmp_path / n) for n in ("a.ready", "b.ready", "go"))
    a = spawn(["-m", "tests.acceptance.workers.writer", store_url, "shared", "pod-a", "a" * 64, a_ready, go])
    wait_for(a_ready)
    os.kill(a.pid, signal.SIGSTOP)
    try:
        b = spawn(["-m", "tests.acceptance.workers.writer", store_url, "shared", "pod-b", "b" * 64, b_ready, go])
        wait_for(b_ready)
        open(go, "w").close()
        b_out, b_err = b.communicate(timeout=60)
        assert json.loads(b_out) == {"ok": True, "snapshot": json.loads(b_out)["snapshot"], "generation": 2}, b_err
    finally:
        os.kill(a.pid, signal.SIGCONT)
    a_out, a_err = a.communicate(timeout=60)
    assert json.loads(a_out) == {"ok": False, "code": "stale-generation", "generation": 1}, a_err
    ws = store.workspaces.workspace("shared")
    assert ws.head_snapshot_id == json.loads(b_out)["snapshot"]
    assert store.snapshots.get(ws.head_snapshot_id).root_oid == "b" * 64
    store.close()
