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
        for name, cmd in group.commands.items():
            found.append((f"{prefix} {name}", cmd))
            if isinstance(cmd, click.Group):
                found += walk(cmd, f"{prefix} {name}")
        return found

    for name, cmd in walk(root, "tenure"):
        assert (cmd.help or "").strip(), f"`{name}` has no help text"
