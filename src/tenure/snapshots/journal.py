"""The change journal of a folder: which folders changed since the last look, or "in doubt".

A :class:`ChangeJournal` watches every folder below ``folder`` with inotify
(one watch per folder; the per-user limit is
``/proc/sys/fs/inotify/max_user_watches``) and answers :meth:`ChangeJournal.take`
with the :class:`Changes` of the interval since :meth:`~ChangeJournal.start`
or the previous take: the folders whose direct entries must be listed again,
and the folders to list with everything below them (created, moved in, or
watched too late). ``None`` means *in doubt*: the caller walks everything.
``take`` first drains the kernel queue itself, so it is exact for everything
that happened before it was called (inotify queues an event before the system
call that caused it returns).

Doubt, for one interval (the journal then rebuilds its watches and goes on):
the kernel queue overflowed; a watch could not be added (the watch limit,
``ENOSPC``; ``ENOMEM``; permission); an event named an unknown watch; the
reader failed in any way; a watched folder below the root was unmounted;
``take`` before ``start``. For good (every later take is ``None``): the
watched root was moved, deleted or unmounted. Excluded folders (tenure's own
data inside the folder) are never watched, never reported and never cause
doubt.

Hard links. A folder watch reports an event only under the name used, so an
edit through one link does not mark the other linked paths. The safe rule: a
reader thread examines promptly (``lstat`` relative to a folder descriptor,
never following symlinks) every non-folder entry that a CREATE, MOVED_TO,
MODIFY, ATTRIB or CLOSE_WRITE event names, and the entries of every folder it
starts watching after :meth:`~ChangeJournal.start`. An entry with more than
one link makes the interval a doubt; so does a created (or moved-in) entry
that is already gone when examined (it may have been a second link), unless
the same events show it moved on inside the folder. Files that already had
several links when the previous checkpoint was taken are the caller's job: it
knows them from its own listing and must look at each of them every time.

The limit that no watch removes: a hard link made from OUTSIDE the watched
folder, and written through that outside name, produces no event inside it.
The same holds for a link made inside and written through an outside name,
and for a created link replaced before the reader examined it. The caller
must therefore still walk from time to time; when is the caller's decision.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import NamedTuple

import inotify_simple

from tenure.snapshots.fsutil import DIR_FLAGS, Beneath

__all__ = ["ChangeJournal", "Changes"]

_F = inotify_simple.flags
_MODIFY = int(_F.MODIFY)
_ATTRIB = int(_F.ATTRIB)
_CLOSE_WRITE = int(_F.CLOSE_WRITE)
_MOVED_FROM = int(_F.MOVED_FROM)
_MOVED_TO = int(_F.MOVED_TO)
_CREATE = int(_F.CREATE)
_DELETE = int(_F.DELETE)
_DELETE_SELF = int(_F.DELETE_SELF)
_MOVE_SELF = int(_F.MOVE_SELF)
_UNMOUNT = int(_F.UNMOUNT)
_Q_OVERFLOW = int(_F.Q_OVERFLOW)
_IGNORED = int(_F.IGNORED)
_ISDIR = int(_F.ISDIR)
_ENTRY = _MODIFY | _ATTRIB | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE
_EXAMINE = _CREATE | _MOVED_TO | _MODIFY | _ATTRIB | _CLOSE_WRITE
_GONE = _DELETE | _MOVED_FROM | _MOVED_TO
#: What every folder watch asks for: its entries' changes, and its own end.
WATCH_MASK = _ENTRY | _DELETE_SELF | _MOVE_SELF | int(_F.ONLYDIR) | int(_F.DONT_FOLLOW)

#: Errors of adding a watch that mean "this folder is no longer there": the event of its parent covers it.
_VANISHED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


class Changes(NamedTuple):
    """What changed in one interval; paths are relative, raw bytes, "/"-joined, ``b""`` the root."""

    folders: frozenset[bytes]  # folders whose direct entries must be listed again
    trees: frozenset[bytes]  # folders to list with everything below them


class _Event(NamedTuple):
    wd: int
    mask: int
    cookie: int
    name: bytes


class _Session:
    """One inotify instance, its watches (descriptor → relative path) and the wake-up pipe of its reader."""

    def __init__(self) -> None:
        self.inotify = inotify_simple.INotify(nonblocking=True)
        self.wake_r, self.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.paths: dict[int, bytes] = {}
        self.dropped: set[int] = set()  # watches removed by the journal; their last events are expected
        self.root_wd = -1
        self.stopped = False
        self.closed = False
        self.thread: threading.Thread | None = None

    def read(self) -> list[_Event]:
        raw = self.inotify.read(timeout=0)
        return [_Event(e.wd, e.mask, e.cookie, os.fsencode(e.name)) for e in raw]

    def stop(self) -> None:
        self.stopped = True
        try:
            os.write(self.wake_w, b"x")
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.inotify.close()
        os.close(self.wake_r)
        os.close(self.wake_w)

    def below(self, rel: bytes) -> list[int]:
        """The watches of ``rel`` and of every folder below it."""
        prefix = rel + b"/"
        return [wd for wd, path in self.paths.items() if path == rel or path.startswith(prefix) or not rel]

    def move(self, old: bytes, new: bytes) -> None:
        """Folder ``old`` is now ``new``: rewrite the paths of its whole subtree."""
        for wd in self.below(old):
            self.paths[wd] = new + self.paths[wd][len(old) :]


class ChangeJournal:
    """Watches ``folder`` and answers which folders changed in each interval (see the module docstring)."""

    def __init__(self, folder: str, *, exclude: Sequence[bytes] = ()) -> None:
        self._root = os.fsencode(folder)
        self._exclude = frozenset(p.strip(b"/") for p in exclude)
        self._lock = threading.Lock()
        self._session: _Session | None = None
        self._identity = (-1, -1)  # the root folder's (device, inode) when started
        self._closed = False
        self._lost = False
        self._resync = False
        self._doubt: str | None = None
        self._folders: set[bytes] = set()
        self._trees: set[bytes] = set()
        #: Why the last interval answered ``None`` (for logs and tests), or ``None``.
        self.reason: str | None = None

    # -- public interface -------------------------------------------------

    @property
    def running(self) -> bool:
        return self._session is not None and not self._closed and not self._lost

    @property
    def watches(self) -> int:
        """How many folders are watched now."""
        return len(self._session.paths) if self._session is not None else 0

    def start(self) -> None:
        """Watch every folder below; changes before this call are unknown."""
        if self._closed:
            raise ValueError("the change journal is closed")
        if self._session is not None:
            return
        s = os.stat(self._root)
        if not stat.S_ISDIR(s.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", os.fsdecode(self._root))
        self._identity = (s.st_dev, s.st_ino)
        self._begin()

    def changed(self) -> bool:
        """Whether anything changed (or the journal is in doubt) since the previous take; the interval goes on."""
        with self._lock:
            session = self._session
            if session is None or self._closed or self._lost:
                return True
            try:
                self._drain(session)
            except Exception:  # noqa: BLE001 - a take will say why; until then, in doubt
                return True
            return bool(self._folders or self._trees or self._doubt or self._resync)

    def take(self) -> Changes | None:
        """What changed since ``start()`` or the previous take; ``None``: in doubt. Starts a new interval."""
        with self._lock:
            session = self._session
            if session is None or self._closed:
                self.reason = "the journal is not running"
                return None
            if not self._lost:
                try:
                    self._drain(session)
                except Exception as exc:  # the reader failed: doubt, and a fresh instance
                    self._fail(f"reading the events failed: {exc!r}", resync=True)
            doubt, self._doubt = self._doubt, None
            changes = Changes(frozenset(self._folders), frozenset(self._trees))
            self._folders.clear()
            self._trees.clear()
            resync = self._resync and not self._lost
            if resync:
                session.stop()
            if self._lost:
                doubt = doubt or self.reason or "the watched folder is gone"
        if resync:
            self._restart(session)
        self.reason = doubt
        return None if doubt is not None else changes

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
            self._closed = True
            if session is not None:
                session.stop()
        if session is not None:
            self._end(session)

    def __enter__(self) -> ChangeJournal:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- seams ------------------------------------------------------------

    def _add_watch(self, session: _Session, path: bytes) -> int:
        """Add one folder watch (a seam: tests replace it to simulate the watch limit)."""
        return int(session.inotify.add_watch(path, WATCH_MASK))

    @contextmanager
    def _held(self) -> Iterator[None]:
        """Keep the reader from reading while the body runs (a seam: tests fill the kernel queue)."""
        with self._lock:
            yield

    def _apply(self, session: _Session, events: list[_Event]) -> None:
        """Account for one batch of events (a seam: tests make it fail)."""
        _Batch(self, session, events).apply()

    # -- sessions ---------------------------------------------------------

    def _begin(self) -> None:
        session = _Session()
        with self._lock:
            self._session = session
            self._resync = False
            try:
                root_wd = self._add_watch(session, self._root)
            except OSError as exc:
                if exc.errno in _VANISHED:
                    self._lose("the watched folder is gone")
                else:
                    self._fail(f"the watched folder could not be watched: {exc!r}", resync=True)
                return
            session.root_wd = root_wd
            session.paths[root_wd] = b""
            self._watch_tree(session, b"", examine=False, known=root_wd)
        thread = threading.Thread(target=self._read_loop, args=(session,), name="tenure-journal", daemon=True)
        session.thread = thread
        thread.start()

    def _restart(self, old: _Session) -> None:
        self._end(old)
        with self._lock:
            if self._closed or self._session is not old:
                return
        try:
            self._begin()
        except OSError as exc:
            with self._lock:
                self._fail(f"restarting the journal failed: {exc!r}", resync=True)

    def _end(self, session: _Session) -> None:
        if session.thread is not None and session.thread is not threading.current_thread():
            session.thread.join()
        session.close()

    def _read_loop(self, session: _Session) -> None:
        poller = select.poll()
        poller.register(session.inotify.fileno(), select.POLLIN)
        poller.register(session.wake_r, select.POLLIN)
        while True:
            poller.poll()
            with self._lock:
                if session.stopped or self._session is not session:
                    return
                try:
                    self._drain(session)
                except Exception as exc:
                    self._fail(f"reading the events failed: {exc!r}", resync=True)
                    return

    def _drain(self, session: _Session) -> None:
        """Read and account for every event the kernel holds (the lock is held)."""
        while not session.stopped:
            events = session.read()
            if not events:
                return
            self._apply(session, events)

    # -- watching ---------------------------------------------------------

    def _excluded(self, rel: bytes) -> bool:
        return any(rel == p or rel.startswith(p + b"/") for p in self._exclude) if self._exclude else False

    def _watch_tree(self, session: _Session, top: bytes, *, examine: bool, known: int = -1) -> None:
        """Watch ``top`` and every folder below it (the lock is held); ``examine``: look at their entries' links."""
        stack = [top]
        while stack:
            rel = stack.pop()
            path = self._root + b"/" + rel if rel else self._root
            if not (rel == top and known >= 0):
                try:
                    wd = self._add_watch(session, path)
                except OSError as exc:
                    if exc.errno not in _VANISHED:
                        self._fail(f"a watch on {rel!r} could not be added: {exc!r}", resync=True)
                    continue
                session.paths[wd] = rel
            try:
                entries = list(os.scandir(path))
            except OSError as exc:
                if exc.errno not in _VANISHED:
                    self._fail(f"listing {rel!r} failed: {exc!r}", resync=True)
                continue
            for entry in entries:
                child = rel + b"/" + entry.name if rel else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if not self._excluded(child):
                            stack.append(child)
                    elif examine and entry.stat(follow_symlinks=False).st_nlink > 1:
                        self._fail(f"{child!r} has several links", resync=False)
                except FileNotFoundError:
                    continue

    # -- doubt ------------------------------------------------------------

    def _fail(self, reason: str, *, resync: bool) -> None:
        """This interval is a doubt (the lock is held); ``resync``: rebuild the watches at the next take."""
        if self._doubt is None:
            self._doubt = reason
        self._resync = self._resync or resync

    def _lose(self, reason: str) -> None:
        """The watched folder itself is gone: every later interval is a doubt."""
        self.reason = reason
        self._lost = True
        if self._doubt is None:
            self._doubt = reason


