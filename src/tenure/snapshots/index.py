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

File: ``TENURE-INDEX\\n`` version:u8 blake3(body):32 bytes, then the body,
a zstd frame of a **columnar** table (version 2, ADR 0027), all integers
little-endian::

    body    := count:u64 noids:u64 nrefs:u64 ndigests:u64 paths_len:u64
               paths                      paths_len bytes: the paths in tree order, NUL-separated
               size:u64{count} mtime_ns:i64{count} ino:u64{count} ctime_ns:i64{count} mode:u64{count}
               digest_at:i64{count}       index into digests, or -1 (no digest)
               ref_start:u64{count + 1}   row i's refs are refs[ref_start[i] : ref_start[i + 1]]
               ref_oid:u32{nrefs} ref_offset:u64{nrefs} ref_length:u64{nrefs}
               oids:32 raw bytes{noids}   distinct, in order of first use
               digests:32 bytes{ndigests}

Loading it builds one ``path → row`` dict and keeps the columns as arrays:
a row's tuple is only made when the build asks about that path, so loading
costs a decompression and a split, not a Python object per field. The same
entries always give the same bytes (paths in **tree order** — by folder in
pre-order, then by name, the order a build meets them, :func:`tree_key` —,
oids in order of first use), so "unchanged" is a comparison of bodies.
Loading does not depend on the order: an index written in another order
(by an earlier version, sorted by path) loads as well.

The index is a local cache written by this process only: a missing,
damaged, truncated, foreign (another version) or inconsistent index is an
empty one (everything is read again), never an error. It is replaced
atomically (temp → fsync → rename → fsync folder).
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, chain, repeat
from operator import itemgetter, sub
from typing import NamedTuple

import blake3
import zstandard

from tenure.fsio import atomic_write
from tenure.snapshots.treeformat import Ref

MAGIC = b"TENURE-INDEX\n"
RACY_MARGIN_NS = 5_000_000_000
"""Files modified less than this before a build or restore get a content digest."""
VERSION = 2
_HEAD = struct.Struct("<5Q")
_DIGEST = 32
_OID = 32
_LITTLE = sys.byteorder == "little"
assert array("q").itemsize == 8 and array("Q").itemsize == 8 and array("I").itemsize == 4

StatKey = tuple[int, int, int, int, int]
Entries = Mapping[bytes, tuple[object, ...]]


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
    """A loaded index (read-only), held as a dict ``path → IndexEntry fields``."""

    def __init__(self, entries: dict[bytes, tuple[object, ...]], written_ns: int) -> None:
        self._entries = entries
        self.written_ns = written_ns

    @classmethod
    def empty(cls) -> Index:
        return cls({}, 0)

    def __len__(self) -> int:
        return len(self._entries)

    def _raw(self, rel: bytes) -> tuple[object, ...] | None:
        return self._entries.get(rel)

    def unchanged(self, rel: bytes, key: StatKey) -> IndexEntry | None:
        """The entry for ``rel`` if the file is unchanged and not racy, else ``None``."""
        raw = self._raw(rel)
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
        raw = self._raw(rel)
        return None if raw is None else IndexEntry._make(raw)

    def body(self) -> bytes:
        """The encoded body of this index (see :func:`encode_body`)."""
        return encode_body(self._entries)

    def same_as(self, entries: Entries) -> bool:
        """Whether ``entries`` is exactly what this index holds (then it need not be written again)."""
        return self.written_ns > 0 and entries == self._entries

    def same_body(self, body: bytes) -> bool:
        """:meth:`same_as`, given the encoded body of the entries."""
        return self.written_ns > 0 and body == self.body()

    def entries(self) -> dict[bytes, tuple[object, ...]]:
        """A copy of every entry, as :func:`encode_body` takes them."""
        return dict(self._entries)

    def patched(self, removed: Iterable[bytes], added: Entries) -> bytes:
        """The body of this index less the ``removed`` paths, with ``added`` put in (new or replacing)."""
        entries = self.entries()
        for rel in removed:
            entries.pop(rel, None)
        entries.update(added)
        return encode_body(entries)

    def oids(self) -> frozenset[str]:
        """Every object id the index refers to."""
        return frozenset(ref[0] for raw in self._entries.values() for ref in raw[6])  # type: ignore[attr-defined]


