"""Releasing one session's binding (``ProjectStore.unbind_session``), on SQLite and PostgreSQL: each guard term
alone — the connection, the project generation — with every other term true."""

from __future__ import annotations

import pytest

from tenure.errors import StaleGenerationError
from tenure.projects import ProjectStore
from tenure.projects.facade import OwnershipFacade
from tenure.projects.pods import PodIdentity
from tenure.projects.store import AlreadyBoundError
from tenure.store import Store
from tests.contract.test_guard_terms import TTL, raw


def test_unbind_releases_only_the_connection_it_names(store: Store) -> None:
    projects = ProjectStore(store)
    projects.create("acme", "p")
    pod = PodIdentity.fresh("a")
    project = OwnershipFacade(store, pod, lease_ttl=TTL).claim_for_local_pod("acme", "p")
    session = projects.create_session(project)
    projects.bind_session(session.id, "client-1", pod.pod_id, project.generation)
    with pytest.raises(AlreadyBoundError):
        projects.unbind_session(session.id, "client-2", project.generation)
    assert projects.session(session.id).bound_connection_id == "client-1", "another connection changes nothing"
    released = projects.unbind_session(session.id, "client-1", project.generation)
    assert released.bound_connection_id is None and released.bound_pod_id is None
    assert projects.unbind_session(session.id, "client-1", project.generation).bound_connection_id is None


def test_unbind_refuses_when_only_the_generation_is_stale(store: Store) -> None:
    projects = ProjectStore(store)
    projects.create("acme", "p")
    pod = PodIdentity.fresh("a")
    project = OwnershipFacade(store, pod, lease_ttl=TTL).claim_for_local_pod("acme", "p")
    session = projects.create_session(project)
    projects.bind_session(session.id, "client-1", pod.pod_id, project.generation)
    raw(store, "UPDATE projects SET generation = generation + 1 WHERE id = ?", (project.id,))
    with pytest.raises(StaleGenerationError):
        projects.unbind_session(session.id, "client-1", project.generation)
    assert projects.session(session.id).bound_connection_id == "client-1", "a fenced unbind changes nothing"
