"""Engine factories named by ``module:factory`` in the engine tests."""

from __future__ import annotations

from tenure.projects import EnginesStartRequested, EnginesStopRequested


class NoteEngine:
    """An engine that notes the events it is given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def start(self, event: EnginesStartRequested, folder: str) -> None:
        self.seen.append(("start", event.project_name, folder))

    def stop(self, event: EnginesStopRequested, folder: str) -> None:
        self.seen.append(("stop", event.project_name, folder))


def make_engine() -> NoteEngine:
    return NoteEngine()


class Factories:
    @staticmethod
    def nested() -> NoteEngine:
        return NoteEngine()


def not_an_engine() -> object:
    return object()


def failing_factory() -> NoteEngine:
    raise RuntimeError("the factory is out of order")


AN_INSTANCE = NoteEngine()
