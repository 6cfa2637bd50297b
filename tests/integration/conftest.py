"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tenure.objects import open_object_store
from tenure.store import open_store
from tenure.workspaces import WorkspaceService


@pytest.fixture(params=["sqlite+folder", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(request, tmp_path) -> Iterator[WorkspaceService]:  # type: ignore[no-untyped-def]
    """A workspace service on SQLite + a local object folder, or on PostgreSQL for both."""
    if request.param == "sqlite+folder":
        store = open_store(f"sqlite:///{tmp_path}/tenure.db")
        objects = open_object_store(f"file://{tmp_path}/objects")
    else:
        from tests.conftest import new_pg_schema_url

        url = new_pg_schema_url()
        store, objects = open_store(url), open_object_store(url)
    yield WorkspaceService(store, objects, str(tmp_path / "data"))
    store.close()
    objects.close()
