"""Reading ahead of the packer, while the folder is still being listed.

:class:`ReadAhead` runs an iterator of files to read (typically one that
walks the folder and consults the index as it goes) on its own thread. It
groups consecutive small files into batches, submits each batch's reads to a
pool of reader threads, and hands ``(files, contents)`` to the consumer in
order through a bounded channel; a large file comes alone with ``None``, for
the consumer to stream through the chunker itself. So listing, reading and
packing overlap, and at most ``2 × workers`` batches (≤ 2 MiB each) wait in
memory.

Files are opened relative to the descriptor of the checked-in folder, one
name at a time, never through a symlink
(:class:`~tenure.snapshots.fsutil.Beneath`): a file, or any folder above it,
replaced by a symlink after it was listed fails the build with
:class:`FolderChangedError` (``folder-changed``, retryable) naming the file;
no byte from outside the folder is read.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

from tenure.snapshots.chunking import CHUNKED_FROM
from tenure.snapshots.errors import FolderChangedError, UnreadableFileError
from tenure.snapshots.fsutil import Beneath
from tenure.snapshots.scan import FileNode

MiB = 1 << 20
BATCH_FILES = 256
BATCH_BYTES = 2 * MiB

Item = tuple[list[FileNode], Future[list[bytes]] | None]


class _Channel:
    """A bounded FIFO between one producer and one consumer; the consumer may close it."""

    def __init__(self, capacity: int) -> None:
        self._items: deque[object] = deque()
        self._capacity = capacity
        self._closed = False
        self._cond = threading.Condition()

    def put(self, item: object) -> bool:
        """Wait for room; ``False`` if the consumer has gone."""
        with self._cond:
            while len(self._items) >= self._capacity and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def get(self) -> object:
        with self._cond:
            while not self._items:
                self._cond.wait()
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()


_END = object()


class ReadAhead:
    """Iterate ``(files, contents or None)`` in order; see the module docstring. Always :meth:`close`.

    ``root_fd`` is the checked-in folder's descriptor, open until :meth:`close` returns.
    """

    def __init__(self, root_fd: int, files: Iterable[FileNode | None], workers: int) -> None:
        self.root_fd = root_fd
        #: bytes of all files handed out so far (grows while the folder is listed).
        self.total = 0
        self._channel = _Channel(2 * workers)
        self._readers = ThreadPoolExecutor(workers, thread_name_prefix="tenure-read")
        self._thread = threading.Thread(target=self._produce, args=(files,), name="tenure-list", daemon=True)
        self._thread.start()

    def _produce(self, files: Iterable[FileNode | None]) -> None:
        try:
            for group, small in batches(self._counted(files)):
                future = self._readers.submit(read_batch, self.root_fd, group) if small else None
                if not self._channel.put((group, future)):
                    return
            self._channel.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._channel.put(exc)

    def _counted(self, files: Iterable[FileNode | None]) -> Iterator[FileNode | None]:
        for f in files:
            if f is not None:
                self.total += f.size
            yield f

    def __iter__(self) -> Iterator[tuple[list[FileNode], list[bytes] | None]]:
        while True:
            item = self._channel.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            group, future = cast(Item, item)
            yield group, None if future is None else future.result()

    def close(self) -> None:
        self._channel.close()
        self._thread.join()
        self._readers.shutdown(wait=True, cancel_futures=True)


def batches(files: Iterable[FileNode | None]) -> Iterator[tuple[list[FileNode], bool]]:
    """Consecutive small files in batches (``True``), each large file alone (``False``).

    A ``None`` among the files is a tick: the batch so far is handed on, then
    an empty group, so the consumer gets a turn although nothing was read
    (a streaming build encodes the folders listed meanwhile).
    """
    batch: list[FileNode] = []
    size = 0
    for f in files:
        if f is None:
            if batch:
                yield batch, True
                batch, size = [], 0
            yield [], False
            continue
        if f.size >= CHUNKED_FROM:
            if batch:
                yield batch, True
                batch, size = [], 0
            yield [f], False
            continue
        batch.append(f)
        size += f.size
        if len(batch) >= BATCH_FILES or size >= BATCH_BYTES:
            yield batch, True
            batch, size = [], 0
    if batch:
        yield batch, True


def read_batch(root_fd: int, files: Sequence[FileNode]) -> list[bytes]:
    """Read small files whole (at most the size ``lstat`` reported). Hot loop: kept lean."""
    out: list[bytes] = []
    opener = Beneath(root_fd)
    f = None
    try:
        for f in files:
            fd = opener.open_file(f.rel)
            try:
                out.append(os.read(fd, f.size) if f.size else b"")
            finally:
                os.close(fd)
    except OSError as exc:
        assert f is not None
        raise read_error(f.rel, exc) from None
    finally:
        opener.close()
    return out


def open_file(root_fd: int, rel: bytes) -> int:
    """Open a regular file below ``root_fd`` for reading, never through a symlink, never blocking on a FIFO."""
    opener = Beneath(root_fd)
    try:
        return opener.open_file(rel)
    except OSError as exc:
        raise read_error(rel, exc) from None
    finally:
        opener.close()


def read_error(rel: bytes, exc: OSError) -> Exception:
    path = os.fsdecode(rel)
    if exc.errno in (errno.ENOENT, errno.ELOOP, errno.EISDIR, errno.ENOTDIR, errno.EAGAIN):
        return FolderChangedError(f"{path!r} changed while it was being read ({exc.strerror})", path=path)
    return UnreadableFileError(f"cannot read {path!r}: {exc.strerror}", path=path, reason=exc.strerror)
