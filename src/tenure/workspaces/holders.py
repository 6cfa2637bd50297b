"""Who holds a pin: a name plus the host and process, so an abandoned pin can be told from a live one.

A pin's holder is ``NAME@HOST:PID`` (a short-lived CLI writer's holder,
``cli@HOST:PID``, already has that form). A pin whose holder ran on this host
in a process that no longer exists is provably abandoned — its restore or
upload was killed — and is dropped at once instead of after its TTL. A pin of
another host, or of a live pid (even a reused one), is kept until it expires.
"""

from __future__ import annotations

import os
import re
import socket

_PROCESS = re.compile(r"^(?P<name>.*)@(?P<host>[^@:/]+):(?P<pid>[0-9]+)$", re.DOTALL)


def process_holder(name: str) -> str:
    """``name`` qualified with this host and process (unchanged if it already is)."""
    if _PROCESS.fullmatch(name):
        return name
    return f"{name}@{socket.gethostname()}:{os.getpid()}"


def abandoned(holder: str) -> bool:
    """Whether ``holder`` names a process of this host that no longer runs."""
    match = _PROCESS.fullmatch(holder)
    if match is None or match["host"] != socket.gethostname():
        return False
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False
