"""Encryption at rest, per object repository (docs/adr/0026-encryption-at-rest.md).

An encrypted repository holds, beside its objects, one or more **key
objects**: the repository's random 256-bit data key, wrapped (AES-256-GCM)
under a key-encryption key (KEK) that comes from a passphrase (scrypt, its
parameters recorded in the key object) or a key file (32 random bytes, raw
or base64). Key objects are stored through the ordinary object interface
under the reserved names ``key.0`` … ``key.15`` (:data:`KEY_SLOTS`), which
no content id can take (ids are 64 hex digits) and which GC never collects
(:func:`tenure.objects.codec.reserved`); a repository is encrypted exactly
when one of those names is stored. Rotation (:func:`rekey`) writes a new
wrapped copy into a free slot and removes the others: no object is
rewritten.

Unlocking attaches a :class:`SealedCodec` to the opened object store
(:func:`tenure.objects.codec.codec_of`). From the data key it derives, with
BLAKE3's key derivation, an **id key** — object ids become the keyed BLAKE3
hash of the plain bytes — and a **payload key**: each zstd-compressed
payload is sealed with AES-256-GCM under a random 96-bit nonce, the object
id bound as associated data::

    b"TSE1" | nonce (12 bytes) | ciphertext of the zstd frame | tag (16 bytes)

A payload that fails authentication (tampered, truncated, moved to another
id) is never decompressed: it is :class:`~tenure.objects.codec.CorruptObjectError`,
the existing corrupt-object path (ADR 0015).

The passphrase and the key file are never logged, stored or put in an
error message; :class:`KeySource` hides them from ``repr``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import blake3
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from tenure.errors import ConfigurationError, ConflictError
from tenure.objects.codec import (
    CODEC_ATTRIBUTE,
    KEY_PREFIX,
    Codec,
    CorruptObjectError,
    codec_of,
    compress,
    decompress,
)

if TYPE_CHECKING:
    from tenure.objects.base import ObjectStore

#: The reserved names of key objects, in the order they are tried and filled.
KEY_SLOTS = tuple(f"{KEY_PREFIX}{n}" for n in range(16))
#: The first bytes of a sealed payload (format 1: AES-256-GCM, 96-bit nonce, id as associated data).
MAGIC = b"TSE1"
NONCE_BYTES = 12
TAG_BYTES = 16
#: scrypt cost for a new passphrase wrap: N = 2**15, r = 8, p = 1 (32 MiB, about 0.1 s); recorded per key object.
SCRYPT_N = 1 << 15
SCRYPT_R = 8
SCRYPT_P = 1
_ID_CONTEXT = "tenure 2026 object ids v1"
_PAYLOAD_CONTEXT = "tenure 2026 object payloads v1"
_WRAP_AAD = b"tenure data key v1 "


class KeyRequiredError(ConfigurationError):
    """The repository is encrypted and no passphrase or key file was given."""

    code = "key-required"
    default_hint = "set TENURE_PASSPHRASE or TENURE_KEY_FILE (or pass --passphrase-file / --key-file)"


class WrongKeyError(ConfigurationError):
    """No key object of the repository opens with the passphrase or key file given."""

    code = "wrong-key"
    default_hint = (
        "check the passphrase or key file (after a rotation only the new one opens the repository); nothing"
        " was read or written"
    )


class NotEncryptedError(ConfigurationError):
    """A passphrase or key file was given for a repository that is not encrypted."""

    code = "not-encrypted"
    default_hint = (
        "unset TENURE_PASSPHRASE / TENURE_KEY_FILE for this repository; encryption is chosen when a repository"
        " is created (`tenure objects init --encrypt`)"
    )


class BadKeyFileError(ConfigurationError):
    """The key file cannot be read or does not hold 32 bytes (raw or base64)."""

    code = "bad-key-file"
    default_hint = "a key file holds 32 random bytes, raw or base64: `head -c 32 /dev/urandom > FILE`"


class ObjectsNotEmptyError(ConflictError):
    """``objects init --encrypt`` on a repository that already holds objects or keys."""

    code = "objects-not-empty"
    default_hint = "encryption is chosen when a repository is created: use a new, empty object store"


@dataclass(frozen=True)
class KeySource:
    """Where the key-encryption key comes from: a passphrase or a key file (never shown in ``repr``)."""

    passphrase: str | None = field(default=None, repr=False)
    key_file: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.passphrase is not None and self.key_file is not None:
            raise ConfigurationError(
                "give a passphrase or a key file, not both",
                code="configuration",
                hint="unset one of TENURE_PASSPHRASE / TENURE_KEY_FILE",
            )

    @classmethod
    def resolve(
        cls,
        *,
        passphrase_file: str | None = None,
        key_file: str | None = None,
        environ: Mapping[str, str] | None = None,
        prefix: str = "TENURE_",
    ) -> KeySource | None:
        """The key given by options, else by ``TENURE_PASSPHRASE`` / ``TENURE_KEY_FILE``; ``None`` when none is."""
        env = os.environ if environ is None else environ
        key_file = key_file or env.get(f"{prefix}KEY_FILE") or None
        if passphrase_file:
            return cls(passphrase=_read_passphrase(passphrase_file), key_file=key_file)
        passphrase = env.get(f"{prefix}PASSPHRASE") or None
        if passphrase is None and key_file is None:
            return None
        return cls(passphrase=passphrase, key_file=key_file)

    def describe(self) -> str:
        return "the key file" if self.key_file is not None else "the passphrase"

    def new_wrap(self, scrypt_n: int = SCRYPT_N) -> tuple[dict[str, Any], bytes]:
        """Fresh KEK parameters (a new salt for a passphrase) and the KEK they give."""
        if self.key_file is not None:
            params: dict[str, Any] = {"type": "key-file"}
        else:
            params = {"type": "scrypt", "salt": _b64(os.urandom(16)), "n": scrypt_n, "r": SCRYPT_R, "p": SCRYPT_P}
        return params, self.kek(params)

    def kek(self, params: Mapping[str, Any]) -> bytes:
        """The KEK for a key object's recorded parameters (``None`` for a kind this source cannot give)."""
        kind = params.get("type")
        if kind == "key-file":
            if self.key_file is None:
                raise _Unusable
            return _read_key_file(self.key_file)
        if kind == "scrypt":
            if self.passphrase is None:
                raise _Unusable
            try:
                salt = base64.b64decode(params["salt"], validate=True)
                n, r, p = int(params["n"]), int(params["r"]), int(params["p"])
                if not (2 <= n <= 1 << 22 and 1 <= r <= 32 and 1 <= p <= 16):
                    raise ValueError("scrypt parameters out of range")
                return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(self.passphrase.encode("utf-8"))
            except (KeyError, TypeError, ValueError, binascii.Error):
                raise _Unusable from None
        raise _Unusable


