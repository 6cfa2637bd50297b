"""Projects set up on a store for the tests."""

from __future__ import annotations

from tenure.projects import PodIdentity, Project, ProjectStore, Session
from tenure.projects.facade import OwnershipFacade
from tenure.store import Store

#: The tenant of the tests' projects, and a project lease long enough never to run out within a test.
T = "acme"
TTL = 60.0


def bound_session(store: Store, ttl: float = TTL) -> tuple[ProjectStore, Project, Session]:
    """Project acme/p, claimed by a fresh pod ``a`` on a ``ttl`` lease, with one session bound to connection
    ``client-1``."""
    projects = ProjectStore(store)
    projects.create("acme", "p")
    pod = PodIdentity.fresh("a")
    project = OwnershipFacade(store, pod, lease_ttl=ttl).claim_for_local_pod("acme", "p")
    session = projects.create_session(project)
    projects.bind_session(session.id, "client-1", pod.pod_id, project.generation)
    return projects, project, session
