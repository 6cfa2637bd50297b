"""S-85: a folder is clean when it holds exactly what its last restore or checkpoint stored, judged from
the local index without reading files; anything the index cannot vouch for is uncommitted data."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tenure.pod.runtime import PodRuntime
from tenure.projects import ProjectStore
from tenure.store import Store

T = "acme"


def _running(store: Store, node: PodRuntime) -> tuple[str, str]:
    ProjectStore(store).create(T, "p")
    project = node.bring(T, "p")
    folder = Path(node.lifecycle.folder(project))
    (folder / "sub").mkdir()
    (folder / "a.txt").write_text("a")
    (folder / "sub" / "b.txt").write_text("b")
    node.checkpoint(T, "p")
    os.utime(folder / "a.txt", ns=(1_000_000_000, 1_000_000_000))  # old mtimes: not racy
    os.utime(folder / "sub" / "b.txt", ns=(1_000_000_000, 1_000_000_000))
    node.checkpoint(T, "p")
    return project.workspace_id, str(folder)


CHANGES: dict[str, Callable[[Path], None]] = {
    "edited": lambda f: (f / "a.txt").write_text("changed"),
    "added": lambda f: (f / "new.txt").write_text("new"),
    "removed": lambda f: (f / "sub" / "b.txt").unlink(),
    "symlink": lambda f: os.symlink("a.txt", f / "link"),
    "fifo": lambda f: os.mkfifo(f / "pipe"),
}


def test_s85_a_folder_as_stored_is_clean(store: Store, node: PodRuntime) -> None:
    workspace_id, folder = _running(store, node)
    assert node.workspaces.folder_is_clean(workspace_id, folder)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_s85_any_change_is_uncommitted_data(store: Store, node: PodRuntime, change: str) -> None:
    workspace_id, folder = _running(store, node)
    CHANGES[change](Path(folder))
    assert not node.workspaces.folder_is_clean(workspace_id, folder)


def test_s85_without_an_index_a_folder_is_never_clean(store: Store, node: PodRuntime) -> None:
    workspace_id, folder = _running(store, node)
    os.unlink(node.workspaces.index_path(workspace_id, folder))
    assert not node.workspaces.folder_is_clean(workspace_id, folder)
