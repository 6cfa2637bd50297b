"""The races' fixtures: every race runs on PostgreSQL, in a fresh schema of its own (``url``) with the store
opened on it (``store``); a test opens its second connection on the same ``url``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tenure.store import Store, open_store


@pytest.fixture
def url() -> str:
    from tests.conftest import new_pg_schema_url

    return new_pg_schema_url()


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = open_store(url)
    yield s
    s.close()
