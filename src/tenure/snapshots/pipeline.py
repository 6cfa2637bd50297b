"""Encoding and storing data objects on every core, in bounded memory.

The reading thread hands plain content to :class:`Uploader`. A thread pool
hashes (BLAKE3) and compresses (zstd) it; both run in native code without
the GIL. Finished objects are gathered into batches of about
``BATCH_BYTES`` that one writer thread stores: ``pin`` the batch (so a
concurrent GC spares it), one ``has_many`` and one ``put_many`` (durable) per
batch, while the pool keeps encoding. An object the store already holds is
not trusted on its id alone: it is read back and decoded, and one that is
not what its id says is moved aside and stored again from the content in
hand (S-12: a snapshot never becomes READY over such an object). Objects the
index already knows are never submitted, so this costs a read only of
content that is new to the workspace but found stored (another workspace's,
a crashed checkpoint's). Content submitted but not yet collected is capped
at ``max_pending`` bytes and ``max_objects`` objects: the reader waits for
the oldest object beyond either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from tenure.objects import ObjectStore
from tenure.objects.codec import Codec, codec_of
from tenure.snapshots.scan import Slot
from tenure.snapshots.verify import set_aside

MiB = 1 << 20
BATCH_BYTES = 4 * MiB
BATCH_OBJECTS = 256

Encoded = tuple[str, bytes | None]
Buffer = bytes | memoryview


def _encode_chunk(codec: Codec, data: Buffer, known: frozenset[str] | None) -> Encoded:
    if known:
        oid = codec.object_id(data)
        if oid in known:
            return oid, None
    return codec.encode(data)


def _store(
    objects: ObjectStore, batch: list[tuple[str, bytes]], pin: Callable[[frozenset[str]], None]
) -> tuple[list[str], int, int]:
    """Pin the batch (so a concurrent GC spares it), then store what the store lacks or holds damaged.

    Returns the ids stored, their bytes, and how many stored objects were
    found damaged and replaced.
    """
    pin(frozenset(oid for oid, _ in batch))
    present = objects.has_many([oid for oid, _ in batch])
    # read back and checked (S-12): one that is not what its id says is moved aside, the build's copy stored
    replaced = set_aside(objects, [oid for oid, _ in batch if oid in present])
    new = [(oid, payload) for oid, payload in batch if oid not in present or oid in replaced]
    if new:
        objects.put_many(new)
    return [oid for oid, _ in new], sum(len(payload) for _, payload in new), len(replaced)


class Uploader:
    """Turns plain content into stored data objects; see the module docstring.

    ``known()`` gives the ids the store is believed to hold (from the index;
    asked once, when first needed): a chunk submitted with ``probe=True`` is
    hashed first and, when known, neither compressed nor stored. The caller
    must check such ids with the store later (they are not in :attr:`written`).
    ``pin`` receives each batch before the store is asked about it.
    """

    def __init__(
        self,
        objects: ObjectStore,
        workers: int,
        known: Callable[[], frozenset[str]] | None = None,
        pin: Callable[[frozenset[str]], None] = lambda _oids: None,
    ) -> None:
        self._objects = objects
        self._codec = codec_of(objects)
        self._pin = pin
        self._known_source = known
        self._known: frozenset[str] | None = None
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="tenure-encode")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="tenure-store")
        self._pending: deque[tuple[Future[Encoded], Slot, int]] = deque()
        self._pending_bytes = 0
        self._max_pending = max(8 * MiB, workers * 4 * MiB)
        #: objects in flight are capped by number too: each holds the files of a pack until it is collected
        self._max_objects = max(8, workers * 4)
        self._batch: list[tuple[str, bytes]] = []
        self._batch_bytes = 0
        self._queued: set[str] = set()
        self._write: Future[tuple[list[str], int, int]] | None = None
        #: ids this run stored itself (absent from the store when asked).
        self.written: set[str] = set()
        #: compressed bytes this run stored.
        self.bytes_new = 0
        #: stored objects found damaged (not what their id says) and stored again from this run's content
        self.replaced = 0

    def add_pack(self, data: bytearray, slot: Slot) -> None:
        """Submit a pack of small files; ``slot.oid`` is its id once collected."""
        self._submit(self._pool.submit(self._codec.encode, memoryview(data)), len(data), slot)

    def add_chunk(self, data: memoryview, *, probe: bool) -> Slot:
        """Submit one chunk of a large file (``probe``: skip it if its id is known)."""
        if probe and self._known is None:
            self._known = self._known_source() if self._known_source else frozenset()
        known = self._known if probe else None
        slot = Slot()
        self._submit(self._pool.submit(_encode_chunk, self._codec, data, known), len(data), slot)
        return slot

    def _submit(self, future: Future[Encoded], size: int, slot: Slot) -> None:
        self._pending.append((future, slot, size))
        self._pending_bytes += size
        while self._pending_bytes > self._max_pending or len(self._pending) > self._max_objects:
            self._collect_oldest()

    def _collect_oldest(self) -> None:
        future, slot, size = self._pending.popleft()
        self._pending_bytes -= size
        oid, payload = future.result()
        slot.oid = oid
        if payload is None or oid in self._queued:
            return
        self._queued.add(oid)
        self._batch.append((oid, payload))
        self._batch_bytes += len(payload)
        if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_OBJECTS:
            self._flush()

    def _flush(self) -> None:
        self._wait_write()
        if self._batch:
            self._write = self._writer.submit(_store, self._objects, self._batch, self._pin)
            self._batch, self._batch_bytes = [], 0

    def _wait_write(self) -> None:
        if self._write is not None:
            stored, size, replaced = self._write.result()
            self._write = None
            self.written.update(stored)
            self.bytes_new += size
            self.replaced += replaced

    def collect(self) -> None:
        """Wait until everything submitted is encoded, so every slot has its id (storing goes on)."""
        while self._pending:
            self._collect_oldest()

    def finish(self) -> None:
        """Wait until everything submitted is encoded and durably stored."""
        while self._pending:
            self._collect_oldest()
        self._flush()
        self._wait_write()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True, cancel_futures=True)
