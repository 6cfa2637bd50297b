"""Restoring a tree: materialize beside the target, verify everything, rename into place.

Sequence of :func:`restore_tree`:

1. Refuse a target that exists and is not an empty folder. Operating-system
   errors of the target become codes (:func:`target_error`): ``disk-full``,
   ``restore-target-not-a-folder``, ``restore-target-read-only``.
2. Verify the tree objects and ask the store which data objects it lacks
   (:func:`~tenure.snapshots.walk.check_tree`, holding none of them). An
   intact tree is then written record by record as its chunks stream in
   (:mod:`~tenure.snapshots.streaming`, ADR 0029), so memory does not grow
   with the tree beyond the index rows. A damaged one, or one found damaged
   while writing, goes through the whole listing
   (:mod:`~tenure.snapshots.walk`), the steps below: damage found there
   fails the restore before anything is written (unless ``partial``).
3. In the target's parent, create ``.<name>.tenure-restore-<hex>``; make its
   folders (owner-only for now) and symlinks.
4. Fetch each data object once, decode it (the codec checks its hash) and
   write every file slice that uses it; single-object files are created,
   written, given their mode and mtime and closed by the same worker.
   Objects are fetched on a thread pool, a bounded number at a time, so
   memory does not grow with the tree.
5. Link hard-link groups, give multi-object files their mode and mtime,
   then each folder its mode and mtime, deepest first (the root last).
   ``S_ISUID`` and ``S_ISGID`` are dropped (from files and folders), and the
   sticky bit from files, unless ``keep_special_bits``: a restore run by
   root must not turn tenant content into root-owned setuid programs (as
   GNU tar does for a user who is not root). Folders keep the sticky bit.
   ``RestoreResult.special_bits_dropped`` lists the paths affected.
6. Write the index for the restored files (if asked), flush the file system
   with one ``syncfs`` (``durable=True``, the default; no per-file fsync),
   ``restore.after_materialize``, rename the temporary folder onto the
   target (replacing an empty folder atomically), fsync the parent,
   ``restore.after_rename``.

A crash at any point leaves the target untouched or complete, never half
written; the temporary folder is removed by :func:`clean_restore_leftovers`.
A restore reads only its own tree's objects, whatever else the store holds.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from tenure.errors import TenureError
from tenure.faults import crash_point, register
from tenure.fsio import FULL_ERRNOS, READ_ONLY_ERRNOS, fsync_dir
from tenure.objects import ObjectStore
from tenure.snapshots.errors import (
    RestoreTargetFullError,
    RestoreTargetNotAFolderError,
    RestoreTargetNotEmptyError,
    RestoreTargetReadOnlyError,
)
from tenure.snapshots.fsutil import force_rmtree, sync_filesystem
from tenure.snapshots.heap import fix_mmap_threshold
from tenure.snapshots.index import save_index
from tenure.snapshots.materialize import Materializer, ModeFilter, Plan, WriteOptions
from tenure.snapshots.results import RestoreResult
from tenure.snapshots.streaming import Damaged, StreamWriter
from tenure.snapshots.walk import Listing, TreeChanged, check_tree, damaged_error, load_listing, stream_records

AFTER_MATERIALIZE = register(
    "restore.after_materialize",
    "the temporary folder holds the complete, verified tree; it is not renamed onto the target yet",
)
AFTER_RENAME = register("restore.after_rename", "the restored folder is in place under its final name")

TEMP_MARK = ".tenure-restore-"
_LEFTOVER = re.compile(r"^\..*\.tenure-restore-(?:(?P<pid>[0-9]+)-)?[0-9a-f]{32}$", re.DOTALL)

Progress = Callable[[int, int], None]


def restore_tree(
    root: str,
    objects: ObjectStore,
    dest: str,
    *,
    partial: bool = False,
    progress: Progress | None = None,
    index_path: str | None = None,
    workers: int | None = None,
    durable: bool = True,
    keep_special_bits: bool = False,
) -> RestoreResult:
    """Materialize tree ``root`` as folder ``dest`` (see the module docstring).

    Missing or corrupt objects raise :class:`SnapshotDamagedError` naming the lost
    paths and leave no trace; with ``partial=True`` every intact file is
    restored and the lost paths are returned instead. ``index_path`` receives
    an index of the restored folder, so checking it in right away reads
    nothing. ``durable=False`` skips the final ``syncfs``. ``keep_special_bits``
    restores setuid, setgid and sticky bits as stored (by default setuid and
    setgid are dropped everywhere, sticky from files).
    """
    dest = os.path.abspath(dest)
    options = WriteOptions(
        objects, workers or os.cpu_count() or 1, progress, index_path is not None, ModeFilter(keep_special_bits)
    )
    try:
        _check_target(dest)
        fix_mmap_threshold()
        result = _restore_streaming(root, dest, index_path, durable, options)
        if result is None:  # damaged (or found damaged while writing): the listing path reports it file by file
            result = _restore_listing(root, dest, partial, index_path, durable, options)
        crash_point(AFTER_MATERIALIZE)
        _rename_into_place(result.temp, dest)
        if durable:
            fsync_dir(os.path.dirname(dest))
        crash_point(AFTER_RENAME)
    except OSError as exc:
        mapped = target_error(exc, dest)
        if mapped is None:
            raise
        raise mapped from exc
    return result.result


class _Ready(NamedTuple):
    temp: str  # the complete, durable temporary folder
    result: RestoreResult


def _restore_streaming(
    root: str, dest: str, index_path: str | None, durable: bool, options: WriteOptions
) -> _Ready | None:
    """Restore an intact tree record by record (ADR 0029); ``None`` when it is damaged."""
    temp: str | None = None
    writer: StreamWriter | None = None
    try:
        with ThreadPoolExecutor(options.workers, thread_name_prefix="tenure-trees") as pool:
            check = check_tree(root, options.objects, pool)
        if check.parsed is None or not check.intact or check.missing:
            return None
        temp = _temp_folder(dest)
        writer = StreamWriter(os.fsencode(temp), options)
        try:
            writer.records(root, stream_records(root, options.objects, check.parsed.chunks, writer.pool))
            writer.finish()
        finally:
            writer.close()
        if index_path is not None:
            writer.rows.save(index_path)
        if durable:
            sync_filesystem(os.path.dirname(temp))  # same file system; temp may have lost its read bit
    except (Damaged, TreeChanged):
        if temp is not None:
            force_rmtree(temp)
        return None
    except BaseException:
        if temp is not None:
            force_rmtree(temp)
        raise
    # an intact tree: nothing lost, missing or corrupt
    result = RestoreResult(
        root=root,
        dest=dest,
        files=writer.files,
        bytes_written=writer.bytes_written,
        special_bits_dropped=tuple(writer.dropped_paths()),
    )
    return _Ready(temp, result)


def _restore_listing(
    root: str, dest: str, partial: bool, index_path: str | None, durable: bool, options: WriteOptions
) -> _Ready:
    """Restore from the whole listing: the path for damaged trees, which reports every lost file."""
    objects = options.objects
    listing = load_listing(root, objects, options.workers)
    if not listing.dirs:
        raise damaged_error(listing)
    plan = Plan(listing)
    missing = plan.data_oids() - objects.has_many(plan.data_oids())
    if (missing or listing.damaged) and not partial:
        raise damaged_error(listing, missing, lost_files=plan.paths_using(missing))
    temp = _temp_folder(dest)
    try:
        done = _materialize(temp, listing, plan, missing, partial, options)
        if index_path is not None:
            save_index(index_path, done.entries)
        if durable:
            sync_filesystem(os.path.dirname(temp))  # same file system; temp may have lost its read bit
    except BaseException:
        force_rmtree(temp)
        raise
    result = RestoreResult(
        root=root,
        dest=dest,
        files=done.files,
        bytes_written=done.bytes_written,
        lost_paths=tuple(sorted(listing.lost_folders() + done.lost)),
        missing=frozenset(done.missing | listing.tree_problems()[0]),
        corrupt=frozenset(done.corrupt | listing.tree_problems()[1]),
        special_bits_dropped=tuple(sorted(_dropped(options.modes, listing, done.lost))),
    )
    return _Ready(temp, result)


class _Done(NamedTuple):
    files: int
    bytes_written: int
    lost: list[str]
    missing: frozenset[str]
    corrupt: set[str]
    entries: dict[bytes, tuple[object, ...]]


def _dropped(modes: ModeFilter, listing: Listing, lost: list[str]) -> set[str]:
    """Restored paths whose stored special bits were not applied."""
    return set(modes.dropped(listing)) - set(lost)


def _materialize(
    temp: str, listing: Listing, plan: Plan, missing: frozenset[str], partial: bool, options: WriteOptions
) -> _Done:
    m = Materializer(os.fsencode(temp), options)
    try:
        m.make_folders(listing.dirs)
        m.make_symlinks(listing.symlinks)
        m.write_files(plan, missing)
        gone = missing | m.vanished
        lost = plan.paths_using(gone | m.corrupt)
        if (m.corrupt or m.vanished) and not partial:
            raise damaged_error(listing, gone, m.corrupt, lost)
        m.link_and_finish(plan, gone | m.corrupt)
        m.finish_folders(listing.dirs)
    finally:
        m.close()
    return _Done(m.files, m.bytes_written, lost, gone, m.corrupt, m.index_entries())


def target_error(exc: OSError, dest: str) -> TenureError | None:
    """An operating-system error of a restore into ``dest`` as tenure's error, or ``None`` when it is none of these.

    No room is ``disk-full`` wherever it happened. A file where a folder of the
    path should be, or no permission to create the target, count only for the
    folders above the target and what the restore writes beside it (the
    temporary folder), not for the data folder's index.
    """
    where = os.path.abspath(exc.filename) if isinstance(exc.filename, str) else dest
    if exc.errno in FULL_ERRNOS:
        at = f" ({where!r})" if where != dest else ""
        return RestoreTargetFullError(f"cannot restore into {dest!r}: {exc.strerror}{at}", path=dest)
    parent = os.path.dirname(dest)
    if not (os.path.commonpath([parent, where]) == parent or dest.startswith(where.rstrip(os.sep) + os.sep)):
        return None
    if exc.errno == errno.ENOTDIR:
        blocked = _not_a_folder(dest)
        return RestoreTargetNotAFolderError(
            f"cannot restore into {dest!r}: {blocked!r} is not a folder", path=dest, blocked_by=blocked
        )
    if exc.errno in READ_ONLY_ERRNOS:
        refusing = os.path.dirname(where)  # the folder that would hold what could not be made (or looked up)
        return RestoreTargetReadOnlyError(
            f"cannot restore into {dest!r}: this user may not write in {refusing!r} ({exc.strerror})",
            path=dest,
            folder=refusing,
        )
    return None


def _not_a_folder(dest: str) -> str:
    """The first folder on the way to ``dest`` that exists and is not a folder (``dest`` if there is none)."""
    current = os.sep
    for part in [p for p in dest.split(os.sep) if p][:-1]:
        current = os.path.join(current, part)
        try:
            if not stat.S_ISDIR(os.stat(current).st_mode):
                return current
        except OSError:
            return current
    return dest


def _check_target(dest: str) -> None:
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        with os.scandir(dest) as entries:
            if next(entries, None) is None:
                return
    raise RestoreTargetNotEmptyError(f"restore target {dest!r} exists and is not an empty folder", path=dest)


def _temp_folder(dest: str) -> str:
    parent, name = os.path.split(dest)
    os.makedirs(parent, exist_ok=True)
    clean_restore_leftovers(parent, name, abandoned_only=True)  # a crashed earlier restore into dest
    temp = os.path.join(parent, f"{_temp_prefix(name)}{os.getpid()}-{uuid.uuid4().hex}")
    os.mkdir(temp, 0o700)
    return temp


def _rename_into_place(temp: str, dest: str) -> None:
    try:
        os.rename(temp, dest)
    except OSError as exc:
        force_rmtree(temp)
        if isinstance(exc, (FileExistsError, NotADirectoryError, IsADirectoryError)) or exc.errno == errno.ENOTEMPTY:
            raise RestoreTargetNotEmptyError(f"restore target {dest!r} was filled while restoring", path=dest) from None
        raise


def _alive(pid: int) -> bool:
    """Whether a process of this pid runs on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _temp_prefix(name: str) -> str:
    """``.<name>.tenure-restore-`` (a long name is shortened: the whole must fit NAME_MAX)."""
    return f".{name[:64]}{TEMP_MARK}"


def clean_restore_leftovers(parent: str, name: str | None = None, *, abandoned_only: bool = False) -> int:
    """Remove temporary folders that crashed restores left in ``parent``; return how many.

    ``name`` limits this to leftovers of restores into ``parent/name``.
    ``abandoned_only`` removes only folders provably abandoned: their name
    carries the pid of the restore that made them, and no process of that
    pid runs on this host any more (a live pid, even a reused one, keeps
    its folder). Without it, call this only when no restore into that
    folder is running (e.g. at start-up, or holding the workspace's lease).
    Every restore runs it with ``abandoned_only`` for its own target first,
    so a successful rerun leaves nothing of a crashed one behind.
    """
    try:
        entries = os.listdir(parent)
    except FileNotFoundError:
        return 0
    prefix = _temp_prefix(name) if name is not None else None
    removed = 0
    for entry in entries:
        match = _LEFTOVER.match(entry)
        if match is None or (prefix is not None and not entry.startswith(prefix)):
            continue
        if abandoned_only and (match["pid"] is None or _alive(int(match["pid"]))):
            continue
        force_rmtree(os.path.join(parent, entry))
        removed += 1
    return removed
