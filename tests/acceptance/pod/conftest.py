"""The ``pg_cluster`` fixture: real `tenure serve` pods on a fresh PostgreSQL schema, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.store import Store, open_store
from tests.support.pods import Cluster


@pytest.fixture
def pg_cluster(tmp_path: Path, pg_url: str) -> Iterator[tuple[Cluster, Store]]:
    cluster = Cluster(tmp_path, pg_url, f"file://{tmp_path}/objects")
    store = open_store(pg_url)
    try:
        yield cluster, store
    finally:
        cluster.stop_all()
        store.close()
