"""The folder cache: the last build's tree stream, folder by folder (ADR 0030).

A build told by a change journal which folders changed lists only those;
every other folder's record is taken byte for byte from this cache. Next to
the index (``INDEX.folders``), written after it, one per index.

It holds, for every folder of the last build in pre-order: its relative
path, the length of its record in the tree stream, how many sub-folders it
has (which gives the tree's shape), how many regular files it holds, flags,
and the data objects its files use; then the tree stream itself. It also
holds the **mark** of the journal interval the build listed after (a build
may use the cache only when the journal's changes start exactly there) and a
digest of the listing rules (ignore patterns, left-out paths): rules that
changed make the cache useless, since they change what any folder lists.

File: ``TENURE-FOLDERS\\n`` version:u8 blake3(frame):32, then a zstd frame
of the body, all integers little-endian::

    body  := count:u64 paths_len:u64 stream_len:u64 noids:u64 nuses:u64 mark_len:u64 rules:32
             mark  paths (NUL-separated, pre-order; the root is the empty path)
             length:u64{count} subs:u32{count} files:u64{count} flags:u8{count}
             use_start:u64{count + 1} use:u32{nuses} oids:32 raw bytes{noids} stream

``flags``: :data:`LINKED` (a file with more than one link: a journal cannot
see every path of it), :data:`RESCAN` (a socket or other skipped entry, or a
file whose size changed while it was read: listed again on every build).

Like the index, the cache is a local hint written by this process only: a
missing, damaged, foreign or inconsistent file loads as ``None`` (the next
build walks everything), never as an error. It is replaced atomically.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from tenure.snapshots.index import BodyReader, column_bytes, read_hint, write_hint

MAGIC = b"TENURE-FOLDERS\n"
VERSION = 1
LINKED = 1
RESCAN = 2
_HEAD = struct.Struct("<6Q32s")


def cache_path(index_path: str) -> str:
    """Where the folder cache of the index at ``index_path`` lives."""
    return index_path + ".folders"


@dataclass
class FolderCache:
    """A loaded folder cache (see the module docstring); ``starts[i]`` is where folder ``i``'s record begins."""

    mark: str
    rules: bytes
    paths: list[bytes]
    lengths: array[int]
    subs: array[int]
    files: array[int]
    flags: bytes
    use_start: array[int]
    uses: array[int]
    oids: list[str]
    stream: bytes

    def __post_init__(self) -> None:
        self.position = {p: i for i, p in enumerate(self.paths)}
        self.starts = [0] * len(self.paths)
        at = 0
        for i, n in enumerate(self.lengths):
            self.starts[i] = at
            at += n
        self.children = _children(self.subs)

    def record(self, i: int) -> memoryview:
        """Folder ``i``'s record bytes in the stream."""
        return memoryview(self.stream)[self.starts[i] : self.starts[i] + self.lengths[i]]

    def data_oids(self, i: int) -> list[str]:
        """The data objects folder ``i``'s files use."""
        oids = self.oids
        return [oids[k] for k in self.uses[self.use_start[i] : self.use_start[i + 1]]]


def _children(subs: Sequence[int]) -> list[list[int]]:
    """Each folder's sub-folders (folder numbers), from the pre-order sub-folder counts.

    Raises ``ValueError`` when the counts do not describe one tree.
    """
    children: list[list[int]] = [[] for _ in subs]
    stack: list[list[int]] = []  # [folder, sub-folders still to come]
    for i, n in enumerate(subs):
        if stack:
            parent = stack[-1]
            children[parent[0]].append(i)
            parent[1] -= 1
            if parent[1] == 0:
                stack.pop()
        elif i:
            raise ValueError("folder cache: more than one root")
        if n:
            stack.append([i, n])
        while stack and stack[-1][1] == 0:
            stack.pop()
    if stack:
        raise ValueError("folder cache: sub-folder counts run past the end")
    return children


Row = tuple[bytes, "bytes | memoryview", int, int, int, Sequence[str]]
"""One folder: path, record, sub-folders, files, flags, data object ids."""


def encode(mark: str, rules: bytes, folders: Sequence[Row]) -> bytes:
    """The body for ``folders`` (:data:`Row`, in pre-order); the stream is their records joined."""
    oid_at: dict[str, int] = {}
    uses = array("I")
    use_start = array("Q", [0])
    for *_, oids in folders:
        for oid in oids:
            at = oid_at.get(oid)
            if at is None:
                at = oid_at[oid] = len(oid_at)
            uses.append(at)
        use_start.append(len(uses))
    paths = b"\0".join(f[0] for f in folders)
    stream = b"".join(f[1] for f in folders)
    mark_b = mark.encode()
    return b"".join(
        (
            _HEAD.pack(len(folders), len(paths), len(stream), len(oid_at), len(uses), len(mark_b), rules),
            mark_b,
            paths,
            column_bytes(array("Q", (len(f[1]) for f in folders))),
            column_bytes(array("I", (f[2] for f in folders))),
            column_bytes(array("Q", (f[3] for f in folders))),
            bytes(f[4] for f in folders),
            column_bytes(use_start),
            column_bytes(uses),
            b"".join(bytes.fromhex(oid) for oid in oid_at),
            stream,
        )
    )


def decode(body: bytes) -> FolderCache:
    """Parse a body; ``ValueError`` (or ``struct.error``) when anything does not add up."""
    count, paths_len, stream_len, noids, nuses, mark_len, rules = _HEAD.unpack_from(body, 0)
    read = BodyReader(body, _HEAD.size)
    mark = read.take(mark_len).decode()
    paths = read.take(paths_len).split(b"\0")
    lengths = read.column("Q", count)
    subs = read.column("I", count)
    files = read.column("Q", count)
    flags = read.take(count)
    use_start = read.column("Q", count + 1)
    uses = read.column("I", nuses)
    oids = read.oids(noids)
    stream = read.take(stream_len)
    if (
        read.pos != len(body)
        or count == 0
        or len(paths) != count
        or paths[0] != b""
        or len(set(paths)) != count
        or len(flags) != count
        or sum(lengths) != stream_len
        or use_start[0] != 0
        or use_start[count] != nuses
        or any(use_start[i] > use_start[i + 1] for i in range(count))
        or (nuses and max(uses) >= noids)
    ):
        raise ValueError("inconsistent folder cache")
    return FolderCache(mark, rules, paths, lengths, subs, files, flags, use_start, uses, oids, stream)


def load(index_path: str | None) -> FolderCache | None:
    """The folder cache of the index at ``index_path``, or ``None`` when there is none that checks out."""
    if index_path is None:
        return None
    read = read_hint(cache_path(index_path), MAGIC, VERSION)
    if read is None:
        return None
    try:
        return decode(read[0])
    except (ValueError, struct.error, OverflowError, UnicodeDecodeError):
        return None


def save(index_path: str, body: bytes) -> None:
    """Atomically replace the folder cache of the index at ``index_path``."""
    write_hint(cache_path(index_path), MAGIC, VERSION, body)


def drop(index_path: str | None) -> None:
    """Remove the folder cache (a build that could not write a good one)."""
    if index_path is not None:
        try:
            os.unlink(cache_path(index_path))
        except FileNotFoundError:
            pass
