"""Releasing one session's binding (``ProjectStore.unbind_session``), on SQLite and PostgreSQL: each guard term
alone — the connection, the project generation — with every other term true."""

from __future__ import annotations

import pytest

from tenure.errors import StaleGenerationError
from tenure.projects.store import AlreadyBoundError
from tenure.store import Store
from tests.contract.test_guard_terms import TTL
from tests.support.projects import bound_session
from tests.support.store import raw


def test_unbind_releases_only_the_connection_it_names(store: Store) -> None:
    projects, project, session = bound_session(store, TTL)
    with pytest.raises(AlreadyBoundError):
        projects.unbind_session(session.id, "client-2", project.generation)
    assert projects.session(session.id).bound_connection_id == "client-1", "another connection changes nothing"
    released = projects.unbind_session(session.id, "client-1", project.generation)
    assert released.bound_connection_id is None and released.bound_pod_id is None
    assert projects.unbind_session(session.id, "client-1", project.generation).bound_connection_id is None


def test_unbind_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    projects, project, session = bound_session(store, TTL)
    raw(store, "UPDATE projects SET generation = generation + 1 WHERE id = ?", (project.id,))
    with pytest.raises(StaleGenerationError):
        projects.unbind_session(session.id, "client-1", project.generation)
    assert projects.session(session.id).bound_connection_id == "client-1", "a fenced unbind changes nothing"
