"""The local index: how each regular file looked when its content was stored.

Per relative path (raw bytes) the index keeps ``size, mtime_ns, ino,
ctime_ns, mode`` (the lstat taken *before* the file was read), a content
digest, and the refs of its content. A file whose five stat fields all match
is not read again: its refs are reused.

**Racy clean** (git's rule): a file modified within the same timestamp tick
in which it was recorded could keep all five fields. So an entry whose
``mtime_ns`` is not older than the index file's own modification time is not
trusted; the file is read again. A packed file whose mtime is within
``RACY_MARGIN_NS`` of the build (the only ones that can turn out racy) also
gets a BLAKE3 digest of its content, so when it is read again and found
unchanged it keeps its old refs (and the tree its old id) instead of being
packed anew.

File: ``TENURE-INDEX\\n`` version:u8 blake3(body):32 bytes, then the body:
a zstd frame of :mod:`marshal` data (a dict ``path → tuple``). The index is
a local cache written by this process only: a missing, damaged or
unreadable index is an empty one (everything is read again), never an
error. It is replaced atomically (temp → fsync → rename → fsync folder).
"""

from __future__ import annotations

import marshal
import os
import stat
from collections.abc import Mapping
from typing import NamedTuple

import blake3
import zstandard

from tenure.fsio import atomic_write
from tenure.snapshots.treeformat import Ref

MAGIC = b"TENURE-INDEX\n"
RACY_MARGIN_NS = 5_000_000_000
"""Files modified less than this before a build or restore get a content digest."""
VERSION = 1
_MARSHAL_VERSION = 4

StatKey = tuple[int, int, int, int, int]


class IndexEntry(NamedTuple):
    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int
    mode: int
    digest: bytes
    refs: tuple[Ref, ...]


def stat_key(st: os.stat_result) -> StatKey:
    """The five fields that must all match for a file to count as unchanged."""
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)


class Index:
    """A loaded index (read-only)."""

    def __init__(self, entries: dict[bytes, tuple[object, ...]], written_ns: int) -> None:
        self._entries = entries
        self.written_ns = written_ns

    @classmethod
    def empty(cls) -> Index:
        return cls({}, 0)

    def __len__(self) -> int:
        return len(self._entries)

    def unchanged(self, rel: bytes, key: StatKey) -> IndexEntry | None:
        """The entry for ``rel`` if the file is unchanged and not racy, else ``None``."""
        raw = self._entries.get(rel)
        if raw is None or raw[:5] != key or key[1] >= self.written_ns:
            return None
        return IndexEntry._make(raw)

    def content(self, rel: bytes, key: StatKey) -> tuple[bytes, tuple[Ref, ...]] | None:
        """``(digest, refs)`` of an unchanged, non-racy file (:meth:`unchanged`, without the record)."""
        raw = self._entries.get(rel)
        if raw is None or raw[:5] != key or key[1] >= self.written_ns:
            return None
        return raw[5], raw[6]  # type: ignore[return-value]

    def previous(self, rel: bytes) -> IndexEntry | None:
        """The entry for ``rel`` whatever the file looks like now."""
        raw = self._entries.get(rel)
        return None if raw is None else IndexEntry._make(raw)

    def same_as(self, entries: Mapping[bytes, tuple[object, ...]]) -> bool:
        """Whether ``entries`` is exactly what this index holds (then it need not be written again)."""
        return self.written_ns > 0 and entries == self._entries

    def oids(self) -> frozenset[str]:
        """Every object id the index refers to."""
        return frozenset(ref[0] for raw in self._entries.values() for ref in raw[6])  # type: ignore[attr-defined]


def folder_matches(root: str, index: Index) -> bool:
    """Whether the folder at ``root`` holds exactly what ``index`` recorded (S-85, "clean").

    Every regular file must be unchanged by its five stat fields and not racy,
    and every file the index names must still be there. Anything the index
    cannot vouch for counts as a change: a symbolic link or special file, a
    file it does not name (an ignored one too), an index that is missing or
    damaged (it loads empty). Folders themselves are not compared. So "clean"
    is never claimed for a folder that holds data the snapshot does not.
    """
    if index.written_ns == 0:
        return False
    base = os.fsencode(root)
    seen = 0
    for folder, dirs, files in os.walk(base, followlinks=False):
        for name in dirs:
            if os.path.islink(os.path.join(folder, name)):
                return False
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                return False
            if not stat.S_ISREG(st.st_mode):
                return False
            if index.unchanged(os.path.relpath(path, base), stat_key(st)) is None:
                return False
            seen += 1
    return seen == len(index)


def load_index(path: str | None) -> Index:
    if path is None:
        return Index.empty()
    try:
        with open(path, "rb") as fh:
            written_ns = os.fstat(fh.fileno()).st_mtime_ns
            data = fh.read()
    except OSError:
        return Index.empty()
    head = len(MAGIC) + 1 + 32
    if data[: len(MAGIC)] != MAGIC or data[len(MAGIC)] != VERSION:
        return Index.empty()
    body = data[head:]
    if blake3.blake3(body).digest() != data[len(MAGIC) + 1 : head]:
        return Index.empty()
    try:
        entries = marshal.loads(zstandard.ZstdDecompressor().decompress(body))
    except (ValueError, EOFError, TypeError, zstandard.ZstdError):
        return Index.empty()
    return Index(entries if isinstance(entries, dict) else {}, written_ns)


def save_index(path: str, entries: Mapping[bytes, tuple[object, ...]]) -> None:
    """Atomically replace the index at ``path`` with ``entries`` (path → ``IndexEntry`` fields, a plain tuple)."""
    body = zstandard.ZstdCompressor(level=1).compress(marshal.dumps(dict(entries), _MARSHAL_VERSION))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, MAGIC + bytes([VERSION]) + blake3.blake3(body).digest() + body, mode=0o600)
