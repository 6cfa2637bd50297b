"""InboxProcessor: one bounded pass over the inbox and the blocked cases.

For each inbox file (sorted by name, inputs that ended ERROR on an earlier
pass last; names starting with ``.`` are a producer's unfinished uploads and
are skipped): symlinks are rejected without being followed; anything else that
is not a regular file (a folder, a FIFO, a socket, a device) is moved into
quarantine by a rename, never opened; oversized files
are moved straight to quarantine; others are copied to ``cache/<sha256>.zip``
(bounded by the archive limit) and the copy is validated — never the live
file. Every input the validator refuses, or cannot read at all, is
quarantined with a structured report and a code; ERROR is left for
infrastructure faults (a full disk, a permission). Valid inputs are admitted
under their case lock (BUSY if it is held). The original is acknowledged
only after publication: it is first renamed to a private name in the inbox
(so a re-upload under the same name is never the file removed), its bytes
are compared with the cached snapshot, and it is removed only if they match;
otherwise it goes back into the inbox. Then due BLOCKED cases are resumed
once each; the others are reported DEFERRED.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tenure.faults import crash_point, register
from tenure.fsio import sync_filesystem

from .admission import Admission, classify
from .canonical import parse_aware, to_utc_text, utc_now
from .commit import commit
from .errors import LifecycleError, PackageRejectedError, RequestRejectedError, TransitionRefusedError
from .fsio import (
    FileLock,
    atomic_write_json,
    fsync_dir,
    fsync_file,
    remove_abandoned_temp,
    safe_text,
    tmp_name,
)
from .machine import intake_machine
from .package import EncodedManifest, Package, read_package
from .plan import Plan, make_request, plan_advance
from .results import PollResult, ResultKind
from .storage import CaseStorage, Staged, index_record
from .workspace import Workspace
from .writer import PackageWriter

__all__ = ["InboxProcessor", "PollResult", "ResultKind", "Observer"]

CACHED = register("intake.admit.cached", "input copied to cache/, not yet validated")
QUARANTINE_COPIED = register("intake.quarantine.copied", "quarantine folder holds package.zip but no report yet")
QUARANTINE_REPORTED = register("intake.quarantine.reported", "quarantine complete; inbox original not yet removed")
BEFORE_ACK = register(
    "intake.admit.before-ack", "outcome confirmed (published, duplicate or quarantined); original still in inbox"
)
ACK_RENAMED = register(
    "intake.admit.ack-renamed", "the original holds its private acknowledgement name; not yet compared or removed"
)
# group commit (ADR 0109): the steps of one batch of admissions
BATCH_STAGED = register(
    "intake.batch.staged",
    "a batch is staged: cache copies, generations and index files under temporary names, unsynced",
)
BATCH_RUNTIME = register("intake.batch.runtime-written", "the batch's runtime summary written; nothing synced or named")
BATCH_SYNCED = register(
    "intake.batch.synced", "every temporary file and new folder of the batch is durable; none named"
)
BATCH_DURABLE = register(
    "intake.batch.durable",
    "every generation of the batch and the folder entries naming it are durable; none acknowledged",
)
BATCH_RUNTIME_CLEARED = register(
    "intake.batch.runtime-cleared", "the batch is stored and its runtime cleared; no input acknowledged"
)
BATCH_ACKNOWLEDGED = register(
    "intake.batch.acknowledged", "every input of the batch removed; the inbox folder not yet synced"
)

#: ``observer(event, inbox_path)`` is told ``"cached"`` and ``"published"``.
Observer = Callable[[str, Path], None]
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: inbox files are opened without waiting: a FIFO swapped in under an input's name opens at once (and is refused)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: what an input that is not a regular file is called inside its quarantine folder (it is no zip)
SPECIAL_INPUT = "input"
_CHUNK = 1024 * 1024
#: an inbox original being acknowledged lives under this private name for a moment
ACK_PREFIX = ".tenure-ack-"
#: ``runtime/failed.json``: inputs that ended ERROR, polled after the others
_FAILED = "failed.json"
_COUNTED = (ResultKind.ACCEPTED, ResultKind.DUPLICATE, ResultKind.QUARANTINED)
#: what ``_process`` returns for an input that joined the batch (its result comes with the batch)
_STAGED = object()


@dataclass
class _Input:
    entry: Path
    cache: Path | None = None
    sha256: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    #: the unsynced cache copy of a group commit, named ``cache/<sha256>.zip`` once the batch is durable
    cache_tmp: Path | None = None
    size: int = 0


@dataclass
class _Job:
    """One input of a group commit, valid and decided, waiting for the batch's syncs."""

    item: _Input
    slot: int
    lock: FileLock
    admission: Admission
    #: the stored package (DUPLICATE) or the validated temporary generation
    package: Package
    folder: Path
    index_tmp: Path | None = None


