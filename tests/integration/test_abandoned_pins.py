"""A pin whose process was killed is dropped by the next GC, not kept for its six-hour TTL."""

from __future__ import annotations

import os
import subprocess
import sys

from tenure.objects.local import LocalObjectStore
from tenure.store import Store
from tenure.workspaces import WorkspaceService
from tenure.workspaces.holders import abandoned, process_holder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_pin_of_a_killed_process_is_dropped_and_a_live_ones_kept(
    store: Store, objects: LocalObjectStore, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    service = WorkspaceService(store, objects, str(tmp_path / "data"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a\n")
    service.create("w")
    snap = service.checkpoint("w", str(src)).snapshot
    live = process_holder("pod-a")
    dead = live.rsplit(":", 1)[0] + f":{_dead_pid()}"
    assert abandoned(dead) and not abandoned(live) and not abandoned("cli@another-host:1")
    store.snapshots.pin_snapshot(snap.id, dead, ttl_s=6 * 3600.0)
    store.snapshots.pin_snapshot(snap.id, live, ttl_s=6 * 3600.0)
    store.snapshots.pin_snapshot(snap.id, "cli@another-host:1", ttl_s=6 * 3600.0)
    service.gc(grace_s=0)
    with store.db.transaction(write=False) as tx:
        holders = sorted(r["holder"] for r in tx.execute("pins_holders"))
    assert holders == sorted([live, "cli@another-host:1"])
    assert snap.id in store.snapshots.pinned_ids()
    assert os.getpid() == int(live.rsplit(":", 1)[1])