class _Unusable(Exception):
    """This key object cannot be opened with this key source (another kind, or malformed)."""


class SealedCodec(Codec):
    """Keyed BLAKE3 ids and AES-256-GCM-sealed zstd payloads, from one repository's data key."""

    encrypted = True

    def __init__(self, data_key: bytes) -> None:
        if len(data_key) != 32:
            raise ValueError("a data key has 32 bytes")
        self._id_key = blake3.blake3(data_key, derive_key_context=_ID_CONTEXT).digest()
        self._aead = AESGCM(blake3.blake3(data_key, derive_key_context=_PAYLOAD_CONTEXT).digest())

    def __repr__(self) -> str:
        return "SealedCodec(…)"

    def object_id(self, plain: bytes | memoryview) -> str:
        return blake3.blake3(plain, key=self._id_key).hexdigest()

    def seal(self, oid: str, compressed: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return MAGIC + nonce + self._aead.encrypt(nonce, compressed, MAGIC + oid.encode("ascii"))

    def encode(self, plain: bytes | memoryview) -> tuple[str, bytes]:
        oid = self.object_id(plain)
        return oid, self.seal(oid, compress(plain))

    def decode(self, oid: str, payload: bytes) -> bytes:
        if len(payload) < len(MAGIC) + NONCE_BYTES + TAG_BYTES or payload[: len(MAGIC)] != MAGIC:
            raise CorruptObjectError(f"object {oid} is not a sealed payload", oid=oid)
        nonce = payload[len(MAGIC) : len(MAGIC) + NONCE_BYTES]
        try:
            compressed = self._aead.decrypt(nonce, payload[len(MAGIC) + NONCE_BYTES :], MAGIC + oid.encode("ascii"))
        except InvalidTag:
            raise CorruptObjectError(
                f"object {oid} fails authentication (tampered, truncated, or stored under another id)", oid=oid
            ) from None
        plain = decompress(oid, compressed)
        if self.object_id(plain) != oid:
            raise CorruptObjectError(f"object {oid} content does not match its id", oid=oid)
        return plain


# ----------------------------------------------------------------------------- key objects


def key_slots(objects: ObjectStore) -> list[str]:
    """The stored key-object names, in slot order (one round trip)."""
    present = objects.has_many(KEY_SLOTS)
    return [slot for slot in KEY_SLOTS if slot in present]


def is_encrypted(objects: ObjectStore) -> bool:
    return bool(key_slots(objects))


def unlock(objects: ObjectStore, key: KeySource | None) -> Codec:
    """Attach the repository's codec to ``objects`` and return it.

    An encrypted repository needs ``key`` (``key-required``) that opens one of
    its key objects (``wrong-key``); an unencrypted one refuses a key
    (``not-encrypted``) and keeps the plain codec.
    """
    slots = key_slots(objects)
    if not slots:
        if key is not None:
            raise NotEncryptedError(
                f"the object store {_redacted(objects)} is not encrypted, but {key.describe()} was given"
            )
        return codec_of(objects)
    if key is None:
        raise KeyRequiredError(f"the object store {_redacted(objects)} is encrypted: a key is needed to open it")
    data_key, _ = _unwrap_any(objects, slots, key)
    codec = SealedCodec(data_key)
    setattr(objects, CODEC_ATTRIBUTE, codec)
    return codec


def init_encryption(objects: ObjectStore, key: KeySource, *, scrypt_n: int = SCRYPT_N) -> Codec:
    """Make an empty repository encrypted: a random data key, wrapped under ``key`` into the first slot."""
    if key_slots(objects):
        raise ObjectsNotEmptyError(f"the object store {_redacted(objects)} is already encrypted")
    if any(True for _ in objects.list_ids()):
        raise ObjectsNotEmptyError(
            f"the object store {_redacted(objects)} already holds objects stored without encryption"
        )
    data_key = secrets.token_bytes(32)
    _write_wrap(objects, data_key, key, scrypt_n)
    return unlock(objects, key)


def rekey(
    objects: ObjectStore, current: KeySource, new: KeySource, *, keep_old: bool = False, scrypt_n: int = SCRYPT_N
) -> str:
    """Wrap the data key under ``new`` into a free slot; unless ``keep_old``, remove every other key object.

    No object is read or rewritten: the data key, hence every id and
    payload, stays the same. Returns the new key object's name.
    """
    slots = key_slots(objects)
    if not slots:
        raise NotEncryptedError(f"the object store {_redacted(objects)} is not encrypted: there is no key to rotate")
    data_key, _ = _unwrap_any(objects, slots, current)
    slot = _write_wrap(objects, data_key, new, scrypt_n)
    if not keep_old:
        objects.delete_many([s for s in slots if s != slot])
    return slot


def _write_wrap(objects: ObjectStore, data_key: bytes, key: KeySource, scrypt_n: int) -> str:
    params, kek = key.new_wrap(scrypt_n)
    for slot in KEY_SLOTS:
        nonce = os.urandom(NONCE_BYTES)
        body = {
            "format": 1,
            "kind": "tenure-data-key",
            "kek": params,
            "cipher": "AES-256-GCM",
            "nonce": _b64(nonce),
            "wrapped": _b64(AESGCM(kek).encrypt(nonce, data_key, _WRAP_AAD + slot.encode())),
            "created_at": datetime.now(UTC).isoformat(),
        }
        payload = json.dumps(body, indent=1).encode() + b"\n"
        if objects.has_many([slot]):
            continue
        objects.put_many([(slot, payload)])
        if objects.get(slot) == payload:  # not taken by a concurrent writer meanwhile
            return slot
    raise ConflictError(
        f"all {len(KEY_SLOTS)} key slots of the object store {_redacted(objects)} are taken",
        code="objects-not-empty",
        hint="rotate without --keep-old to remove the old wrapped copies",
    )


def _unwrap_any(objects: ObjectStore, slots: list[str], key: KeySource) -> tuple[bytes, str]:
    """The data key from the first key object ``key`` opens, with its slot; else ``wrong-key``."""
    kinds: set[str] = set()
    for slot in slots:
        try:
            body = json.loads(objects.get(slot))
            params = body["kek"]
            kinds.add(str(params.get("type")))
            kek = key.kek(params)
            nonce = base64.b64decode(body["nonce"], validate=True)
            wrapped = base64.b64decode(body["wrapped"], validate=True)
            data_key = AESGCM(kek).decrypt(nonce, wrapped, _WRAP_AAD + slot.encode())
        except (_Unusable, InvalidTag, ValueError, KeyError, TypeError, AttributeError, binascii.Error):
            continue
        if len(data_key) == 32:
            return data_key, slot
    wanted = " or ".join(sorted({"a passphrase" if k == "scrypt" else "a key file" for k in kinds})) or "a key"
    raise WrongKeyError(
        f"{key.describe()} does not open the object store {_redacted(objects)} ({len(slots)} wrapped key(s),"
        f" opened by {wanted})"
    )


def _read_key_file(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(4096)
    except OSError as exc:
        raise BadKeyFileError(f"cannot read the key file {path}: {exc.strerror}", path=path) from None
    if len(raw) == 32:
        return raw
    try:
        decoded = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) != 32:
        raise BadKeyFileError(f"the key file {path} does not hold 32 bytes (raw or base64)", path=path)
    return decoded


def _read_passphrase(path: str) -> str:
    """The first line of a passphrase file (without its line break)."""
    try:
        with open(path, encoding="utf-8") as fh:
            line = fh.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"cannot read the passphrase file {path}: {exc}", code="bad-key-file", path=path
        ) from None
    if not line:
        raise ConfigurationError(f"the passphrase file {path} is empty", code="bad-key-file", path=path)
    return line


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _redacted(objects: ObjectStore) -> str:
    """The store's URL without the password a PostgreSQL URL may carry."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", objects.url)
