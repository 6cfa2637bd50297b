"""The pod API's contract: the OpenAPI document equals the stored copy (tests/contract/golden/openapi.json).

A route renamed, a parameter dropped, a body field retyped or a status removed changes the document and
fails here; a deliberate change of the contract updates the stored copy in the same commit
(``TENURE_UPDATE_GOLDEN=1`` rewrites it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tenure.api.app import create_app
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.store import open_store

GOLDEN = Path(__file__).parent / "golden" / "openapi.json"


def _document(tmp_path: Path) -> dict[str, Any]:
    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    try:
        pod = PodRuntime(
            ServeConfig(data_dir=str(tmp_path / "data"), self_pull=False),
            store,
            LocalObjectStore(str(tmp_path / "objects")),
        )
        doc = create_app(pod).openapi()
    finally:
        store.close()
    doc["info"]["version"] = "*"  # the release number is not the contract
    # one JSON round trip: tuples become lists, as in the stored copy
    return json.loads(json.dumps(doc))  # type: ignore[no-any-return]


def test_openapi_document_equals_the_stored_copy(tmp_path: Path) -> None:
    doc = _document(tmp_path)
    if os.environ.get("TENURE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    stored = json.loads(GOLDEN.read_text())
    assert sorted(doc["paths"]) == sorted(stored["paths"]), "routes added or removed"
    for path, operations in stored["paths"].items():
        assert doc["paths"][path] == operations, f"the operations of {path} changed"
    assert doc == stored
