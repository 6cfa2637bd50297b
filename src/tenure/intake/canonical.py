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
#: the record of a stored generation (format v2, ADR 0110); in the checkpoint namespace, but no checkpoint
GENERATION_RECORD = "history/checkpoints/generation.json"


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
    """Parse an ISO 8601 timestamp that must carry an offset and lie within years 1..9999 in UTC;
    ValueError otherwise."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"timestamp {text!r} has no UTC offset")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"timestamp {text!r} lies outside the years 1 to 9999 in UTC") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: the deepest nesting of arrays and objects a manifest or checkpoint may have
MAX_JSON_DEPTH = 64
#: integers are exact in every JSON reader up to this magnitude (IEEE double)
MAX_JSON_INT = 2**53 - 1


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 16 or abs(value := int(text)) > MAX_JSON_INT:
        raise ValueError(f"integer {text[:40]}{'...' if len(text) > 40 else ''} is beyond +-(2**53 - 1)")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is beyond the range of a double")
    return value


def _check_depth(value: Any) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def strict_json_loads(data: bytes) -> Any:
    """Parse UTF-8 JSON strictly, or raise ValueError.

    Refused: duplicate keys, NaN and infinities (also ``1e400``), integers
    beyond +-(2**53 - 1), nesting deeper than :data:`MAX_JSON_DEPTH`, and
    strings (keys included) holding a lone surrogate escape (``"\\ud800"``),
    which no UTF-8 file can hold. A document nested past what the parser can
    follow is refused the same way, never a crash.
    """
    try:
        value = json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except RecursionError:
        raise ValueError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    _check_depth(value)
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("JSON holds a lone surrogate escape, which is not text") from None
    return value