class _Batch:
    """One batch of events, accounted for in two passes: the structure first, then the examinations."""

    def __init__(self, journal: ChangeJournal, session: _Session, events: list[_Event]) -> None:
        self.j = journal
        self.s = session
        self.events = events
        self.moved_to = {e.cookie: e for e in events if e.mask & _MOVED_TO}
        self.pending: list[tuple[int, int, bytes, bool]] = []  # (index, wd, name, created)
        # Cookies of entries moved to a folder still watched: their destination is examined. A MOVED_TO on the
        # watch of a folder that has left (its last events) or of an excluded path does not count: it moved out.
        self.landed: set[int] = set()
        self.new: list[bytes] = []  # folders created or moved in: watched (again) after the batch, at their final paths

    def apply(self) -> None:
        for index, event in enumerate(self.events):
            self.one(index, event)
        for rel in dict.fromkeys(self.new):
            # Every folder below is watched again at its current path: add_watch gives a folder already
            # watched its own descriptor back, and its path is corrected one watch at a time.
            self.j._watch_tree(self.s, rel, examine=True)
        self.examine()

    def one(self, index: int, e: _Event) -> None:
        j, s = self.j, self.s
        if e.mask & _Q_OVERFLOW:
            j._fail("the kernel's event queue overflowed", resync=True)
            return
        if e.wd in s.dropped:
            if e.mask & _IGNORED:
                s.dropped.discard(e.wd)
            return
        rel = s.paths.get(e.wd)
        if rel is None:
            j._fail(f"an event named an unknown watch ({e.wd})", resync=True)
            return
        if e.wd == s.root_wd and e.mask & (_DELETE_SELF | _MOVE_SELF | _UNMOUNT | _IGNORED):
            j._lose("the watched folder was moved, deleted or unmounted")
            return
        if e.mask & _UNMOUNT:
            j._fail(f"the file system of {rel!r} was unmounted", resync=True)
            return
        if e.mask & _IGNORED:
            del s.paths[e.wd]
            return
        if not e.name:  # the folder's own metadata, or its end (reported by its parent)
            if e.mask & _ATTRIB:
                j._folders.add(rel)
            return
        child = rel + b"/" + e.name if rel else e.name
        if j._excluded(child):
            return
        j._folders.add(rel)
        if e.mask & _ISDIR:
            self.folder(e, child)
        elif e.mask & _EXAMINE:
            self.pending.append((index, e.wd, e.name, bool(e.mask & (_CREATE | _MOVED_TO))))
            if e.mask & _MOVED_TO:
                self.landed.add(e.cookie)

    def folder(self, e: _Event, child: bytes) -> None:
        """An event on a folder entry ``child``."""
        j, s = self.j, self.s
        if e.mask & _MOVED_FROM:
            to = self.moved_to.get(e.cookie)
            parent = s.paths.get(to.wd) if to is not None else None
            if to is None or parent is None:
                self.unwatch(child)  # moved out: its watches go now, while their paths are right
                return
            dest = parent + b"/" + to.name if parent else to.name
            if j._excluded(dest):
                self.unwatch(child)
                return
            s.move(child, dest)
            self.new = [dest + p[len(child) :] if p == child or p.startswith(child + b"/") else p for p in self.new]
        elif e.mask & (_MOVED_TO | _CREATE):
            j._trees.add(child)
            self.new.append(child)

    def unwatch(self, rel: bytes) -> None:
        """Folder ``rel`` left the watched folder: drop the watches of its subtree."""
        s = self.s
        for wd in s.below(rel):
            del s.paths[wd]
            s.dropped.add(wd)
            try:
                s.inotify.rm_watch(wd)
            except OSError:
                s.dropped.discard(wd)  # already gone: no IGNORED will follow

    def examine(self) -> None:
        """Look at the entries the events named, in the state after the whole batch."""
        ends: dict[tuple[int, bytes], list[int]] = {}
        for index, e in enumerate(self.events):
            if e.mask & _GONE and not e.mask & _ISDIR:
                ends.setdefault((e.wd, e.name), []).append(index)
        todo: dict[tuple[int, bytes, int], bool] = {}
        for index, wd, name, created in self.pending:
            end = next((i for i in ends.get((wd, name), ()) if i > index), -1)
            key = (wd, name, end)
            todo[key] = todo.get(key, False) or created
        if not todo:
            return
        # The root is opened for each batch, never held: an open descriptor would delay its DELETE_SELF.
        try:
            root_fd = os.open(self.j._root, DIR_FLAGS)
        except OSError as exc:
            self.j._fail(f"the watched folder could not be opened: {exc!r}", resync=False)
            return
        beneath = Beneath(root_fd)
        try:
            s = os.fstat(root_fd)
            if (s.st_dev, s.st_ino) != self.j._identity:
                self.j._fail("the watched folder was replaced", resync=False)
                return
            for (wd, name, end), created in sorted(todo.items(), key=lambda kv: self.s.paths.get(kv[0][0], b"")):
                self.check(beneath, wd, name, end, created)
        finally:
            beneath.close()
            os.close(root_fd)

    def check(self, beneath: Beneath, wd: int, name: bytes, end: int, created: bool) -> None:
        j = self.j
        if end >= 0:  # the entry was deleted, moved or replaced later in this batch
            e = self.events[end]
            moved_on = e.mask & _MOVED_FROM and e.cookie in self.landed
            if created and not moved_on:
                j._fail(f"{name!r} was created and is gone (it may have been a second link)", resync=False)
            return
        folder = self.s.paths.get(wd)
        if folder is None:  # its folder left: the entry left with it
            if created:
                j._fail(f"{name!r} was created in a folder that is gone", resync=False)
            return
        try:
            st = os.stat(name, dir_fd=beneath.folder(folder), follow_symlinks=False)
        except FileNotFoundError:
            if created:
                j._fail(
                    f"{name!r} in {folder!r} was created and is gone (it may have been a second link)", resync=False
                )
            return
        except OSError as exc:
            j._fail(f"{name!r} in {folder!r} could not be examined: {exc!r}", resync=False)
            return
        if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
            j._fail(f"{name!r} in {folder!r} has {st.st_nlink} links", resync=False)
