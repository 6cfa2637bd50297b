"""The host-local mount store: records that survive the process, every change through the mount machine,
and one forced path used only by reconciliation and takeover (S-52, S-53, S-72)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tenure.errors import IllegalTransitionError, TenureError
from tenure.mounts.store import MountStore
from tenure.states import MountState as M

ROOT = Path(__file__).resolve().parents[3]
#: the modules that may force a mount's status: reconciliation and takeover
FORCE_CALLERS = {"src/tenure/mounts/store.py", "src/tenure/projects/mountlog.py", "src/tenure/pod/reconcile.py"}


def test_a_mount_moves_only_along_the_machine_and_survives_the_process(tmp_path: Path) -> None:
    store = MountStore(str(tmp_path))
    mount = store.open("w-1", str(tmp_path / "f"), 3, project_id="p-1", project_ref="acme/web", base_snapshot="s-1")
    assert (mount.state, mount.generation, mount.base_snapshot) == (M.MOUNTING, 3, "s-1")
    store.transition(mount.id, M.MOUNTING, M.MOUNTED)
    store.checkpoint_begin(mount.id, "key-1")
    store.transition(mount.id, M.MOUNTED, M.CHECKPOINTING)
    store.checkpoint_pending(mount.id, "s-2")
    store.close()
    again = MountStore(str(tmp_path)).get(mount.id)  # a new process reads what was recorded
    assert (again.state, again.checkpoint_key, again.pending_snapshot) == (M.CHECKPOINTING, "key-1", "s-2")
    assert again.live


@pytest.mark.parametrize(
    "src,dst", [(M.MOUNTING, M.CHECKPOINTING), (M.MOUNTED, M.CLOSED), (M.CLOSED, M.MOUNTED), (M.MOUNTED, M.MOUNTED)]
)
def test_an_illegal_move_is_refused_and_changes_nothing(tmp_path: Path, src: M, dst: M) -> None:
    store = MountStore(str(tmp_path))
    mount = store.open("w-1", str(tmp_path / "f"), 1)
    if src is not M.MOUNTING:
        store.force(mount.id, src, "test setup")
    with pytest.raises(IllegalTransitionError):
        store.transition(mount.id, src, dst)
    assert store.get(mount.id).state is src


def test_a_move_from_a_status_the_mount_is_not_in_is_a_conflict(tmp_path: Path) -> None:
    store = MountStore(str(tmp_path))
    mount = store.open("w-1", str(tmp_path / "f"), 1)
    with pytest.raises(TenureError) as refused:
        store.transition(mount.id, M.MOUNTED, M.CHECKPOINTING)  # it is MOUNTING
    assert refused.value.code == "mount-state-conflict"
    assert store.get(mount.id).state is M.MOUNTING


def test_the_forced_path_records_its_reason(tmp_path: Path) -> None:
    store = MountStore(str(tmp_path))
    mount = store.open("w-1", str(tmp_path / "f"), 1)
    store.transition(mount.id, M.MOUNTING, M.MOUNTED)
    forced = store.force(mount.id, M.CLOSED, "stale generation")
    assert (forced.state, forced.forced_reason) == (M.CLOSED, "stale generation")
    assert store.live_for("w-1") is None


def test_s52_no_other_caller_uses_the_forced_path() -> None:
    offenders = []
    for folder, _, files in os.walk(ROOT / "src" / "tenure"):
        for name in files:
            if name.endswith(".py"):
                path = Path(folder) / name
                rel = path.relative_to(ROOT).as_posix()
                if rel in FORCE_CALLERS:
                    continue
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    if re.search(r"\b(store|mounts?|mount_store)\.force\(", line):  # the mount store's
                        offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == [], offenders


def test_the_store_file_is_synchronous(tmp_path: Path) -> None:
    store = MountStore(str(tmp_path))
    with store.db.sql_transaction(write=False) as tx:
        assert tx.execute_sql("PRAGMA synchronous")[0]["synchronous"] == 2  # FULL
        assert tx.execute_sql("PRAGMA journal_mode")[0]["journal_mode"] == "wal"