class _Table(Index):
    """An index as loaded from its file: columns in arrays, a row's tuple made only when asked for."""

    def __init__(self, body: bytes, written_ns: int) -> None:
        super().__init__({}, written_ns)
        count, noids, nrefs, ndigests, paths_len = _HEAD.unpack_from(body, 0)
        read = BodyReader(body, _HEAD.size)
        listed = read.take(paths_len)
        paths = listed.split(b"\0") if count else []
        columns = [read.column(code, count) for code in ("Q", "q", "Q", "q", "Q", "q")]
        starts = read.column("Q", count + 1)
        ref_oid = read.column("I", nrefs)
        ref_offset = read.column("Q", nrefs)
        ref_length = read.column("Q", nrefs)
        oids = read.oids(noids)
        digests = read.take(_DIGEST * ndigests)
        rows = dict(zip(paths, range(count)))
        digest_at = columns[5]
        if (
            read.pos != len(body)
            or len(paths) != count
            or len(rows) != count
            or any(not p for p in paths)
            or (count and (starts[0] != 0 or starts[count] != nrefs))
            or any(starts[i] > starts[i + 1] for i in range(count))
            or (nrefs and max(ref_oid) >= noids)
            or (count and (min(digest_at) < -1 or max(digest_at) >= ndigests))
            or len(set(oids)) != noids
        ):
            raise ValueError("inconsistent index")
        self._rows = rows
        self._paths = paths
        self._size, self._mtime, self._ino, self._ctime, self._mode, self._digest_at = columns
        self._starts = starts
        self._ref_oid, self._ref_offset, self._ref_length = ref_oid, ref_offset, ref_length
        self._oids = oids
        self._digests = digests
        self._body = body

    def __len__(self) -> int:
        return len(self._rows)

    def _raw(self, rel: bytes) -> tuple[object, ...] | None:
        i = self._rows.get(rel)
        if i is None:
            return None
        return (
            self._size[i],
            self._mtime[i],
            self._ino[i],
            self._ctime[i],
            self._mode[i],
            self._digest_of(i),
            self._refs_of(i),
        )

    def _digest_of(self, i: int) -> bytes:
        at = self._digest_at[i]
        return b"" if at < 0 else self._digests[at * _DIGEST : (at + 1) * _DIGEST]

    def _refs_of(self, i: int) -> tuple[Ref, ...]:
        start, end = self._starts[i], self._starts[i + 1]
        if end == start + 1:
            return ((self._oids[self._ref_oid[start]], self._ref_offset[start], self._ref_length[start]),)
        oids, offsets, lengths = self._oids, self._ref_offset, self._ref_length
        return tuple((oids[self._ref_oid[j]], offsets[j], lengths[j]) for j in range(start, end))

    def content(self, rel: bytes, key: StatKey) -> tuple[bytes, tuple[Ref, ...]] | None:
        i = self._rows.get(rel)
        if (
            i is None
            or key[1] >= self.written_ns
            or self._mtime[i] != key[1]
            or self._size[i] != key[0]
            or self._ino[i] != key[2]
            or self._ctime[i] != key[3]
            or self._mode[i] != key[4]
        ):
            return None
        return self._digest_of(i), self._refs_of(i)

    def body(self) -> bytes:
        return self._body

    def entries(self) -> dict[bytes, tuple[object, ...]]:
        raw = self._raw
        return {p: raw(p) for p in self._rows}  # type: ignore[misc]

    def patched(self, removed: Iterable[bytes], added: Entries) -> bytes:
        """:meth:`Index.patched` without a Python object per row: the columns are copied in slices.

        Rows keep tree order when this index is in it (any index this version
        wrote). The result is a valid body, not the canonical one: the object ids and
        digests of removed rows stay in their tables until those hold twice
        what the rows use, when the body is encoded afresh.
        """
        rows, paths = self._rows, self._paths
        n = len(paths)
        drop = {rows[p] for p in removed if p in rows} | {rows[p] for p in added if p in rows}
        events = sorted(
            [(i, 1, b"") for i in drop] + [(bisect_left(paths, tree_key(p), key=tree_key), 0, p) for p in added]
        )
        segments: list[tuple[int, int] | bytes] = []
        at = 0
        for i, kind, p in events:
            if i > at:
                segments.append((at, i))
                at = i
            if kind == 0:
                segments.append(p)
            else:
                at = i + 1
        if at < n:
            segments.append((at, n))
        old_columns = (self._size, self._mtime, self._ino, self._ctime, self._mode)
        columns = [array(c.typecode) for c in old_columns]
        digest_at, counts = array("q"), array("Q")
        ref_oid, ref_offset, ref_length = array("I"), array("Q"), array("Q")
        digests = bytearray(self._digests)
        oids = list(self._oids)
        oid_number = {oid: k for k, oid in enumerate(oids)}
        starts = self._starts
        old_counts = array("Q", map(sub, starts[1:], starts[:-1]))
        out_paths: list[bytes] = []
        for segment in segments:
            if isinstance(segment, tuple):
                a, b = segment
                out_paths += paths[a:b]
                for new, old in zip(columns, old_columns):
                    new += old[a:b]
                digest_at += self._digest_at[a:b]
                counts += old_counts[a:b]
                ref_oid += self._ref_oid[starts[a] : starts[b]]
                ref_offset += self._ref_offset[starts[a] : starts[b]]
                ref_length += self._ref_length[starts[a] : starts[b]]
                continue
            raw = added[segment]
            out_paths.append(segment)
            for k, column in enumerate(columns):
                column.append(raw[k])  # type: ignore[arg-type]
            digest = raw[5]
            if digest:
                digest_at.append(len(digests) // _DIGEST)
                digests += digest  # type: ignore[arg-type]
            else:
                digest_at.append(-1)
            refs = raw[6]
            counts.append(len(refs))  # type: ignore[arg-type]
            for oid, offset, length in refs:  # type: ignore[attr-defined]
                number = oid_number.get(oid)
                if number is None:
                    number = oid_number[oid] = len(oids)
                    oids.append(oid)
                ref_oid.append(number)
                ref_offset.append(offset)
                ref_length.append(length)
        used_digests = len(digest_at) - digest_at.count(-1)
        if len(digests) // _DIGEST > 2 * used_digests + 1024 or len(oids) > 2 * len(set(ref_oid)) + 1024:
            return super().patched(removed, added)  # mostly garbage: encode afresh
        joined = b"\0".join(out_paths)
        return b"".join(
            (
                _HEAD.pack(len(out_paths), len(oids), len(ref_oid), len(digests) // _DIGEST, len(joined)),
                joined,
                *(column_bytes(c) for c in columns),
                column_bytes(digest_at),
                column_bytes(array("Q", accumulate(counts, initial=0))),
                column_bytes(ref_oid),
                column_bytes(ref_offset),
                column_bytes(ref_length),
                b"".join(bytes.fromhex(oid) for oid in oids),
                bytes(digests),
            )
        )

    def same_as(self, entries: Entries) -> bool:
        return self.same_body(encode_body(entries))

    def oids(self) -> frozenset[str]:
        return frozenset(self._oids)


class BodyReader:
    """Reads the parts of a body in order, from ``pos`` on: byte runs, columns (:func:`column`) and object ids.

    A byte run past the end comes back short; the caller compares ``pos``
    with the body's length once all is read.
    """

    __slots__ = ("body", "pos")

    def __init__(self, body: bytes, pos: int) -> None:
        self.body = body
        self.pos = pos

    def take(self, n: int) -> bytes:
        start = self.pos
        self.pos += n
        return self.body[start : self.pos]

    def column(self, code: str, n: int) -> array[int]:
        out = column(code, self.body, self.pos, n)
        self.pos += out.itemsize * n
        return out

    def oids(self, n: int) -> list[str]:
        """``n`` object ids (32 bytes each), in hex."""
        raw = self.take(_OID * n)
        return [raw[p : p + _OID].hex() for p in range(0, _OID * n, _OID)]


def column(code: str, body: bytes, pos: int, n: int) -> array[int]:
    """``n`` little-endian items of type ``code`` at ``pos`` of ``body`` (``ValueError`` past its end)."""
    size = array(code).itemsize
    if pos + size * n > len(body):
        raise ValueError("truncated table")
    out = array(code)
    out.frombytes(body[pos : pos + size * n])
    if not _LITTLE:
        out.byteswap()
    return out


def column_bytes(values: array[int]) -> bytes:
    """The little-endian bytes of ``values``."""
    if not _LITTLE:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def tree_key(rel: bytes) -> tuple[bytes, bytes]:
    """Where a file comes in tree order: its folder (folders in pre-order), then its name.

    Pre-order of folders is the byte order of their paths with ``/`` below
    every byte a name can hold (names hold no NUL).
    """
    folder, _, name = rel.rpartition(b"/")
    return folder.replace(b"/", b"\0"), name


def encode_body(entries: Entries) -> bytes:
    """The uncompressed, canonical body of an index holding ``entries`` (see the module docstring)."""
    paths = sorted(entries, key=tree_key)
    rows = [entries[p] for p in paths]
    oid_at: dict[str, int] = {}
    ref_oid, ref_offset, ref_length = array("I"), array("Q"), array("Q")
    starts = array("Q", [0])
    digest_at = array("q")
    digests: list[bytes] = []
    add_oid, add_offset, add_length, add_start = ref_oid.append, ref_offset.append, ref_length.append, starts.append
    for raw in rows:
        digest = raw[5]
        if digest:
            if not isinstance(digest, bytes) or len(digest) != _DIGEST:
                raise ValueError(f"an index digest is {_DIGEST} bytes")
            digest_at.append(len(digests))
            digests.append(digest)
        else:
            digest_at.append(-1)
        for oid, offset, length in raw[6]:  # type: ignore[attr-defined]
            at = oid_at.get(oid)
            if at is None:
                at = oid_at[oid] = len(oid_at)
            add_oid(at)
            add_offset(offset)
            add_length(length)
        add_start(len(ref_oid))
    if any(not p or b"\0" in p for p in paths):
        raise ValueError("an index path is empty or holds NUL")
    joined = b"\0".join(paths)
    columns = [array(code, map(itemgetter(k), rows)) for k, code in enumerate("QqQqQ")]
    return b"".join(
        (
            _HEAD.pack(len(paths), len(oid_at), len(ref_oid), len(digests), len(joined)),
            joined,
            *(column_bytes(c) for c in columns),
            column_bytes(digest_at),
            column_bytes(starts),
            column_bytes(ref_oid),
            column_bytes(ref_offset),
            column_bytes(ref_length),
            b"".join(bytes.fromhex(oid) for oid in oid_at),
            b"".join(digests),
        )
    )


class Rows:
    """Index rows gathered one file at a time in compact columns, encoded as :func:`encode_body` would.

    A streaming build adds each folder's files as the folder is done and
    drops the files' objects; what stays per file is its path and a few
    machine integers. A build adds them in tree order, so :meth:`body` needs
    no sorting; rows added in another order are sorted there. Either way it
    gives exactly the bytes ``encode_body`` gives for the same entries.
    """

    def __init__(self) -> None:
        self._in_order = True
        self._last: tuple[bytes, bytes] | None = None
        self._paths: list[bytes] = []
        self._columns = [array(code) for code in "QqQqQ"]
        self._digest_at = array("q")
        self._digests = bytearray()
        self._counts = array("Q")
        self._first_ref = array("Q")  # where each row's refs start (only for refs())
        self._ref_oid, self._ref_offset, self._ref_length = array("I"), array("Q"), array("Q")
        self._oids: list[str] = []
        self._oid_number: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._paths)

    def add(self, rel: bytes, key: StatKey, digest: bytes, refs: Sequence[Ref]) -> int:
        """Add a row; its number (for :meth:`put`, when the stat is known only later)."""
        if not rel or b"\0" in rel:
            raise ValueError("an index path is empty or holds NUL")
        place = tree_key(rel)
        if self._last is not None and place <= self._last:
            self._in_order = False
        self._last = place
        self._paths.append(rel)
        for column, value in zip(self._columns, key):
            column.append(value)
        if digest:
            if len(digest) != _DIGEST:
                raise ValueError(f"an index digest is {_DIGEST} bytes")
            self._digest_at.append(len(self._digests) // _DIGEST)
            self._digests += digest
        else:
            self._digest_at.append(-1)
        self._first_ref.append(len(self._ref_oid))
        self._counts.append(len(refs))
        numbers = self._oid_number
        for oid, offset, length in refs:
            number = numbers.get(oid)
            if number is None:
                number = numbers[oid] = len(self._oids)
                self._oids.append(oid)
            self._ref_oid.append(number)
            self._ref_offset.append(offset)
            self._ref_length.append(length)
        return len(self._paths) - 1

    def put(self, row: int, key: StatKey, digest: bytes = b"") -> None:
        """Set row ``row``'s stat fields, and its digest when one is given."""
        for column, value in zip(self._columns, key):
            column[row] = value
        if digest:
            if len(digest) != _DIGEST:
                raise ValueError(f"an index digest is {_DIGEST} bytes")
            at = self._digest_at[row]
            if at < 0:
                self._digest_at[row] = len(self._digests) // _DIGEST
                self._digests += digest
            else:
                self._digests[at * _DIGEST : (at + 1) * _DIGEST] = digest

    def path(self, row: int) -> bytes:
        return self._paths[row]

    def digest(self, row: int) -> bytes:
        at = self._digest_at[row]
        return b"" if at < 0 else bytes(self._digests[at * _DIGEST : (at + 1) * _DIGEST])

    def refs(self, row: int) -> tuple[Ref, ...]:
        start = self._first_ref[row]
        return tuple(
            (self._oids[self._ref_oid[j]], self._ref_offset[j], self._ref_length[j])
            for j in range(start, start + self._counts[row])
        )

    def find(self, wanted: set[bytes]) -> dict[bytes, int]:
        """The rows of the paths in ``wanted`` (one pass: ``wanted`` is small, e.g. hard-link leaders)."""
        return {path: row for row, path in enumerate(self._paths) if path in wanted}

    def add_folder(
        self,
        paths: list[bytes],
        keys: list[StatKey],
        digests: list[bytes],
        refs: list[tuple[Ref, ...]],
    ) -> None:
        """:meth:`add` for one folder's files, in name order (a build's hot path: column operations, no loop
        per field). The paths are trusted to be clean relative paths, as a listing gives them; rows that do not
        come in tree order are sorted by :meth:`body`, as with :meth:`add`."""
        if not paths:
            return
        place = tree_key(paths[0])
        if (self._last is not None and place <= self._last) or sorted(paths) != paths or len(set(paths)) != len(paths):
            self._in_order = False  # (one folder's paths in name order are sorted: checked in native code)
        self._last = tree_key(paths[-1])
        self._paths += paths
        for k, column in enumerate(self._columns):
            column.extend(map(itemgetter(k), keys))
        digest_at = self._digest_at
        if any(digests):
            for digest in digests:
                if digest:
                    if len(digest) != _DIGEST:
                        raise ValueError(f"an index digest is {_DIGEST} bytes")
                    digest_at.append(len(self._digests) // _DIGEST)
                    self._digests += digest
                else:
                    digest_at.append(-1)
        else:
            digest_at.extend(repeat(-1, len(digests)))
        counts = list(map(len, refs))
        self._first_ref.extend(accumulate(counts[:-1], initial=len(self._ref_oid)))
        self._counts.extend(counts)
        flat = list(chain.from_iterable(refs))
        numbers = self._oid_number
        for oid in dict.fromkeys(map(itemgetter(0), flat)):
            if oid not in numbers:
                numbers[oid] = len(self._oids)
                self._oids.append(oid)
        self._ref_oid.extend(map(numbers.__getitem__, map(itemgetter(0), flat)))
        self._ref_offset.extend(map(itemgetter(1), flat))
        self._ref_length.extend(map(itemgetter(2), flat))

    def body(self) -> bytes:
        """The canonical body of these rows (tree order, ids in order of first use, digests in row order)."""
        if not self._in_order:
            return self._sorted().body()
        return b"".join(self._parts(*self._numbering()))

    def matches(self, body: bytes) -> bool:
        """Whether these rows encode to exactly ``body``, compared part by part (never encoded whole)."""
        if not self._in_order:
            return self._sorted().matches(body)
        view, at = memoryview(body), 0
        for part in self._parts(*self._numbering()):
            if view[at : at + len(part)] != part:
                return False
            at += len(part)
        return at == len(body)

    def save(self, path: str) -> None:
        """Write these rows as the index at ``path`` (as :func:`write_index`), compressing part by part.

        The body is never held whole: on a large folder it is the largest
        thing a build would otherwise make at its end.
        """
        if not self._in_order:
            self._sorted().save(path)
            return
        first_use, ref_oid = self._numbering()
        n, nrefs = len(self._paths), len(ref_oid)
        paths_len = sum(map(len, self._paths)) + max(n - 1, 0)
        size = _HEAD.size + paths_len + 8 * (7 * n + 1) + 20 * nrefs + _OID * len(first_use) + len(self._digests)
        compressor = zstandard.ZstdCompressor(level=1).compressobj(size=size)  # the size in the frame: loadable
        frame = b"".join([*(compressor.compress(part) for part in self._parts(first_use, ref_oid)), compressor.flush()])
        write_frame(path, MAGIC, VERSION, frame)

    def _numbering(self) -> tuple[list[int], array[int]]:
        """The object numbers in order of first use, and the refs' numbers in that numbering."""
        first_use = list(dict.fromkeys(self._ref_oid))
        ref_oid = self._ref_oid
        if first_use != list(range(len(first_use))):  # (they are, unless rows came out of order)
            renumber = [0] * len(self._oids)
            for new, old in enumerate(first_use):
                renumber[old] = new
            ref_oid = array("I", map(renumber.__getitem__, ref_oid))
        return first_use, ref_oid

    def _parts(self, first_use: list[int], ref_oid: array[int]) -> Iterator[bytes]:
        paths_len = sum(map(len, self._paths)) + max(len(self._paths) - 1, 0)
        yield _HEAD.pack(len(self._paths), len(first_use), len(ref_oid), len(self._digests) // _DIGEST, paths_len)
        yield b"\0".join(self._paths)
        for column in self._columns:
            yield column_bytes(column)
        yield column_bytes(self._digest_at)
        yield column_bytes(array("Q", accumulate(self._counts, initial=0)))
        yield column_bytes(ref_oid)
        yield column_bytes(self._ref_offset)
        yield column_bytes(self._ref_length)
        yield b"".join(bytes.fromhex(self._oids[old]) for old in first_use)
        yield bytes(self._digests)

    def _sorted(self) -> Rows:
        """The same rows in tree order (columns permuted as arrays; a loop per row only for refs and digests)."""
        paths = self._paths
        if len(set(paths)) != len(paths):
            raise ValueError("an index path occurs twice")
        order = sorted(range(len(paths)), key=lambda i: tree_key(paths[i]))
        starts = array("Q", accumulate(self._counts, initial=0))
        out = Rows()
        out._paths = [paths[i] for i in order]
        out._columns = [array(c.typecode, map(c.__getitem__, order)) for c in self._columns]
        out._counts = array("Q", map(self._counts.__getitem__, order))
        out._first_ref = array("Q", accumulate(out._counts[:-1], initial=0)) if order else array("Q")
        out._oids, out._oid_number = list(self._oids), dict(self._oid_number)
        for i in order:
            a, b = starts[i], starts[i + 1]
            out._ref_oid += self._ref_oid[a:b]
            out._ref_offset += self._ref_offset[a:b]
            out._ref_length += self._ref_length[a:b]
            at = self._digest_at[i]
            if at < 0:
                out._digest_at.append(-1)
            else:
                out._digest_at.append(len(out._digests) // _DIGEST)
                out._digests += self._digests[at * _DIGEST : (at + 1) * _DIGEST]
        out._last = tree_key(out._paths[-1]) if out._paths else None
        return out


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


class FolderChanges(NamedTuple):
    """What a folder holds that its index does not vouch for (:func:`folder_changes`)."""

    #: relative paths (``/``-separated) of the entries that are new or changed, sorted
    paths: list[str]
    #: their size in bytes (a symbolic link counts its target's length)
    size: int
    #: how many files the index names that the folder no longer holds
    removed: int


def folder_changes(root: str, index: Index) -> FolderChanges:
    """Every entry of the folder at ``root`` that ``index`` cannot vouch for, by the rules of
    :func:`folder_matches`: a regular file that is new, changed or racy, a symbolic link or special file;
    and the count of files the index names that are gone. An empty or damaged index vouches for nothing."""
    base = os.fsencode(root)
    paths: list[str] = []
    size = 0
    known = 0
    for folder, _dirs, files in os.walk(base, followlinks=False):
        for name in files + [d for d in _dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rel = os.path.relpath(path, base)
            if stat.S_ISREG(st.st_mode) and index.previous(rel) is not None:
                known += 1
                if index.unchanged(rel, stat_key(st)) is not None:
                    continue
            paths.append(os.fsdecode(rel))
            size += st.st_size
    paths.sort()
    return FolderChanges(paths, size, max(0, len(index) - known))


def load_index(path: str | None) -> Index:
    if path is None:
        return Index.empty()
    read = read_hint(path, MAGIC, VERSION)
    if read is None:
        return Index.empty()
    try:
        return _Table(*read)
    except (ValueError, struct.error, OverflowError):
        return Index.empty()


def read_hint(path: str, magic: bytes, version: int) -> tuple[bytes, int] | None:
    """The body of a local hint file (the index, the folder cache, the tree hint), decompressed, and the file's
    mtime; ``None`` when :func:`read_frame` finds none or its frame does not decompress."""
    read = read_frame(path, magic, version)
    if read is None:
        return None
    try:
        return zstandard.ZstdDecompressor().decompress(read[0]), read[1]
    except zstandard.ZstdError:
        return None


def write_hint(path: str, magic: bytes, version: int, body: bytes) -> None:
    """Atomically replace a local hint file with ``body``, compressed, in the envelope :func:`read_hint` reads."""
    write_frame(path, magic, version, zstandard.ZstdCompressor(level=1).compress(body))


def read_frame(path: str, magic: bytes, version: int) -> tuple[bytes, int] | None:
    """The zstd frame of a local file ``magic`` version:u8 blake3(frame):32 frame, and the file's mtime.

    ``None`` when the file is missing, unreadable, of another kind or
    version, or its frame does not match its hash (the index and the folder
    cache are such files: hints that are rebuilt, never trusted).
    """
    try:
        with open(path, "rb") as fh:
            written_ns = os.fstat(fh.fileno()).st_mtime_ns
            data = fh.read()
    except OSError:
        return None
    head = len(magic) + 1 + 32
    if len(data) < head or data[: len(magic)] != magic or data[len(magic)] != version:
        return None
    frame = data[head:]
    if blake3.blake3(frame).digest() != data[len(magic) + 1 : head]:
        return None
    return frame, written_ns


def index_identity(path: str) -> str | None:
    """The identity of the index file at ``path``: the hash of its frame, from its header (never decoded).

    ``None`` when there is no index of this kind there. A base file records it
    when the folder's content is known to be a published or restored snapshot,
    so an index a build saved for a checkpoint that never published is told
    apart from it (ADR 0033).
    """
    head = len(MAGIC) + 1 + 32
    try:
        with open(path, "rb") as fh:
            data = fh.read(head)
    except OSError:
        return None
    if len(data) < head or data[: len(MAGIC)] != MAGIC or data[len(MAGIC)] != VERSION:
        return None
    return data[len(MAGIC) + 1 : head].hex()


def write_frame(path: str, magic: bytes, version: int, frame: bytes) -> None:
    """Atomically replace the file at ``path`` with ``frame`` in the envelope :func:`read_frame` reads."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, b"".join((magic, bytes([version]), blake3.blake3(frame).digest(), frame)), mode=0o600)


def save_index(path: str, entries: Entries) -> None:
    """Atomically replace the index at ``path`` with ``entries`` (path → ``IndexEntry`` fields, a plain tuple)."""
    write_index(path, encode_body(entries))


def write_index(path: str, body: bytes) -> None:
    """Atomically replace the index at ``path`` with an encoded body (:func:`encode_body`)."""
    write_hint(path, MAGIC, VERSION, body)
