"""The JSON Schemas shipped with tenure (``tenure/intake/schemas/``).

Validation always uses these files; a schema is never read from the archive
being validated.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

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
    errors = sorted(_validator(name).iter_errors(document), key=lambda e: list(e.path))
    return [_short(f"{'/'.join(str(p) for p in e.path) or '<root>'}: {e.message}") for e in errors[:5]]


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
