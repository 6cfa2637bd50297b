"""Content-defined chunking of large files (FastCDC 2020, :mod:`pyfastcdc`).

Files of ``CHUNKED_FROM`` bytes or more are cut where the content says so,
so an insertion or an append moves only the cut points next to it and a
small edit stores about one new chunk. Smaller files go into packs
(:mod:`tenure.snapshots.build`). Parameters (see ``docs/adr/0003-chunking.md``):
minimum 256 KiB, average target 1 MiB (FastCDC's mean is about
``avg + min``), maximum 4 MiB, normalization level 1, gear seed 0. Changing
any of them changes where chunks are cut: new checkpoints would share no
chunks with old ones (still correct, just not deduplicated).

A file is read in windows of ``WINDOW`` bytes into fresh buffers; the chunks
are zero-copy views of them. The last chunk of a window may have been cut
only by the window's end, so its bytes are carried into the next window and
cut again: the cut points are exactly those of the whole file in one buffer.
Memory per file is one window plus the chunks still being encoded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyfastcdc

KiB, MiB = 1 << 10, 1 << 20
CHUNKED_FROM = 1 * MiB
MIN_SIZE = 256 * KiB
AVG_SIZE = 1 * MiB
MAX_SIZE = 4 * MiB
WINDOW = 8 * MiB


def new_chunker() -> pyfastcdc.FastCDC:
    """A chunker with tenure's fixed parameters (one per thread: it is not thread-safe)."""
    return pyfastcdc.FastCDC(avg_size=AVG_SIZE, min_size=MIN_SIZE, max_size=MAX_SIZE, normalized_chunking=1, seed=0)


def iter_chunks(fd: int, limit: int, chunker: pyfastcdc.FastCDC) -> Iterator[memoryview]:
    """Yield the chunks of the first ``limit`` bytes readable from ``fd`` (fewer if it ends sooner)."""
    carry = memoryview(b"")
    left = limit
    while True:
        want = min(WINDOW, left)
        buf = bytearray(len(carry) + want)
        buf[: len(carry)] = carry
        got = _fill(fd, memoryview(buf)[len(carry) :])
        left -= got
        final = got < want or left == 0
        view = memoryview(buf)[: len(carry) + got]
        if not view:
            return
        chunks = [(c.offset, c.length) for c in chunker.cut_buf(view)]
        if not final:
            last_offset, _ = chunks.pop()
            carry = view[last_offset:]
        for offset, length in chunks:
            yield view[offset : offset + length]
        if final:
            return


def _fill(fd: int, view: memoryview) -> int:
    """Read into ``view`` until it is full or the file ends; return the byte count."""
    total = 0
    while total < len(view):
        n = os.readv(fd, [view[total:]])
        if n == 0:
            break
        total += n
    return total
