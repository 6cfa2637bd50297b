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

import array
import contextlib
import gc
import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "canonical_json",
    "canonical_parts",
    "join_parts",
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


def canonical_parts(value: Mapping[str, Any]) -> dict[str, bytes]:
    """The canonical JSON of each member of an object; :func:`join_parts` makes the object's from them.

    A manifest's next generation changes a few top-level members and keeps
    the others, so its canonical form is joined from the parts kept and the
    members changed, without encoding the kept ones (``metadata``, up to a
    mebibyte of producer data) again.
    """
    return {key: canonical_json(member) for key, member in value.items()}


def join_parts(parts: Mapping[str, bytes]) -> bytes:
    """``canonical_json`` of the object whose members' canonical forms are ``parts``: keys sorted, no spaces."""
    return b"{" + b",".join(canonical_json(key) + b":" + parts[key] for key in sorted(parts)) + b"}"


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
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: the deepest nesting of arrays and objects a manifest or checkpoint may have
MAX_JSON_DEPTH = 64
#: integers are exact in every JSON reader up to this magnitude (IEEE double)
MAX_JSON_INT = 2**53 - 1


_INFINITIES = (float("inf"), float("-inf"))
#: a ``\\u`` escape of a UTF-16 surrogate; only where one appears can a string hold a lone surrogate
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: a JSON string (keys included), escapes and all
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
#: an opening bracket counts +1, a closing one -1 (as a signed byte)
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
#: every digit becomes 0 and E becomes e, so numbers are found with plain byte searches
_NUMERALS = bytes.maketrans(b"123456789E", b"000000000e")
#: a whole JSON number: it starts where no digit, point, exponent or sign is before it, and its quantifiers
#: are possessive, so a number of a million digits is matched once, never backtracked into
_NUMBER = re.compile(rb"(?<![\d.eE+-])-?(\d++)(\.\d++)?([eE][+-]?\d++)?")


def _check_text(text: str) -> None:
    """Nesting, integers and finite numbers, checked on the text of a document the parser accepted.

    Outside its strings a JSON document is ASCII: brackets, numbers, the
    literals and punctuation. With the strings blanked out, the nesting is
    the running count of brackets, and the numbers that could be out of range
    are found by byte searches (an integer beyond 2**53 - 1 has 16 digits
    or more; only an exponent or 309 integer digits overflow a double), then
    converted as the parser converted them. No walk over the parsed values:
    a mebibyte of small lists is half a million of them.
    """
    skeleton = _STRING.sub('""', text).encode("ascii")
    signs = array.array("b", skeleton.translate(None, _NOT_BRACKET).translate(_SIGNS))
    if max(itertools.accumulate(signs), default=0) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels")
    numerals = skeleton.translate(_NUMERALS)
    if b"0" * 16 not in numerals and b"0e" not in numerals:
        return  # no integer of 16 digits, no exponent (and so no 309-digit number): every number is in range
    for match in _NUMBER.finditer(skeleton):
        digits, fraction, exponent = match.groups()
        if fraction is None and exponent is None:
            if len(digits) >= 16 and not -MAX_JSON_INT <= int(match.group()) <= MAX_JSON_INT:
                raise ValueError(f"integer {match.group()[:40].decode()}... is beyond +-(2**53 - 1)")
        elif (exponent is not None or len(digits) >= 309) and float(match.group()) in _INFINITIES:
            raise ValueError(f"number {match.group()[:40].decode()} is beyond the range of a double")


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No cyclic garbage collection while a document is parsed: a JSON parse makes no cycles, and a
    collection every few hundred containers made parsing a mebibyte of small lists four times slower."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def strict_json_loads(data: bytes) -> Any:
    """Parse UTF-8 JSON strictly, or raise ValueError.

    Refused: duplicate keys, NaN and infinities (also ``1e400``), integers
    beyond +-(2**53 - 1), nesting deeper than :data:`MAX_JSON_DEPTH`, and
    strings (keys included) holding a lone surrogate escape (``"\\ud800"``),
    which no UTF-8 file can hold. A document nested past what the parser can
    follow is refused the same way, never a crash.

    Numbers are parsed by the C parser (an integer of more digits than
    Python converts is refused there); the nesting and the numbers are then
    checked on the text (:func:`_check_text`), and the strings for lone
    surrogates only when the text holds a surrogate escape.
    """
    text = data.decode("utf-8")
    try:
        with _no_collection():
            value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    _check_text(text)
    if _SURROGATE_ESCAPE.search(text) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("JSON holds a lone surrogate escape, which is not text") from None
    return value
