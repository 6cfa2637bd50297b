"""Run the real CLI in a child process under the conditions a fault needs.

As root, permission bits do not stop anything: :func:`unprivileged` drops the
two capabilities that bypass them (the child keeps uid 0, so it can still read
the interpreter and the test's folders). :func:`tenure` runs
``python -m tenure.cli.main`` with optional extra environment, a working
folder and a ``preexec_fn`` (for ``RLIMIT_FSIZE``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.support.procs import ROOT, env


def unprivileged() -> list[str]:
    """A command prefix under which permission bits apply (empty when not root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux): cannot make permission bits count")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


def tenure(
    args: Sequence[str],
    *,
    prefix: Sequence[str] = (),
    cwd: str = ROOT,
    preexec_fn: Callable[[], None] | None = None,
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    # No byte-code writes: a child under a file-size limit would leave truncated .pyc files behind.
    return subprocess.run(
        [*prefix, sys.executable, "-m", "tenure.cli.main", *args],
        cwd=cwd,
        env=env(PYTHONDONTWRITEBYTECODE="1", **extra),
        text=True,
        capture_output=True,
        timeout=300,
        preexec_fn=preexec_fn,
    )


def file_size_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn``: no file of the child may grow past ``limit`` bytes (write fails with EFBIG)."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def error_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON error document of a ``--json`` run that failed (stdout empty, stderr nothing else)."""
    assert result.returncode != 0, result.stdout
    assert result.stdout == "", result.stdout
    document = json.loads(result.stderr)
    assert list(document) == ["error"], result.stderr
    assert set(document["error"]) == {"code", "message", "hint", "retryable", "context"}
    return document["error"]  # type: ignore[no-any-return]


def one_line(result: subprocess.CompletedProcess[str], code: str) -> str:
    """The single ``error[code]: …`` line of a failed run."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error[{code}]: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    return json.loads(result.stdout)


def private_mount_namespace() -> tuple[str, ...]:
    """The command prefix of a private mount namespace (an unprivileged user namespace's root, who may mount a
    tmpfs); the test is skipped where user namespaces are not allowed."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare (util-linux) is missing")
    probe = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user namespaces here: {probe.stderr.decode().strip()}")
    return (unshare, "--user", "--map-root-user", "--mount")


def in_private_mount_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``sh -c script`` in a private mount namespace (as an unprivileged user namespace's root), where it
    may mount a small tmpfs; ``$PY`` names this interpreter. Skipped where user namespaces are not allowed."""
    return subprocess.run(
        [*private_mount_namespace(), "sh", "-c", script],
        env=env(PY=sys.executable, PYTHONDONTWRITEBYTECODE="1"),
        text=True,
        capture_output=True,
        timeout=300,
    )
