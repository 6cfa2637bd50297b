"""Driver and operating-system faults under the SQLite store and the object folder, through the real CLI.

None of them may surface as ``error[internal]`` (exit 70): each has a stable
code (docs/errors.md) and its family's exit code. Permission faults run
without the capabilities that let root ignore permission bits.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support.cli import (
    error_of,
    file_size_limit,
    in_private_mount_namespace,
    ok_json,
    one_line,
    tenure,
    unprivileged,
)


def _store(tmp_path: Path) -> str:
    data = str(tmp_path / "data")
    ok_json(tenure(["--data", data, "--json", "workspace", "create", "w"]))
    return data


def _small_files(root: Path, count: int) -> None:
    root.mkdir()
    for i in range(count):
        (root / f"f{i:04d}.txt").write_text(f"file {i}\n" * (i % 7 + 1))


# --------------------------------------------------------------------------- a damaged SQLite file


@pytest.mark.parametrize("command", [["workspace", "list"], ["workspace", "create", "x"], ["db", "migrate"]])
def test_random_bytes_instead_of_the_store_is_store_corrupt(tmp_path: Path, command: list[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "tenure.db").write_bytes(os.urandom(64 * 1024))
    result = tenure(["--data", str(data), "--json", *command])
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "store-corrupt" and error["retryable"] is False
    assert "not a database" in error["message"] and str(data / "tenure.db") in error["message"]
    line = one_line(tenure(["--data", str(data), *command]), "store-corrupt")
    assert "backup" in line


@pytest.mark.parametrize("keep", [0.5, 0.02])
def test_truncated_store_is_store_corrupt(tmp_path: Path, keep: float) -> None:
    data = _store(tmp_path)
    db = os.path.join(data, "tenure.db")
    os.truncate(db, int(os.path.getsize(db) * keep))
    result = tenure(["--data", data, "--json", "workspace", "list"])
    assert result.returncode == 5 and error_of(result)["code"] == "store-corrupt"


# --------------------------------------------------------------------------- read-only store


def test_read_only_store_file_reads_but_refuses_writes_with_store_read_only(tmp_path: Path) -> None:
    data = _store(tmp_path)
    os.chmod(os.path.join(data, "tenure.db"), 0o444)
    listed = ok_json(tenure(["--data", data, "--json", "workspace", "list"], prefix=unprivileged()))
    assert [w["name"] for w in listed] == ["w"]
    result = tenure(["--data", data, "--json", "workspace", "create", "x"], prefix=unprivileged())
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "store-read-only" and error["retryable"] is False
    assert "write access" in error["hint"]


@pytest.mark.parametrize("command", [["workspace", "list"], ["workspace", "create", "x"]])
def test_read_only_store_folder_is_store_read_only(tmp_path: Path, command: list[str]) -> None:
    """SQLite must create FILE-wal and FILE-shm beside the file, even to read; a read-only folder refuses."""
    data = _store(tmp_path)
    os.chmod(data, 0o555)
    try:
        result = tenure(["--data", data, "--json", *command], prefix=unprivileged())
    finally:
        os.chmod(data, 0o755)
    assert result.returncode == 5
    assert error_of(result)["code"] == "store-read-only"


# --------------------------------------------------------------------------- full disk


def test_file_size_limit_under_the_store_is_disk_full_and_leaves_the_store_usable(tmp_path: Path) -> None:
    """``ulimit -f`` just above the WAL index: the checkpoint's own WAL writes cross it (EFBIG)."""
    data = _store(tmp_path)
    _small_files(tmp_path / "src", 300)
    limit = 32 * 1024 + 1000  # the -shm file (32 KiB) fits, the WAL does not grow much further
    args = ["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(tmp_path / "src")]
    result = tenure(args, preexec_fn=file_size_limit(limit))
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "disk-full" and error["retryable"] is True
    assert "ulimit -f" in error["message"]
    again = ok_json(tenure(args))  # nothing half-written: the same checkpoint now publishes
    assert again["snapshot"]["state"] == "READY" and again["snapshot"]["files"] == 300


def test_full_file_system_under_the_store_is_disk_full(tmp_path: Path) -> None:
    """A real ENOSPC: a 1 MiB tmpfs, mounted in a private namespace, filled up after the store exists."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    data = mount / "data"
    script = (
        f'mount -t tmpfs -o size=1m tmpfs "{mount}" && '
        f'"$PY" -m tenure.cli.main --data "{data}" workspace create w >/dev/null && '
        f'(dd if=/dev/zero of="{mount}/filler" bs=4k 2>/dev/null; true) && '
        f'exec "$PY" -m tenure.cli.main --data "{data}" --json workspace create x'
    )
    result = in_private_mount_namespace(script)
    assert result.returncode == 5, result.stderr
    error = error_of(result)
    assert error["code"] == "disk-full" and "file system is full" in error["message"]


def test_file_size_limit_under_the_object_folder_is_disk_full(tmp_path: Path) -> None:
    data = _store(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "big.bin").write_bytes(os.urandom(3_000_000))  # incompressible chunks of ~1 MiB
    result = tenure(
        ["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(tmp_path / "src")],
        preexec_fn=file_size_limit(200_000),
    )
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "disk-full" and "objects" in error["message"]


# --------------------------------------------------------------------------- object folder and data folder


def _two_snapshots_one_pruned(tmp_path: Path) -> str:
    data = _store(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    for content in (b"first" * 1000, b"second" * 1000):
        (src / "a.txt").write_bytes(content)
        ok_json(tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(src)]))
    assert ok_json(tenure(["--data", data, "--json", "snapshot", "prune", "w", "--keep-last", "1"]))["deleted"]
    return data


def _chmod_tree(root: str, writable: bool) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            mode = os.stat(name).st_mode
            os.chmod(name, (mode | stat.S_IWUSR) if writable else (mode & ~0o222))


def test_gc_on_a_read_only_object_folder_is_object_store_read_only(tmp_path: Path) -> None:
    data = _two_snapshots_one_pruned(tmp_path)
    objects = os.path.join(data, "objects")
    _chmod_tree(objects, writable=False)
    try:
        result = tenure(["--data", data, "--json", "gc", "--grace", "0"], prefix=unprivileged())
    finally:
        _chmod_tree(objects, writable=True)
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "object-store-read-only" and error["retryable"] is False
    assert objects in error["message"]
    assert ok_json(tenure(["--data", data, "--json", "gc", "--grace", "0"]))["removed"] > 0


def test_unreadable_data_folder_is_data_dir_unusable(tmp_path: Path) -> None:
    data = _store(tmp_path)
    os.chmod(data, 0)
    try:
        listed = tenure(["--data", data, "--json", "workspace", "list"], prefix=unprivileged())
        created = tenure(["--data", data, "workspace", "create", "x"], prefix=unprivileged())
    finally:
        os.chmod(data, 0o755)
    assert listed.returncode == 2
    error = error_of(listed)
    assert error["code"] == "data-dir-unusable" and data in error["message"]
    assert created.returncode == 2
    one_line(created, "data-dir-unusable")
