"""`tenure verify cluster` end to end: real pods on PostgreSQL under faults give a clean history; a violation
planted in the recorded history is found, named, and fails the command; a fencing bug planted in the pods
themselves (the test-only launcher ``tenure.verify.planted``) is caught as a stale write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tenure.verify.cluster import plant_violation
from tenure.verify.history import RULES, check
from tests.support.histories import history_of, two_holders

SRC = str(Path(__file__).resolve().parents[3] / "src")


def run_kit(
    pg_url: str, workdir: Path, *extra: str, pods: int = 3, projects: int = 3
) -> tuple[int, dict[str, Any], str]:
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
        str(pods),
        "--projects",
        str(projects),
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
    # the paused and cut pods were probed straight, and none of them took a write or a checkpoint
    probes = report["probes"]
    assert probes, faults
    assert all("ok" not in outcomes for outcomes in probes.values()), probes


def probes_of(workdir: Path) -> list[dict[str, Any]]:
    history = json.loads((workdir / "history.json").read_text())
    return [op for op in history["operations"] if op["payload"].get("probe")]


@pytest.mark.postgres
def test_a_pod_that_skips_the_generation_check_is_caught_writing_under_a_stale_generation(
    pg_url: str, tmp_path: Path
) -> None:
    code, report, stderr = run_kit(
        pg_url,
        tmp_path,
        "--duration",
        "12",
        "--seed",
        "3",
        "--fault",
        "stop",
        "--plant-bug",
        "skip-generation-check",
        pods=2,
        projects=4,
    )
    assert report, stderr
    probes = [(op["id"], op["kind"], op["outcome"], op["code"], op["generation"]) for op in probes_of(tmp_path)]
    assert code == 1, (report["faults"], probes, stderr)
    assert report["planted_bug"] == "skip-generation-check" and report["planted"] is None
    # the paused pod, probed straight once resumed, acknowledged a checkpoint of a project taken over from it
    assert report["probes"].get("checkpoint", {}).get("ok"), (report["faults"], probes)
    stale = [v for v in report["violations"] if v["rule"] == "stale-write"]
    assert any(set(v["records"]) & {op[0] for op in probes} for v in stale), report["violations"]


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
