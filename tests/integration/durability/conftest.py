"""The recorder fixture: every durability test runs under strace and under the in-process recorder.

strace needs the ``strace`` binary and permission to ptrace. Where either is
missing, the strace half is skipped with the reason, except under
``CI=true``, where it fails (``.ci/run`` installs strace).
"""

from __future__ import annotations

import functools

import pytest

from tests.conftest import IN_CI
from tests.integration.durability.trace import strace_problem


@functools.cache
def _strace_problem() -> str | None:
    return strace_problem()


def need_strace(problem: str | None, in_ci: bool) -> None:
    """Fail (under CI) or skip when strace cannot record."""
    if problem is None:
        return
    if in_ci:
        pytest.fail(f"CI=true but {problem}")
    pytest.skip(problem)


@pytest.fixture(params=["strace", "inprocess"])
def recorder(request: pytest.FixtureRequest) -> str:
    if request.param == "strace":
        need_strace(_strace_problem(), IN_CI)
    return str(request.param)
