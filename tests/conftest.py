"""Shared fixtures: a real SQLite file and a real PostgreSQL per test.

PostgreSQL: one throw-away database per test run (per xdist worker), created
from ``TENURE_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
and dropped at the end; each test gets its own schema in it. Outside CI an
unreachable server skips the PostgreSQL tests with one reason; with
``CI=true`` it fails them instead.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import quote

import pytest
from hypothesis import settings

from tests.support.s3_server import s3_endpoint, s3_url  # noqa: F401 - fixtures: a moto S3 server per test process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADMIN_URL = os.environ.get("TENURE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Hypothesis: under CI the same examples every run (derandomized, nothing read from or written to the
# example database) and a deadline per example, generous enough for tests that build and restore real
# folders; elsewhere random exploration without a deadline. HYPOTHESIS_PROFILE=ci|dev picks one by hand.
# A test's own @settings still wins for the values it sets.
settings.register_profile("ci", derandomize=True, database=None, deadline=timedelta(seconds=30), print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else "dev"))

_pg_state: dict[str, object] = {}


def _admin_connect():  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)


def _pg_database() -> str:
    """Create (once per process) the throw-away database; return its base URL."""
    if "url" in _pg_state:
        return str(_pg_state["url"])
    if "error" in _pg_state:
        _unavailable(str(_pg_state["error"]))
    try:
        with _admin_connect() as conn:
            name = f"tenure_test_{uuid.uuid4().hex[:10]}"
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        _pg_state["error"] = f"PostgreSQL not reachable at {ADMIN_URL} ({type(exc).__name__}); set TENURE_TEST_PG"
        _unavailable(str(_pg_state["error"]))
    base = ADMIN_URL.rsplit("/", 1)[0]
    _pg_state["name"] = name
    _pg_state["url"] = f"{base}/{name}"
    return str(_pg_state["url"])


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    name = _pg_state.get("name")
    if not name:
        return
    try:
        with _admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except Exception:  # noqa: BLE001 - best effort cleanup
        pass


def new_pg_schema_url() -> str:
    """A URL whose connections see only a fresh, empty schema."""
    import psycopg

    base = _pg_database()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{base}?options={quote(f'-csearch_path={schema}')}"


@pytest.fixture
def sqlite_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{tmp_path}/tenure.db"


@pytest.fixture
def pg_url() -> str:
    return new_pg_schema_url()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path) -> str:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tenure.db"
    return new_pg_schema_url()


@pytest.fixture
def store(store_url) -> Iterator[object]:  # type: ignore[no-untyped-def]
    from tenure.store import open_store

    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def objects(tmp_path):  # type: ignore[no-untyped-def]
    from tenure.objects.local import LocalObjectStore

    return LocalObjectStore(str(tmp_path / "objects"))


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture
def ws(tmp_path):  # type: ignore[no-untyped-def]
    """A fresh intake workspace in a temporary folder."""
    from tenure.intake import Workspace

    return Workspace(tmp_path / "ws")
