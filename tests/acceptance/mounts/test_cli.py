"""``tenure mounts`` reads the host-local mount store of the data folder alone (ADR 0021): it works whatever
store the pod used (``--db``), and refuses to recover a preserved delta into the data folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tenure.mounts.store import MountStore
from tenure.states import MountState as M

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("TENURE_DB", None)
    env.pop("TENURE_DATA", None)
    return subprocess.run(
        [sys.executable, "-m", "tenure.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=str(cwd) if cwd is not None else None,
    )


def pod_data_folder_on_postgresql(data: Path) -> tuple[str, Path]:
    """What a pod that ran on ``--db postgresql://…`` leaves in its data folder: ``mounts.db`` and ``pod.lock``
    (no ``tenure.db``), with one preserved delta."""
    kept = data / "preserved" / "delta"
    (kept / "sub").mkdir(parents=True)
    (kept / "sub" / "f.txt").write_text("recover me")
    (data / "pod.lock").write_text("p-dead\n")
    records = MountStore(str(data))
    mount = records.open("w-1", str(data / "workspaces" / "gone"), 1, project_ref="acme/p")
    records.force(mount.id, M.CLOSED, "test")
    records.set_verdict(mount.id, "preserved-delta", preserved_folder=str(kept), preserved_at=time.time())
    records.close()
    assert not (data / "tenure.db").exists()
    return mount.id, kept


def test_mounts_work_from_the_data_folder_alone_whatever_store_the_pod_used(tmp_path: Path) -> None:
    data = tmp_path / "A"
    mount_id, kept = pod_data_folder_on_postgresql(data)

    listed = run("--data", str(data), "--json", "mounts", "list")
    assert listed.returncode == 0, listed.stderr
    assert [(m["id"], m["verdict"]) for m in json.loads(listed.stdout)] == [(mount_id, "preserved-delta")]
    shown = run("--data", str(data), "--json", "mounts", "show", mount_id)
    assert shown.returncode == 0 and json.loads(shown.stdout)["preserved_folder"] == str(kept), shown.stderr
    out = tmp_path / "recovered"
    recovered = run("--data", str(data), "mounts", "recover", mount_id, "--to", str(out))
    assert recovered.returncode == 0, recovered.stderr
    assert (out / "sub" / "f.txt").read_text() == "recover me"
    discarded = run("--data", str(data), "mounts", "discard", mount_id)
    assert discarded.returncode == 0, discarded.stderr
    assert not kept.exists() and MountStore(str(data)).list() == []
    assert not (data / "tenure.db").exists(), "no control-plane store was created"


def test_mounts_work_from_the_default_data_folder_too(tmp_path: Path) -> None:
    mount_id, _ = pod_data_folder_on_postgresql(tmp_path / ".tenure")
    listed = run("--json", "mounts", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [m["id"] for m in json.loads(listed.stdout)] == [mount_id]


@pytest.mark.parametrize("where", ["missing", "empty", "store-only"])
def test_mounts_say_no_tenure_data_only_without_a_mount_store(tmp_path: Path, where: str) -> None:
    data = tmp_path / "B"
    if where != "missing":
        data.mkdir()
    if where == "store-only":
        (data / "tenure.db").write_bytes(b"")
    result = run("--data", str(data), "--json", "mounts", "list")
    assert result.returncode == 3, result.stderr
    error = json.loads(result.stderr or result.stdout)["error"]
    assert error["code"] == "no-tenure-data"
    assert str(data / "mounts.db") in error["message"]
    assert not (data / "mounts.db").exists(), "nothing was created"


@pytest.mark.parametrize(
    "inside",
    ["preserved/delta/inner", "preserved/other", "workspaces/new", "", "link-to-data/x"],
    ids=["into-itself", "beside-it", "elsewhere-in-the-data-folder", "the-data-folder", "through-a-symlink"],
)
def test_a_recovery_into_the_data_folder_is_refused_and_changes_nothing(tmp_path: Path, inside: str) -> None:
    """A delta recovered into itself would copy itself into itself; anywhere else in the data folder it would
    leave a folder no record names, which the recovery window never removes. Refused, nothing written."""
    data = tmp_path / "A"
    mount_id, kept = pod_data_folder_on_postgresql(data)
    (tmp_path / "link-to-data").symlink_to(data)
    dest = tmp_path / "link-to-data" / "x" if inside.startswith("link-to-data") else data / inside
    before = sorted(str(p.relative_to(data)) for p in data.rglob("*"))
    result = run("--data", str(data), "--json", "mounts", "recover", mount_id, "--to", str(dest))
    assert result.returncode == 2, result.stderr
    error = json.loads(result.stderr or result.stdout)["error"]
    assert error["code"] == "destination-in-data-folder"
    assert str(data) in error["message"]
    assert sorted(str(p.relative_to(data)) for p in data.rglob("*")) == before, "nothing was written"
    assert (kept / "sub" / "f.txt").read_text() == "recover me"
