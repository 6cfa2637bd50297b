"""Recording the file-system calls of a durable path, as one sequence of events.

Two recorders produce the same :class:`Event` list:

* **strace** (preferred): the child process runs under
  ``strace -f -y -e trace=<STRACE_TRACE>``; :func:`parse_strace` turns the
  output into events. ``-y`` annotates every descriptor with its path, so a
  write or an fsync names the file it touched.
* **in-process** (fallback when strace cannot run): :class:`InProcessRecorder`
  wraps the ``os`` calls tenure makes (``open``, ``write``, ``pwrite``,
  ``fsync``, ``fdatasync``, ``rename``, ``replace``, ``mkdir``, ``unlink``,
  ``rmdir``, ``link``, ``symlink``, ``close``, ``sync``), the files the
  built-in ``open`` (and ``io.open``, which ``pathlib`` uses) opens for
  writing in binary mode, and the ``syncfs`` that
  :func:`tenure.snapshots.fsutil.sync_filesystem` reaches through
  ``ctypes``. It cannot see calls made from C (SQLite's own fsyncs).

The child marks points of interest (an operation begins, it is acknowledged)
with :func:`mark`: an ``os.stat`` of a path under :data:`MARK_PREFIX`, which
strace records (and the parser recognizes) and which the in-process recorder
records directly.

This module is imported by the child process: it must not import pytest.
"""

from __future__ import annotations

import builtins
import ctypes
import io
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MARK_PREFIX = "/nonexistent-tenure-durability-mark/"
STRACE = "/usr/bin/strace"
STRACE_TRACE = (
    "%file,%desc,fsync,fdatasync,syncfs,sync_file_range,sync,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat"
)

# Event kinds. Path arguments are absolute and normalized.
OPEN, CLOSE, WRITE, TRUNCATE, FSYNC, SYNCFS, RENAME, MKDIR, UNLINK, RMDIR, LINK, SYMLINK, MARK = (
    "open",
    "close",
    "write",
    "truncate",
    "fsync",
    "syncfs",
    "rename",
    "mkdir",
    "unlink",
    "rmdir",
    "link",
    "symlink",
    "mark",
)
SYNCS = (FSYNC, SYNCFS)


@dataclass
class Event:
    """One file-system call that succeeded (or a mark).

    ``path`` is the file the call acted on (for descriptor calls, the path
    the descriptor had when the call was made); ``path2`` is the second path
    of ``rename`` and ``link`` (the destination). ``size`` is the number of
    bytes written (or the new length of ``truncate``), ``offset`` the
    position of a ``pwrite`` (None: the descriptor's position). ``path`` of
    ``syncfs`` is any path on the file system it flushed (None: every one).
    """

    kind: str
    path: str | None = None
    path2: str | None = None
    fd: int | None = None
    creat: bool = False
    trunc: bool = False
    append: bool = False
    size: int = 0
    offset: int | None = None
    label: str = ""
    tid: int = 0


def mark(label: str) -> None:
    """Mark a point in the trace (the recorder sees an ``os.stat`` of a marker path)."""
    recorder = InProcessRecorder.active
    if recorder is not None:
        recorder.add(Event(MARK, label=label))
        return
    try:
        os.stat(MARK_PREFIX + label)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------- strace


