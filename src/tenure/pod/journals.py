"""The change journals of the projects running on this pod (ADR 0028, ADR 0030).

A project's journal starts at its first checkpoint here (that checkpoint
walks: nothing is known before the start) and lives while the project runs
here under the same generation. Each checkpoint takes one interval, so it
lists only the folders the journal names. Every ``walk_every``-th checkpoint
of a project walks anyway: a hard link made from outside the folder and
written through that outside name is invisible to a journal, and a walk
bounds how long such a change can go unstored. A journal that cannot start
(no inotify, the watch limit) leaves the checkpoints walking, as without one.

All the journals of the pod share one :class:`~tenure.snapshots.journal.JournalHub`
(one inotify instance and one reader thread, ADR 0043), made with the first
journal and closed by :meth:`FolderJournals.close`: the per-user limit of
inotify instances (128 by default) no longer bounds how many projects a pod
can journal; the limit of watches (one per folder) still does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from tenure.snapshots.build import Interval, JournalCursor
from tenure.snapshots.journal import ChangeJournal, JournalHub


@dataclass
class _Entry:
    generation: int
    folder: str
    journal: ChangeJournal
    cursor: JournalCursor
    taken: int = 0


class FolderJournals:
    """One change journal per project running here (thread-safe)."""

    def __init__(self, *, enabled: bool = True, walk_every: int = 16) -> None:
        self.enabled = enabled
        self.walk_every = max(1, walk_every)
        self._entries: dict[str, _Entry] = {}
        self._hub: JournalHub | None = None
        self._lock = threading.Lock()

    @property
    def hub(self) -> JournalHub | None:
        """The inotify hub every journal here uses (``None`` until the first journal)."""
        return self._hub

    def interval(self, project_id: str, generation: int, folder: str) -> Interval | None:
        """The interval for a checkpoint of the project's ``folder`` now (``None``: journals are off)."""
        if not self.enabled:
            return None
        with self._lock:
            entry = self._entries.get(project_id)
            if entry is not None and (entry.generation != generation or entry.folder != folder):
                self._entries.pop(project_id)
                entry.journal.close()
                entry = None
            if entry is None:
                hub = self._shared_hub()
                if hub is None:
                    return None
                journal = ChangeJournal(folder, hub=hub)
                try:
                    journal.start()
                except OSError:
                    journal.close()
                    return None
                entry = self._entries[project_id] = _Entry(generation, folder, journal, JournalCursor(journal))
            entry.taken += 1
            interval = entry.cursor.take()
        if entry.taken % self.walk_every == 0:
            return Interval(interval.since, interval.mark, None)  # the periodic walk
        return interval

    def changed(self, project_id: str) -> bool:
        """Whether the project's folder may have changed since its last checkpoint here (True when unknown:
        no journal yet, journals off, or one in doubt)."""
        with self._lock:
            entry = self._entries.get(project_id)
        return entry is None or entry.journal.changed()

    def keep(self, project_ids: Iterable[str]) -> None:
        """Close the journals of projects that no longer run here."""
        keep = set(project_ids)
        with self._lock:
            gone = [pid for pid in self._entries if pid not in keep]
            closing = [self._entries.pop(pid).journal for pid in gone]
        for journal in closing:
            journal.close()

    def close(self) -> None:
        """Close every journal, then the hub."""
        self.keep(())
        with self._lock:
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()

    def _shared_hub(self) -> JournalHub | None:
        """The pod's hub, made now if there is none (the lock is held); ``None``: no inotify instance."""
        if self._hub is None or self._hub.closed:
            try:
                self._hub = JournalHub()
            except OSError:
                return None
        return self._hub

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
