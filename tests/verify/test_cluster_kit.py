"""`tenure verify cluster` end to end: real pods on PostgreSQL under faults give a clean history; a violation
planted in the recorded history is found, named, and fails the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tenure.verify.cluster import plant_violation
from tenure.verify.history import RULES, check
from tests.verify.test_history import history_of, two_holders

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_kit(pg_url: str, workdir: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    args = [
        sys.executable,
        "-m",
        "tenure.cli.main",
        "--json",
        "verify",
        "cluster",
        "--db",
        pg_url,
        "--pods",
        "3",
        "--projects",
        "3",
        "--workdir",
        str(workdir),
        *extra,
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=180, env=dict(os.environ, PYTHONPATH=SRC))
    document = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, document, done.stderr


@pytest.mark.postgres
def test_pods_under_kill_pause_and_partition_leave_a_history_without_violations(pg_url: str, tmp_path: Path) -> None:
    code, report, stderr = run_kit(
        pg_url,
        tmp_path,
        "--duration",
        "14",
        "--seed",
        "7",
        "--fault",
        "kill",
        "--fault",
        "stop",
        "--fault",
        "partition",
    )
    assert code == 0, (report.get("violations"), stderr)
    assert report["ok"] is True and report["violations"] == []
    operations = report["operations"]
    assert isinstance(operations, dict)
    assert operations["write"]["ok"] > 0 and operations["checkpoint"]["ok"] > 0
    assert report["checkpoints_with_digest"] and report["restored"]
    faults = report["faults"]
    assert isinstance(faults, list) and {f["fault"] for f in faults} <= {"kill", "stop", "partition"} and faults
    assert (tmp_path / "history.json").is_file()


@pytest.mark.postgres
def test_a_violation_planted_in_the_recorded_history_fails_the_run_and_is_named(pg_url: str, tmp_path: Path) -> None:
    code, report, stderr = run_kit(
        pg_url, tmp_path, "--duration", "6", "--seed", "3", "--fault", "kill", "--plant-violation", "stale-write"
    )
    assert code == 1, stderr
    assert report["planted"] == "stale-write"
    violations = report["violations"]
    assert isinstance(violations, list)
    assert {v["rule"] for v in violations} == {"stale-write"}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_planting_a_rule_in_a_clean_history_gives_exactly_that_rule(rule: str) -> None:
    clean = history_of(two_holders(), horizon=40.0)
    assert check(clean) == []
    assert {v.rule for v in check(plant_violation(clean, rule))} == {rule}
