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
            f"{path} is stale: run `python -m tenure.cli.docs docs/machines`")


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
    storage = doc[doc.index("## Storage lifecycle (S-nn)"):doc.index("## Intake (I-nn)")]
    assert set(re.findall(r"^\| (S-\d+) \|", storage, re.MULTILINE)) == {f"S-{n:02d}" for n in range(1, 86)}
    projects = doc[doc.index("## Project lifecycle (P-nn)"):doc.index("## Storage lifecycle (S-nn)")]
    assert set(re.findall(r"^\| (P-\d+) \|", projects, re.MULTILINE)) == {f"P-{n:02d}" for n in range(1, 134)}
    sources = "\n".join(open(p, encoding="utf-8").read()
                        for p in glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"), recursive=True))
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
