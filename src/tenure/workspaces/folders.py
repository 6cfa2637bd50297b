"""The workspace folders a pod keeps on its host, under its data folder.

``<data>/workspaces/<hash>``
    a mount: the working folder of one workspace on this host. Keys (project
    ids) are hashed before they become paths.
``<data>/workspaces/<hash>.base.json``
    the base file: which snapshot the folder was restored from. It is
    written *before* the restore, which renames a complete folder into place
    or leaves none, so a folder found later with this base is exactly that
    snapshot (plus whatever was changed in it since).
``<data>/preserved/<hash>-<time>-<rand>``
    a preserved delta: a folder that may hold data no READY snapshot has
    (a lease lost to another pod, a stale generation, a closed project),
    moved aside instead of being overwritten or deleted; kept for the
    recovery window, then deleted (``tenure mounts`` lists and recovers them).
``<data>/trash/<rand>``
    folders to delete: renamed there at once, deleted in the background; the
    trash folder itself is the record, swept at every start.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from typing import Any

from tenure.fsio import atomic_write, fsync_dir, make_dirs_durable

#: What :meth:`LocalFolders.read_base` returns when the base file is missing or unreadable.
UNKNOWN_BASE = "unknown"


class Trash:
    """Folders to delete: renamed into ``<data>/trash`` at once, deleted in the background.

    Whatever a crash leaves there is deleted by the next :meth:`sweep`.
    """

    def __init__(self, data_dir: str) -> None:
        self.root = os.path.join(data_dir, "trash")
        os.makedirs(self.root, exist_ok=True)
        self._threads: list[threading.Thread] = []

    def discard(self, path: str) -> None:
        if not os.path.lexists(path):
            return
        target = os.path.join(self.root, uuid.uuid4().hex)
        os.rename(path, target)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        fsync_dir(self.root)
        self._spawn([target])

    def sweep(self) -> None:
        leftovers = [os.path.join(self.root, n) for n in os.listdir(self.root)]
        if leftovers:
            self._spawn(leftovers)

    def _spawn(self, paths: list[str]) -> None:
        def remove() -> None:
            for path in paths:
                shutil.rmtree(path, ignore_errors=True)

        thread = threading.Thread(target=remove, name="tenure-trash", daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class LocalFolders:
    """Paths, base files, preserved folders and the trash of one data folder."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.trash = Trash(data_dir)

    def path(self, key: str) -> str:
        """The working folder for ``key`` on this host."""
        return os.path.join(self.data_dir, "workspaces", hashlib.sha256(key.encode()).hexdigest()[:24])

    @staticmethod
    def base_file(folder: str) -> str:
        return folder + ".base.json"

    def _read_base_file(self, folder: str) -> dict[str, Any] | None:
        """The base file of ``folder`` (:meth:`write_base`); ``None`` when missing, unreadable or not an object."""
        try:
            with open(self.base_file(folder), encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def read_base(self, folder: str) -> str | None:
        """The snapshot ``folder`` was restored from; :data:`UNKNOWN_BASE` when not recorded."""
        record = self._read_base_file(folder)
        value = UNKNOWN_BASE if record is None else record.get("snapshot")
        return value if value is None or isinstance(value, str) else UNKNOWN_BASE

    def read_vouched_index(self, folder: str) -> str | None:
        """The identity of the local index that describes the base snapshot (see :meth:`write_base`), if any."""
        record = self._read_base_file(folder)
        value = None if record is None else record.get("index")
        return value if isinstance(value, str) else None

    def write_base(self, folder: str, snapshot_id: str | None, *, index: str | None = None) -> None:
        """Record the snapshot ``folder`` holds; ``index``: the identity of the local index that then describes
        it exactly (after a publish or a finished restore; ADR 0033), so "clean" can be judged against it."""
        make_dirs_durable(os.path.dirname(folder))
        body: dict[str, str | None] = {"snapshot": snapshot_id}
        if index is not None:
            body["index"] = index
        atomic_write(self.base_file(folder), json.dumps(body).encode("utf-8"))

    def forget_base(self, folder: str) -> None:
        try:
            os.unlink(self.base_file(folder))
        except FileNotFoundError:
            return
        fsync_dir(os.path.dirname(os.path.abspath(folder)))

    def preserve_target(self, folder: str) -> str:
        """A fresh place under ``preserved/`` for ``folder`` (nothing is created)."""
        return os.path.join(
            self.data_dir, "preserved", f"{os.path.basename(folder)}-{int(time.time())}-{uuid.uuid4().hex[:8]}"
        )

    def preserve(self, folder: str, target: str | None = None) -> str:
        """Move ``folder`` aside as a preserved delta (to ``target`` when given); return where it went."""
        target = target or self.preserve_target(folder)
        make_dirs_durable(os.path.dirname(target))
        os.rename(folder, target)
        fsync_dir(os.path.dirname(target))  # the folder is in preserved/ for good ...
        fsync_dir(os.path.dirname(os.path.abspath(folder)))  # ... before its old place is reused
        return target

    def discard(self, folder: str) -> None:
        """Move ``folder`` to the trash (no-op when absent)."""
        self.trash.discard(folder)
