"""Operating-system faults of a restore's target, through the real CLI.

A file where a folder of the path should be, a full file system and a
parent folder this user may not write to each have a stable code and their
family's exit code, on one line with a hint, never ``error[internal]``; the
permission fault runs without the capabilities that let root ignore
permission bits. Nothing is left behind: no target, no temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.cli import error_of, in_private_mount_namespace, ok_json, one_line, tenure, unprivileged


def _snapshot(tmp_path: Path, size: int = 2_000_000) -> str:
    data = str(tmp_path / "data")
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(size))
    (src / "note.txt").write_text("a note\n")
    ok_json(tenure(["--data", data, "--json", "workspace", "create", "w"]))
    ok_json(tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(src)]))
    return data


def test_a_file_on_the_target_path_is_restore_target_not_a_folder(tmp_path: Path) -> None:
    data = _snapshot(tmp_path, 1000)
    (tmp_path / "afile").write_text("in the way\n")
    target = str(tmp_path / "afile" / "sub" / "out")
    result = tenure(["--data", data, "--json", "workspace", "restore", "w", "--to", target])
    assert result.returncode == 2, result.stderr
    error = error_of(result)
    assert error["code"] == "restore-target-not-a-folder" and error["retryable"] is False
    assert error["context"]["blocked_by"] == str(tmp_path / "afile")
    line = one_line(
        tenure(["--data", data, "workspace", "restore", "w", "--to", target]), "restore-target-not-a-folder"
    )
    assert str(tmp_path / "afile") in line and "move the file out of the way" in line
    assert (tmp_path / "afile").read_text() == "in the way\n"


def test_a_full_file_system_under_the_target_is_disk_full_and_leaves_nothing(tmp_path: Path) -> None:
    """A real ENOSPC: a 256 KiB tmpfs (a private mount namespace) cannot hold the restored 2 MB file."""
    data = _snapshot(tmp_path)
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = (
        f'mount -t tmpfs -o size=256k tmpfs "{mount}" && '
        f'"$PY" -m tenure.cli.main --data "{data}" workspace restore w --to "{mount}/out"; '
        f'echo "exit $?"; ls -A "{mount}"'
    )
    result = in_private_mount_namespace(script)
    assert result.stdout.splitlines() == ["exit 5"], (result.stdout, result.stderr)  # the mount is empty again
    line = one_line(result, "disk-full")
    assert "No space left on device" in line and str(mount / "out") in line and "free space" in line


def test_a_read_only_parent_is_restore_target_read_only(tmp_path: Path) -> None:
    data = _snapshot(tmp_path, 1000)
    parent = tmp_path / "ro"
    parent.mkdir()
    os.chmod(parent, 0o555)
    try:
        results = [
            tenure(
                ["--data", data, "--json", "workspace", "restore", "w", "--to", str(parent / "out")],
                prefix=unprivileged(),
            ),
            tenure(
                ["--data", data, "workspace", "restore", "w", "--to", str(parent / "a" / "b")], prefix=unprivileged()
            ),
        ]
    finally:
        os.chmod(parent, 0o755)
    assert results[0].returncode == 2, results[0].stderr
    error = error_of(results[0])
    assert error["code"] == "restore-target-read-only" and error["retryable"] is False
    assert error["context"]["folder"] == str(parent)
    assert results[1].returncode == 2
    line = one_line(results[1], "restore-target-read-only")
    assert f"may not write in '{parent}'" in line and "write access" in line
    assert os.listdir(parent) == []
