"""Store and object URLs that name no usable place are refused before anything is created; a read-only
object folder without ``tmp/`` can be restored from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import error_of, ok_json, tenure, unprivileged


@pytest.mark.parametrize("url", ["file://", "file://.", "file://./", "file://objects", "file:///"])
def test_object_url_without_an_absolute_folder_is_bad_objects_url(tmp_path: Path, url: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    data = str(tmp_path / "data")
    for command in (["workspace", "create", "w"], ["workspace", "list"]):
        result = tenure(["--data", data, "--objects", url, "--json", *command], cwd=str(cwd))
        assert result.returncode == 2
        error = error_of(result)
        assert error["code"] == "bad-objects-url" and "file:///" in error["hint"]
    assert os.listdir(cwd) == [] and not os.path.exists(data)


def test_object_url_file_localhost_names_an_absolute_folder(tmp_path: Path) -> None:
    data, objects = str(tmp_path / "data"), tmp_path / "objects"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    url, cwd = f"file://localhost{objects}", str(tmp_path)  # read as a relative path, it would land in cwd
    ok_json(tenure(["--data", data, "--objects", url, "--json", "workspace", "create", "w"], cwd=cwd))
    ok_json(
        tenure(
            [
                "--data",
                data,
                "--objects",
                url,
                "--json",
                "workspace",
                "checkpoint",
                "w",
                "--from",
                str(tmp_path / "src"),
            ],
            cwd=cwd,
        )
    )
    assert any(len(name) == 2 for name in os.listdir(objects))


#: Every way a store URL can name a SQLite database that is no file: SQLite reads a name that starts
#: with ``file:`` as a URI (it is built to), so in-memory and temporary URI filenames count too.
THROW_AWAY = [
    "sqlite:///",
    "sqlite:///:memory:",
    "sqlite:///file:x?mode=memory",
    "sqlite:///file::memory:",
    "sqlite:///file::memory:?cache=shared",
    "sqlite:///file:x?cache=shared&mode=memory",
    "sqlite:///file:x?mode=%6Demory",
    "sqlite:///file:%3Amemory%3A",
    "sqlite:///file:x?vfs=memdb",
    "sqlite:///file:",
    "sqlite:///file:?mode=rwc",
]


@pytest.mark.parametrize("url", THROW_AWAY)
def test_throw_away_sqlite_store_is_bad_store_url(tmp_path: Path, url: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    data = str(tmp_path / "data")
    for command in (["workspace", "create", "w"], ["workspace", "list"], ["db", "migrate"]):
        result = tenure(["--data", data, "--db", url, "--json", *command], cwd=str(cwd))
        assert result.returncode == 2
        error = error_of(result)
        assert error["code"] == "bad-store-url" and "throw-away" in error["message"]
    assert os.listdir(cwd) == [] and not os.path.exists(data)


@pytest.mark.parametrize("url", THROW_AWAY)
def test_the_library_refuses_a_throw_away_sqlite_store_too(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tenure.errors import ConfigurationError
    from tenure.store import open_store

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        open_store(url)
    assert info.value.code == "bad-store-url" and os.listdir(tmp_path) == []


def test_a_uri_filename_naming_a_file_is_still_a_store(tmp_path: Path) -> None:
    from tenure.store import open_store

    store = open_store(f"sqlite:///file:{tmp_path}/t.db?cache=private")
    try:
        store.workspaces.create("w")
    finally:
        store.close()
    assert (tmp_path / "t.db").is_file()


def test_read_only_object_folder_without_tmp_can_be_restored_from(tmp_path: Path) -> None:
    data, src = str(tmp_path / "data"), tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello")
    (src / "b.bin").write_bytes(os.urandom(200_000))
    ok_json(tenure(["--data", data, "--json", "workspace", "create", "w"]))
    ok_json(tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(src)]))
    objects = os.path.join(data, "objects")
    os.rmdir(os.path.join(objects, "tmp"))
    for folder, dirs, files in os.walk(objects):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chmod(name, os.stat(name).st_mode & ~0o222)
    try:
        restored = ok_json(
            tenure(
                ["--data", data, "--json", "workspace", "restore", "w", "--to", str(tmp_path / "copy")],
                prefix=unprivileged(),
            )
        )
        assert not os.path.exists(os.path.join(objects, "tmp"))
    finally:
        for folder, dirs, files in os.walk(objects):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chmod(name, os.stat(name).st_mode | 0o200)
    assert restored["files"] == 2
    assert (tmp_path / "copy" / "a.txt").read_text() == "hello"
    assert (tmp_path / "copy" / "b.bin").read_bytes() == (src / "b.bin").read_bytes()


def test_opening_the_object_folder_creates_nothing_until_the_first_write(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    ok_json(tenure(["--data", data, "--json", "workspace", "create", "w"]))
    assert not os.path.exists(os.path.join(data, "objects"))
    assert ok_json(tenure(["--data", data, "--json", "gc", "--grace", "0"]))["removed"] == 0
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    ok_json(tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(tmp_path / "src")]))
    assert os.path.isdir(os.path.join(data, "objects", "tmp"))
