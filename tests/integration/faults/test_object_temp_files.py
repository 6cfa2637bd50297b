"""Temp files of the local object folder through the real CLI: a failed write leaves none, GC removes dead writers'.

A payload is written to ``objects/tmp`` and renamed into place. A write that
a full disk stops must not leave its half-written temp file holding the
space; one a writer that died left behind (untouched for an hour) is removed
by ``tenure gc``, and a young one — maybe a live writer's — never is.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support.cli import error_of, file_size_limit, ok_json, tenure


def _checkpointed(tmp_path: Path) -> tuple[str, Path]:
    data = str(tmp_path / "data")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("small\n")
    ok_json(tenure(["--data", data, "--json", "workspace", "create", "w"]))
    ok_json(tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(src)]))
    return data, src


def test_a_write_stopped_by_a_full_disk_leaves_no_temp_file(tmp_path: Path) -> None:
    data, src = _checkpointed(tmp_path)
    (src / "big.bin").write_bytes(os.urandom(3_000_000))  # chunks of about 1 MiB, past the limit below
    result = tenure(
        ["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(src)],
        preexec_fn=file_size_limit(200_000),
    )
    assert result.returncode == 5 and error_of(result)["code"] == "disk-full"
    assert os.listdir(os.path.join(data, "objects", "tmp")) == [], "the half-written temp file holds the space"


def test_gc_removes_temp_files_of_writers_that_died_and_keeps_young_ones(tmp_path: Path) -> None:
    data, _ = _checkpointed(tmp_path)
    tmp = Path(data) / "objects" / "tmp"
    dead, young = tmp / f"{'ab' * 32}.{'0' * 32}", tmp / f"{'cd' * 32}.{'1' * 32}"
    dead.write_bytes(b"x" * 10_000)
    young.write_bytes(b"y" * 10_000)
    two_hours_ago = time.time() - 7200
    os.utime(dead, (two_hours_ago, two_hours_ago))

    result = ok_json(tenure(["--data", data, "--json", "gc", "--grace", "0"]))
    assert result["temp_removed"] == 1
    assert sorted(os.listdir(tmp)) == [young.name], "gc removed a young temp file, or kept a dead writer's"