@dataclass
class _Batch:
    jobs: list[_Job] = field(default_factory=list)
    size: int = 0
    #: files and folders whose data or entries the first barrier makes durable
    files: list[Path] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)

    @property
    def case_ids(self) -> set[str]:
        return {job.package.case_id for job in self.jobs}


class InboxProcessor:
    """Single-pass admission of inbox files; not a daemon."""

    def __init__(
        self, workspace: Workspace, *, clock: Callable[[], datetime] = utc_now, observer: Observer | None = None
    ) -> None:
        self.workspace = workspace
        self.config = workspace.config
        self.machine = intake_machine(self.config.phases)
        self.storage = CaseStorage(workspace)
        self._clock = clock
        self._observer = observer

    def poll(self, max_jobs: int = 100) -> list[PollResult]:
        """One pass: at most ``max_jobs`` inputs acted on (DEFERRED, BUSY and ERROR do not count)."""
        lock = self.workspace.worker_lock()
        if not lock.acquire():
            return [
                PollResult(
                    ResultKind.BUSY,
                    code="worker-busy",
                    message="another worker is polling this workspace",
                    paths={"lock": str(lock.path)},
                )
            ]
        try:
            self.workspace.clear_stale_runtime()
            self._recover()
            self._failed = self._read_failed()
            self._results: list[PollResult | None] = []
            self._batch = _Batch()
            used = retried = 0
            # inputs that failed before go last, and at most max_jobs of them are tried again per pass
            entries = sorted(self.workspace.inbox.iterdir(), key=lambda e: (_key(e) in self._failed, e.name))
            try:
                for entry in entries:
                    if used >= max_jobs:
                        break
                    if _key(entry) in self._failed:
                        if retried >= max_jobs:
                            break
                        retried += 1
                    slot = len(self._results)
                    self._results.append(None)
                    result = self._guarded(entry, slot)
                    if result is None:
                        self._results.pop()
                        continue
                    if not isinstance(result, PollResult):  # staged: ACCEPTED or DUPLICATE once the batch is stored
                        used += 1
                        if self._batch_full():
                            self._flush()
                        continue
                    self._settle(slot, entry, result)
                    used += result.kind in _COUNTED
            finally:
                self._flush()
            results = [r for r in self._results if r is not None]
            self._write_failed(self._failed)
            results.extend(self._blocked_pass(max_jobs - used))
            return results
        finally:
            lock.release()

    def _recover(self) -> None:
        """Undo what a pass that died left: acknowledgements half done, abandoned temporary files.

        An original caught under its private acknowledgement name may or may
        not have been confirmed; it goes back into the inbox under a new name
        and is judged again (a confirmed input comes back DUPLICATE, or is
        quarantined again), so no upload is ever lost. Temporary files in
        ``cache/`` and ``quarantine/`` are written only under the worker lock,
        which this pass holds: any left there is abandoned.
        """
        inbox = self.workspace.inbox
        try:
            leftovers = sorted(inbox.glob(ACK_PREFIX + "*"))
            for leftover in leftovers:
                os.rename(leftover, inbox / f"recovered-{leftover.name[len(ACK_PREFIX) :]}")
            if leftovers:
                fsync_dir(inbox)
            remove_abandoned_temp(self.workspace.cache)
            for folder in self.workspace.quarantine.iterdir():
                if folder.is_dir() and not folder.is_symlink():
                    remove_abandoned_temp(folder)
        except OSError:
            pass  # best effort: the inputs themselves report an unusable folder

    def _read_failed(self) -> dict[str, Any]:
        value = self.workspace.read_runtime_file(_FAILED)
        return value if isinstance(value, dict) else {}

    def _write_failed(self, failed: dict[str, Any]) -> None:
        if failed != self._read_failed():
            self.workspace.write_runtime_file(_FAILED, failed)

    def _note_outcome(self, failed: dict[str, Any], entry: Path, result: PollResult) -> None:
        key = _key(entry)
        if result.kind is ResultKind.ERROR:
            before = failed.get(key) or {}
            failed[key] = {"name": safe_text(entry.name), "code": result.code, "count": before.get("count", 0) + 1}
        elif result.kind in _COUNTED:
            failed.pop(key, None)

    # ------------------------------------------------------------------ one input

    def _settle(self, slot: int, entry: Path, result: PollResult) -> None:
        self._results[slot] = result
        self._note_outcome(self._failed, entry, result)

    def _guarded(self, entry: Path, slot: int) -> PollResult | None | object:
        if entry.name.startswith("."):
            return None
        item = _Input(entry)
        try:
            return self._process(item, slot)
        except LifecycleError as error:
            return self._error(item, error.code, error.message)
        except OSError as error:
            return self._error(item, "io-error", str(error))
        except Exception as error:  # noqa: BLE001 - bad input never stops the loop
            return self._error(item, "internal-error", f"{type(error).__name__}: {error}")

    def _error(self, item: _Input, code: str, message: str) -> PollResult:
        if item.cache_tmp is not None:
            item.cache_tmp.unlink(missing_ok=True)
        return PollResult(ResultKind.ERROR, input_path=item.entry, code=code, message=message, paths=item.extra)

    def _process(self, item: _Input, slot: int) -> PollResult | None | object:
        st = os.lstat(item.entry)
        if stat.S_ISLNK(st.st_mode):
            return self._reject_symlink(item)
        if not stat.S_ISREG(st.st_mode):
            return self._reject_special(item, st.st_mode)
        limit = self.config.limits.archive_bytes
        try:
            cached = st.st_size <= limit and self._cache(item, limit)
        except _NotRegular as swapped:
            return self._reject_special(item, swapped.mode)
        if not cached:
            error = PackageRejectedError(f"input is larger than {limit} bytes", code="archive-too-large", limit=limit)
            return self._quarantine(item, error, move=True)
        self._notify("cached", item.entry)
        crash_point(CACHED)
        assert item.cache is not None
        try:
            incoming = read_package(item.cache, self.config)
        except PackageRejectedError as error:
            return self._quarantine(item, error)
        except OSError:
            raise  # the cached copy could not be read: an infrastructure fault
        except Exception as error:  # noqa: BLE001 - whatever the bytes make the reader do is the input's fault
            return self._quarantine(item, _unreadable(error))
        return self._admit(item, incoming, slot)

    def _cache(self, item: _Input, limit: int) -> bool:
        """Copy the input to a temporary file in cache/; False if it exceeds ``limit``.

        The copy is not synced here: an input admitted in a batch has its copy
        synced with the batch and named ``cache/<sha256>.zip`` then
        (:meth:`_flush`); any other outcome names it at once
        (:meth:`_settle_cache`).
        """
        cache = self.workspace.cache
        tmp = cache / tmp_name(".zip")
        digest = hashlib.sha256()
        total = 0
        fd = os.open(item.entry, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced since it was looked at
            os.close(fd)
            raise _NotRegular(mode)
        with os.fdopen(fd, "rb") as src, open(tmp, "xb") as dst:
            while chunk := src.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    break
                digest.update(chunk)
                dst.write(chunk)
        if total > limit:
            tmp.unlink()
            return False
        final = cache / f"{digest.hexdigest()}.zip"
        item.cache = item.cache_tmp = tmp
        item.sha256, item.size = digest.hexdigest(), total
        item.extra["cache"] = str(final)
        return True

    def _settle_cache(self, item: _Input) -> None:
        """Sync the input's cache copy and name it ``cache/<sha256>.zip`` (an outcome outside a batch)."""
        tmp = item.cache_tmp
        if tmp is None:
            return
        _fsync_path(tmp)
        self._name_cache(item)
        fsync_dir(self.workspace.cache)

    def _name_cache(self, item: _Input) -> None:
        tmp, final = item.cache_tmp, Path(item.extra["cache"])
        assert tmp is not None
        try:
            os.link(tmp, final)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        item.cache, item.cache_tmp = final, None

    def _admit(self, item: _Input, incoming: Package, slot: int) -> PollResult | object:
        if incoming.case_id in self._batch.case_ids:
            self._flush()  # one generation per case and batch: the case lock is held until it is stored
        lock = self.workspace.case_lock(incoming.case_id)
        if not lock.acquire():
            self._settle_cache(item)
            return PollResult(
                ResultKind.BUSY,
                input_path=item.entry,
                code="case-busy",
                message="another worker holds this case; left pending",
                paths=item.extra,
                case_id=incoming.case_id,
                package_id=incoming.package_id,
            )
        staged = False
        try:
            current = self.storage.load_current(incoming.case_id, incoming.package_id, repair=True)
            try:
                admission = classify(incoming, current, self.storage)
                folder = self.workspace.case_dir(incoming.case_id, incoming.package_id)
                job = _Job(item, slot, lock, admission, current if current is not None else incoming, folder)
                if admission is not Admission.DUPLICATE:
                    self._stage(job, incoming)
            except (PackageRejectedError, RequestRejectedError, TransitionRefusedError) as error:
                # the input is valid on its own but cannot be stored: a conflict, or a generation past a limit
                return self._quarantine(item, error)
            assert item.cache_tmp is not None
            self._batch.jobs.append(job)
            self._batch.files.append(item.cache_tmp)
            self._batch.size += item.size
            staged = True
            return _STAGED
        finally:
            if not staged:
                lock.release()

    def _stage(self, job: _Job, incoming: Package) -> None:
        """Write the input's next generation and its index under temporary names, unsynced."""
        now = self._clock()
        if job.admission is Admission.FRESH:
            request = make_request(
                self.machine,
                self.config,
                "VALIDATED",
                step_id=f"admission:{incoming.fingerprint}",
                details={"raw_sha256": job.item.sha256},
            )
            plan = plan_advance(incoming, request, self.machine, now, self.config.limits)
        else:
            plan = Plan(
                manifest=dict(incoming.manifest),
                additions={},
                checkpoint={},
                encoded=EncodedManifest.of_package(incoming),
            )
        self._batch.folders.extend(_create_dirs(job.folder))
        remove_abandoned_temp(job.folder)  # the case lock is held: a temporary file here is a dead writer's
        written = PackageWriter(self.config).write(
            job.folder,
            plan.manifest,
            base=incoming,
            additions=plan.additions,
            stored=True,
            sync=False,
            encoded=plan.encoded,
        )
        index_tmp = job.folder / tmp_name(".json")
        try:
            with open(index_tmp, "xb") as fh:
                fh.write(_json_bytes(index_record(written)))
        except BaseException:
            written.path.unlink(missing_ok=True)
            index_tmp.unlink(missing_ok=True)
            raise
        job.package, job.index_tmp = written, index_tmp
        self._batch.files.extend([written.path, index_tmp])
        self._batch.size += written.path.stat().st_size

    def _batch_full(self) -> bool:
        batch = self._batch
        return len(batch.jobs) >= self.config.batch_packages or batch.size >= self.config.batch_bytes

    # ------------------------------------------------------------------ group commit

    def _flush(self) -> None:
        """Store the batch with one set of syncs, then acknowledge each input.

        1. write the runtime summary naming the batch;
        2. first barrier: every temporary file (cache copies, generations,
           index files) and every new folder's parent is made durable;
        3. name each cache copy and each generation (its index first), then
           the second barrier: the cache folder and every case folder;
        4. clear the runtime summary; release the case locks;
        5. acknowledge each input (private name, byte check, unlink), then
           sync the inbox folder once.

        No input is acknowledged before its generation, and the folder entry
        naming it, are durable. A crash anywhere leaves each input stored and
        acknowledged, stored and still in the inbox (a DUPLICATE next pass),
        or not stored at all (its temporary files are abandoned and removed).
        """
        batch, self._batch = self._batch, _Batch()
        if not batch.jobs:
            return
        crash_point(BATCH_STAGED)
        stored: list[tuple[_Job, Package]] = []
        try:
            first = batch.jobs[0]
            summary = Workspace.job_summary(
                first.package.case_id,
                first.package.package_id,
                input_generation=0 if first.admission is Admission.FRESH else first.package.generation,
                analysis_revision=first.package.analysis_revision,
                target=first.package.state.value,
                started_at=self._clock(),
                last_checkpoint_at=None,
            )
            summary["batch"] = [
                {"case_id": j.package.case_id, "package_id": j.package.package_id, "folder": str(j.folder)}
                for j in batch.jobs
            ]
            self.workspace.write_runtime(summary)
            crash_point(BATCH_RUNTIME)
            try:
                self._sync(batch.files, batch.folders)
                crash_point(BATCH_SYNCED)
                for job in batch.jobs:
                    self._name_cache(job.item)
                writes = [j for j in batch.jobs if j.admission is not Admission.DUPLICATE]
                staged: list[Staged] = [(j.package, j.folder, j.index_tmp) for j in writes if j.index_tmp]
                named = dict(
                    zip(map(id, writes), self.storage.publish_many(staged, also=self._also(batch)), strict=True)
                )
            except BaseException:
                self.workspace.write_runtime(None)  # nothing acknowledged; the job is over
                raise
            crash_point(BATCH_DURABLE)
            self.workspace.write_runtime(None)
            crash_point(BATCH_RUNTIME_CLEARED)
        except Exception as error:  # noqa: BLE001 - the batch's inputs stay pending, each with the reason
            code = (
                error.code
                if isinstance(error, LifecycleError)
                else "io-error"
                if isinstance(error, OSError)
                else "internal-error"
            )
            for job in batch.jobs:
                self._abandon(job)
                self._settle(job.slot, job.item.entry, self._error(job.item, code, str(error)))
            return
        finally:
            for job in batch.jobs:
                job.lock.release()
        for job in batch.jobs:
            outcome = named.get(id(job), job.package)
            if isinstance(outcome, OSError):
                self._abandon(job)
                self._settle(job.slot, job.item.entry, self._error(job.item, "io-error", str(outcome)))
            else:
                stored.append((job, outcome))
        for job, _package in stored:
            self._notify("published", job.item.entry)
        removed = False
        for job, package in stored:
            kind = ResultKind.DUPLICATE if job.admission is Admission.DUPLICATE else ResultKind.ACCEPTED
            try:
                result = self._finish(job.item, kind, package, sync=False)
                removed = True
            except OSError as error:
                result = self._error(job.item, "io-error", str(error))
            self._settle(job.slot, job.item.entry, result)
        crash_point(BATCH_ACKNOWLEDGED)
        if removed:
            fsync_dir(self.workspace.inbox)

    def _also(self, batch: _Batch) -> list[Path]:
        """Folders the second barrier syncs besides the new generations': cache/ and the duplicates' case folders."""
        return [self.workspace.cache, *(j.folder for j in batch.jobs if j.admission is Admission.DUPLICATE)]

    def _abandon(self, job: _Job) -> None:
        """Remove what a job that will not be stored wrote (its input stays pending)."""
        paths = [job.item.cache_tmp, job.index_tmp]
        if job.admission is not Admission.DUPLICATE:
            paths.append(job.package.path if job.package.path.name.startswith(".tmp-") else None)
        for path in paths:
            if path is not None:
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass
        job.item.cache_tmp = None

    def _sync(self, files: list[Path], folders: list[Path]) -> None:
        """The first barrier: file data and folder entries durable, one fsync each or one ``syncfs``."""
        unique = list(dict.fromkeys(folders))
        if self.config.syncfs_from and len(files) + len(unique) >= self.config.syncfs_from:
            sync_filesystem(self.workspace.root)
            return
        for path in files:
            _fsync_path(path)
        for folder in unique:
            fsync_dir(folder)

    def _finish(self, item: _Input, kind: ResultKind, stored: Package, *, sync: bool = True) -> PollResult:
        paths = {**item.extra, "generation": str(stored.path)}
        acknowledged = self._acknowledge(item, sync=sync)
        return PollResult(
            kind,
            input_path=item.entry,
            paths=paths,
            case_id=stored.case_id,
            package_id=stored.package_id,
            generation=stored.generation,
            state=stored.state.value,
            code=None if acknowledged else "input-changed",
            message=None if acknowledged else "the inbox file changed during processing; it was left in the inbox",
        )

    def _acknowledge(self, item: _Input, *, sync: bool = True) -> bool:
        """Remove the original if its bytes still equal the cached snapshot.

        The original is first renamed to a private name: a producer that
        publishes a new file under the same name meanwhile publishes a new
        input, never the one removed here. A file that turns out not to be
        the snapshot goes back into the inbox. ``sync=False``: the caller
        syncs the inbox once for a whole batch.
        """
        crash_point(BEFORE_ACK)
        inbox = item.entry.parent
        private = inbox / f"{ACK_PREFIX}{uuid.uuid4().hex}"
        try:
            os.rename(item.entry, private)
        except FileNotFoundError:
            return True  # the producer withdrew it
        crash_point(ACK_RENAMED)
        if _sha256_of(private) == item.sha256:
            os.unlink(private)
            if sync:
                fsync_dir(inbox)
            return True
        try:
            os.link(private, item.entry, follow_symlinks=False)
        except FileExistsError:  # a newer upload took the name meanwhile: keep this one under its own
            os.link(private, inbox / f"{item.entry.name}.{uuid.uuid4().hex[:8]}", follow_symlinks=False)
        os.unlink(private)
        if sync:
            fsync_dir(inbox)
        return False

    # ------------------------------------------------------------------ quarantine

    def _new_quarantine(self) -> Path:
        stamp = self._clock().strftime("%Y%m%dT%H%M%S%fZ")
        folder = self.workspace.quarantine / f"{stamp}-{uuid.uuid4().hex}"
        folder.mkdir()
        fsync_dir(self.workspace.quarantine)  # the new folder's entry is durable before anything points at it
        return folder

    def _quarantine(self, item: _Input, error: LifecycleError, *, move: bool = False) -> PollResult:
        if not move:
            self._settle_cache(item)
        folder = self._new_quarantine()
        target = folder / "package.zip"
        if move:
            os.rename(item.entry, target)
        else:
            assert item.cache is not None
            os.link(item.cache, target)
        fsync_dir(folder)
        if move:  # the input leaves the inbox durably only once it is durably here
            fsync_dir(item.entry.parent)
        crash_point(QUARANTINE_COPIED)
        self._report(folder, item, error)
        crash_point(QUARANTINE_REPORTED)
        acknowledged = move or self._acknowledge(item)
        return PollResult(
            ResultKind.QUARANTINED,
            input_path=item.entry,
            code=error.code,
            message=error.message if acknowledged else f"{error.message}; the inbox file changed and was left in place",
            paths={**item.extra, "quarantine": str(folder)},
            case_id=error.context.get("case_id"),
            package_id=error.context.get("package_id"),
        )

    def _reject_symlink(self, item: _Input) -> PollResult:
        error = PackageRejectedError(
            "inbox inputs must be regular files; symbolic links are never followed", code="symlink-input"
        )
        folder = self._new_quarantine()
        self._report(folder, item, error, link_target=safe_text(os.readlink(item.entry)))
        os.unlink(item.entry)
        fsync_dir(item.entry.parent)
        return _rejected(item, error, folder)

    def _reject_special(self, item: _Input, mode: int) -> PollResult:
        """Quarantine an input that is not a regular file: renamed into its folder as ``input``, never opened.

        A FIFO is never read (nothing waits for a writer), a socket never
        connected to, a folder moved whole; the report says what it was.
        """
        kind = _kind_of(mode)
        error = PackageRejectedError(
            f"inbox inputs must be regular files; this one is a {kind}", code="not-a-regular-file", kind=kind
        )
        folder = self._new_quarantine()
        os.rename(item.entry, folder / SPECIAL_INPUT)
        fsync_dir(folder)
        fsync_dir(item.entry.parent)  # the input leaves the inbox durably only once it is durably here
        crash_point(QUARANTINE_COPIED)
        self._report(folder, item, error, input_kind=kind)
        crash_point(QUARANTINE_REPORTED)
        return _rejected(item, error, folder)

    def _report(self, folder: Path, item: _Input, error: LifecycleError, **extra: Any) -> None:
        report = {
            "format": "tenure-validation-error",
            "format_version": 1,
            "input_name": safe_text(item.entry.name),
            "input_sha256": item.sha256,
            "quarantined_at": to_utc_text(self._clock()),
            **error.to_dict(),
            **extra,
        }
        atomic_write_json(folder / "validation_error.json", report)

    # ------------------------------------------------------------------ blocked cases

    def _blocked_pass(self, budget: int) -> list[PollResult]:
        results: list[PollResult] = []
        used = 0
        now = self._clock()
        try:
            folders = self.workspace.case_dirs()
        except OSError as error:
            return [
                PollResult(
                    ResultKind.ERROR, code="io-error", message=str(error), paths={"cases": str(self.workspace.cases)}
                )
            ]
        for folder in folders:
            try:
                hint = self.storage.index_hint(folder)
                if hint is None:
                    package = self.storage.load_dir(folder)
                    hint = index_record(package) if package is not None else {}
            except LifecycleError as error:
                results.append(
                    PollResult(ResultKind.ERROR, code=error.code, message=error.message, paths={"case": str(folder)})
                )
                continue
            if hint.get("state") != "BLOCKED":
                continue
            case_id, package_id = str(hint["case_id"]), str(hint["package_id"])
            retry_at = parse_aware(str(hint["retry_at"]))
            if retry_at > now:
                results.append(
                    PollResult(
                        ResultKind.DEFERRED,
                        generation=hint["generation"],
                        state="BLOCKED",
                        message=f"retry at {retry_at}",
                        paths={"case": str(folder)},
                        case_id=case_id,
                        package_id=package_id,
                    )
                )
            elif used < budget:
                result = self._resume(case_id, package_id, now)
                used += result.kind in (ResultKind.RESUMED, ResultKind.ERROR)
                results.append(result)
        return results

    def _resume(self, case_id: str, package_id: str, now: datetime) -> PollResult:
        lock = self.workspace.case_lock(case_id)
        if not lock.acquire():
            return PollResult(
                ResultKind.BUSY,
                code="case-busy",
                case_id=case_id,
                package_id=package_id,
                message="another worker holds this case",
            )
        try:
            return self._resume_locked(case_id, package_id, now)
        except LifecycleError as error:
            return PollResult(
                ResultKind.ERROR, code=error.code, message=error.message, case_id=case_id, package_id=package_id
            )
        except OSError as error:
            return PollResult(
                ResultKind.ERROR, code="io-error", message=str(error), case_id=case_id, package_id=package_id
            )
        finally:
            lock.release()

    def _resume_locked(self, case_id: str, package_id: str, now: datetime) -> PollResult:
        current = self.storage.load_current(case_id, package_id, repair=True)
        if current is None or current.state.value != "BLOCKED":
            return PollResult(ResultKind.DEFERRED, message="no longer blocked", case_id=case_id, package_id=package_id)
        request = make_request(
            self.machine,
            self.config,
            current.resume_state,
            step_id=f"resume:g{current.generation:08d}",
            details={"resumed_by": "poll"},
        )
        plan = plan_advance(current, request, self.machine, now, self.config.limits)
        folder = self.workspace.case_dir(case_id, package_id)
        published = commit(self.workspace, current, plan, folder, now)
        return PollResult(
            ResultKind.RESUMED,
            generation=published.generation,
            state=published.state.value,
            case_id=case_id,
            package_id=package_id,
            paths={"generation": str(published.path)},
        )

    def _notify(self, event: str, entry: Path) -> None:
        if self._observer is not None:
            self._observer(event, entry)


def _create_dirs(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents, unsynced; return the parents whose entries must be synced."""
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    for created in reversed(missing):
        try:
            created.mkdir()
        except FileExistsError:
            pass
    return [created.parent for created in reversed(missing)]


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    try:
        fsync_file(fd)
    finally:
        os.close(fd)


def _json_bytes(value: Any) -> bytes:
    """JSON as :func:`atomic_write_json` writes it."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return text.encode("utf-8", "backslashreplace")


def _key(entry: Path) -> str:
    """A stable text key for an inbox name, whatever bytes it is made of."""
    return os.fsencode(entry.name).hex()


def _sha256_of(path: Path) -> str | None:
    """SHA-256 of a regular file (never following a link nor waiting on a FIFO), or None if it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class _NotRegular(Exception):
    """The inbox name was a regular file when looked at, and something else when opened."""

    def __init__(self, mode: int) -> None:
        super().__init__(mode)
        self.mode = mode


def _rejected(item: _Input, error: LifecycleError, folder: Path) -> PollResult:
    """The result for an input quarantined in ``folder`` without a package copy (a symlink, a special file)."""
    return PollResult(
        ResultKind.QUARANTINED,
        input_path=item.entry,
        code=error.code,
        message=error.message,
        paths={"quarantine": str(folder)},
    )


def _kind_of(mode: int) -> str:
    """What a file that is not a regular file is, for the report."""
    for test, kind in (
        (stat.S_ISDIR, "folder"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return kind
    return f"file of type {stat.S_IFMT(mode):#o}"


def _unreadable(error: Exception) -> PackageRejectedError:
    return PackageRejectedError(
        f"the package could not be read ({type(error).__name__}: {str(error)[:200]})",
        code="unreadable-package",
        cause=type(error).__name__,
    )
