"""Helpers for tests that run real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(extra)
    return e


def spawn(args: Sequence[str], **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env(**extra), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def tenure(args: Sequence[str], **extra: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "tenure.cli.main", *args],
        cwd=ROOT,
        env=env(**extra),
        text=True,
        capture_output=True,
        timeout=300,
    )


def wait_for(path: str, timeout: float = 30.0) -> None:
    """Poll for a file with a deadline (a readiness signal from a child)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout}s")
        time.sleep(0.005)
