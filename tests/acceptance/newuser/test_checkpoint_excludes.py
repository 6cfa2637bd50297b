"""A checkpoint never backs up tenure's own data, and `--exclude` leaves out what the user names."""

from __future__ import annotations

import os

from tests.acceptance.newuser.helpers import ok
from tests.support.trees import describe, make_tree


def test_checkpoint_of_the_current_folder_leaves_out_the_data_folder_and_is_unchanged_the_second_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "project")
    make_tree(src, files=12)
    ok(["workspace", "create", "notes"], cwd=src)  # default data folder: ./.tenure, inside the source
    assert os.path.isfile(os.path.join(src, ".tenure", "tenure.db"))
    first = ok(["workspace", "checkpoint", "notes", "--from", "."], cwd=src)
    second = ok(["workspace", "checkpoint", "notes", "--from", "."], cwd=src)
    assert first["unchanged"] is False
    assert second["unchanged"] is True and second["snapshot"]["id"] == first["snapshot"]["id"]
    mine = {k: v for k, v in describe(src).items() if k != ".tenure" and not k.startswith(".tenure" + os.sep)}
    assert first["snapshot"]["files"] == sum(1 for v in mine.values() if v[0] == "file")
    copy = str(tmp_path / "copy")
    ok(["workspace", "restore", "notes", "--to", copy], cwd=src)
    assert not os.path.exists(os.path.join(copy, ".tenure"))
    assert describe(copy) == mine


def test_data_and_object_folders_elsewhere_in_the_source_are_left_out_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "project"
    make_tree(str(src), files=6)
    data, objects = src / "state" / "tenure-data", src / "blobs"
    opts = ["--data", str(data), "--objects", f"file://{objects}"]
    ok([*opts, "workspace", "create", "w"], cwd=str(tmp_path))
    # The object folder is made by the first checkpoint's first write: its parent's mtime changes once.
    ok([*opts, "workspace", "checkpoint", "w", "--from", str(src)], cwd=str(tmp_path))
    second = ok([*opts, "workspace", "checkpoint", "w", "--from", str(src)], cwd=str(tmp_path))
    for _ in range(2):
        again = ok([*opts, "workspace", "checkpoint", "w", "--from", str(src)], cwd=str(tmp_path))
        assert again["unchanged"] is True and again["snapshot"]["id"] == second["snapshot"]["id"]
    copy = tmp_path / "copy"
    ok([*opts, "workspace", "restore", "w", "--to", str(copy)], cwd=str(tmp_path))
    assert not (copy / "blobs").exists() and not (copy / "state" / "tenure-data").exists()
    assert (copy / "state").is_dir(), "only tenure's own folder is left out, not its parent"


def test_exclude_patterns_use_gitignore_syntax_and_add_to_tenureignore(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "project"
    for rel in (
        "keep.txt",
        "build/out.o",
        "logs/a.log",
        "logs/keep.log",
        "src/x.log",
        "src/main.py",
        "node_modules/m/index.js",
        "cache/c.bin",
    ):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    (src / ".tenureignore").write_text("cache/\n")
    data = str(tmp_path / "data")
    ok(["--data", data, "workspace", "create", "w"], cwd=str(tmp_path))
    ok(
        [
            "--data",
            data,
            "workspace",
            "checkpoint",
            "w",
            "--from",
            str(src),
            "--exclude",
            "build/",
            "--exclude",
            "*.log",
            "--exclude",
            "!logs/keep.log",
            "--exclude",
            "/node_modules",
        ],
        cwd=str(tmp_path),
    )
    copy = tmp_path / "copy"
    ok(["--data", data, "workspace", "restore", "w", "--to", str(copy)], cwd=str(tmp_path))
    kept = sorted(os.path.relpath(os.path.join(d, f), copy) for d, _, files in os.walk(copy) for f in files)
    assert kept == [".tenureignore", "keep.txt", "logs/keep.log", "src/main.py"]
