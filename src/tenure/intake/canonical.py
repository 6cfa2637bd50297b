"""Canonical JSON, the hashes the intake uses, and UTC time helpers.

* ``id_hash`` — SHA-256 (hex) of an opaque id's UTF-8 bytes; used for
  ``cases/<case-hash>/<package-hash>/`` and ``case-<case-hash>.lock``.
* ``step_hash`` — SHA-256 (hex) of the step id; the checkpoint file name.
* ``fingerprint`` — SHA-256 over the sorted ``(path, sha256(content))``
  pairs of a package, with ``manifest.json`` hashed in canonical JSON.
* ``request_hash`` — SHA-256 of the canonical JSON of an advance request.

Canonical JSON: UTF-8, keys sorted, no insignificant whitespace, no NaN or
infinity (see ADR 0103).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "canonical_json",
    "sha256_hex",
    "id_hash",
    "step_hash",
    "fingerprint",
    "request_hash",
    "utc_now",
    "to_utc_text",
    "parse_aware",
    "strict_json_loads",
]

MANIFEST = "manifest.json"


def canonical_json(value: Any) -> bytes:
    """The one byte form of a JSON value used for hashing and comparison."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def id_hash(opaque_id: str) -> str:
    """Hash of an opaque id; the only form in which ids reach a path."""
    return sha256_hex(opaque_id.encode("utf-8", "surrogatepass"))


def step_hash(step_id: str) -> str:
    return sha256_hex(step_id.encode("utf-8", "surrogatepass"))


def fingerprint(entry_hashes: Mapping[str, str]) -> str:
    """Content fingerprint from ``path -> sha256(content)`` (manifest canonical)."""
    digest = hashlib.sha256(b"tenure-package-fingerprint-v1\n")
    for path in sorted(entry_hashes):
        encoded = path.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "big") + encoded)
        digest.update(bytes.fromhex(entry_hashes[path]))
    return "sha256:" + digest.hexdigest()


def request_hash(request: Mapping[str, Any]) -> str:
    return "sha256:" + sha256_hex(canonical_json(request))


def utc_now() -> datetime:
    return datetime.now(UTC)


def to_utc_text(moment: datetime) -> str:
    """An aware datetime as ISO 8601 in UTC (``2024-01-02T03:04:05.000006+00:00``)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("naive datetime")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def parse_aware(text: str) -> datetime:
    """Parse an ISO 8601 timestamp that must carry an offset; ValueError otherwise."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"timestamp {text!r} has no UTC offset")
    return moment.astimezone(UTC)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def strict_json_loads(data: bytes) -> Any:
    """Parse UTF-8 JSON rejecting duplicate keys, NaN and infinities."""
    return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
