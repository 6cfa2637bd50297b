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
call that caused it returns). A folder is watched and listed through a
descriptor opened relative to its parent's, never through a symlink: a
folder swapped for a symlink while it is being watched cannot lead a watch,
or a listing, to another folder (whose watch would then take a wrong path).

One inotify instance for many journals. Journals share an instance through
a :class:`JournalHub`: one instance and one reader thread, however many
journals (the per-user limit of instances,
``/proc/sys/fs/inotify/max_user_instances``, is 128 by default; a pod makes
one hub for all the projects it runs). A journal made without a hub makes its
own. Each journal keeps its own watches (descriptor → relative path), its own
changes and its own doubt; the hub routes each event to the journals that
hold its watch descriptor when the event is read (the folder of two
overlapping journals has one descriptor, held by both) and removes a watch
from the kernel only when the last journal holding it lets go. Whoever drains
the queue (the reader, or any journal's ``take``) routes every journal's
events; each journal accounts for its own.

Watch descriptors. A descriptor leaves a journal when the journal accounts
for its IN_IGNORED or lets go of it (its folder moved out, a rebuild, close);
events routed to the journal before then are ignored, and the hub never
routes a descriptor to a journal that does not hold it. A watch removed from
the kernel still has its last events, up to its IN_IGNORED, in the queue: the
hub routes them to no one. The kernel numbers watches cyclically, so a number
comes back only after 2**31 watches on one instance; when it comes back while
the IN_IGNORED of its previous watch is still unread (told apart from a
folder already watched with IN_MASK_CREATE), the events up to that IN_IGNORED
go to no one, and the journals that held the ended watch forget it and are in
doubt for one interval.

Doubt, for one interval (the journal then rebuilds its watches and goes on):
the kernel queue overflowed, or an event named a watch the hub does not know
(either: every journal of the hub, which cannot tell whose events were lost;
the hub replaces its instance and each journal rebuilds its watches at its
next take); more than :data:`INBOX_LIMIT` events waited for the journal; a
watch could not be added (the watch limit, ``ENOSPC``; ``ENOMEM``;
permission); a watch number came back as described above; the reader failed
in any way; a watched folder below the root was unmounted; ``take`` before
``start``. For good (every later take is ``None``): the watched root was
moved, deleted or unmounted. Excluded folders (tenure's own data inside the
folder) are never watched, never reported and never cause doubt.

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
import re
import select
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import NamedTuple

import inotify_simple

from tenure.snapshots.fsutil import DIR_FLAGS, Beneath

__all__ = ["INBOX_LIMIT", "ChangeJournal", "Changes", "JournalHub"]

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
#: ``inotify_add_watch`` only if the folder has no watch in the instance yet, else ``EEXIST`` (Linux 4.18).
_MASK_CREATE = 0x10000000
#: Watches are added through ``/proc/self/fd/N`` of the folder's open descriptor (leads to exactly that folder).
_PROC_FD = os.path.isdir("/proc/self/fd")
#: What the hub itself tells a journal, in its queue of events (outside the kernel's 32 bits).
_NOTICE = 1 << 32  # a doubt: the reason in ``name``; ``cookie`` 1: rebuild the watches
_FORGET = 1 << 33  # the watch ``wd`` ended and its end will not be routed here: forget it
#: How many events may wait for one journal; beyond, they are dropped and its interval is a doubt.
INBOX_LIMIT = 1 << 16
#: Adding watches reads the kernel queue every this many watches, so one long walk cannot overflow it.
_READ_EVERY = 64

#: Errors of adding a watch that mean "this folder is no longer there": the event of its parent covers it.
_VANISHED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def _kernel_has_mask_create() -> bool:
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return found is not None and (int(found.group(1)), int(found.group(2))) >= (4, 18)


class Changes(NamedTuple):
    """What changed in one interval; paths are relative, raw bytes, "/"-joined, ``b""`` the root."""

    folders: frozenset[bytes]  # folders whose direct entries must be listed again
    trees: frozenset[bytes]  # folders to list with everything below them


class _Event(NamedTuple):
    wd: int
    mask: int
    cookie: int
    name: bytes


def _notice(reason: str, *, rebuild: bool) -> _Event:
    return _Event(-1, _NOTICE, int(rebuild), reason.encode())


class _Session:
    """One journal on a hub: its watches (descriptor → relative path) and the events routed to it."""

    def __init__(self, hub: JournalHub, deliver: Callable[[_Session], bool]) -> None:
        self.hub = hub
        self.deliver = deliver  # called by the hub's reader: account for the inbox; False if busy
        self.paths: dict[int, bytes] = {}
        self.root_wd = -1
        self.inbox: list[_Event] = []  # routed, not accounted for yet (the hub's lock)
        self.epoch = -1  # the hub's inotify instance its watches belong to
        self.closed = False

    @property
    def inotify(self) -> inotify_simple.INotify:
        """The hub's inotify instance (shared by all its journals)."""
        return self.hub.inotify

    def below(self, rel: bytes) -> list[int]:
        """The watches of ``rel`` and of every folder below it."""
        prefix = rel + b"/"
        return [wd for wd, path in self.paths.items() if path == rel or path.startswith(prefix) or not rel]

    def move(self, old: bytes, new: bytes) -> None:
        """Folder ``old`` is now ``new``: rewrite the paths of its whole subtree."""
        for wd in self.below(old):
            self.paths[wd] = new + self.paths[wd][len(old) :]


class _Watch:
    """One watch descriptor of a hub: the journals holding it, and how many ended watches of the same
    number still have events, up to their IN_IGNORED, in the kernel's queue (those go to no one)."""

    __slots__ = ("owners", "ended")

    def __init__(self) -> None:
        self.owners: dict[_Session, None] = {}
        self.ended = 0


class JournalHub:
    """One inotify instance and one reader thread for many change journals (see the module docstring).

    Thread-safe. Its lock is taken inside a journal's lock, never the other way: the reader routes
    events into the journals' queues under the hub's lock, then lets each journal account for its own.
    """

    def __init__(self) -> None:
        self._inotify: inotify_simple.INotify | None = inotify_simple.INotify(nonblocking=True)
        try:
            self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            self._inotify.close()
            raise
        self._lock = threading.Lock()
        self._epoch = 0
        self._wds: dict[int, _Watch] = {}
        self._sessions: dict[_Session, None] = {}
        self._top = 0  # the highest descriptor the instance gave; a fresh one not above it: numbers wrapped
        self._wrapped = False
        self._mask_create = _kernel_has_mask_create()
        self._adds = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tenure-journal", daemon=True)
        self._thread.start()

    # -- public interface -------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def journals(self) -> int:
        """How many journals are on the hub."""
        with self._lock:
            return len(self._sessions)

    @property
    def watches(self) -> int:
        """How many watch descriptors the hub knows (held, or ended with events still queued)."""
        with self._lock:
            return len(self._wds)

    @property
    def inotify(self) -> inotify_simple.INotify:
        """The current inotify instance (replaced after an overflow)."""
        inotify = self._inotify
        if inotify is None:
            raise OSError(errno.EBADF, "the journal hub has no inotify instance")
        return inotify

    def fileno(self) -> int:
        return int(self.inotify.fileno())

    def close(self) -> None:
        """Stop the reader and close the instance; journals still on the hub answer in doubt from now on."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for session in self._sessions:
                session.inbox.clear()
            self._sessions.clear()
            self._wake()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            if self._inotify is not None:
                self._inotify.close()
                self._inotify = None
            self._wds.clear()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def __enter__(self) -> JournalHub:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- what journals ask (each holding its own lock) --------------------

    def attach(self, session: _Session) -> None:
        """Put ``session`` on the current instance, holding no watch yet (at start, and to rebuild)."""
        with self._lock:
            if self._closed:
                raise OSError(errno.EBADF, "the journal hub is closed")
            if self._inotify is None:
                self._renew()
            if self._inotify is None:
                raise OSError(errno.EMFILE, "the journal hub could not make an inotify instance")
            self._sessions[session] = None
            session.epoch = self._epoch
            # Events of the watches it let go are stale; the hub's notices (doubts) stay.
            session.inbox = [e for e in session.inbox if e.wd < 0]

    def detach(self, session: _Session, wds: Iterable[int]) -> None:
        """Take ``session`` off the hub, letting go of its watches ``wds``."""
        with self._lock:
            self._release(session, wds)
            self._sessions.pop(session, None)
            session.inbox.clear()

    def add(self, session: _Session, path: bytes, fd: int | None = None) -> int:
        """Watch folder ``path`` for ``session``; its descriptor (the same for a folder already watched).

        ``fd``: the folder opened (``O_DIRECTORY | O_NOFOLLOW``, relative to its parent's descriptor): the
        watch is added through it, so no symlink on the way to ``path`` can lead the watch elsewhere.
        """
        with self._lock:
            inotify = self._live(session)
            self._adds += 1
            if self._adds % _READ_EVERY == 0:
                self._read()
                inotify = self._live(session)
            if fd is not None and _PROC_FD:
                wd, fresh = self._kernel_add(inotify, b"/proc/self/fd/%d" % fd, WATCH_MASK & ~int(_F.DONT_FOLLOW))
            else:
                wd, fresh = self._kernel_add(inotify, path, WATCH_MASK)
            if fresh:
                if wd <= self._top:
                    self._wrapped = True
                self._top = max(self._top, wd)
            watch = self._wds.get(wd)
            if watch is None:
                watch = self._wds[wd] = _Watch()
            elif fresh and watch.owners:
                # The number of a watch whose IN_IGNORED is still unread, given to a new watch: the ended
                # watch's events, up to that IN_IGNORED, go to no one; its holders forget it (a doubt).
                for owner in watch.owners:
                    self._purge(owner, wd)
                    if owner is not session:
                        owner.inbox.append(_notice(f"watch {wd} ended before its last events were read", rebuild=False))
                        owner.inbox.append(_Event(wd, _FORGET, 0, b""))
                watch.owners = {}
                watch.ended += 1
            if session not in watch.owners:
                if self._wrapped:
                    self._purge(session, wd)  # events of an ended watch of the same number
                if wd in session.paths:  # its mapping is of an ended watch of the same number
                    session.inbox.append(_notice(f"watch {wd} ended before its last events were read", rebuild=False))
                watch.owners[session] = None
            return wd

    def release(self, session: _Session, wds: Iterable[int]) -> None:
        """``session`` lets go of watches ``wds``; a watch no journal holds any more is removed."""
        with self._lock:
            self._release(session, wds)

    def drain(self) -> None:
        """Read every event the kernel holds and route it to the journals' queues."""
        with self._lock:
            if not self._closed:
                self._read()

    def grab(self, session: _Session) -> list[_Event]:
        """The events routed to ``session`` so far (its queue is emptied)."""
        with self._lock:
            events, session.inbox = session.inbox, []
            return events

    # -- inside the hub's lock --------------------------------------------

    def _live(self, session: _Session) -> inotify_simple.INotify:
        if self._closed:
            raise OSError(errno.EBADF, "the journal hub is closed")
        if session.epoch != self._epoch or self._inotify is None:
            raise OSError(errno.ESTALE, "the journal hub's inotify instance was replaced")
        return self._inotify

    def _kernel_add(self, inotify: inotify_simple.INotify, path: bytes, mask: int) -> tuple[int, bool]:
        """``(descriptor, fresh)``: fresh if the kernel made a new watch (known only with IN_MASK_CREATE)."""
        if self._mask_create:
            try:
                return int(inotify.add_watch(path, mask | _MASK_CREATE)), True
            except OSError as exc:
                if exc.errno == errno.EINVAL:
                    self._mask_create = False  # a kernel without it: a known number counts as shared
                elif exc.errno != errno.EEXIST:
                    raise
        return int(inotify.add_watch(path, mask)), False

    def _release(self, session: _Session, wds: Iterable[int]) -> None:
        if session.epoch != self._epoch or self._inotify is None:
            return  # its watches were on an instance since replaced
        for wd in wds:
            watch = self._wds.get(wd)
            if watch is None or session not in watch.owners:
                continue  # ended (its IN_IGNORED was routed), or no longer this journal's
            del watch.owners[session]
            if not watch.owners:
                try:
                    self._inotify.rm_watch(wd)
                except OSError:
                    pass  # the kernel ended it already: its IN_IGNORED is queued all the same
                watch.ended += 1

    @staticmethod
    def _purge(session: _Session, wd: int) -> None:
        session.inbox = [e for e in session.inbox if e.wd != wd]

    def _read(self) -> None:
        """Read the kernel queue until it is empty and route every event."""
        while self._inotify is not None:
            try:
                raw = self._inotify.read(timeout=0)
                if not raw:
                    return
                for e in raw:
                    if not self._route(_Event(e.wd, e.mask, e.cookie, os.fsencode(e.name))):
                        return
            except Exception as exc:  # noqa: BLE001 - every journal is in doubt, on a fresh instance
                self._reset(f"reading the events failed: {exc!r}")
                return

    def _route(self, e: _Event) -> bool:
        """Route one event to the journals holding its watch; False: the instance was replaced."""
        if e.mask & _Q_OVERFLOW:
            self._reset("the kernel's event queue overflowed")
            return False
        watch = self._wds.get(e.wd)
        if watch is None:
            self._reset(f"an event named an unknown watch ({e.wd})")
            return False
        if watch.ended:  # the last events of a removed watch of this number: no one's
            if e.mask & _IGNORED:
                watch.ended -= 1
                if not watch.ended and not watch.owners:
                    del self._wds[e.wd]
            return True
        for owner in watch.owners:
            if len(owner.inbox) >= INBOX_LIMIT:
                owner.inbox = [_notice(f"more than {INBOX_LIMIT} events waited for the journal", rebuild=True)]
            owner.inbox.append(e)
        if e.mask & _IGNORED:
            del self._wds[e.wd]  # ended: its holders forget it as they account for this event
        return True

    def _reset(self, reason: str) -> None:
        """Every journal is in doubt and rebuilds its watches on a fresh instance (the kernel's state of
        the old one can no longer be followed: lost events, a watch no one made)."""
        old, self._inotify = self._inotify, None
        if old is not None:
            old.close()
        self._wds.clear()
        self._epoch += 1
        self._renew()
        note = _notice(reason, rebuild=True)
        for session in self._sessions:
            session.inbox = [note]
        self._wake()

    def _renew(self) -> None:
        try:
            self._inotify = inotify_simple.INotify(nonblocking=True)
        except OSError:
            self._inotify = None  # every journal rebuilding fails (a doubt) until one can be made
            return
        self._top = 0
        self._wrapped = False

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    # -- the reader -------------------------------------------------------

    def _run(self) -> None:
        poller = select.poll()
        epoch = -1
        busy = False
        while True:
            with self._lock:
                if self._closed:
                    return
                if epoch != self._epoch:  # a fresh instance: poll its descriptor
                    poller = select.poll()
                    poller.register(self._wake_r, select.POLLIN)
                    if self._inotify is not None:
                        poller.register(self._inotify.fileno(), select.POLLIN)
                    epoch = self._epoch
                missing = self._inotify is None
            # A journal busy (its own take) is tried again shortly; without an instance, once a second.
            poller.poll(10 if busy else 1000 if missing else None)
            with self._lock:
                if self._closed:
                    return
                try:
                    while os.read(self._wake_r, 64):
                        pass
                except BlockingIOError:
                    pass
                self._read()
                ready = [s for s in self._sessions if s.inbox]
            busy = False
            for session in ready:
                if not session.deliver(session):
                    busy = True


class ChangeJournal:
    """Watches ``folder`` and answers which folders changed in each interval (see the module docstring).

    ``hub``: the :class:`JournalHub` whose inotify instance it uses (the caller closes it); without one,
    the journal makes its own and closes it with itself.
    """

    def __init__(self, folder: str, *, exclude: Sequence[bytes] = (), hub: JournalHub | None = None) -> None:
        self._root = os.fsencode(folder)
        self._exclude = frozenset(p.strip(b"/") for p in exclude)
        self._hub = hub
        self._own_hub = False
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
        session = self._session
        return session is not None and not self._closed and not self._lost and not session.hub.closed

    @property
    def watches(self) -> int:
        """How many folders are watched now."""
        return len(self._session.paths) if self._session is not None else 0

    @property
    def hub(self) -> JournalHub | None:
        return self._hub

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
        if self._hub is None:
            self._hub = JournalHub()
            self._own_hub = True
        session = _Session(self._hub, self._deliver)
        with self._lock:
            self._hub.attach(session)
            self._session = session
            self._watch_root(session)

    def changed(self) -> bool:
        """Whether anything changed (or the journal is in doubt) since the previous take; the interval goes on."""
        with self._lock:
            session = self._session
            if session is None or self._closed or self._lost or session.hub.closed:
                return True
            try:
                self._pump(session)
            except Exception as exc:  # noqa: BLE001 - the events are gone: a doubt, which a take will tell
                self._fail(f"reading the events failed: {exc!r}", resync=True)
            return bool(self._folders or self._trees or self._doubt or self._resync)

    def take(self) -> Changes | None:
        """What changed since ``start()`` or the previous take; ``None``: in doubt. Starts a new interval."""
        with self._lock:
            session = self._session
            if session is None or self._closed:
                self.reason = "the journal is not running"
                return None
            if session.hub.closed:
                self.reason = "the journal's hub is closed"
                return None
            if not self._lost:
                try:
                    self._pump(session)
                except Exception as exc:  # the reader failed: doubt, and rebuilt watches
                    self._fail(f"reading the events failed: {exc!r}", resync=True)
            doubt, self._doubt = self._doubt, None
            changes = Changes(frozenset(self._folders), frozenset(self._trees))
            self._folders.clear()
            self._trees.clear()
            if self._lost:
                doubt = doubt or self.reason or "the watched folder is gone"
                if session.paths:
                    self._let_go(session)
            elif self._resync:
                self._rebuild(session)
            self.reason = doubt
        return None if doubt is not None else changes

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
            self._closed = True
            if session is not None:
                session.closed = True
                session.hub.detach(session, list(session.paths))
                session.paths.clear()
        if self._own_hub and self._hub is not None:
            self._hub.close()

    def __enter__(self) -> ChangeJournal:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- seams ------------------------------------------------------------

    def _add_watch(self, session: _Session, path: bytes, fd: int | None = None) -> int:
        """Add one folder watch, through ``fd`` if given (a seam: tests replace it to simulate the watch limit)."""
        return session.hub.add(session, path, fd)

    @contextmanager
    def _held(self) -> Iterator[None]:
        """Keep the hub's reader from reading while the body runs (a seam: tests fill the kernel queue)."""
        with self._lock:
            session = self._session
            if session is None:
                yield
                return
            with session.hub._lock:
                yield

    def _apply(self, session: _Session, events: list[_Event]) -> None:
        """Account for one batch of events (a seam: tests make it fail)."""
        _Batch(self, session, events).apply()

    # -- accounting -------------------------------------------------------

    def _deliver(self, session: _Session) -> bool:
        """The hub's reader: account for the events routed here; False if busy (the reader comes back)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._session is not session or self._closed:
                return True
            if self._lost:
                session.hub.grab(session)  # nothing to account for any more
                return True
            try:
                self._catch_up(session)
            except Exception as exc:  # noqa: BLE001 - a doubt, and rebuilt watches at the next take
                self._fail(f"reading the events failed: {exc!r}", resync=True)
            return True
        finally:
            self._lock.release()

    def _pump(self, session: _Session) -> None:
        """Drain the kernel queue (every journal's events are routed) and account for ours (the lock is held)."""
        session.hub.drain()
        self._catch_up(session)

    def _catch_up(self, session: _Session) -> None:
        while True:
            events = session.hub.grab(session)
            if not events:
                return
            self._apply(session, events)

    # -- watching ---------------------------------------------------------

    def _watch_root(self, session: _Session) -> None:
        """Watch the root and everything below (the lock is held; the session holds no watch)."""
        self._resync = False
        self._watch_tree(session, b"", examine=False)

    def _rebuild(self, session: _Session) -> None:
        """Let go of every watch and watch everything again (the lock is held)."""
        self._let_go(session)
        try:
            session.hub.attach(session)
        except OSError as exc:
            self._fail(f"restarting the journal failed: {exc!r}", resync=True)
            return
        self._watch_root(session)

    def _let_go(self, session: _Session) -> None:
        session.hub.release(session, list(session.paths))
        session.paths.clear()
        session.root_wd = -1

    def _excluded(self, rel: bytes) -> bool:
        return any(rel == p or rel.startswith(p + b"/") for p in self._exclude) if self._exclude else False

    def _watch_tree(self, session: _Session, top: bytes, *, examine: bool) -> None:
        """Watch ``top`` and every folder below it (the lock is held); ``examine``: look at their entries' links.

        Each folder is opened relative to its parent's descriptor, never through a symlink, then watched
        through its descriptor and listed from it: a folder swapped for a symlink meanwhile (to another
        watched folder, say) can neither be watched nor listed in its place. ``top`` ``b""``: the root.
        """
        try:
            root_fd = os.open(self._root, DIR_FLAGS)
        except OSError as exc:
            if exc.errno not in _VANISHED:
                self._fail(f"the watched folder could not be opened: {exc!r}", resync=True)
            elif not top:
                self._lose("the watched folder is gone")
            return  # else the root's own end says it
        beneath = Beneath(root_fd)
        try:
            s = os.fstat(root_fd)
            if (s.st_dev, s.st_ino) != self._identity:
                if top:
                    self._fail("the watched folder was replaced", resync=False)
                else:
                    self._lose("the watched folder was replaced")
                return
            stack = [top]
            while stack:
                rel = stack.pop()
                path = self._root + b"/" + rel if rel else self._root
                try:
                    fd = beneath.folder(rel)
                    wd = self._add_watch(session, path, fd)
                except OSError as exc:
                    if not rel:
                        self._fail(f"the watched folder could not be watched: {exc!r}", resync=True)
                        return
                    if exc.errno not in _VANISHED:
                        self._fail(f"a watch on {rel!r} could not be added: {exc!r}", resync=True)
                    continue  # else gone, or no longer a folder: the event of its parent covers it
                session.paths[wd] = rel
                if not rel:
                    session.root_wd = wd
                try:
                    entries = list(os.scandir(fd))
                except OSError as exc:
                    if exc.errno not in _VANISHED:
                        self._fail(f"listing {rel!r} failed: {exc!r}", resync=True)
                    continue
                for entry in entries:
                    child = rel + b"/" + os.fsencode(entry.name) if rel else os.fsencode(entry.name)
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if not self._excluded(child):
                                stack.append(child)
                        elif examine and entry.stat(follow_symlinks=False).st_nlink > 1:
                            self._fail(f"{child!r} has several links", resync=False)
                    except FileNotFoundError:
                        continue
        finally:
            beneath.close()
            os.close(root_fd)

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
        if e.mask & _NOTICE:
            j._fail(e.name.decode(), resync=bool(e.cookie))
            return
        if e.mask & _FORGET:
            if e.wd == s.root_wd:
                j._lose("the watched folder was moved, deleted or unmounted")
            s.paths.pop(e.wd, None)
            return
        rel = s.paths.get(e.wd)
        if rel is None:  # the last events of a watch this journal let go: routed before it did
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
        """Folder ``rel`` left the watched folder: let go of the watches of its subtree."""
        s = self.s
        wds = s.below(rel)
        for wd in wds:
            del s.paths[wd]
        s.hub.release(s, wds)

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
