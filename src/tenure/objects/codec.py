"""Plain bytes ⇄ stored payloads: BLAKE3 naming, zstd compression.

Both run in native code and release the GIL, so a thread pool encodes on
every core.
"""

from __future__ import annotations

import threading

import blake3
import zstandard

from tenure.errors import IntegrityError

LEVEL = 3
_local = threading.local()


class CorruptObject(IntegrityError):
    """A stored payload does not decompress, or hashes to another id."""

    code = "object-corrupt"


def object_id(plain: bytes | memoryview) -> str:
    """The BLAKE3 hex digest of plain content: an object's name."""
    return blake3.blake3(plain).hexdigest()


def _cctx() -> zstandard.ZstdCompressor:
    ctx = getattr(_local, "cctx", None)
    if ctx is None:
        ctx = _local.cctx = zstandard.ZstdCompressor(level=LEVEL, write_content_size=True)
    return ctx


def _dctx() -> zstandard.ZstdDecompressor:
    ctx = getattr(_local, "dctx", None)
    if ctx is None:
        ctx = _local.dctx = zstandard.ZstdDecompressor()
    return ctx


def encode(plain: bytes | memoryview) -> tuple[str, bytes]:
    """Return ``(oid, payload)`` for plain content."""
    return object_id(plain), _cctx().compress(plain)


def decode(oid: str, payload: bytes) -> bytes:
    """Decompress ``payload`` and check that it hashes to ``oid``."""
    try:
        plain = _dctx().decompress(payload)
    except zstandard.ZstdError as exc:
        raise CorruptObject(f"object {oid} does not decompress: {exc}", oid=oid) from exc
    if object_id(plain) != oid:
        raise CorruptObject(f"object {oid} content does not match its id", oid=oid)
    return plain
