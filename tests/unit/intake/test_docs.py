"""The intake documentation states what the code does (I-86, I-122)."""

from __future__ import annotations

import re
from pathlib import Path

from tenure.faults import POINTS
from tenure.intake.errors import CODES

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "intake.md").read_text("utf-8")


def test_i86_network_filesystems_documented_unsupported() -> None:
    assert (
        "Shared\nnetwork filesystems (NFS, SMB) are not supported" in DOC
        or "network filesystems (NFS, SMB) are not supported" in DOC.replace("\n", " ")
    )


def test_i122_every_error_code_is_documented() -> None:
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", DOC, re.MULTILINE))
    assert set(CODES) <= documented


def test_every_crash_point_is_documented() -> None:
    import tenure.intake.inbox  # noqa: F401

    for point in (p for p in POINTS if p.startswith("intake.")):
        assert f"`{point}`" in DOC, point


def test_requirements_table_covers_every_intake_id() -> None:
    doc = (ROOT / "docs" / "requirements.md").read_text("utf-8")
    table = doc[doc.index("## Intake (I-nn)") :]
    ids = set(re.findall(r"^\| (I-\d+) \|", table, re.MULTILINE))
    assert ids == {f"I-{n:02d}" for n in range(1, 135)}
    tests = "\n".join(p.read_text("utf-8") for p in (ROOT / "tests").glob("*/intake/test_*.py"))
    for name in re.findall(r"`(test_[a-z0-9_]+)`", table):
        assert f"def {name}(" in tests or f"{name} =" in tests, name
