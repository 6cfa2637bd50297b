"""Plain bytes ⇄ stored payloads: BLAKE3 naming, zstd compression.

Both run in native code and release the GIL, so a thread pool encodes on
every core.

The module functions are the plain codec. The codec a repository uses is
:func:`codec_of` its opened object store: :data:`PLAIN` (these functions),
or, for an encrypted repository, the sealing codec of
:mod:`tenure.objects.crypto` (keyed ids, AEAD-sealed payloads) that
unlocking attached to it. Snapshot code that names, encodes or decodes
objects asks ``codec_of(objects)``, never the module functions.
"""

from __future__ import annotations

import threading

import blake3
import zstandard

from tenure.errors import IntegrityError

LEVEL = 3
_local = threading.local()


class CorruptObjectError(IntegrityError):
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
        raise CorruptObjectError(f"object {oid} does not decompress: {exc}", oid=oid) from exc
    if object_id(plain) != oid:
        raise CorruptObjectError(f"object {oid} content does not match its id", oid=oid)
    return plain


class Codec:
    """How one repository names, encodes and decodes objects: this one is the plain codec."""

    #: Whether payloads are sealed (tenure.objects.crypto).
    encrypted = False

    def object_id(self, plain: bytes | memoryview) -> str:
        return object_id(plain)

    def encode(self, plain: bytes | memoryview) -> tuple[str, bytes]:
        return encode(plain)

    def decode(self, oid: str, payload: bytes) -> bytes:
        return decode(oid, payload)


#: Names that start so are reserved for key objects (tenure.objects.crypto): no content id (64 hex digits)
#: takes one, and GC never collects them.
KEY_PREFIX = "key."


def reserved(name: str) -> bool:
    """Whether a stored name is a key object rather than content."""
    return name.startswith(KEY_PREFIX)


#: The codec of an unencrypted repository: BLAKE3 ids, zstd payloads, as always.
PLAIN = Codec()

#: The attribute of an opened object store that holds its codec when it is not the plain one.
CODEC_ATTRIBUTE = "codec"


def codec_of(objects: object) -> Codec:
    """The codec of an opened object store: the one unlocking attached to it, else :data:`PLAIN`."""
    found = getattr(objects, CODEC_ATTRIBUTE, None)
    return found if isinstance(found, Codec) else PLAIN


def compress(plain: bytes | memoryview) -> bytes:
    """zstd at :data:`LEVEL`, with the content size in the frame (the sealing codec compresses first)."""
    return _cctx().compress(plain)


def decompress(oid: str, payload: bytes) -> bytes:
    """The plain bytes of a zstd payload, or :class:`CorruptObjectError`."""
    try:
        return _dctx().decompress(payload)
    except zstandard.ZstdError as exc:
        raise CorruptObjectError(f"object {oid} does not decompress: {exc}", oid=oid) from exc
