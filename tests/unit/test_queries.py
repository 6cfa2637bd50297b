"""SQL lives in the named query files and the migrations, nowhere else; names and blocks match.

* No string literal in ``src/tenure/**/*.py`` (docstrings aside) holds SQL.
* Every query name the code passes to a transaction exists for its package,
  and every named block is used by some module (no dead queries).
* A name defined for one dialect only is used under ``if tx.dialect == …``.
* Only the migrator runs SQL text as written.
* States are parameters: no query spells a state.
* Every SQLite block compiles against the migrated schema.
"""

from __future__ import annotations

import ast
import enum
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure.projects.records import Kind, LifecycleType
from tenure.states import (
    READABLE_SNAPSHOT_STATES,
    LeaseState,
    MountState,
    PodState,
    ProjectStatus,
    SnapshotState,
    WorkspaceState,
)
from tenure.store import open_store
from tenure.store.connector import bind, translate
from tenure.store.queries import DIALECTS, STORE, Queries, QueryFileError, UnknownQueryError, load, parse, state_params

SRC = Path(tenure.__file__).parent
OBJECTS = "tenure.objects"
MOUNTS = "tenure.mounts"
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE (UNIQUE )?(TABLE|INDEX))\b")
TX_METHODS = {"execute", "one", "count", "executemany"}
RAW_METHODS = {"execute_sql", "count_sql", "sql_transaction"}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        yield str(path.relative_to(SRC.parent)), ast.parse(path.read_text(encoding="utf-8"))


def docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def packages_of(module: str) -> tuple[str, ...]:
    """The query packages whose names a module may use (the migrator runs over every package)."""
    if module == "tenure/store/migrate.py":
        return (STORE, OBJECTS, MOUNTS)
    if module.startswith("tenure/mounts/"):
        return (MOUNTS,)
    return (OBJECTS,) if module.startswith("tenure/objects/") else (STORE,)


def served(package: str) -> set[str]:
    queries = load(package)
    return set(DIALECTS) if queries.portable else set(queries.dialects)


def query_calls() -> list[tuple[str, int, str, set[str] | None]]:
    """Every ``<tx>.execute/one/count/executemany("name", …)``: module, line, name, dialect guard (if any)."""
    calls = []
    for module, tree in modules():
        parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in TX_METHODS
                and node.args
            ):
                continue
            first = node.args[0]
            receiver = node.func.value
            is_tx = isinstance(receiver, ast.Name) and receiver.id.endswith("tx")
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and _NAME.fullmatch(first.value):
                calls.append((module, node.lineno, first.value, _guard(node, parents)))
            elif is_tx:
                calls.append((module, node.lineno, "<not a literal name>", None))
    return calls


def _guard(node: ast.AST, parents: dict[int, ast.AST]) -> set[str] | None:
    """The dialects an enclosing ``if <x>.dialect == "<d>"`` allows, if there is one."""
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, ast.If) and child in parent.body:
            test = parent.test
            if (
                isinstance(test, ast.Compare)
                and isinstance(test.left, ast.Attribute)
                and test.left.attr == "dialect"
                and isinstance(test.ops[0], ast.Eq)
                and isinstance(test.comparators[0], ast.Constant)
            ):
                return {str(test.comparators[0].value)}
        child, parent = parent, parents.get(id(parent))
    return None


# --------------------------------------------------------------------------- where SQL lives


def test_no_sql_in_python_string_literals() -> None:
    offenders = []
    for module, tree in modules():
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if SQL.search(node.value):
                    offenders.append(f"{module}:{node.lineno}: {node.value.strip()[:80]!r}")
    assert offenders == [], "SQL belongs in a named block of sql/queries.sql (or a migration):\n" + "\n".join(offenders)


def test_only_the_migrator_runs_sql_text() -> None:
    offenders = []
    for module, tree in modules():
        if module in (
            "tenure/store/migrate.py",
            "tenure/store/connector.py",
            "tenure/store/sqlite.py",
            "tenure/store/postgres.py",
        ):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in RAW_METHODS:
                offenders.append(f"{module}:{node.lineno}: {node.attr}")
    assert offenders == [], "application code names its queries:\n" + "\n".join(offenders)


# --------------------------------------------------------------------------- names and blocks


def test_query_names_are_literals() -> None:
    bad = [f"{m}:{line}" for m, line, name, _ in query_calls() if name == "<not a literal name>"]
    assert bad == [], "pass the query name as a string literal, so its use can be checked:\n" + "\n".join(bad)


def test_every_name_used_exists() -> None:
    missing = []
    for module, line, name, guard in query_calls():
        for package in packages_of(module):
            queries = load(package)
            for dialect in sorted((guard or served(package)) & served(package)):
                try:
                    queries.get(dialect, name)
                except UnknownQueryError:
                    missing.append(f"{module}:{line}: {name!r} ({package}, {dialect})")
    assert missing == [], "no such query:\n" + "\n".join(missing)


def test_every_block_is_used() -> None:
    used: dict[str, set[str]] = {STORE: set(), OBJECTS: set(), MOUNTS: set()}
    for module, _, name, _ in query_calls():
        for package in packages_of(module):
            used[package].add(name)
    for package, names in used.items():
        dead = sorted(load(package).names() - names)
        assert dead == [], f"{package}: named blocks nothing uses: {dead}"


def test_blocks_for_one_dialect_are_used_only_under_that_dialect() -> None:
    offenders = []
    for module, line, name, guard in query_calls():
        for package in packages_of(module):
            queries = load(package)
            have = {d for d in served(package) if name in queries.portable or name in queries.dialects.get(d, {})}
            if have != served(package) and not (guard and (guard & served(package)) <= have):
                offenders.append(f"{module}:{line}: {name!r} exists only for {sorted(have)}")
    assert offenders == [], "guard these with `if tx.dialect == ...`:\n" + "\n".join(offenders)


