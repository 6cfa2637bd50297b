"""A mistyped path is an error, never a fresh empty store: read-only commands create nothing."""

from __future__ import annotations

import os

import pytest

from tests.acceptance.newuser.helpers import error_of, ok, run

READ_ONLY = [
    ["workspace", "list"],
    ["workspace", "restore", "w", "--to", "copy"],
    ["snapshot", "list", "w"],
    ["snapshot", "show", "s-0123456789"],
    ["snapshot", "prune", "w"],
    ["gc"],
    ["project", "list"],
    ["project", "show", "acme/web"],
    ["project", "bring", "acme/web"],
    ["project", "close", "acme/web", "--yes"],
    ["pods"],
]


def _everything(folder: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), folder) for d, dirs, files in os.walk(folder) for n in dirs + files
    )


@pytest.mark.parametrize("args", READ_ONLY, ids=[" ".join(a[:2]) for a in READ_ONLY])
def test_a_command_on_a_folder_without_tenure_data_fails_and_creates_nothing(tmp_path, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    here = str(tmp_path / "somewhere")
    os.makedirs(here)
    result = run(["--json", *args], cwd=here)
    assert result.returncode == 3, result.stderr
    error = error_of(result)
    assert error["code"] == "no-tenure-data"
    assert os.path.join(here, ".tenure") in error["message"]
    assert "tenure workspace create" in error["hint"]
    assert _everything(here) == [], "no data folder, no SQLite file"


def test_a_mistyped_data_path_is_named_and_left_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ok(["--data", str(tmp_path / "data"), "workspace", "create", "w"], cwd=str(tmp_path))
    typo = tmp_path / "dta"
    result = run(["--data", str(typo), "workspace", "list"], cwd=str(tmp_path))
    assert result.returncode == 3
    line = result.stderr.strip()
    assert line.startswith("error[no-tenure-data]:") and str(typo) in line and len(line.splitlines()) == 1
    assert not typo.exists()
    assert [w["name"] for w in ok(["--data", str(tmp_path / "data"), "workspace", "list"], cwd=str(tmp_path))] == ["w"]


def test_a_mistyped_sqlite_url_is_refused_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "elsewhere" / "tenure.db"
    result = run(["--json", "--db", f"sqlite:///{db}", "project", "list"], cwd=str(tmp_path))
    assert result.returncode == 3 and error_of(result)["code"] == "no-tenure-data"
    assert str(db) in error_of(result)["message"]
    assert _everything(str(tmp_path)) == []


@pytest.mark.parametrize("args", [["workspace", "create", "w"], ["project", "create", "acme/web"]])
def test_commands_that_create_still_create_the_data_folder(tmp_path, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    here = str(tmp_path)
    ok(args, cwd=here)
    assert os.path.isfile(os.path.join(here, ".tenure", "tenure.db"))
    ok(["workspace", "list"], cwd=here)
    ok(["project", "list"], cwd=here)
    ok(["pods"], cwd=here)


def test_checkpoint_creates_the_data_folder_and_then_names_the_missing_workspace(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    result = run(["--json", "workspace", "checkpoint", "w", "--from", str(src)], cwd=str(tmp_path))
    assert result.returncode == 3 and error_of(result)["code"] == "workspace-not-found"
    assert (tmp_path / ".tenure" / "tenure.db").is_file()


@pytest.mark.parametrize("args", [["show"], ["poll"], ["advance", "c", "p", "VALIDATED", "--step-id", "s"]])
@pytest.mark.parametrize("where", ["missing", "empty folder"])
def test_intake_commands_on_a_path_without_an_intake_fail_and_create_no_layout(
    tmp_path, args: list[str], where: str
) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "intkae"
    if where == "empty folder":
        target.mkdir()
    result = run(["--json", "intake", args[0], str(target), *args[1:]], cwd=str(tmp_path))
    assert result.returncode == 7, result.stderr
    error = error_of(result)
    assert error["code"] == "no-intake"
    assert str(target) in error["message"] and f"tenure intake init {target}" in error["hint"]
    assert _everything(str(tmp_path)) == ([] if where == "missing" else ["intkae"])


def test_intake_init_creates_the_layout_then_show_and_poll_work(tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "intake"
    ok(["intake", "init", str(target)], cwd=str(tmp_path))
    assert (target / "inbox").is_dir()
    assert ok(["intake", "show", str(target)], cwd=str(tmp_path)) == {"packages": []}
    assert ok(["intake", "poll", str(target)], cwd=str(tmp_path)) == {"results": []}
    assert not (tmp_path / ".tenure").exists(), "intake commands never touch the tenure data folder"
