"""Docs that must not go stale: machine diagrams, CLI help, requirement list."""

from __future__ import annotations

import os

import pytest

from tenure.states import machine_doc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _machines():  # type: ignore[no-untyped-def]
    from tenure.cli.docs import documented_machines

    return documented_machines()


@pytest.mark.parametrize("name", sorted(_machines()))
def test_s08_machine_docs_match_the_edge_tables(name: str) -> None:
    machine, description = _machines()[name]
    path = os.path.join(ROOT, "docs", "machines", f"{name}.md")
    assert os.path.exists(path), f"missing {path}: run `python -m tenure.cli.docs docs/machines`"
    with open(path, encoding="utf-8") as fh:
        assert fh.read() == machine_doc(machine, description), (
            f"{path} is stale: run `python -m tenure.cli.docs docs/machines`"
        )


def test_every_cli_command_has_help() -> None:
    import click

    from tenure.cli.main import root

    def walk(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
        found = []
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None, f"{prefix} {name} does not load"
            found.append((f"{prefix} {name}", cmd))
            if isinstance(cmd, click.Group):
                found += walk(cmd, f"{prefix} {name}")
        return found

    for name, cmd in walk(root, "tenure"):
        assert (cmd.help or "").strip(), f"`{name}` has no help text"


def test_requirements_list_every_id_and_name_real_tests() -> None:
    import glob
    import re

    with open(os.path.join(ROOT, "docs", "requirements.md"), encoding="utf-8") as fh:
        doc = fh.read()
    storage = doc[doc.index("## Storage lifecycle (S-nn)") : doc.index("## Intake (I-nn)")]
    assert set(re.findall(r"^\| (S-\d+) \|", storage, re.MULTILINE)) == {f"S-{n:02d}" for n in range(1, 86)}
    projects = doc[doc.index("## Project lifecycle (P-nn)") : doc.index("## Storage lifecycle (S-nn)")]
    assert set(re.findall(r"^\| (P-\d+) \|", projects, re.MULTILINE)) == {f"P-{n:02d}" for n in range(1, 134)}
    sources = "\n".join(
        open(p, encoding="utf-8").read()
        for p in glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"), recursive=True)
    )
    for name in set(re.findall(r"`(test_[a-z0-9_]+)", doc)):
        assert f"def {name}(" in sources, f"docs/requirements.md names a test that does not exist: {name}"


def test_every_storage_error_code_is_documented() -> None:
    import glob
    import re

    with open(os.path.join(ROOT, "docs", "errors.md"), encoding="utf-8") as fh:
        documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", fh.read(), re.MULTILINE))
    found = set()
    for path in glob.glob(os.path.join(ROOT, "src", "tenure", "**", "*.py"), recursive=True):
        if os.sep + "intake" in path:
            continue
        with open(path, encoding="utf-8") as fh:
            found |= set(re.findall(r'\bcode\s*=\s*"([a-z0-9-]+)"', fh.read()))
    assert found - documented == set()


GLOSSARY_CORE_TERMS = (
    "project",
    "pod",
    "owner",
    "ownership lease",
    "claim",
    "generation",
    "package generation",
    "writer lease",
    "workspace",
    "head",
    "snapshot",
    "checkpoint",
    "intake checkpoint",
    "object",
    "object store",
    "pin",
    "gc",
    "prune",
    "mount",
    "session",
    "activation registry",
    "engine",
    "bring",
    "suspend",
    "close",
    "owner-required",
    "lifecycle type",
    "kind",
    "placement selector",
    "placement score",
    "drift",
    "trash",
    "preserved folder",
    "base file",
    "intake",
    "inbox",
    "quarantine",
    "case",
    "package",
    "step id",
    "blocked",
    "error code",
    "error family",
    "retryable",
)


def _glossary() -> tuple[str, dict[str, str]]:
    """The glossary text and its entries: each ``### A / B`` heading's names → the entry's text."""
    import re

    with open(os.path.join(ROOT, "docs", "glossary.md"), encoding="utf-8") as fh:
        text = fh.read()
    entries: dict[str, str] = {}
    for heading, body in re.findall(r"^### ([^\n]+)\n(.*?)(?=^##|\Z)", text, re.MULTILINE | re.DOTALL):
        for name in heading.split(" / "):
            assert name.lower() not in entries, f"docs/glossary.md defines {name!r} twice"
            entries[name.lower()] = body.strip()
    return text, entries


def test_glossary_defines_every_core_term_in_a_short_entry() -> None:
    _, entries = _glossary()
    missing = [term for term in GLOSSARY_CORE_TERMS if term not in entries]
    assert not missing, f"docs/glossary.md has no entry for {missing}"
    for name, body in entries.items():
        assert body, f"the glossary entry {name!r} is empty"
        assert len(body.split()) <= 130, f"the glossary entry {name!r} is not short ({len(body.split())} words)"


def test_glossary_names_only_classes_that_exist() -> None:
    """Every ``ClassName`` and ``tenure.dotted.Name`` the glossary shows in backticks is real."""
    import ast
    import glob
    import importlib
    import re

    text, _ = _glossary()
    defined: set[str] = set()
    for path in glob.glob(os.path.join(ROOT, "src", "tenure", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        defined |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    named = set(re.findall(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)`", text))
    assert named, "the glossary names no class: the pattern above is stale"
    assert named - defined == set(), f"docs/glossary.md names classes tenure does not define: {named - defined}"
    for dotted in set(re.findall(r"`(tenure(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", text)):
        module, _, attr = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), f"docs/glossary.md names {dotted}, which does not exist"


def test_glossary_links_resolve() -> None:
    """In-page anchors name a heading; relative links name a file of the repository."""
    import re

    text, _ = _glossary()
    slugs = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    }
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if target.startswith("#"):
            assert target[1:] in slugs, f"docs/glossary.md links to a missing entry: {target}"
        else:
            path = os.path.join(ROOT, "docs", target.split("#")[0])
            assert os.path.exists(path), f"docs/glossary.md links to a missing file: {target}"


def test_readme_and_architecture_link_the_glossary() -> None:
    for page, link in (("README.md", "(docs/glossary.md)"), (os.path.join("docs", "architecture.md"), "(glossary.md)")):
        with open(os.path.join(ROOT, page), encoding="utf-8") as fh:
            assert link in fh.read(), f"{page} does not link the glossary"
