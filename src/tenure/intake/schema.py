"""The JSON Schemas shipped with tenure (``tenure/intake/schemas/``).

Validation always uses these files; a schema is never read from the archive
being validated.

:func:`schema_errors` first asks ``jsonschema-rs`` (the same schema,
compiled once, validated in native code) whether a document is valid; only
a document it does not accept goes to ``jsonschema``, which decides and
reports the errors. So the fast check can only *accept*, and where the two
libraries could disagree the stricter answer reaches ``jsonschema``: a
document is accepted only if ``jsonschema-rs`` accepts it, and
``tests/integration/intake/test_schema_fast.py`` checks on valid documents and on
type-confusing mutations that ``jsonschema`` accepts every one it does
(the two must never differ the other way).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from typing import Any, cast

import jsonschema_rs
from jsonschema import Draft202012Validator

__all__ = ["MANIFEST_SCHEMA", "CHECKPOINT_SCHEMA", "schema_text", "schema_errors"]

MANIFEST_SCHEMA = "manifest-v1.schema.json"
CHECKPOINT_SCHEMA = "checkpoint-v1.schema.json"


def schema_text(name: str) -> str:
    """The text of a shipped schema."""
    return resources.files("tenure.intake").joinpath("schemas", name).read_text("utf-8")


@lru_cache(maxsize=4)
def _validator(name: str) -> Draft202012Validator:
    schema = json.loads(schema_text(name))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_errors(name: str, document: Any) -> list[str]:
    """Human-readable schema violations of ``document`` (empty when valid)."""
    accepts = _fast_check(name)
    if accepts is not None and accepts(document):
        return []
    errors = sorted(_validator(name).iter_errors(document), key=lambda e: list(e.path))
    return [_short(f"{'/'.join(str(p) for p in e.path) or '<root>'}: {e.message}") for e in errors[:5]]


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------- the fast check

Check = Callable[[Any], bool]


@lru_cache(maxsize=4)
def _fast_check(name: str) -> Check | None:
    """``jsonschema-rs``'s ``is_valid`` for a shipped schema (``None`` if it cannot compile it)."""
    try:
        return cast(Check, jsonschema_rs.validator_for(json.loads(schema_text(name))).is_valid)
    except (ValueError, jsonschema_rs.ValidationError):  # pragma: no cover - the shipped schemas compile
        return None
