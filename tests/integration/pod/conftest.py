"""The ``client`` fixture: the pod API of the module's ``node`` fixture, in process (no redirects followed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tenure.api.app import create_app
from tenure.pod.runtime import PodRuntime


@pytest.fixture
def client(node: PodRuntime) -> Iterator[TestClient]:
    with TestClient(create_app(node), follow_redirects=False) as c:
        yield c
