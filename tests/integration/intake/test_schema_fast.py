"""The fast schema check (jsonschema-rs, tenure.intake.schema): it accepts only what jsonschema accepts.

``schema_errors`` answers from the fast check when it accepts a document
and from ``jsonschema`` otherwise; these tests compare both with
``jsonschema`` alone on valid documents and on mutations of them (every
field swapped for values where Python and JSON Schema types disagree:
booleans for integers, floats, strings with a trailing newline, ...).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenure.intake import Workspace
from tenure.intake.schema import CHECKPOINT_SCHEMA, MANIFEST_SCHEMA, _fast_check, _short, _validator, schema_errors
from tests.support.intake import to_building

SCHEMAS = (MANIFEST_SCHEMA, CHECKPOINT_SCHEMA)

TRICKY: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.0,
    0.5,
    2**53,
    99999999,
    100000000,
    "",
    " ",
    "x",
    "A",
    "A\n",
    "BUILDING_CASE",
    "a\u00a0",
    "inbox",
    "tenure-package",
    "tenure-checkpoint",
    "sha256:" + "0" * 64,
    "sha256:" + "0" * 64 + "\n",
    [],
    ["a", "a"],
    ["a", "b"],
    [1, True],
    {},
    {"revisions": 0},
    {"reason": "r", "retry_at": "2026-01-01T00:00:00+00:00", "resume_state": "A"},
]


def _reference(name: str, document: Any) -> list[str]:
    """What schema_errors answered before the compiled check: jsonschema alone."""
    errors = sorted(_validator(name).iter_errors(document), key=lambda e: list(e.path))
    return [_short(f"{'/'.join(str(p) for p in e.path) or '<root>'}: {e.message}") for e in errors[:5]]


@pytest.fixture
def documents(tmp_path: Path) -> dict[str, dict[str, Any]]:
    ws = Workspace(tmp_path / "ws")
    package = to_building(ws)
    assert package.latest is not None
    return {MANIFEST_SCHEMA: dict(package.manifest), CHECKPOINT_SCHEMA: dict(package.latest.data)}


@pytest.mark.parametrize("name", SCHEMAS)
def test_both_schemas_compile_and_accept_valid_documents(name: str, documents: dict[str, dict[str, Any]]) -> None:
    check = _fast_check(name)
    assert check is not None
    assert check(documents[name]) is True
    assert schema_errors(name, documents[name]) == [] == _reference(name, documents[name])


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _mutate(document: dict[str, Any], edits: list[tuple[int, int, int]]) -> Any:
    result: Any = copy.deepcopy(document)
    for where, what, how in edits:
        paths = _paths(result)
        path = paths[where % len(paths)]
        value = copy.deepcopy(TRICKY[what % len(TRICKY)])
        if not path:
            result = value if how % 5 == 0 else result
            continue
        parent = result
        for step in path[:-1]:
            parent = parent[step]
        if how % 4 == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        elif how % 4 == 1 and isinstance(parent, dict):
            parent[f"extra{how % 3}" if how % 2 else "metadata"] = value
        else:
            parent[path[-1]] = value
    return result


@pytest.mark.parametrize("name", SCHEMAS)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200), st.integers(0, 20)), min_size=1, max_size=3))
def test_fast_check_accepts_only_what_jsonschema_accepts(
    name: str, documents: dict[str, dict[str, Any]], edits: list[tuple[int, int, int]]
) -> None:
    document = _mutate(documents[name], edits)
    check = _fast_check(name)
    assert check is not None
    reference = _reference(name, document)
    if check(document):
        assert reference == []
    assert schema_errors(name, document) == reference


@pytest.mark.parametrize("name", SCHEMAS)
@pytest.mark.parametrize("value", TRICKY, ids=repr)
def test_every_field_swapped_for_a_tricky_value(name: str, documents: dict[str, dict[str, Any]], value: Any) -> None:
    for path in _paths(documents[name]):
        document: Any = copy.deepcopy(documents[name])
        if not path:
            document = copy.deepcopy(value)
        else:
            parent = document
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = copy.deepcopy(value)
        check = _fast_check(name)
        assert check is not None
        if check(document):
            assert _reference(name, document) == [], (path, value)
        assert schema_errors(name, document) == _reference(name, document), (path, value)