# --------------------------------------------------------------------------- what the blocks say

_ALL_STATES = {
    str(m.value)
    for e in (SnapshotState, WorkspaceState, LeaseState, MountState, ProjectStatus, Kind, LifecycleType, PodState)
    for m in e
}


@pytest.mark.parametrize("package", [STORE, OBJECTS, MOUNTS])
def test_states_are_parameters(package: str) -> None:
    spelled = [
        f"{q.source} {q.name}: '{lit}'"
        for q in load(package).blocks()
        for lit in re.findall(r"'([^']*)'", q.sql)
        if lit in _ALL_STATES
    ]
    assert spelled == [], "pass states as parameters (tenure.store.queries.state_params):\n" + "\n".join(spelled)


@pytest.mark.parametrize("name", ["pin_insert_snapshot", "gc_mark_roots", "gc_roots_since"])
def test_readable_queries_name_exactly_the_readable_states(name: str) -> None:
    sql = load(STORE).sql("sqlite", name)
    listed = re.search(r"state IN \(([^)]*)\)", sql)
    assert listed is not None
    assert {p.strip().lstrip(":") for p in listed.group(1).split(",")} == set(state_params(*READABLE_SNAPSHOT_STATES))


def test_every_sqlite_block_compiles_against_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "tenure.db"
    open_store(f"sqlite:///{path}").close()
    queries = load(STORE)
    failures = []
    with sqlite3.connect(path) as conn:
        for name in sorted(queries.names()):
            try:
                sql = translate("sqlite", queries.sql("sqlite", name))
            except UnknownQueryError:
                continue  # PostgreSQL only
            params = {p: None for p in re.findall(r"(?<!:):([a-zA-Z_]\w*)", sql)}
            try:
                conn.execute("EXPLAIN " + sql, params)
            except sqlite3.Error as exc:
                failures.append(f"{name}: {exc}")
    assert failures == []


# --------------------------------------------------------------------------- the loader


def test_files_parse_with_unique_names() -> None:
    for package in (STORE, OBJECTS, MOUNTS):
        queries = load(package)
        assert queries.names(), package
        for query in queries.blocks():
            assert query.sql and not query.sql.endswith(";"), query.name


def test_a_dialect_block_overrides_the_portable_one() -> None:
    queries = Queries(
        "example",
        parse("-- name: ids\nSELECT id FROM t WHERE id IN (:ids)\n-- name: both\nSELECT 1\n", "queries.sql"),
        {
            "postgres": parse(
                "-- name: ids\nSELECT id FROM t WHERE id = ANY(:ids)\n-- name: lock\nSELECT 1 FOR UPDATE\n",
                "postgres/queries.sql",
            )
        },
    )
    assert queries.sql("sqlite", "ids") == "SELECT id FROM t WHERE id IN (:ids)"
    assert queries.sql("postgres", "ids") == "SELECT id FROM t WHERE id = ANY(:ids)"
    assert queries.sql("sqlite", "both") == queries.sql("postgres", "both") == "SELECT 1"
    assert queries.sql("postgres", "lock") == "SELECT 1 FOR UPDATE"
    with pytest.raises(UnknownQueryError):
        queries.sql("sqlite", "lock")
    assert queries.names() == {"ids", "both", "lock"}


def test_list_parameters_are_bound_per_dialect() -> None:
    assert bind("sqlite", {"ids": ["a", "b"], "n": 1}) == {"ids": '["a", "b"]', "n": 1}
    assert bind("postgres", {"ids": ("a", "b"), "n": 1}) == {"ids": ["a", "b"], "n": 1}
    assert translate("postgres", "SELECT 1 WHERE a = :a AND b::text LIKE '%' AND t < {now}").startswith(
        "SELECT 1 WHERE a = %(a)s AND b::text LIKE '%%' AND t < extract(epoch"
    )


def test_an_unknown_name_is_a_clear_key_error() -> None:
    with pytest.raises(KeyError) as info:
        load(STORE).sql("sqlite", "no_such_query")
    assert "no_such_query" in str(info.value) and "sqlite" in str(info.value)
    with pytest.raises(UnknownQueryError):
        load(STORE).sql("sqlite", "migrations_lock")  # PostgreSQL only
    with pytest.raises(UnknownQueryError):
        load(STORE).sql("oracle", "store_now")


def test_the_parser_refuses_malformed_files() -> None:
    good = parse("-- preamble\n\n-- name: a\n-- what a does\nSELECT 1;\n\n-- name: b\nSELECT 2\n", "t.sql")
    assert [(q.name, q.doc, q.sql) for q in good.values()] == [("a", "what a does", "SELECT 1"), ("b", "", "SELECT 2")]
    for text in (
        "-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n",  # duplicate
        "SELECT 1;\n",  # outside a block
        "-- name: a\n-- nothing\n",  # empty
        "-- name: Bad-Name\nSELECT 1;\n",  # invalid name
        "-- name: a\nSELECT 1; SELECT 2;\n",
    ):  # two statements
        with pytest.raises(QueryFileError):
            parse(text, "t.sql")


def test_state_params_name_the_state() -> None:
    assert state_params(SnapshotState.READY, ProjectStatus.CLOSED) == {"ready": "READY", "closed": "CLOSED"}


def test_enum_params_cover_every_member() -> None:
    for members in (SnapshotState, ProjectStatus, PodState):
        assert set(state_params(*members).values()) == {m.value for m in members}
        assert all(isinstance(m, enum.Enum) for m in members)
