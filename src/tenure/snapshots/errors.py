"""Errors of the tree engine, each a leaf of the one tenure error tree.

::

    InvalidInputError
    ├── NotAFolderError             the folder to check in is not a folder     not-a-folder
    ├── UnreadableFileError         a file or folder in the tree cannot be read unreadable-file
    └── RestoreTargetNotEmptyError  restore would overwrite something          restore-target-not-empty
    ConflictError
    └── FolderChangedError          a path changed type or vanished mid-build  folder-changed (retryable)
    IntegrityError
    ├── SnapshotDamagedError        objects of a tree are missing or corrupt   snapshot-damaged
    ├── TreeFormatError        a tree object is not a valid tree          tree-format
    └── UploadIncompleteError       objects kept vanishing during a build      upload-incomplete (retryable)
"""

from __future__ import annotations

from collections.abc import Iterable

from tenure.errors import ConflictError, IntegrityError, InvalidInputError

__all__ = [
    "NotAFolderError",
    "UnreadableFileError",
    "RestoreTargetNotEmptyError",
    "FolderChangedError",
    "SnapshotDamagedError",
    "TreeFormatError",
    "UploadIncompleteError",
]


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
