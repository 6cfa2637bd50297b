"""Fixtures for the intake tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.intake import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A fresh intake workspace in a temporary folder."""
    return Workspace(tmp_path / "ws")
