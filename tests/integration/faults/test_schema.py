"""A schema newer than the code, or one whose applied migrations differ from the code's, is refused by
every command (``tenure db migrate`` too), on SQLite and on PostgreSQL, through the real CLI."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import error_of, ok_json, tenure

MIGRATIONS = Path(__file__).resolve().parents[3] / "src" / "tenure" / "store" / "sql" / "migrations"


def _files() -> dict[int, tuple[str, str]]:
    """Version → (name, SHA-256 of the file's text), read from the migration files themselves."""
    found = {}
    for path in MIGRATIONS.glob("*.sql"):
        number, _, name = path.stem.partition("_")
        found[int(number)] = (name, hashlib.sha256(path.read_text(encoding="utf-8").encode()).hexdigest())
    return found


class Backend:
    """The CLI options and direct SQL access for one store."""

    def __init__(self, kind: str, tmp_path: Path, pg_url: str | None) -> None:
        self.kind = kind
        self.data = str(tmp_path / "data")
        self.url = pg_url if kind == "postgres" else f"sqlite:///{tmp_path}/data/tenure.db"

    def cli(self, *args: str) -> Any:
        return tenure(["--data", self.data, "--db", str(self.url), "--json", *args])

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            with sqlite3.connect(str(self.url)[len("sqlite:///") :]) as conn:
                return conn.execute(statement, params).fetchall()
        import psycopg

        with psycopg.connect(str(self.url), autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []

    def recorded(self) -> dict[int, tuple[str, str | None]]:
        return {v: (n, c) for v, n, c in self.sql("SELECT version, name, checksum FROM schema_migrations")}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    store = Backend(request.param, tmp_path, pg_url)
    ok_json(store.cli("workspace", "create", "w"))
    return store


COMMANDS = [["workspace", "list"], ["workspace", "create", "x"], ["project", "list"], ["gc"], ["db", "migrate"]]


def test_every_applied_migration_is_recorded_with_the_checksum_of_its_file(backend: Backend) -> None:
    assert backend.recorded() == {v: (name, digest) for v, (name, digest) in _files().items()}


def test_schema_newer_than_the_code_is_refused_by_every_command(backend: Backend) -> None:
    future = max(_files()) + 1
    backend.sql(
        "INSERT INTO schema_migrations (version, name, applied_at, checksum) VALUES (?, ?, 0, ?)",
        (future, "from_a_newer_tenure", "0" * 64),
    )
    for command in COMMANDS:
        result = backend.cli(*command)
        assert result.returncode == 5, command
        error = error_of(result)
        assert error["code"] == "schema-too-new" and error["retryable"] is False, command
        assert f"{future:04d}_from_a_newer_tenure" in error["message"] and "upgrade tenure" in error["hint"]
    backend.sql("DELETE FROM schema_migrations WHERE version = ?", (future,))
    assert [w["name"] for w in ok_json(backend.cli("workspace", "list"))] == ["w"]  # nothing was written


def test_edited_migration_is_schema_mismatch_and_never_applied_again(backend: Backend) -> None:
    backend.sql("UPDATE schema_migrations SET checksum = ? WHERE version = 2", ("f" * 64,))
    for command in COMMANDS:
        result = backend.cli(*command)
        assert result.returncode == 5, command
        error = error_of(result)
        assert error["code"] == "schema-mismatch" and "0002_projects" in error["message"], command
        assert "edited" in error["message"]
    assert backend.recorded()[2][1] == "f" * 64


def test_renumbered_migration_is_schema_mismatch(backend: Backend) -> None:
    """The store applied this tenure's 0004 as its 0003 and the other way round: both files were renumbered."""
    files = _files()
    for version, other in ((3, 4), (4, 3)):
        backend.sql("UPDATE schema_migrations SET name = ?, checksum = ? WHERE version = ?", (*files[other], version))
    result = backend.cli("db", "migrate")
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "schema-mismatch" and "renumbered" in error["message"]
    assert f"0004_{files[4][0]}" in error["message"]


def _before_checksums(backend: Backend) -> None:
    """Make the store look as one migrated by a tenure without migration 0004 (no checksum column)."""
    backend.sql("DELETE FROM schema_migrations WHERE version = 4")
    backend.sql("ALTER TABLE schema_migrations DROP COLUMN checksum")


def test_migrations_applied_before_the_checksum_column_get_their_checksums(backend: Backend) -> None:
    _before_checksums(backend)
    assert [w["name"] for w in ok_json(backend.cli("workspace", "list"))] == ["w"]
    assert backend.recorded() == {v: (name, digest) for v, (name, digest) in _files().items()}
    assert ok_json(backend.cli("db", "migrate")) == {"applied": []}


def test_migration_applied_before_the_checksum_column_under_another_name_is_schema_mismatch(backend: Backend) -> None:
    _before_checksums(backend)
    backend.sql("UPDATE schema_migrations SET name = 'something_else' WHERE version = 3")
    result = backend.cli("workspace", "list")
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "schema-mismatch" and "0003_something_else" in error["message"]
    assert 4 not in {v for (v,) in backend.sql("SELECT version FROM schema_migrations")}  # nothing applied
