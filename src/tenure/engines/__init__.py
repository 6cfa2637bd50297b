"""Engines: user code started for a project while it runs on this pod.

An engine is anything with ``start(event, folder)`` and ``stop(event,
folder)`` (:class:`tenure.projects.Engine`). A pod loads its engines from
specs (``tenure serve --engine SPEC``), each one either

* a name registered in the entry-point group ``tenure.engines`` (the entry
  point names a factory: a class or a callable taking no arguments), or
* ``module:factory`` — the module is imported and the attribute called.

::

    from tenure.engines import load_engines

    engines = load_engines(["intake", "my_company.agents:make_engine"])

The built-in engine ``intake`` (:class:`IntakeEngine`) polls the intake that
lives in each running project's workspace folder. See ``docs/engines.md``.
"""

from .intake import INTERVAL_ENV, IntakeEngine, PassReport
from .loader import ENTRY_POINT_GROUP, BadEngineError, load_engine, load_engines, registered_names

__all__ = [
    "ENTRY_POINT_GROUP",
    "BadEngineError",
    "load_engine",
    "load_engines",
    "registered_names",
    "IntakeEngine",
    "PassReport",
    "INTERVAL_ENV",
]
