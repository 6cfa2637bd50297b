"""The intake service layout, its locks and its coarse runtime file.

::

    <root>/
      inbox/                       incoming files of any name or extension
      quarantine/<unique-id>/      package.zip + validation_error.json
      cache/<sha256>.zip           exact, immutable input archives
      cases/<case-hash>/<package-hash>/
        g00000001.zip              immutable confirmed generations
        current.json               reconstructible lookup index
      outbox/  review/             reserved (no delivery in this milestone)
      runtime/current_job.json     coarse worker summary, or null when idle
      runtime/locks/worker.lock    persistent lock files, never deleted
      runtime/locks/case-<case-hash>.lock

Opaque ids reach paths only as SHA-256 hashes. The workspace must live on a
local filesystem with hard links (generations are published with a no-clobber
``link``) and POSIX ``flock`` or Windows ``msvcrt`` locks; shared network
filesystems are not supported.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from .canonical import id_hash, to_utc_text
from .config import IntakeConfig
from .errors import BusyError, LifecycleError
from .fsio import FileLock, atomic_write_json, make_dirs_durable, remove_abandoned_temp, tmp_name

__all__ = ["Workspace"]

_FOLDERS = ("inbox", "quarantine", "cache", "cases", "outbox", "review", "runtime", "runtime/locks")


class Workspace:
    """A service-owned intake folder; creates the layout when opened.

    With ``create=False`` it only opens an intake that exists (its
    ``inbox/`` is a folder; folders missing beside it are completed) and
    raises ``no-intake`` for any other path, creating nothing there.
    """

    def __init__(
        self, root: str | os.PathLike[str], config: IntakeConfig | None = None, *, create: bool = True
    ) -> None:
        self.root = Path(root).absolute()
        self.config = config or IntakeConfig()
        if not create and not (self.root / "inbox").is_dir():
            raise LifecycleError(
                f"no intake at {self.root}: it has no inbox/ folder",
                code="no-intake",
                root=str(self.root),
                hint=f"check the path, or create the intake with `tenure intake init {self.root}`",
            )
        for name in _FOLDERS:
            make_dirs_durable(self.root / name)  # each new folder's entry is synced in its parent
        if not self.runtime_file.exists():
            atomic_write_json(self.runtime_file, None)
        self._check_hard_links()

    # ------------------------------------------------------------------ layout

    @property
    def inbox(self) -> Path:
        return self.root / "inbox"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def cases(self) -> Path:
        return self.root / "cases"

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def review(self) -> Path:
        return self.root / "review"

    @property
    def runtime_file(self) -> Path:
        return self.root / "runtime" / "current_job.json"

    @property
    def locks(self) -> Path:
        return self.root / "runtime" / "locks"

    def case_dir(self, case_id: str, package_id: str) -> Path:
        """``cases/<case-hash>/<package-hash>/`` (ids are never used raw)."""
        return self.cases / id_hash(case_id) / id_hash(package_id)

    def case_dirs(self) -> list[Path]:
        """Every stored package folder, in a stable order."""
        found: list[Path] = []
        for case in sorted(self.cases.iterdir()):
            if case.is_dir() and not case.is_symlink():
                found.extend(p for p in sorted(case.iterdir()) if p.is_dir() and not p.is_symlink())
        return found

    # ------------------------------------------------------------------ locks

    def worker_lock(self) -> FileLock:
        """The lock guarding ``runtime/current_job.json`` (one worker at a time)."""
        return FileLock(self.locks / "worker.lock")

    def case_lock(self, case_id: str) -> FileLock:
        """The per-case lock, keyed on the case identity only."""
        return FileLock(self.locks / f"case-{id_hash(case_id)}.lock")

    @contextmanager
    def locked(self, case_id: str | None = None) -> Iterator[None]:
        """Hold the worker lock (and the case lock); raise BusyError at once if taken."""
        worker = self.worker_lock()
        if not worker.acquire():
            raise BusyError("another worker is processing this workspace", code="worker-busy", lock=str(worker.path))
        try:
            self.clear_stale_runtime()
            if case_id is None:
                yield
                return
            with self.case_locked(case_id):
                yield
        finally:
            worker.release()

    @contextmanager
    def case_locked(self, case_id: str) -> Iterator[None]:
        lock = self.case_lock(case_id)
        if not lock.acquire():
            raise BusyError("another worker is processing this case", code="case-busy", lock=str(lock.path))
        try:
            yield
        finally:
            lock.release()

    # ------------------------------------------------------------------ runtime

    def read_runtime(self) -> Any:
        """The coarse worker summary, or None when idle (never authoritative)."""
        try:
            return json.loads(self.runtime_file.read_text("utf-8"))
        except (OSError, ValueError):
            return None

    def write_runtime(self, summary: dict[str, Any] | None) -> None:
        atomic_write_json(self.runtime_file, summary)

    def read_runtime_file(self, name: str) -> Any:
        """A JSON file of ``runtime/`` (a hint, never authoritative), or None."""
        try:
            return json.loads((self.root / "runtime" / name).read_text("utf-8"))
        except (OSError, ValueError):
            return None

    def write_runtime_file(self, name: str, value: Any) -> None:
        atomic_write_json(self.root / "runtime" / name, value)

    def clear_stale_runtime(self) -> None:
        """Called with the worker lock held: any summary left is from a crash.

        A group commit's summary lists the case folders of its batch; the
        temporary files its writer left there are removed (nobody else
        writes there while the worker lock is held).
        """
        stale = self.read_runtime()
        if isinstance(stale, dict) and isinstance(stale.get("batch"), list):
            for job in stale["batch"]:
                folder = Path(str(job.get("folder", ""))) if isinstance(job, dict) else None
                if folder is not None and folder.parent.parent == self.cases:
                    remove_abandoned_temp(folder)
        if stale is not None or not self.runtime_file.exists():
            self.write_runtime(None)

    @staticmethod
    def job_summary(
        case_id: str,
        package_id: str,
        *,
        input_generation: int,
        analysis_revision: int,
        target: str,
        started_at: datetime,
        last_checkpoint_at: datetime | None,
    ) -> dict[str, Any]:
        """What ``current_job.json`` holds: identities and timing, no progress."""
        return {
            "case_id": case_id,
            "package_id": package_id,
            "input_generation": input_generation,
            "analysis_revision": analysis_revision,
            "target_state": target,
            "started_at": to_utc_text(started_at),
            "last_checkpoint_at": to_utc_text(last_checkpoint_at) if last_checkpoint_at else None,
            "pid": os.getpid(),
        }

    # ------------------------------------------------------------------ checks

    def _check_hard_links(self) -> None:
        probe = self.root / "runtime" / tmp_name(".probe")
        linked = probe.with_name(probe.name + ".link")
        try:
            probe.write_bytes(b"")
            os.link(probe, linked)
        except OSError as error:
            raise LifecycleError(
                f"{self.root} does not support hard links: {error}", code="no-hard-links", root=str(self.root)
            ) from None
        finally:
            linked.unlink(missing_ok=True)
            probe.unlink(missing_ok=True)