def strace_problem() -> str | None:
    """Why strace cannot record here (not installed, ptrace refused), or None when it can."""
    if not os.path.exists(STRACE) and shutil.which("strace") is None:
        return "strace is not installed (Debian: apt-get install -y strace)"
    probe = subprocess.run(
        [strace_binary(), "-f", "-qq", "-o", os.devnull, "true"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        return f"strace cannot trace here (ptrace not permitted?): {probe.stderr.strip()[:300]}"
    return None


def strace_binary() -> str:
    return STRACE if os.path.exists(STRACE) else (shutil.which("strace") or STRACE)


def strace_command(out: str, argv: list[str]) -> list[str]:
    return [strace_binary(), "-f", "-qq", "-y", "-s", "16", "-e", f"trace={STRACE_TRACE}", "-o", out, *argv]


_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^([a-z_0-9]+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)(?:<(.*?)>)?(.*)$", re.DOTALL)
_UNFINISHED = " <unfinished ...>"
_RESUMED = re.compile(r"^<\.\.\. ([a-z_0-9]+) resumed>(.*)$", re.DOTALL)
_FD = re.compile(r"^(-?\d+|AT_FDCWD)<(.*)>$", re.DOTALL)
_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"(\.\.\.)?$', re.DOTALL)

_WRITES = {"write": None, "writev": None, "pwrite64": 3, "pwritev": 3, "pwritev2": 3}


@dataclass
class _Arg:
    text: str

    @property
    def string(self) -> str | None:
        m = _QUOTED.match(self.text)
        return _unescape(m.group(1)) if m else None

    @property
    def fd(self) -> tuple[int | None, str | None]:
        """``(fd, path)`` of an annotated descriptor (``AT_FDCWD`` gives fd None)."""
        m = _FD.match(self.text)
        if not m:
            return None, None
        fd = None if m.group(1) == "AT_FDCWD" else int(m.group(1))
        return fd, _clean_fd_path(m.group(2))


def _clean_fd_path(path: str) -> str | None:
    if not path.startswith("/"):
        return None  # socket:[…], pipe:[…], anon_inode:…
    return os.path.normpath(path.removesuffix(" (deleted)"))


def _unescape(text: str) -> str:
    out = bytearray()
    i = 0
    simple = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, '"': 34, "\\": 92}
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt in simple:
            out.append(simple[nxt])
            i += 2
        elif nxt == "x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            j = i + 1
            while j < len(text) and j < i + 4 and text[j] in "01234567":
                j += 1
            out.append(int(text[i + 1 : j], 8))
            i = j
    return os.fsdecode(bytes(out))


def _split_args(text: str) -> list[_Arg]:
    args: list[_Arg] = []
    depth = 0
    quoted = False
    start = 0
    i = 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(_Arg(text[start:i].strip()))
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail:
        args.append(_Arg(tail))
    return args


def _at(dirfd: _Arg, name: _Arg) -> str | None:
    """The absolute path of ``name`` relative to the annotated ``dirfd``."""
    rel = name.string
    if rel is None:
        return None
    if rel.startswith("/"):
        return os.path.normpath(rel)
    _, base = dirfd.fd
    return os.path.normpath(os.path.join(base, rel)) if base else None


def _plain(name: _Arg, cwd: str | None) -> str | None:
    rel = name.string
    if rel is None:
        return None
    if rel.startswith("/"):
        return os.path.normpath(rel)
    return os.path.normpath(os.path.join(cwd, rel)) if cwd else None


def parse_strace(text: str) -> list[Event]:
    """The events of an ``strace -f -y`` log, in the order the calls completed.

    A call split by another thread (``<unfinished ...>`` … ``<... resumed>``)
    is joined; a sync call is placed where it *started* (it covers only what
    completed before it), every other call where it *completed*.
    """
    pending: dict[int, tuple[str, int]] = {}
    placed: list[tuple[int, int, Event]] = []
    cwd: dict[int, str] = {}
    for number, raw in enumerate(text.splitlines()):
        m = _LINE.match(raw)
        if not m:
            continue
        tid, body = int(m.group(1)), m.group(2)
        started = number
        if body.endswith(_UNFINISHED):
            pending[tid] = (body[: -len(_UNFINISHED)], number)
            continue
        resumed = _RESUMED.match(body)
        if resumed:
            head, started = pending.pop(tid, ("", number))
            if not head:
                continue
            body = head + resumed.group(2)
        for event in _events(body, tid, cwd):
            position = started if event.kind in SYNCS else number
            placed.append((position, len(placed), event))
    placed.sort(key=lambda item: (item[0], item[1]))
    return [event for _, _, event in placed]


def _events(body: str, tid: int, cwd: dict[int, str]) -> list[Event]:
    call = _CALL.match(body)
    if not call:
        return []
    name, args, ret, ret_path = call.group(1), _split_args(call.group(2)), call.group(3), call.group(4)
    for arg in args:
        s = arg.string
        if s is not None and s.startswith(MARK_PREFIX):
            return [Event(MARK, label=s[len(MARK_PREFIX) :], tid=tid)]
    if ret.startswith("-") or ret == "?":
        return []
    value = int(ret, 0)
    for arg in args:  # learn the working folder from any AT_FDCWD annotation
        if arg.text.startswith("AT_FDCWD<"):
            _, path = arg.fd
            if path:
                cwd[tid] = path
    here = cwd.get(tid)
    fd, fd_path = args[0].fd if args else (None, None)
    if name in ("openat", "open", "creat", "openat2"):
        flags = (
            args[2].text
            if name in ("openat", "openat2") and len(args) > 2
            else (args[1].text if name == "open" and len(args) > 1 else "O_CREAT|O_WRONLY|O_TRUNC")
        )
        path = _clean_fd_path(ret_path) if ret_path else None
        if path is None:
            path = _at(args[0], args[1]) if name.startswith("openat") else _plain(args[0], here)
        return [
            Event(
                OPEN,
                path=path,
                fd=value,
                creat="O_CREAT" in flags,
                trunc="O_TRUNC" in flags,
                append="O_APPEND" in flags,
                tid=tid,
            )
        ]
    if name == "close":
        return [Event(CLOSE, path=fd_path, fd=fd, tid=tid)]
    if name in _WRITES:
        at = _WRITES[name]
        offset = int(args[at].text, 0) if at is not None and len(args) > at else None
        return [Event(WRITE, path=fd_path, fd=fd, size=value, offset=offset, tid=tid)]
    if name == "fallocate":
        return [Event(WRITE, path=fd_path, fd=fd, size=int(args[3].text, 0), offset=int(args[2].text, 0), tid=tid)]
    if name == "ftruncate":
        return [Event(TRUNCATE, path=fd_path, fd=fd, size=int(args[1].text, 0), tid=tid)]
    if name == "truncate":
        return [Event(TRUNCATE, path=_plain(args[0], here), size=int(args[1].text, 0), tid=tid)]
    if name in ("fsync", "fdatasync"):
        return [Event(FSYNC, path=fd_path, fd=fd, tid=tid)]
    if name == "syncfs":
        return [Event(SYNCFS, path=fd_path, fd=fd, tid=tid)]
    if name == "sync":
        return [Event(SYNCFS, tid=tid)]
    if name == "rename":
        return [Event(RENAME, path=_plain(args[0], here), path2=_plain(args[1], here), tid=tid)]
    if name in ("renameat", "renameat2"):
        return [Event(RENAME, path=_at(args[0], args[1]), path2=_at(args[2], args[3]), tid=tid)]
    if name == "mkdir":
        return [Event(MKDIR, path=_plain(args[0], here), tid=tid)]
    if name == "mkdirat":
        return [Event(MKDIR, path=_at(args[0], args[1]), tid=tid)]
    if name in ("unlink", "rmdir"):
        return [Event(UNLINK if name == "unlink" else RMDIR, path=_plain(args[0], here), tid=tid)]
    if name == "unlinkat":
        kind = RMDIR if len(args) > 2 and "AT_REMOVEDIR" in args[2].text else UNLINK
        return [Event(kind, path=_at(args[0], args[1]), tid=tid)]
    if name == "link":
        return [Event(LINK, path=_plain(args[0], here), path2=_plain(args[1], here), tid=tid)]
    if name == "linkat":
        return [Event(LINK, path=_at(args[0], args[1]), path2=_at(args[2], args[3]), tid=tid)]
    if name == "symlink":
        return [Event(SYMLINK, path=_plain(args[1], here), tid=tid)]
    if name == "symlinkat":
        return [Event(SYMLINK, path=_at(args[1], args[2]), tid=tid)]
    return []


# ---------------------------------------------------------------------------------------------- in-process


class InProcessRecorder:
    """Records tenure's ``os`` calls in this process (see the module docstring)."""

    active: InProcessRecorder | None = None

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._paths: dict[int, str] = {}
        self._saved: dict[str, Any] = {}

    def add(self, event: Event) -> None:
        with self._lock:
            event.tid = threading.get_native_id()
            self.events.append(event)

    def _abs(self, path: Any, dir_fd: int | None = None) -> str:
        text = os.fsdecode(path)
        if not os.path.isabs(text):
            base = self._paths.get(dir_fd, "") if dir_fd is not None else os.getcwd()
            text = os.path.join(base, text)
        return os.path.normpath(text)

    def install(self) -> None:
        real = {
            name: getattr(os, name)
            for name in (
                "open",
                "close",
                "write",
                "pwrite",
                "fsync",
                "fdatasync",
                "rename",
                "replace",
                "mkdir",
                "unlink",
                "remove",
                "rmdir",
                "link",
                "symlink",
                "ftruncate",
                "truncate",
                "sync",
            )
        }
        self._saved = dict(real, CDLL=ctypes.CDLL, builtins_open=builtins.open, io_open=io.open)

        def _open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            fd: int = real["open"](path, flags, mode, dir_fd=dir_fd)
            full = self._abs(path, dir_fd)
            self._paths[fd] = full
            self.add(
                Event(
                    OPEN,
                    path=full,
                    fd=fd,
                    creat=bool(flags & os.O_CREAT),
                    trunc=bool(flags & os.O_TRUNC),
                    append=bool(flags & os.O_APPEND),
                )
            )
            return fd

        def _close(fd: int) -> None:
            real["close"](fd)
            self.add(Event(CLOSE, path=self._paths.pop(fd, None), fd=fd))

        def _write(fd: int, data: Any) -> int:
            n: int = real["write"](fd, data)
            self.add(Event(WRITE, path=self._paths.get(fd), fd=fd, size=n))
            return n

        def _pwrite(fd: int, data: Any, offset: int) -> int:
            n: int = real["pwrite"](fd, data, offset)
            self.add(Event(WRITE, path=self._paths.get(fd), fd=fd, size=n, offset=offset))
            return n

        def _syncer(name: str) -> Callable[[Any], None]:
            def sync(fd: Any) -> None:
                number = fd if isinstance(fd, int) else fd.fileno()
                self.add(Event(FSYNC, path=self._paths.get(number), fd=number))  # placed where it starts
                real[name](fd)

            return sync

        def _mover(name: str) -> Callable[..., None]:
            def move(src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
                real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                self.add(Event(RENAME, path=self._abs(src, src_dir_fd), path2=self._abs(dst, dst_dir_fd)))

            return move

        def _mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
            real["mkdir"](path, mode, dir_fd=dir_fd)
            self.add(Event(MKDIR, path=self._abs(path, dir_fd)))

        def _remover(name: str, kind: str) -> Callable[..., None]:
            def remove(path: Any, *, dir_fd: int | None = None) -> None:
                real[name](path, dir_fd=dir_fd)
                self.add(Event(kind, path=self._abs(path, dir_fd)))

            return remove

        def _link(
            src: Any,
            dst: Any,
            *,
            src_dir_fd: int | None = None,
            dst_dir_fd: int | None = None,
            follow_symlinks: bool = True,
        ) -> None:
            real["link"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)
            self.add(Event(LINK, path=self._abs(src, src_dir_fd), path2=self._abs(dst, dst_dir_fd)))

        def _symlink(src: Any, dst: Any, target_is_directory: bool = False, *, dir_fd: int | None = None) -> None:
            real["symlink"](src, dst, target_is_directory, dir_fd=dir_fd)
            self.add(Event(SYMLINK, path=self._abs(dst, dir_fd)))

        def _ftruncate(fd: int, length: int) -> None:
            real["ftruncate"](fd, length)
            self.add(Event(TRUNCATE, path=self._paths.get(fd), fd=fd, size=length))

        def _truncate(path: Any, length: int) -> None:
            real["truncate"](path, length)
            if isinstance(path, int):
                self.add(Event(TRUNCATE, path=self._paths.get(path), fd=path, size=length))
            else:
                self.add(Event(TRUNCATE, path=self._abs(path), size=length))

        def _sync() -> None:
            self.add(Event(SYNCFS))
            real["sync"]()

        recorder = self

        class RecordingFileIO(io.FileIO):
            """The raw file under a buffered file the built-in ``open`` made for writing: writes are recorded."""

            def write(self, data: Any, /) -> int:
                fd = self.fileno()
                at = None if "a" in self.mode else self.tell()
                n = super().write(data)
                if n and InProcessRecorder.active is recorder:
                    recorder.add(Event(WRITE, path=recorder._paths.get(fd), fd=fd, size=n, offset=at))
                return n

            def close(self) -> None:
                fd = None if self.closed else self.fileno()
                super().close()
                if fd is not None and InProcessRecorder.active is recorder:
                    recorder.add(Event(CLOSE, path=recorder._paths.pop(fd, None), fd=fd))

        builtin_open = builtins.open

        def _builtin_open(
            file: Any,
            mode: str = "r",
            buffering: int = -1,
            encoding: str | None = None,
            errors: str | None = None,
            newline: str | None = None,
            closefd: bool = True,
            opener: Callable[[Any, int], int] | None = None,
        ) -> Any:
            """Files opened by path for writing in binary mode are recorded; other opens pass through."""
            writing = "b" in mode and "+" not in mode and any(c in mode for c in "wxa")
            options = (encoding, errors, newline, opener)
            if not writing or options != (None,) * 4 or not isinstance(file, str | bytes | os.PathLike):
                return builtin_open(file, mode, buffering, encoding, errors, newline, closefd, opener)

            def recorded(path: Any, flags: int) -> int:
                return _open(path, flags, 0o666)

            raw = RecordingFileIO(file, mode.replace("b", ""), closefd=closefd, opener=recorded)
            if buffering == 0:
                return raw
            return io.BufferedWriter(raw, buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE)

        class RecordingCDLL(ctypes.CDLL):
            """``ctypes.CDLL`` whose ``syncfs`` is recorded."""

            def __getitem__(self, name: Any) -> Any:
                func = super().__getitem__(name)
                if name != "syncfs":
                    return func

                def syncfs(fd: int) -> int:
                    recorder.add(Event(SYNCFS, path=recorder._paths.get(fd), fd=fd))
                    rc: int = func(fd)
                    return rc

                return syncfs

        wrapped: dict[str, Any] = {
            "open": _open,
            "close": _close,
            "write": _write,
            "pwrite": _pwrite,
            "fsync": _syncer("fsync"),
            "fdatasync": _syncer("fdatasync"),
            "rename": _mover("rename"),
            "replace": _mover("replace"),
            "mkdir": _mkdir,
            "unlink": _remover("unlink", UNLINK),
            "remove": _remover("remove", UNLINK),
            "rmdir": _remover("rmdir", RMDIR),
            "link": _link,
            "symlink": _symlink,
            "ftruncate": _ftruncate,
            "truncate": _truncate,
            "sync": _sync,
        }
        for name, func in wrapped.items():
            setattr(os, name, func)
        ctypes.CDLL = RecordingCDLL  # type: ignore[misc]
        builtins.open = io.open = _builtin_open
        InProcessRecorder.active = self

    def uninstall(self) -> None:
        InProcessRecorder.active = None
        for name, func in self._saved.items():
            if name == "CDLL":
                ctypes.CDLL = func  # type: ignore[misc]
            elif name == "builtins_open":
                builtins.open = func
            elif name == "io_open":
                io.open = func
            else:
                setattr(os, name, func)


# ---------------------------------------------------------------------------------------------- serialization

_DEFAULTS = Event("")


def dump_events(events: list[Event]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.__dict__.items() if k == "kind" or v != getattr(_DEFAULTS, k)} for e in events]


def load_events(rows: list[dict[str, Any]]) -> list[Event]:
    return [Event(**row) for row in rows]
