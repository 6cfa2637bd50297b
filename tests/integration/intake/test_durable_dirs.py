"""A new case folder is made durable: the parent of every created folder is fsynced."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure import fsio


def test_new_case_folders_have_their_parents_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    real = fsio.fsync_dir
    monkeypatch.setattr(fsio, "fsync_dir", lambda folder: (synced.append(Path(folder)), real(folder))[1])
    target = tmp_path / "cases" / "c1" / "p1"
    fsio.make_dirs_durable(target)
    assert target.is_dir()
    assert synced == [tmp_path, tmp_path / "cases", tmp_path / "cases" / "c1"]
    synced.clear()
    fsio.make_dirs_durable(target)
    assert synced == [], "an existing folder needs nothing"
