"""``tenure project create`` takes the placement with the project (``--selector``, ``--score``), so a
project that may run only on some pods is never placed before its selector is known; a selector that is
not ``KEY=VALUE`` is refused with ``invalid-selector`` and creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import error_of, ok_json, tenure


@pytest.fixture
def base(tmp_path: Path) -> list[str]:
    return ["--data", str(tmp_path / "data"), "--json"]


def test_create_sets_the_selector_and_score_with_the_project(base: list[str]) -> None:
    created = ok_json(
        tenure(
            [
                *base,
                "project",
                "create",
                "acme/gpu",
                "--type",
                "PERMANENT",
                "--selector",
                "gpu=a100",
                "--selector",
                "zone=eu",
                "--score",
                "2.5",
            ]
        )
    )
    assert (created["placement_selector"], created["placement_score"]) == ({"gpu": "a100", "zone": "eu"}, 2.5)
    shown = ok_json(tenure([*base, "project", "show", "acme/gpu"]))
    assert (shown["placement_selector"], shown["placement_score"]) == ({"gpu": "a100", "zone": "eu"}, 2.5)


def test_create_without_placement_options_keeps_the_defaults(base: list[str]) -> None:
    created = ok_json(tenure([*base, "project", "create", "acme/plain"]))
    assert (created["placement_selector"], created["placement_score"]) == ({}, 1.0)


@pytest.mark.parametrize("bad", ["zone", "=eu"])
def test_a_malformed_selector_is_refused_and_creates_nothing(base: list[str], bad: str) -> None:
    ok_json(tenure([*base, "project", "create", "acme/first"]))
    error = error_of(tenure([*base, "project", "create", "acme/odd", "--selector", bad]))
    assert error["code"] == "invalid-selector"
    assert [p["name"] for p in ok_json(tenure([*base, "project", "list"]))] == ["first"]


def test_a_score_that_is_not_positive_is_refused(base: list[str]) -> None:
    error = error_of(tenure([*base, "project", "create", "acme/free", "--score", "0"]))
    assert error["code"] == "invalid-score"
