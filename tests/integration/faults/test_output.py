"""Under ``--json`` every error is one JSON document on stderr — an unexpected one (``internal``, exit 70)
too — and stdout stays empty; without ``--json`` it is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.procs import ROOT, env

#: The real CLI, with opening the store broken the way a bug would break it.
BROKEN = """
import sys
import tenure.store

def broken(*args, **kwargs):
    raise RuntimeError("disk on fire")

tenure.store.open_store = broken
from tenure.cli.main import main
main()
"""


def _broken(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BROKEN, *args], cwd=ROOT, env=env(), text=True, capture_output=True, timeout=120
    )


def test_internal_error_under_json_is_one_json_document(tmp_path: Path) -> None:
    result = _broken("--data", str(tmp_path / "data"), "--json", "workspace", "create", "w")
    assert result.returncode == 70 and result.stdout == ""
    document = json.loads(result.stderr)
    assert document == {
        "error": {
            "code": "internal",
            "message": "RuntimeError: disk on fire",
            "hint": "rerun with --debug for a traceback and report it",
            "retryable": False,
            "context": {},
        }
    }


def test_internal_error_without_json_is_one_line(tmp_path: Path) -> None:
    result = _broken("--data", str(tmp_path / "data"), "workspace", "create", "w")
    assert result.returncode == 70 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error[internal]: RuntimeError: disk on fire (rerun with --debug for a traceback)"
    ]
