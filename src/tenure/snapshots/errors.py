"""Errors of the tree engine, each a leaf of the one tenure error tree.

::

    InvalidInput
    ├── NotAFolder             the folder to check in is not a folder     not-a-folder
    ├── UnreadableFile         a file or folder in the tree cannot be read unreadable-file
    └── RestoreTargetNotEmpty  restore would overwrite something          restore-target-not-empty
    Conflict
    └── FolderChanged          a path changed type or vanished mid-build  folder-changed (retryable)
    IntegrityError
    ├── SnapshotDamaged        objects of a tree are missing or corrupt   snapshot-damaged
    ├── TreeFormatError        a tree object is not a valid tree          tree-format
    └── UploadIncomplete       objects kept vanishing during a build      upload-incomplete (retryable)
"""

from __future__ import annotations

from collections.abc import Iterable

from tenure.errors import Conflict, IntegrityError, InvalidInput

__all__ = [
    "NotAFolder",
    "UnreadableFile",
    "RestoreTargetNotEmpty",
    "FolderChanged",
    "SnapshotDamaged",
    "TreeFormatError",
    "UploadIncomplete",
]


class NotAFolder(InvalidInput):
    """The path given to :func:`build_tree` is not a folder. ``context``: ``path``."""

    code = "not-a-folder"


class UnreadableFile(InvalidInput):
    """A file or folder inside the tree cannot be opened. ``context``: ``path``, ``reason``."""

    code = "unreadable-file"
    default_hint = "make the path readable, or list it in .tenureignore"


class RestoreTargetNotEmpty(InvalidInput):
    """Restore never overwrites: the target exists and is not an empty folder. ``context``: ``path``."""

    code = "restore-target-not-empty"
    default_hint = "restore into a new or empty folder"


class FolderChanged(Conflict):
    """A path changed type or vanished between listing and reading. ``context``: ``path``."""

    code = "folder-changed"
    retryable = True
    default_hint = "the folder changed while it was checked in; retry when it is quiet"


class SnapshotDamaged(IntegrityError):
    """Objects of a tree are missing or corrupt.

    ``context``: ``lost_paths`` (relative paths that cannot be restored; a lost
    folder ends with ``/``), ``missing`` and ``corrupt`` (object ids).
    """

    code = "snapshot-damaged"

    @classmethod
    def of(cls, root: str, lost_paths: Iterable[str], missing: Iterable[str], corrupt: Iterable[str]
           ) -> SnapshotDamaged:
        lost = sorted(lost_paths)
        shown = ", ".join(repr(p) for p in lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
        return cls(f"tree {root} is damaged: {len(lost)} paths cannot be restored: {shown}",
                   lost_paths=lost, missing=sorted(missing), corrupt=sorted(corrupt), root=root)


class TreeFormatError(IntegrityError):
    """A tree object hashes correctly but is not a tree this version can read. ``context``: ``oid``."""

    code = "tree-format"


class UploadIncomplete(IntegrityError):
    """Objects the new tree needs kept disappearing from the store while it was built."""

    code = "upload-incomplete"
    retryable = True
    default_hint = "another process is deleting objects (GC without pins?); retry the checkpoint"
