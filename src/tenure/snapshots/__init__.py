"""The content-addressed tree engine: folder ⇄ objects in an :class:`~tenure.objects.ObjectStore`.

A folder becomes one tree object per folder (names, modes, mtimes, symlink
targets, hard-link groups, file refs) and data objects: packs of small files
and content-defined chunks of large ones. The root tree's id names the
whole folder. See ``docs/snapshots-format.md``.

* :func:`build_tree` — check a folder in (incremental with a local index; given a change journal's
  :class:`Interval`, listing only the folders it names);
* :func:`restore_tree` — materialize a tree beside the target, rename into place;
* :func:`tree_closure` — every object id a root references;
* :func:`verify_tree` — re-hash objects, report missing, corrupt and lost paths;
* :func:`repair_tree` — put back lost data objects from a folder's files;
* :func:`iter_tree` — list a stored tree;
* :func:`clean_restore_leftovers` — remove what crashed restores left.

This package keeps no records: snapshot records, pins and GC live above it.
"""

from tenure.snapshots.build import Interval, JournalCursor, build_tree
from tenure.snapshots.errors import (
    FolderChangedError,
    NotAFolderError,
    RestoreTargetNotEmptyError,
    SnapshotDamagedError,
    TreeFormatError,
    UnreadableFileError,
    UploadIncompleteError,
)
from tenure.snapshots.repair import RepairResult, Unrepairable, repair_tree
from tenure.snapshots.restore import clean_restore_leftovers, restore_tree
from tenure.snapshots.results import BuildResult, RestoreResult, VerifyResult
from tenure.snapshots.verify import verify_tree
from tenure.snapshots.walk import TreeEntry, iter_tree, tree_closure

__all__ = [
    "build_tree",
    "Interval",
    "JournalCursor",
    "restore_tree",
    "tree_closure",
    "verify_tree",
    "repair_tree",
    "iter_tree",
    "clean_restore_leftovers",
    "BuildResult",
    "RestoreResult",
    "VerifyResult",
    "RepairResult",
    "Unrepairable",
    "TreeEntry",
    "NotAFolderError",
    "UnreadableFileError",
    "RestoreTargetNotEmptyError",
    "FolderChangedError",
    "SnapshotDamagedError",
    "TreeFormatError",
    "UploadIncompleteError",
]
