"""Named crash-injection points.

Code that must survive a crash at a given step calls ``crash_point("name")``
there. When the environment variable ``TENURE_CRASH_AT`` names that point
(a comma-separated list is allowed), the process kills itself with SIGKILL on
the spot — no cleanup, no ``finally``, no flushed buffers: exactly what
``kill -9`` or a power cut would do. Tests run the real CLI or a worker in a
subprocess with the variable set, then check that the next call completes.

``TENURE_CRASH_SKIP=N`` lets the point pass N times before it fires (to crash
in the middle of a loop).

A process can also *pause itself*, on demand: with ``TENURE_PAUSE_AT``
naming a point (or ``TENURE_PAUSE_AFTER_STATEMENT`` a named PostgreSQL
statement, such as ``pod_renew_lease``) and ``TENURE_PAUSE_TRIGGER`` a file
path, the first time the point (or the statement) is passed while that file
exists the file is removed and the process stops itself with SIGSTOP, right
there — inside an open transaction, say — until someone sends SIGCONT
(``tenure verify cluster``'s ``renewal-pause`` fault).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["crash_point", "POINTS", "register", "at", "pause_if_triggered"]

#: Every named point, with a sentence saying what has happened when it fires.
POINTS: dict[str, str] = {}
_hits: dict[str, int] = {}
_hooks: dict[str, Callable[[], None]] = {}
_hook_lock = threading.Lock()


def register(name: str, description: str) -> str:
    POINTS[name] = description
    return name


@contextmanager
def at(name: str, action: Callable[[], None], *, times: int = 1) -> Iterator[None]:
    """While the block runs, call ``action`` the first ``times`` times point ``name`` is reached."""
    if name not in POINTS:
        raise KeyError(f"no fault point named {name!r}")
    left = [times]

    def fire() -> None:
        if left[0] > 0:
            left[0] -= 1
            action()

    with _hook_lock:
        _hooks[name] = fire
    try:
        yield
    finally:
        with _hook_lock:
            _hooks.pop(name, None)


def crash_point(name: str) -> None:
    """Run a test's action at this point, if any; die here with SIGKILL if ``TENURE_CRASH_AT`` names it."""
    if _hooks:
        hook = _hooks.get(name)
        if hook is not None:
            hook()
    pause = os.environ.get("TENURE_PAUSE_AT")
    if pause and name in pause.split(","):
        pause_if_triggered()
    wanted = os.environ.get("TENURE_CRASH_AT")
    if not wanted or name not in wanted.split(","):
        return
    skip = int(os.environ.get("TENURE_CRASH_SKIP", "0"))
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] > skip:
        os.kill(os.getpid(), signal.SIGKILL)


def pause_if_triggered() -> None:
    """SIGSTOP this process when ``TENURE_PAUSE_TRIGGER`` names a file that exists (removed first)."""
    trigger = os.environ.get("TENURE_PAUSE_TRIGGER")
    if not trigger:
        return
    try:
        os.unlink(trigger)
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGSTOP)
