"""A claiming pod for ownership tests with real processes.

    python -m tests.acceptance.workers.claimer STORE_URL LEASE_TTL GO_PREFIX OUT_PREFIX MODE TENANT/NAME...

For each project i in turn: wait until the file ``GO_PREFIX<i>`` exists (the
shared start signal), then claim the project and write one JSON result to
``OUT_PREFIX<i>.<pod_id>`` (atomically, via rename). The pod identity is
created when the first start signal arrives (``TENURE_NODE_NAME`` pins the
node name), so a "restarted" process gets its id after its predecessor died.

MODE:

* ``raw`` — ``Ownership.claim``; the result records whether the row came back,
  and the owner this pod then reads;
* ``facade`` — ``OwnershipFacade.claim_for_local_pod``; a refusal records the
  error code and the holder it names;
* ``until`` — ``Ownership.claim`` repeated (polling with a deadline) until it
  succeeds; the result records the first attempt and the successful one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

DEADLINE_S = 60.0


def _wait(path: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"start signal {path} never came")
        time.sleep(0.0005)


def _write(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def main() -> None:
    url, ttl_s, go_prefix, out_prefix, mode, *refs = sys.argv[1:]
    ttl = float(ttl_s)
    from tenure.errors import TenureError
    from tenure.projects import Ownership, OwnershipFacade, PodIdentity, ProjectStore
    from tenure.store import open_store

    store = open_store(url)
    ownership = Ownership(store)
    projects = ProjectStore(store)
    pod: PodIdentity | None = None
    for i, ref in enumerate(refs):
        tenant, name = ref.split("/", 1)
        project_id = projects.get(tenant, name).id  # warm connection before the start signal
        _wait(f"{go_prefix}{i}")
        if pod is None:
            pod = PodIdentity.fresh(os.environ.get("TENURE_NODE_NAME"))
        result: dict[str, Any] = {"pod_id": pod.pod_id, "node": pod.node_name, "ref": ref}

        def attempt() -> dict[str, Any]:
            assert pod is not None
            before = ownership.owner(project_id, ttl)
            row = ownership.claim(tenant, name, pod.pod_id, pod.node_name, pod.endpoint, ttl)
            after = ownership.owner(project_id, ttl)
            return {
                "got": row is not None,
                "generation": None if row is None else row.generation,
                "owner_before": before.to_dict(),
                "owner_after": after.to_dict(),
                "mine": [p.id for p in ownership.find_by_home_pod_id(pod.pod_id)],
            }

        if mode == "raw":
            result.update(attempt())
        elif mode == "facade":
            facade = OwnershipFacade(store, pod, lease_ttl=ttl)
            try:
                row = facade.claim_for_local_pod(tenant, name)
                result.update(got=True, generation=row.generation)
            except TenureError as exc:
                result.update(got=False, code=exc.code, holder=exc.context.get("holder"))
        elif mode == "until":
            result["first"] = attempt()
            deadline = time.monotonic() + DEADLINE_S
            tries = 1
            last = result["first"]
            while not last["got"] and time.monotonic() < deadline:
                time.sleep(0.01)  # poll cadence
                last = attempt()
                tries += 1
            result.update(final=last, tries=tries)
        else:
            raise SystemExit(f"unknown mode {mode}")
        _write(f"{out_prefix}{i}.{pod.pod_id}", result)
    store.close()


if __name__ == "__main__":
    main()
