"""The ``backend`` fixture: SQLite store + object folder, or PostgreSQL store + PostgreSQL objects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.identity.helpers import Backend


@pytest.fixture(params=["folder", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request, tmp_path) -> Iterator[Backend]:  # type: ignore[no-untyped-def]
    if request.param == "folder":
        yield Backend(
            "folder",
            f"sqlite:///{tmp_path}/tenure.db",
            f"file://{tmp_path}/objects",
            f"file://{tmp_path}/other-objects",
            tmp_path,
            f"sqlite:///{tmp_path}/other-tenure.db",
        )
        return
    from tests.conftest import new_pg_schema_url

    url = new_pg_schema_url()
    yield Backend("postgres", url, url, new_pg_schema_url(), tmp_path, new_pg_schema_url())
