"""Running the real CLI the way a new user does: from a folder, with or without a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from tests.support.procs import env

#: Environment variables that would point the CLI elsewhere than the user's folder.
_CLEARED = ("TENURE_DATA", "TENURE_DB", "TENURE_OBJECTS")


def user_env(**extra: str) -> dict[str, str]:
    e = env(**extra)
    for name in _CLEARED:
        if name not in extra:
            e.pop(name, None)
    return e


def run(args: Sequence[str], *, cwd: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    """``tenure ARGS`` in ``cwd``, stdin a pipe (no terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "tenure.cli.main", *args],
        cwd=cwd,
        env=user_env(**extra),
        text=True,
        capture_output=True,
        input=stdin if stdin is not None else "",
        timeout=300,
    )


def start(args: Sequence[str], *, cwd: str, **extra: str) -> subprocess.Popen[str]:
    """``tenure ARGS`` in ``cwd`` as a child left running, stdout and stderr pipes (no terminal)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tenure.cli.main", *args],
        cwd=cwd,
        env=user_env(**extra),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def ok(args: Sequence[str], *, cwd: str, **extra: str) -> Any:
    result = run(["--json", *args], cwd=cwd, **extra)
    assert result.returncode == 0, (args, result.returncode, result.stderr)
    return json.loads(result.stdout)


def error_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON error document (the command ran with --json)."""
    return json.loads(result.stderr)["error"]  # type: ignore[no-any-return]


def run_on_terminal(
    args: Sequence[str], *, cwd: str, answer: str = "", terminal_stderr: bool = False, **extra: str
) -> tuple[int, str, str]:
    """``tenure ARGS`` with stdin on a pseudo-terminal (and stderr too, if asked), ``answer`` typed ahead.

    Returns the exit code, stdout and what the terminal showed (stderr, and the echo of the typed answer).
    """
    master, slave = pty.openpty()
    err_r, err_w = (None, slave) if terminal_stderr else os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tenure.cli.main", *args],
            cwd=cwd,
            env=user_env(COLUMNS="160", TERM="xterm", **extra),
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=err_w,
            text=False,
            close_fds=True,
        )
    finally:
        os.close(slave)
        if err_w != slave:
            os.close(err_w)
    if answer:
        os.write(master, answer.encode())
    out_chunks: list[bytes] = []
    shown: list[bytes] = []
    streams = {master: shown}
    if err_r is not None:
        streams[err_r] = shown
    assert proc.stdout is not None
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out_chunks)
    for fd, sink in streams.items():
        sel.register(fd, selectors.EVENT_READ, sink)
    open_streams = 1 + len(streams)
    while open_streams:
        for key, _ in sel.select(timeout=300):
            try:
                chunk = os.read(key.fd, 65536)
            except OSError:  # the terminal's other side closed (EIO)
                chunk = b""
            if chunk:
                key.data.append(chunk)
            else:
                sel.unregister(key.fileobj)
                open_streams -= 1
    code = proc.wait(timeout=300)
    os.close(master)
    if err_r is not None:
        os.close(err_r)
    return code, b"".join(out_chunks).decode(errors="replace"), b"".join(shown).decode(errors="replace")
