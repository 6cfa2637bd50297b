"""I-79: the Windows branch of :class:`tenure.intake.fsio.FileLock` (``msvcrt.locking``), run on POSIX.

Windows cannot run here, so the test loads the source of ``tenure.intake.fsio``
into a fresh module object that sees ``os.name == "nt"`` and imports
:class:`FakeMsvcrt`, a test double of ``msvcrt``, instead of the real one. The
branch's own code then runs unchanged: its ``_try_lock`` and ``_unlock`` call
``locking`` the way Windows would see them.

:class:`FakeMsvcrt` puts real byte-range locks (``fcntl.lockf``) on the file,
from the descriptor's current position like ``msvcrt.locking``, and, like
Windows, refuses to unlock a byte that this descriptor has not locked. POSIX
record locks belong to a process, not to a descriptor, so two locks in one
process never exclude each other under the double: exclusion is shown with the
second ``FileLock`` in another process. What only a Windows run shows: the
exclusion of two ``FileLock`` objects inside one process, that closing one
handle leaves another handle's lock alone, and the real ``msvcrt`` (its
constants, its errors, and that the OS drops the lock when the holder dies).
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import tenure.intake.fsio
from tests.support.intake import SRC, run_python

ROOT = str(Path(__file__).resolve().parents[3])


class FakeMsvcrt:
    """Test double of Windows' ``msvcrt`` module (Windows cannot run here): ``locking`` on ``fcntl.lockf``.

    ``locking(fd, LK_NBLCK, n)`` locks ``n`` bytes from the current position or raises
    :class:`OSError` when another process holds them; ``locking(fd, LK_UNLCK, n)``
    unlocks ``n`` bytes at the current position and, as on Windows, raises
    :class:`OSError` when this descriptor holds no lock there. ``calls`` records
    ``(mode, position, n)`` for every call.
    """

    LK_UNLCK = 0  # the values of Windows' msvcrt
    LK_LOCK = 1
    LK_NBLCK = 2
    LK_RLCK = 3
    LK_NBRLCK = 4

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.held: set[tuple[int, int]] = set()  # (fd, first byte) locked through this double

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        position = os.lseek(fd, 0, os.SEEK_CUR)
        self.calls.append((mode, position, nbytes))
        if mode == self.LK_NBLCK:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, nbytes, 0, os.SEEK_CUR)
            except OSError as error:
                raise OSError(errno.EACCES, "Permission denied") from error
            self.held.add((fd, position))
        elif mode == self.LK_UNLCK:
            if (fd, position) not in self.held:
                raise OSError(errno.EACCES, f"Permission denied: byte {position} of fd {fd} is not locked")
            fcntl.lockf(fd, fcntl.LOCK_UN, nbytes, 0, os.SEEK_CUR)
            self.held.discard((fd, position))
        else:
            raise NotImplementedError(f"FakeMsvcrt models LK_NBLCK and LK_UNLCK only, not mode {mode}")


def load_windows_fsio(fake: FakeMsvcrt) -> types.ModuleType:
    """``tenure.intake.fsio``'s source in a fresh module that sees ``os.name == "nt"`` and ``fake`` as msvcrt."""
    nt_os = types.ModuleType("os")
    nt_os.__dict__.update(vars(os))
    nt_os.name = "nt"

    def importer(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name == "os":
            return nt_os
        if level == 0 and name == "msvcrt":
            return fake
        return builtins.__import__(name, globals, locals, fromlist, level)

    path = Path(tenure.intake.fsio.__file__)
    module = types.ModuleType("tenure.intake.fsio_on_windows")
    module.__file__ = str(path)
    module.__dict__["__builtins__"] = {**vars(builtins), "__import__": importer}
    exec(compile(path.read_text("utf-8"), str(path), "exec"), module.__dict__)
    assert module.msvcrt is fake and "fcntl" not in vars(module)  # the Windows branch was taken
    return module


#: Another process: the fsio module as on Windows, one FileLock on argv[1]; prints whether it got the lock.
OTHER_PROCESS = (
    "import sys\n"
    "from pathlib import Path\n"
    "from tests.integration.intake.test_lock_windows_branch import FakeMsvcrt, load_windows_fsio\n"
    "lock = load_windows_fsio(FakeMsvcrt()).FileLock(Path(sys.argv[1]))\n"
    "print(lock.acquire())\n"
)


def other_process_acquires(path: Path) -> bool:
    done = run_python(OTHER_PROCESS, str(path), env={"PYTHONPATH": os.pathsep.join([SRC, ROOT])})
    assert done.returncode == 0, done.stderr
    return {"True\n": True, "False\n": False}[done.stdout]


def test_i79_two_windows_locks_on_one_path_exclude_each_other(tmp_path: Path) -> None:
    fake = FakeMsvcrt()
    fsio = load_windows_fsio(fake)
    path = tmp_path / "worker.lock"
    holder = fsio.FileLock(path)
    assert holder.acquire() and holder.held
    assert fake.calls == [(FakeMsvcrt.LK_NBLCK, 0, 1)]  # one byte at offset 0
    assert other_process_acquires(path) is False
    assert holder.held
    holder.release()
    assert not holder.held
    assert other_process_acquires(path) is True  # that process has exited, and its lock with it


#: Another process that holds the lock on argv[1] until its standard input closes.
HOLDER = (
    "import sys\n"
    "from pathlib import Path\n"
    "from tests.integration.intake.test_lock_windows_branch import FakeMsvcrt, load_windows_fsio\n"
    "lock = load_windows_fsio(FakeMsvcrt()).FileLock(Path(sys.argv[1]))\n"
    "print(lock.acquire(), flush=True)\n"
    "sys.stdin.read()\n"
    "lock.release()\n"
    "print('released', flush=True)\n"
)


def test_i79_a_windows_lock_held_elsewhere_refuses_acquire_at_once(tmp_path: Path) -> None:
    fake = FakeMsvcrt()
    fsio = load_windows_fsio(fake)
    path = tmp_path / "worker.lock"
    contender = fsio.FileLock(path)
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([SRC, ROOT])},
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline() == "True\n"
        assert contender.acquire() is False and not contender.held
        assert fake.calls == [(FakeMsvcrt.LK_NBLCK, 0, 1)] and fake.held == set()
        holder.stdin.close()
        assert holder.stdout.read() == "released\n"
    assert holder.returncode == 0
    assert contender.acquire() and contender.held
    contender.release()


