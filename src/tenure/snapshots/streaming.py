"""Restoring an intact tree while its folder records stream in (ADR 0029).

:class:`StreamWriter` takes the folder records of a tree in stream order
(:func:`~tenure.snapshots.walk.stream_records`) and writes them below the
temporary folder as they come: a record's sub-folders and symlinks are made
at once, its files join a **window** of at most ``WINDOW_FILES`` files,
grouped by data object. A full window fetches each of its objects once (the
last object of the previous window is kept decoded, so a pack that spans two
windows is read once) and hands the slices to the thread pool in groups, as
:class:`~tenure.snapshots.materialize.Materializer` does. Nothing per file
outlives its window except what must be kept, compactly:

- the rows of the index written after the restore
  (:class:`~tenure.snapshots.index.Rows`: columns, one path per file, in
  tree order as the records come; hard-link followers, added last, make
  them sorted once at the end);
- hard-link followers (a few per linked file), linked once all content is
  written: a follower may come before its leader (the first member by
  path byte order) in the stream;
- per folder: its path, mode and mtime, applied deepest first at the end;
  files of several objects (at least ``CHUNKED_FROM`` bytes each), finished
  at the end.

Only intact trees come here: :func:`~tenure.snapshots.walk.check_tree`
verifies every tree object and asks for missing data objects first. If an
object turns out missing or corrupt while writing (or a tree chunk cannot
be read again), :class:`Damaged` is raised and the restore starts over on
the listing path, which reports the damage file by file.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from typing import NamedTuple

from tenure.snapshots.errors import TreeFormatError
from tenure.snapshots.index import Rows, StatKey, stat_key
from tenure.snapshots.materialize import (
    GROUP,
    Materializer,
    Piece,
    WriteOptions,
    WriteQueue,
    _create_empty,
    _fetch,
    _finish,
    _lstat,
    _mkdir,
    _symlink,
    add_pieces,
)
from tenure.snapshots.treeformat import DirItem, FileItem, SymlinkItem, Tree

WINDOW_FILES = 4096
WINDOW_BYTES = 64 << 20


class Damaged(Exception):
    """A data object proved missing or corrupt while writing: the caller restores through the listing path."""


class _File(NamedTuple):
    path: bytes
    mode: int
    mtime_ns: int
    size: int
    row: int  # index row, or -1


_Written = tuple[int, list[tuple[int, StatKey, bytes]]]
_NO_STAT: StatKey = (0, 0, 0, 0, 0)  # a row's stat until its file is written


class StreamWriter(Materializer):
    """Writes an intact tree record by record (see the module docstring)."""

    def __init__(self, temp: bytes, options: WriteOptions) -> None:
        super().__init__(temp, options)
        self.rows = Rows()
        self.folders: list[tuple[bytes, int, int]] = []
        self.dropped: list[bytes] = []
        self._window: dict[str, list[Piece[_File]]] = {}
        self._window_files = self._window_bytes = 0
        self._empties: list[Piece[_File]] = []
        self._multi: list[_File] = []
        self._followers: list[tuple[bytes, FileItem]] = []
        self._own_links: set[bytes] = set()
        self._last: tuple[str, bytes] | None = None
        self._stream_writes: WriteQueue[Piece[_File], tuple[int, StatKey, bytes]] = WriteQueue(
            self.pool, self.workers, self._write_pieces, self._take_rows
        )
        self._expected: set[bytes] = set()
        self._seen: set[bytes] = set()
        self._pending: dict[bytes, Tree] = {}

    # ----------------------------------------------------------------- records

    def records(self, root: str, stream: Iterable[tuple[bytes, Tree]]) -> None:
        """Write every record of ``stream``; a record out of pre-order waits for the folder that lists it."""
        for rel, tree in stream:
            if rel in self._seen:
                raise TreeFormatError(f"tree {root} lists folder {rel!r} twice", oid=root, problem="duplicate-folder")
            self._seen.add(rel)
            if rel in self._expected if rel else not self.folders:
                self._folder(rel, tree)
            else:
                self._pending[rel] = tree
        if self._expected or self._pending or not self.folders:
            raise TreeFormatError(
                f"tree {root}: folder records do not match the folders listed", oid=root, problem="bad-structure"
            )

    def _folder(self, rel: bytes, tree: Tree) -> None:
        todo = [(rel, tree)]
        while todo:
            rel, tree = todo.pop()
            self._expected.discard(rel)
            self.folders.append((rel, tree.mode, tree.mtime_ns))
            if tree.mode & ~self.modes.dir_bits:
                self.dropped.append(rel)
            prefix = rel + b"/" if rel else b""
            for item in tree.items:
                path = prefix + item.name
                if type(item) is FileItem:
                    self._file(path, item)
                elif type(item) is DirItem:
                    self.at(path, _mkdir)
                    waiting = self._pending.pop(path, None)
                    if waiting is None:
                        self._expected.add(path)
                    else:
                        todo.append((path, waiting))
                else:
                    assert isinstance(item, SymlinkItem)
                    self.at(path, _symlink, item)

    def _file(self, path: bytes, item: FileItem) -> None:
        if item.mode & ~self.modes.file_bits:
            self.dropped.append(path)
        if item.link and item.link != path:
            self._followers.append((path, item))
            return
        if item.link:
            self._own_links.add(path)  # its own leader: not a leader for anyone else
        self._content(path, item)

    def _content(self, path: bytes, item: FileItem) -> None:
        refs = item.refs
        row = self.rows.add(path, _NO_STAT, b"", refs) if self.want_index else -1
        f = _File(path, item.mode & self.modes.file_bits, item.mtime_ns, item.size, row)
        self._total += item.size
        self.files += 1
        self.bytes_written += item.size
        if not refs:
            self._empties.append(Piece(f, 0, 0, 0, True))
            if len(self._empties) >= GROUP:
                self._stream_writes.put(b"", self._empties)
                self._empties = []
            return
        if len(refs) > 1:
            self.at(path, _create_empty)
            self._multi.append(f)
        add_pieces(self._window, f, refs)
        self._window_files += 1
        self._window_bytes += item.size
        if self._window_files >= WINDOW_FILES or self._window_bytes >= WINDOW_BYTES:
            self.flush()

    # ----------------------------------------------------------------- objects and writes

    def flush(self) -> None:
        """Fetch each object of the window once and queue its slices (at most ``workers`` fetches ahead)."""
        window, self._window = self._window, {}
        self._window_files = self._window_bytes = 0
        fetches: deque[tuple[str, list[Piece[_File]], Future[tuple[bytes | None, bool]] | bytes]] = deque()
        for oid, pieces in window.items():
            last = self._last
            fetches.append(
                (
                    oid,
                    pieces,
                    last[1] if last is not None and last[0] == oid else self.pool.submit(_fetch, self.objects, oid),
                )
            )
            if len(fetches) > self.workers:
                self._land_object(*fetches.popleft())
        while fetches:
            self._land_object(*fetches.popleft())
        if self._empties:
            self._stream_writes.put(b"", self._empties)
            self._empties = []

    def _land_object(
        self, oid: str, pieces: list[Piece[_File]], fetched: Future[tuple[bytes | None, bool]] | bytes
    ) -> None:
        plain = fetched if isinstance(fetched, bytes) else fetched.result()[0]
        if plain is None or any(p.offset + p.length > len(plain) for p in pieces):
            raise Damaged(oid)
        self._last = (oid, plain)
        self._stream_writes.put(plain, pieces)

    def _take_rows(self, written: int, rows: list[tuple[int, StatKey, bytes]]) -> None:
        for row, key, digest in rows:
            self.rows.put(row, key, digest)
        self._wrote(written)

    def drain(self) -> None:
        self.flush()
        self._stream_writes.drain()

    def _write_pieces(self, plain: bytes, pieces: list[Piece[_File]]) -> _Written:
        view = memoryview(plain)
        written = 0
        rows: list[tuple[int, StatKey, bytes]] = []
        for p in pieces:
            data = view[p.offset : p.offset + p.length]
            if p.whole:
                row = self.at(p.file.path, self._whole, p.file, data)
                if row is not None:
                    rows.append(row)
            else:
                self.at(p.file.path, self._write_slice, data, p.at)
            written += p.length
        return written, rows

    def _whole(self, path: bytes, dir_fd: int | None, f: _File, data: memoryview) -> tuple[int, StatKey, bytes] | None:
        """Create, fill and finish a one-slice file; its index row's stat and digest when it has a row."""
        key = self._create_whole(path, dir_fd, f.mode, f.mtime_ns, data, f.row >= 0)
        return None if key is None else (f.row, key, self._racy_digest(f.size, f.mtime_ns, data))

    # ----------------------------------------------------------------- after the content

    def finish(self) -> None:
        """Write everything queued; finish multi-object files; hard links; folder modes, deepest first."""
        self.drain()
        for f in self._multi:
            self.at(f.path, _finish, f.mode, f.mtime_ns)
            if f.row >= 0:
                self.rows.put(f.row, stat_key(self.at(f.path, _lstat)))
        self._links()
        bits = self.modes.dir_bits
        for rel, mode, mtime_ns in reversed(self.folders):
            self.at(rel, _finish, mode & bits, mtime_ns)
        self._report()

    def _links(self) -> None:
        followers = self._followers
        if not followers:
            return
        names = {rel for rel, _ in followers}
        linked: list[tuple[bytes, bytes]] = []
        for rel, item in followers:
            if item.link not in names and item.link not in self._own_links and self._is_file(item.link):
                linked.append((rel, item.link))
            else:
                self._content(rel, item)  # no leader to link to: its own copy, as the listing path does
        self.drain()
        for rel, leader in linked:
            self.at(leader, self._link, rel)
        self.files += len(linked)
        if not self.want_index:
            return
        leaders = self.rows.find({leader for _, leader in linked})
        for row in leaders.values():  # a new link changed the leader's ctime
            self.rows.put(row, stat_key(self.at(self.rows.path(row), _lstat)))
        for rel, leader in linked:
            at = leaders[leader]
            row = self.rows.add(rel, stat_key(self.at(rel, _lstat)), self.rows.digest(at), self.rows.refs(at))

    def _is_file(self, rel: bytes) -> bool:
        try:
            return stat.S_ISREG(self.at(rel, _lstat).st_mode)
        except FileNotFoundError:
            return False

    def dropped_paths(self) -> list[str]:
        return sorted(os.fsdecode(rel) for rel in self.dropped)
