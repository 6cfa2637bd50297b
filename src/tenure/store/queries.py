"""Named SQL queries, read once from the package's ``sql/`` folder.

A package that talks SQL keeps its statements in named blocks:

* ``sql/queries.sql`` — portable statements, valid on every dialect (a
  package may split them over more files, ``sql/<topic>.sql``; a name is
  unique across all of them);
* ``sql/<dialect>/queries.sql`` (``sqlite``, ``postgres``) — statements that
  differ per dialect. A block there overrides the portable block of the same
  name for that dialect; a name found only in one dialect's file exists only
  for that dialect.

A block starts with a header line ``-- name: <name>``, may continue with
comment lines saying what it does, and then holds one statement (an ending
``;`` is optional)::

    -- name: workspace_by_ref
    -- A workspace by name or id.
    SELECT * FROM workspaces WHERE name = :r OR id = :r;

Statements use ``:name`` parameters and the ``{now}`` store-clock
placeholder; the connector translates both for its driver. Names are unique
within a file. Files are read through :mod:`importlib.resources`, so an
installed package finds them too; each package is parsed once per process.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

DIALECTS = ("sqlite", "postgres")
#: The control-plane store's queries (and migrations).
STORE = "tenure.store"

_HEADER = re.compile(r"^--\s*name:\s*(\S+)\s*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class UnknownQueryError(KeyError):
    """No block of that name exists for the dialect."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown query"


class QueryFileError(ValueError):
    """A query file is malformed (duplicate or invalid name, empty block, stray text)."""


@dataclass(frozen=True)
class Query:
    name: str
    doc: str
    sql: str
    source: str


@dataclass(frozen=True)
class Queries:
    """The named blocks of one package: portable ones and per-dialect overrides."""

    package: str
    portable: Mapping[str, Query]
    dialects: Mapping[str, Mapping[str, Query]]

    def get(self, dialect: str, name: str) -> Query:
        """The block for ``name`` on ``dialect`` (its override if it has one)."""
        if dialect not in DIALECTS:
            raise UnknownQueryError(f"unknown SQL dialect {dialect!r}; known: {', '.join(DIALECTS)}")
        found = self.dialects.get(dialect, {}).get(name) or self.portable.get(name)
        if found is None:
            raise UnknownQueryError(
                f"no query named {name!r} for {dialect} in {self.package} (sql/queries.sql, sql/{dialect}/queries.sql)"
            )
        return found

    def sql(self, dialect: str, name: str) -> str:
        """The statement text for ``name`` on ``dialect``, untranslated."""
        return self.get(dialect, name).sql

    def names(self) -> set[str]:
        """Every name defined for at least one dialect."""
        found = set(self.portable)
        for blocks in self.dialects.values():
            found |= set(blocks)
        return found

    def blocks(self) -> Iterator[Query]:
        """Every block of every file, overrides included."""
        yield from self.portable.values()
        for dialect in DIALECTS:
            yield from self.dialects.get(dialect, {}).values()


def parse(text: str, source: str) -> dict[str, Query]:
    """The named blocks of one file; raises :class:`QueryFileError` when it is malformed."""
    blocks: dict[str, Query] = {}
    name: str | None = None
    doc: list[str] = []
    body: list[str] = []

    def close(number: int) -> None:
        if name is None:
            return
        sql = "\n".join(body).strip().rstrip(";").strip()
        if not sql:
            raise QueryFileError(f"{source}: block {name!r} has no statement (before line {number})")
        if ";" in sql:
            raise QueryFileError(f"{source}: block {name!r} holds more than one statement")
        blocks[name] = Query(name, " ".join(doc), sql, source)

    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line.strip())
        if header:
            close(number)
            name, doc, body = header.group(1), [], []
            if not _NAME.fullmatch(name):
                raise QueryFileError(
                    f"{source}:{number}: invalid query name {name!r} (use lower_case_with_underscores)"
                )
            if name in blocks:
                raise QueryFileError(f"{source}:{number}: duplicate query name {name!r}")
            continue
        stripped = line.strip()
        if name is None:
            if stripped and not stripped.startswith("--"):
                raise QueryFileError(f"{source}:{number}: statement outside a named block")
            continue
        if stripped.startswith("--"):
            if not body:
                doc.append(stripped[2:].strip())
            continue  # comments inside a statement are dropped before it reaches the driver
        body.append(line)
    close(len(text.splitlines()) + 1)
    return blocks


@functools.cache
def load(package: str = STORE) -> Queries:
    """The parsed query files of ``package`` (read once, then cached)."""
    folder = resources.files(package) / "sql"
    portable: dict[str, Query] = {}
    files = (
        sorted(
            (e for e in folder.iterdir() if e.is_file() and e.name.endswith(".sql")),
            key=lambda e: (e.name != "queries.sql", e.name),
        )
        if folder.is_dir()
        else []
    )
    for entry in files:
        found = parse(entry.read_text(encoding="utf-8"), f"{package}:sql/{entry.name}")
        twice = sorted(set(found) & set(portable))
        if twice:
            raise QueryFileError(f"{package}:sql/{entry.name}: names already defined in another file: {twice}")
        portable.update(found)
    dialects: dict[str, dict[str, Query]] = {}
    for dialect in DIALECTS:
        entry = folder / dialect / "queries.sql"
        if entry.is_file():
            dialects[dialect] = parse(entry.read_text(encoding="utf-8"), f"{package}:sql/{dialect}/queries.sql")
    return Queries(package, portable, dialects)


def state_params(*states: enum.Enum) -> dict[str, Any]:
    """Parameters for the states a query names: ``:ready`` is ``SnapshotState.READY.value``.

    Queries never spell a state; they name it as a parameter after the state
    (lower case), and the caller passes the enum's value through this.
    """
    return {str(s.value).lower(): s.value for s in states}