def test_i79_windows_lock_release_then_reacquire(tmp_path: Path) -> None:
    fake = FakeMsvcrt()
    fsio = load_windows_fsio(fake)
    path = tmp_path / "case.lock"
    lock = fsio.FileLock(path)
    with lock:
        assert lock.acquire()
    assert not lock.held
    assert lock.acquire()
    assert other_process_acquires(path) is False
    lock.release()
    lock.release()  # a second release is a no-op: no unlock without a lock
    assert [mode for mode, _, _ in fake.calls] == [FakeMsvcrt.LK_NBLCK, FakeMsvcrt.LK_UNLCK] * 2
    assert fake.held == set()
    assert path.exists()  # lock files are never deleted


def test_i79_windows_unlock_is_at_offset_zero_after_the_position_moved(tmp_path: Path) -> None:
    fake = FakeMsvcrt()
    fsio = load_windows_fsio(fake)
    path = tmp_path / "worker.lock"
    lock = fsio.FileLock(path)
    assert lock.acquire()
    os.write(lock._fd, b"moved")  # the descriptor's position is now 5
    assert os.lseek(lock._fd, 0, os.SEEK_CUR) == 5
    lock.release()  # Windows (and the double) refuse an unlock of byte 5, which was never locked
    assert fake.calls[-1] == (FakeMsvcrt.LK_UNLCK, 0, 1)
    assert other_process_acquires(path) is True


def test_fake_msvcrt_refuses_to_unlock_a_byte_it_did_not_lock(tmp_path: Path) -> None:
    """The double is strict where Windows is: an unlock at the wrong offset fails."""
    fake = FakeMsvcrt()
    fd = os.open(tmp_path / "x.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fake.locking(fd, FakeMsvcrt.LK_NBLCK, 1)
        os.lseek(fd, 3, os.SEEK_SET)
        try:
            fake.locking(fd, FakeMsvcrt.LK_UNLCK, 1)
        except OSError as error:
            assert error.errno == errno.EACCES
        else:
            raise AssertionError("unlocking byte 3 succeeded")
        os.lseek(fd, 0, os.SEEK_SET)
        fake.locking(fd, FakeMsvcrt.LK_UNLCK, 1)
    finally:
        os.close(fd)
