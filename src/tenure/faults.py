"""Named crash-injection points.

Code that must survive a crash at a given step calls ``crash_point("name")``
there. When the environment variable ``TENURE_CRASH_AT`` names that point
(a comma-separated list is allowed), the process kills itself with SIGKILL on
the spot — no cleanup, no ``finally``, no flushed buffers: exactly what
``kill -9`` or a power cut would do. Tests run the real CLI or a worker in a
subprocess with the variable set, then check that the next call completes.

``TENURE_CRASH_SKIP=N`` lets the point pass N times before it fires (to crash
in the middle of a loop).

Every point is registered in :data:`POINTS`, so a test can iterate them all.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point", "POINTS", "register"]

#: Every named point, with a sentence saying what has happened when it fires.
POINTS: dict[str, str] = {}
_hits: dict[str, int] = {}


def register(name: str, description: str) -> str:
    POINTS[name] = description
    return name


def crash_point(name: str) -> None:
    """Die here with SIGKILL if ``TENURE_CRASH_AT`` names this point."""
    wanted = os.environ.get("TENURE_CRASH_AT")
    if not wanted or name not in wanted.split(","):
        return
    skip = int(os.environ.get("TENURE_CRASH_SKIP", "0"))
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] > skip:
        os.kill(os.getpid(), signal.SIGKILL)
