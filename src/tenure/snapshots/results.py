"""What the tree engine returns: frozen value objects."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuildResult:
    """The outcome of :func:`tenure.snapshots.build_tree`."""

    root: str  # id of the root tree object
    files: int  # regular files in the tree
    bytes_read: int  # bytes read from disk by this run (unchanged files: 0)
    bytes_new: int  # compressed bytes this run newly stored
    objects: frozenset[str]  # the closure: every id the root references, root included
    skipped: tuple[tuple[str, str], ...]  # (relative path, "socket" | "fifo" | "device"), not stored
    folders_listed: int = 0  # folders listed by this run (all of them, unless a change journal named a few)
    walked: bool = True  # False: only the folders a change journal named were listed (ADR 0030)
    replaced: int = 0  # stored objects found not to be what their id says, stored again from this run (S-12)


@dataclass(frozen=True)
class RestoreResult:
    """The outcome of :func:`tenure.snapshots.restore_tree`."""

    root: str
    dest: str
    files: int  # regular files restored (hard links count once per path)
    bytes_written: int  # content bytes written
    lost_paths: tuple[str, ...] = ()  # partial restore only: paths left out (folders end with "/")
    missing: frozenset[str] = frozenset()  # object ids not in the store
    corrupt: frozenset[str] = frozenset()  # object ids whose content does not match
    special_bits_dropped: tuple[str, ...] = ()  # paths restored without their stored setuid/setgid/sticky bits

    @property
    def complete(self) -> bool:
        return not self.lost_paths


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of :func:`tenure.snapshots.verify_tree`."""

    root: str
    checked: int  # objects read back and re-hashed (tree objects included)
    bytes_checked: int  # stored (compressed) bytes read back
    missing: frozenset[str]
    corrupt: frozenset[str]
    lost_paths: tuple[str, ...]  # paths the missing or corrupt objects make unreadable

    @property
    def ok(self) -> bool:
        return not (self.missing or self.corrupt)
