"""InboxProcessor: one bounded pass over the inbox and the blocked cases.

For each inbox file (sorted by name, inputs that ended ERROR on an earlier
pass last; names starting with ``.`` are a producer's unfinished uploads and
are skipped): symlinks are rejected without being followed; oversized files
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
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tenure.faults import crash_point, register

from .admission import Admission, classify
from .canonical import parse_aware, to_utc_text, utc_now
from .commit import commit
from .errors import LifecycleError, PackageRejectedError, RequestRejectedError, TransitionRefusedError
from .fsio import (
    atomic_write_json,
    fsync_dir,
    fsync_file,
    remove_abandoned_temp,
    safe_text,
    tmp_name,
)
from .machine import intake_machine
from .package import Package, read_package
from .plan import Plan, make_request, plan_advance
from .results import PollResult, ResultKind
from .storage import CaseStorage, index_record
from .workspace import Workspace

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

#: ``observer(event, inbox_path)`` is told ``"cached"`` and ``"published"``.
Observer = Callable[[str, Path], None]
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CHUNK = 1024 * 1024
#: an inbox original being acknowledged lives under this private name for a moment
ACK_PREFIX = ".tenure-ack-"
#: ``runtime/failed.json``: inputs that ended ERROR, polled after the others
_FAILED = "failed.json"
_COUNTED = (ResultKind.ACCEPTED, ResultKind.DUPLICATE, ResultKind.QUARANTINED)


@dataclass
class _Input:
    entry: Path
    cache: Path | None = None
    sha256: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


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
            failed = self._read_failed()
            results: list[PollResult] = []
            used = retried = 0
            # inputs that failed before go last, and at most max_jobs of them are tried again per pass
            entries = sorted(self.workspace.inbox.iterdir(), key=lambda e: (_key(e) in failed, e.name))
            for entry in entries:
                if used >= max_jobs:
                    break
                if _key(entry) in failed:
                    if retried >= max_jobs:
                        break
                    retried += 1
                result = self._guarded(entry)
                if result is None:
                    continue
                results.append(result)
                used += result.kind in _COUNTED
                self._note_outcome(failed, entry, result)
            self._write_failed(failed)
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

    def _guarded(self, entry: Path) -> PollResult | None:
        if entry.name.startswith("."):
            return None
        item = _Input(entry)
        try:
            return self._process(item)
        except LifecycleError as error:
            return self._error(item, error.code, error.message)
        except OSError as error:
            return self._error(item, "io-error", str(error))
        except Exception as error:  # noqa: BLE001 - bad input never stops the loop
            return self._error(item, "internal-error", f"{type(error).__name__}: {error}")

    def _error(self, item: _Input, code: str, message: str) -> PollResult:
        return PollResult(ResultKind.ERROR, input_path=item.entry, code=code, message=message, paths=item.extra)

    def _process(self, item: _Input) -> PollResult | None:
        st = os.lstat(item.entry)
        if stat.S_ISLNK(st.st_mode):
            return self._reject_symlink(item)
        if not stat.S_ISREG(st.st_mode):
            return None
        limit = self.config.limits.archive_bytes
        if st.st_size > limit or not self._cache(item, limit):
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
        return self._admit(item, incoming)

    def _cache(self, item: _Input, limit: int) -> bool:
        """Copy the input to cache/<sha256>.zip; False if it exceeds ``limit``."""
        cache = self.workspace.cache
        tmp = cache / tmp_name(".zip")
        digest = hashlib.sha256()
        total = 0
        fd = os.open(item.entry, os.O_RDONLY | _NOFOLLOW)
        with os.fdopen(fd, "rb") as src, open(tmp, "xb") as dst:
            while chunk := src.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    break
                digest.update(chunk)
                dst.write(chunk)
            dst.flush()
            fsync_file(dst.fileno())
        if total > limit:
            tmp.unlink()
            return False
        final = cache / f"{digest.hexdigest()}.zip"
        try:
            os.link(tmp, final)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        fsync_dir(cache)
        item.cache, item.sha256 = final, digest.hexdigest()
        item.extra["cache"] = str(final)
        return True

    def _admit(self, item: _Input, incoming: Package) -> PollResult:
        lock = self.workspace.case_lock(incoming.case_id)
        if not lock.acquire():
            return PollResult(
                ResultKind.BUSY,
                input_path=item.entry,
                code="case-busy",
                message="another worker holds this case; left pending",
                paths=item.extra,
                case_id=incoming.case_id,
                package_id=incoming.package_id,
            )
        try:
            current = self.storage.load_current(incoming.case_id, incoming.package_id, repair=True)
            try:
                admission = classify(incoming, current, self.storage)
                stored = current if admission is Admission.DUPLICATE else self._store(incoming, admission, item)
            except (PackageRejectedError, RequestRejectedError, TransitionRefusedError) as error:
                # the input is valid on its own but cannot be stored: a conflict, or a generation past a limit
                return self._quarantine(item, error)
            assert stored is not None
            self._notify("published", item.entry)
            kind = ResultKind.DUPLICATE if admission is Admission.DUPLICATE else ResultKind.ACCEPTED
            return self._finish(item, kind, stored)
        finally:
            lock.release()

    def _store(self, incoming: Package, admission: Admission, item: _Input) -> Package:
        now = self._clock()
        folder = self.workspace.case_dir(incoming.case_id, incoming.package_id)
        if admission is Admission.FRESH:
            request = make_request(
                self.machine,
                self.config,
                "VALIDATED",
                step_id=f"admission:{incoming.fingerprint}",
                details={"raw_sha256": item.sha256},
            )
            plan = plan_advance(incoming, request, self.machine, now, self.config.limits)
        else:
            plan = Plan(manifest=dict(incoming.manifest), additions={}, checkpoint={})
        return commit(self.workspace, incoming, plan, folder, now)

    def _finish(self, item: _Input, kind: ResultKind, stored: Package) -> PollResult:
        paths = {**item.extra, "generation": str(stored.path)}
        acknowledged = self._acknowledge(item)
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

    def _acknowledge(self, item: _Input) -> bool:
        """Remove the original if its bytes still equal the cached snapshot.

        The original is first renamed to a private name: a producer that
        publishes a new file under the same name meanwhile publishes a new
        input, never the one removed here. A file that turns out not to be
        the snapshot goes back into the inbox.
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
            fsync_dir(inbox)
            return True
        try:
            os.link(private, item.entry, follow_symlinks=False)
        except FileExistsError:  # a newer upload took the name meanwhile: keep this one under its own
            os.link(private, inbox / f"{item.entry.name}.{uuid.uuid4().hex[:8]}", follow_symlinks=False)
        os.unlink(private)
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
        return PollResult(
            ResultKind.QUARANTINED,
            input_path=item.entry,
            code=error.code,
            message=error.message,
            paths={"quarantine": str(folder)},
        )

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


def _key(entry: Path) -> str:
    """A stable text key for an inbox name, whatever bytes it is made of."""
    return os.fsencode(entry.name).hex()


def _sha256_of(path: Path) -> str | None:
    """SHA-256 of a regular file (never following a link), or None if it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _unreadable(error: Exception) -> PackageRejectedError:
    return PackageRejectedError(
        f"the package could not be read ({type(error).__name__}: {str(error)[:200]})",
        code="unreadable-package",
        cause=type(error).__name__,
    )
