"""Errors of the tree engine, each a leaf of the one tenure error tree.

::

    InvalidInputError
    ├── NotAFolderError                the folder to check in is not a folder      not-a-folder
    ├── UnreadableFileError            a file or folder in the tree cannot be read unreadable-file
    ├── RestoreTargetNotEmptyError     restore would overwrite something           restore-target-not-empty
    ├── RestoreTargetNotAFolderError   a folder on the target's path is a file     restore-target-not-a-folder
    └── RestoreTargetReadOnlyError     this user may not create the target         restore-target-read-only
    ConflictError
    └── FolderChangedError             a path changed type or vanished mid-build   folder-changed (retryable)
    IntegrityError
    ├── SnapshotDamagedError           objects of a tree are missing or corrupt    snapshot-damaged
    ├── TreeFormatError                a tree object is not a valid tree           tree-format
    └── UploadIncompleteError          objects kept vanishing during a build       upload-incomplete (retryable)
    TenureError
    └── RestoreTargetFullError         no room left for the restored folder        disk-full (retryable, exit 5)
"""

from __future__ import annotations

from collections.abc import Iterable

from tenure.errors import ConflictError, IntegrityError, InvalidInputError, TenureError


class NotAFolderError(InvalidInputError):
    """The path given to :func:`build_tree` is not a folder. ``context``: ``path``."""

    code = "not-a-folder"


class UnreadableFileError(InvalidInputError):
    """A file or folder inside the tree cannot be opened. ``context``: ``path``, ``reason``."""

    code = "unreadable-file"
    default_hint = "make the path readable, or list it in .tenureignore"


class RestoreTargetNotEmptyError(InvalidInputError):
    """Restore never overwrites: the target exists and is not an empty folder. ``context``: ``path``."""

    code = "restore-target-not-empty"
    default_hint = "restore into a new or empty folder"


class RestoreTargetNotAFolderError(InvalidInputError):
    """A folder on the target's path is a file (or another non-folder). ``context``: ``path``, ``blocked_by``."""

    code = "restore-target-not-a-folder"
    default_hint = "restore to a path whose every folder is a folder, or move the file out of the way"


class RestoreTargetReadOnlyError(InvalidInputError):
    """This user may not create the target: its folder refuses writes or entry, or it is on a read-only mount."""

    code = "restore-target-read-only"
    default_hint = "restore into a folder this user can write to, or give this user write access to it"


class RestoreTargetFullError(TenureError):
    """No room left for the restored folder: a full file system, a quota, or the process's file-size limit."""

    code = "disk-full"
    retryable = True
    exit_code = 5  # as every disk-full (docs/operations.md, "Exit codes")
    http_status = 507
    default_hint = (
        "free space on the file system that holds the target (or raise the quota or `ulimit -f` that stopped the"
        " write), then restore again; the partly written folder was removed"
    )


class FolderChangedError(ConflictError):
    """A path changed type or vanished between listing and reading. ``context``: ``path``."""

    code = "folder-changed"
    retryable = True
    default_hint = "the folder changed while it was checked in; retry when it is quiet"


class SnapshotDamagedError(IntegrityError):
    """Objects of a tree are missing or corrupt.

    ``context``: ``lost_paths`` (relative paths that cannot be restored; a lost
    folder ends with ``/``), ``missing`` and ``corrupt`` (object ids).
    """

    code = "snapshot-damaged"

    @classmethod
    def of(
        cls, root: str, lost_paths: Iterable[str], missing: Iterable[str], corrupt: Iterable[str]
    ) -> SnapshotDamagedError:
        lost = sorted(lost_paths)
        shown = ", ".join(repr(p) for p in lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
        return cls(
            f"tree {root} is damaged: {len(lost)} paths cannot be restored: {shown}",
            lost_paths=lost,
            missing=sorted(missing),
            corrupt=sorted(corrupt),
            root=root,
        )


class TreeFormatError(IntegrityError):
    """A tree object hashes correctly but is not a tree this version can read.

    ``context``: ``oid``, and ``problem``: which rule the object breaks, one of
    :data:`tenure.snapshots.treeformat.PROBLEMS` (``bad-name``,
    ``duplicate-name``, ``truncated``, ...), stable across releases.
    """

    code = "tree-format"


class UploadIncompleteError(IntegrityError):
    """Objects the new tree needs kept disappearing from the store while it was built."""

    code = "upload-incomplete"
    retryable = True
    default_hint = "another process is deleting objects (GC without pins?); retry the checkpoint"
