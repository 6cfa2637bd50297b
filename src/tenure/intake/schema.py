"""The JSON Schemas shipped with tenure (``tenure/intake/schemas/``).

Validation always uses these files; a schema is never read from the archive
being validated.

:func:`schema_errors` first tries a check compiled once from the same schema
(:func:`_compile`): plain closures for the keywords these schemas use, with
no per-call validator objects or reference lookups. It only ever *accepts*,
and only what ``jsonschema`` accepts too — wherever the two could differ
(a float where an integer is wanted, a boolean against ``const``/``enum``,
``uniqueItems`` over anything but strings, a ``oneOf`` branch it cannot
rule out by type) it answers "not sure" — and every document it does not
accept is validated by ``jsonschema``, which reports the errors. A schema
holding a keyword the compiler does not know is never compiled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
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
    accepts = _fast_check(name)
    if accepts is not None and accepts(document):
        return []
    errors = sorted(_validator(name).iter_errors(document), key=lambda e: list(e.path))
    return [_short(f"{'/'.join(str(p) for p in e.path) or '<root>'}: {e.message}") for e in errors[:5]]


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------- the compiled check

Check = Callable[[Any], bool]

#: keywords that never constrain an instance
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples"})
_JSON_TYPES: dict[type, str] = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    str: "string",
    dict: "object",
    list: "array",
}


class _Unsupported(Exception):
    """The schema uses something the compiler does not translate."""


@lru_cache(maxsize=4)
def _fast_check(name: str) -> Check | None:
    """The compiled check of a shipped schema, or None if it cannot be compiled."""
    schema = json.loads(schema_text(name))
    try:
        return _compile(schema, schema)
    except _Unsupported:
        return None


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` itself, or what its lone local ``$ref`` (``#/$defs/NAME``) names."""
    ref = schema.get("$ref")
    if ref is None:
        return schema
    match = re.fullmatch(r"#/\$defs/([A-Za-z0-9_]+)", str(ref))
    if match is None or len(schema) != 1 or match.group(1) not in root.get("$defs", {}):
        raise _Unsupported(f"$ref {ref!r}")
    target = root["$defs"][match.group(1)]
    if not isinstance(target, dict) or "$ref" in target:
        raise _Unsupported(f"$ref {ref!r}")
    return target


def _type_of(value: Any) -> str | None:
    """The JSON type of ``value`` when it is unambiguous (None for a float or anything unusual)."""
    return _JSON_TYPES.get(type(value))


def _type_check(allowed: list[str]) -> Check:
    names = set(allowed)
    if not names <= {"null", "boolean", "integer", "string", "object", "array", "number"}:
        raise _Unsupported(f"type {allowed!r}")
    if "number" in names:
        names.add("integer")
    return lambda value: _type_of(value) in names


def _excluded_by_type(schema: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` surely fails ``schema`` because of its ``type`` keyword."""
    allowed = schema.get("type")
    if allowed is None:
        return False
    names = set([allowed] if isinstance(allowed, str) else allowed)
    if "number" in names:
        names.add("integer")
    kind = _type_of(value)
    return kind is not None and kind not in names


def _compile(schema: Any, root: Mapping[str, Any]) -> Check:
    """A check that returns True only for values ``schema`` surely accepts."""
    if not isinstance(schema, dict):
        raise _Unsupported("boolean or non-object schema")
    schema = _resolve(schema, root)
    checks: list[Check] = []
    for keyword, arg in schema.items():
        if keyword in _ANNOTATIONS or keyword in ("properties", "additionalProperties"):
            continue
        checks.append(_keyword(keyword, arg, schema, root))
    if "properties" in schema or "additionalProperties" in schema:
        checks.append(_object_members(schema, root))

    def check(value: Any) -> bool:
        return all(c(value) for c in checks)

    return checks[0] if len(checks) == 1 else check


def _keyword(keyword: str, arg: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Check:  # noqa: C901
    if keyword == "type":
        return _type_check([arg] if isinstance(arg, str) else list(arg))
    if keyword in ("const", "enum"):
        options = [arg] if keyword == "const" else list(arg)
        if not all(type(o) in (str, int) for o in options):
            raise _Unsupported(f"{keyword} {arg!r}")
        pairs = {(type(o), o) for o in options}
        return lambda value: type(value) in (str, int) and (type(value), value) in pairs
    if keyword in ("minimum", "maximum"):
        if type(arg) is not int:
            raise _Unsupported(f"{keyword} {arg!r}")
        low = keyword == "minimum"
        return lambda value: (
            (value >= arg if low else value <= arg)
            if type(value) is int
            else _type_of(value) in ("string", "object", "array", "null")
        )
    if keyword in ("minLength", "maxLength"):
        if type(arg) is not int:
            raise _Unsupported(f"{keyword} {arg!r}")
        low = keyword == "minLength"
        return lambda value: not isinstance(value, str) or (len(value) >= arg if low else len(value) <= arg)
    if keyword == "pattern":
        compiled = re.compile(arg)  # what jsonschema does: re.search(pattern, instance)
        return lambda value: not isinstance(value, str) or compiled.search(value) is not None
    if keyword == "required":
        names = list(arg)
        return lambda value: not isinstance(value, dict) or all(n in value for n in names)
    if keyword == "propertyNames":
        key_check = _compile(arg, root)
        return lambda value: not isinstance(value, dict) or all(key_check(k) for k in value)
    if keyword == "items":
        item_check = _compile(arg, root)
        return lambda value: not isinstance(value, list) or all(item_check(i) for i in value)
    if keyword == "uniqueItems":
        if arg is not True:
            raise _Unsupported("uniqueItems false")
        return lambda value: (
            not isinstance(value, list) or (all(type(i) is str for i in value) and len(set(value)) == len(value))
        )
    if keyword == "oneOf":
        branches = [(_resolve(b, root) if isinstance(b, dict) else b, _compile(b, root)) for b in arg]
        for branch, _check in branches:
            if not isinstance(branch, dict):
                raise _Unsupported("oneOf branch")

        def one_of(value: Any) -> bool:
            passed = 0
            for branch, branch_check in branches:
                if branch_check(value):
                    passed += 1
                elif not _excluded_by_type(branch, value):
                    return False  # not sure this branch fails
            return passed == 1

        return one_of
    raise _Unsupported(keyword)


def _object_members(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Check:
    """``properties`` and ``additionalProperties`` (with no ``patternProperties``)."""
    if "patternProperties" in schema:
        raise _Unsupported("patternProperties")
    known = {name: _compile(sub, root) for name, sub in schema.get("properties", {}).items()}
    extra = schema.get("additionalProperties", True)
    extra_check: Check | None
    if extra is True:
        extra_check = None
    elif extra is False:
        extra_check = _never
    else:
        extra_check = _compile(extra, root)

    def members(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for name, item in value.items():
            if type(name) is not str:
                return False  # not sure: keys of JSON objects are strings
            check = known.get(name)
            if check is None:
                if extra_check is not None and not extra_check(item):
                    return False
            elif not check(item):
                return False
        return True

    return members


def _never(value: Any) -> bool:
    return False
