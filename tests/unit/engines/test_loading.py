"""Engine specs: a name in the ``tenure.engines`` entry-point group, or ``module:factory``."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from tenure.engines import BadEngineError, IntakeEngine, load_engine, load_engines, registered_names
from tenure.errors import ConfigurationError
from tests.unit.engines.samples import NoteEngine


def test_the_intake_engine_is_registered_under_its_entry_point_name() -> None:
    assert "intake" in registered_names()
    (engine,) = load_engines(["intake"])
    assert isinstance(engine, IntakeEngine)


def test_module_factory_imports_the_module_and_calls_the_attribute() -> None:
    first, second, nested = load_engines(
        [
            "tests.unit.engines.samples:make_engine",
            "tests.unit.engines.samples:NoteEngine",
            "tests.unit.engines.samples:Factories.nested",
        ]
    )
    assert all(isinstance(e, NoteEngine) for e in (first, second, nested))
    assert len({id(first), id(second), id(nested)}) == 3  # one fresh engine per spec


def test_specs_keep_their_order() -> None:
    engines = load_engines(["tests.unit.engines.samples:make_engine", "intake"])
    assert [type(e).__name__ for e in engines] == ["NoteEngine", "IntakeEngine"]
    assert load_engines([]) == []


def _bad(spec: str) -> BadEngineError:
    with pytest.raises(BadEngineError) as info:
        load_engine(spec)
    error = info.value
    assert isinstance(error, ConfigurationError) and error.code == "bad-engine" and error.exit_code == 2
    assert spec in error.message and error.context["spec"] == spec
    assert "intake" in error.hint and "module:factory" in error.hint  # the registered names, and the other form
    return error


def test_an_unknown_name_is_a_bad_engine_listing_the_registered_names() -> None:
    error = _bad("no-such-engine")
    assert "no engine is registered" in error.message
    assert "intake" in error.context["registered"]


def test_a_module_that_cannot_be_imported_is_a_bad_engine() -> None:
    error = _bad("tests.unit.engines.no_such_module:make_engine")
    assert "cannot be imported" in error.message and "ModuleNotFoundError" in error.message
    error = _bad("tests.unit.engines.samples:no_such_factory")
    assert "no attribute no_such_factory" in error.message


def test_a_factory_that_returns_no_engine_is_a_bad_engine() -> None:
    error = _bad("tests.unit.engines.samples:not_an_engine")
    assert "no start and stop" in error.message and "object" in error.message
    error = _bad("tests.unit.engines.samples:failing_factory")
    assert "factory failed" in error.message and "out of order" in error.message
    error = _bad("tests.unit.engines.samples:AN_INSTANCE")
    assert "not a factory" in error.message


def test_an_entry_point_that_cannot_be_imported_is_a_bad_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = EntryPoint("broken", "tests.unit.engines.no_such_module:Engine", "tenure.engines")

    def entry_points(group: str) -> list[EntryPoint]:
        assert group == "tenure.engines"
        return [broken, EntryPoint("intake", "tenure.engines.intake:IntakeEngine", group)]

    monkeypatch.setattr("tenure.engines.loader.entry_points", entry_points)
    error = _bad("broken")
    assert "entry point tests.unit.engines.no_such_module:Engine cannot be imported" in error.message
    assert error.context["registered"] == ["broken", "intake"]


def test_a_malformed_module_factory_spec_is_a_bad_engine() -> None:
    for spec in (":make_engine", "tests.unit.engines.samples:"):
        _bad(spec)


def test_a_bad_intake_interval_is_a_bad_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENURE_INTAKE_INTERVAL", "0.25")
    (engine,) = load_engines(["intake"])
    assert isinstance(engine, IntakeEngine) and engine.interval == 0.25
    for raw in ("soon", "0", "-1", "inf", "nan"):
        monkeypatch.setenv("TENURE_INTAKE_INTERVAL", raw)
        with pytest.raises(BadEngineError) as info:
            load_engines(["intake"])
        assert info.value.code == "bad-engine" and "TENURE_INTAKE_INTERVAL" in str(info.value)
    monkeypatch.delenv("TENURE_INTAKE_INTERVAL")
    assert IntakeEngine().interval == 2.0
