"""The ``node`` fixture: one started pod runtime on the test's store and a local object folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.store import Store


@pytest.fixture
def node(store: Store, tmp_path: Path) -> Iterator[PodRuntime]:
    made = PodRuntime(
        ServeConfig(data_dir=str(tmp_path / "a"), self_pull=False), store, LocalObjectStore(str(tmp_path / "objects"))
    )
    made.start()
    yield made
    made.stop()
