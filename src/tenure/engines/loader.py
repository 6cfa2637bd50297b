"""Engine specs to engines: a registered entry-point name or ``module:factory``."""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from tenure.errors import ConfigurationError
from tenure.projects.lifecycle import Engine

__all__ = ["ENTRY_POINT_GROUP", "BadEngineError", "load_engine", "load_engines", "registered_names"]

#: the entry-point group engines register under (``[project.entry-points."tenure.engines"]``)
ENTRY_POINT_GROUP = "tenure.engines"


class BadEngineError(ConfigurationError):
    code = "bad-engine"


def registered_names() -> list[str]:
    """The engine names registered in the ``tenure.engines`` entry-point group, sorted."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def load_engines(specs: list[str]) -> list[Engine]:
    """One engine per spec, in the order given (that is the order events are delivered in)."""
    return [load_engine(spec) for spec in specs]


def load_engine(spec: str) -> Engine:
    """The engine a spec names: a registered name, or ``module:factory``.

    The factory (a class, or a callable taking no arguments) is called once.
    Raises :class:`BadEngineError` (code ``bad-engine``) for an unknown name,
    a module or attribute that cannot be imported, something that is not a
    factory, a factory that fails, or one whose result has no ``start`` and
    ``stop``.
    """
    spec = spec.strip()
    if ":" in spec:
        factory = _import_factory(spec)
    else:
        factory = _registered_factory(spec)
    if not callable(factory):
        raise _bad(spec, f"it names a {type(factory).__name__}, not a factory (a class or a callable)")
    try:
        engine = factory()
    except Exception as exc:
        raise _bad(spec, f"its factory failed: {type(exc).__name__}: {exc}") from exc
    if not (callable(getattr(engine, "start", None)) and callable(getattr(engine, "stop", None))):
        raise _bad(spec, f"its factory returned {type(engine).__name__}, which has no start and stop methods")
    return engine  # type: ignore[no-any-return]


def _registered_factory(name: str) -> Any:
    found: list[EntryPoint] = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise _bad(name, "no engine is registered under that name")
    try:
        return found[0].load()
    except Exception as exc:
        raise _bad(name, f"its entry point {found[0].value} cannot be imported: {type(exc).__name__}: {exc}") from exc


def _import_factory(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise _bad(spec, "a spec with ':' must be module:factory")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise _bad(spec, f"module {module_name} cannot be imported: {type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise _bad(spec, f"module {module_name} has no attribute {attribute}") from exc
    return target


def _bad(spec: str, why: str) -> BadEngineError:
    names = registered_names()
    registered = ", ".join(names) if names else "none"
    return BadEngineError(
        f"engine {spec!r}: {why}",
        hint=f"name a registered engine (registered: {registered}) or give module:factory",
        spec=spec,
        registered=names,
    )
