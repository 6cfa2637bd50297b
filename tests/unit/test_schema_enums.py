"""The schema's CHECK lists equal the enums, column by column.

The migrations are applied to a fresh SQLite file and every ``CHECK (col IN
(...))`` of the resulting tables is read back. Adding an enum value without a
migration fails here, and so does a CHECK list that no enum describes.
"""

from __future__ import annotations

import enum
import re
import sqlite3

import pytest

from tenure.projects.records import Kind, LifecycleType
from tenure.states import LeaseState, PodState, ProjectStatus, SnapshotState, WorkspaceState
from tenure.store import open_store

#: Each checked column and the enum whose values it holds.
ENUMS: dict[tuple[str, str], type[enum.Enum]] = {
    ("workspaces", "state"): WorkspaceState,
    ("writer_leases", "state"): LeaseState,
    ("snapshots", "state"): SnapshotState,
    ("projects", "status"): ProjectStatus,
    ("projects", "kind"): Kind,
    ("projects", "lifecycle_type"): LifecycleType,
    ("pods", "status"): PodState,
}
#: Checked columns that hold no enum.
NOT_ENUMS: dict[tuple[str, str], set[str]] = {
    ("projects", "owner_required"): {"0", "1"},
    ("api_tokens", "admin"): {"0", "1"},
    ("api_tokens", "cluster"): {"0", "1"},
    ("projects", "pod_bound"): {"0", "1"},
}

_CHECK = re.compile(r"CHECK\s*\(\s*(\w+)\s+IN\s*\(([^)]*)\)\s*\)", re.IGNORECASE)


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], set[str]]:
    path = tmp_path_factory.mktemp("schema") / "tenure.db"
    open_store(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    found: dict[tuple[str, str], set[str]] = {}
    for table, sql in tables:
        for column, values in _CHECK.findall(sql or ""):
            key = (table, column)
            assert key not in found, f"{table}.{column} has two CHECK lists"
            found[key] = {v.strip().strip("'") for v in values.split(",")}
    return found


def test_the_checks_are_found(checks: dict[tuple[str, str], set[str]]) -> None:
    assert set(ENUMS) <= set(checks), f"no CHECK list for {sorted(set(ENUMS) - set(checks))}"


@pytest.mark.parametrize("column", sorted(ENUMS), ids=lambda c: ".".join(c))
def test_check_list_equals_the_enum(checks: dict[tuple[str, str], set[str]], column: tuple[str, str]) -> None:
    values = {str(member.value) for member in ENUMS[column]}
    table, name = column
    assert sorted(values - checks[column]) == [], (
        f"{ENUMS[column].__name__} has values the CHECK of {table}.{name} refuses: add a migration"
    )
    assert sorted(checks[column] - values) == [], (
        f"the CHECK of {table}.{name} admits values {ENUMS[column].__name__} lacks"
    )


def test_every_check_list_is_described(checks: dict[tuple[str, str], set[str]]) -> None:
    undescribed = sorted(set(checks) - set(ENUMS) - set(NOT_ENUMS))
    assert undescribed == [], f"CHECK lists without an enum in this test: {undescribed}"
    for column, values in NOT_ENUMS.items():
        assert checks[column] == values, column
