"""Cluster auth that keeps placing (ADR 0048), with real `tenure serve` processes on PostgreSQL: once an API
token exists, pods still place projects on each other with no extra step (the store's cluster credential),
and `tenure token revoke --all` is the way back to an open API."""

from __future__ import annotations

import pytest

from tenure.pod.tokens import CLUSTER_LABEL, TokenStore
from tenure.projects import LifecycleType, ProjectStore
from tenure.store import Store
from tests.support.pods import Cluster, owner_of, wait_for


@pytest.mark.postgres
def test_with_a_token_and_no_cluster_token_in_the_environment_twenty_projects_are_placed_on_both_pods(
    pg_cluster: tuple[Cluster, Store],
) -> None:
    cluster, store = pg_cluster
    tokens = TokenStore(store)
    tokens.create(None, admin=True, cluster=False, label="ops")  # the API is closed from now on
    # no self-pull: only the master's placements (an HTTP request to the target pod) bring projects
    a = cluster.start("a", "--tick", "0.3", pull=False)
    b = cluster.start("b", "--tick", "0.3", pull=False)
    names = [f"p{i}" for i in range(20)]
    projects = ProjectStore(store)
    for name in names:
        projects.create("acme", name, lifecycle_type=LifecycleType.PERMANENT)

    def placed() -> set[str] | None:
        owners = [owner_of(store, "acme", n) for n in names]
        return {o for o, live in owners if live and o} if all(live for _, live in owners) else None

    holders = wait_for(placed, 60, "all 20 projects placed")
    assert len(holders) == 2, f"placed on {len(holders)} pod(s) only: the other pod's placements were refused"
    labels = [t.label for t in tokens.list() if t.revoked_at is None]
    assert labels.count(CLUSTER_LABEL) == 1, "one credential, provisioned once by the pods"
    for pod in (a, b):
        assert "tnr_" not in pod.output(), "the credential is never printed"
    rotated = tokens.rotate_cluster_credential()
    assert [t.id for t in tokens.list() if t.label == CLUSTER_LABEL and t.revoked_at is None] == [rotated.id]


def test_revoke_all_opens_the_api_again_for_a_pod_started_afterwards(store: Store) -> None:
    tokens = TokenStore(store)
    tokens.create(None, admin=True, cluster=False)
    assert tokens.cluster_credential() is not None
    assert tokens.revoke_all() == 2
    fresh = TokenStore(store)
    assert fresh.any_exist() is False and fresh.cluster_credential() is None
