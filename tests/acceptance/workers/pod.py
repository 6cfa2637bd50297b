"""A long-lived pod for fencing and lease tests with real processes.

    python -m tests.acceptance.workers.pod STORE_URL OBJECTS_DIR DATA_DIR TENANT/NAME LEASE_TTL READY CMD [HEARTBEAT_S]

Registers a fresh :class:`PodIdentity` (``TENURE_NODE_NAME`` pins the node
name, ``TENURE_POD_ENDPOINT`` sets its endpoint) in ``pods``, brings the
project with its own lifecycle service, writes files into the project folder
and creates a session, then writes READY (one JSON object: pod id, node,
generation, folder, workspace and session ids).

With HEARTBEAT_S > 0 a thread beats every HEARTBEAT_S seconds: pod row
heartbeat plus one ``renew_leases`` — what a real pod does, so its lease and
its liveness are both fresh at the moment it is killed. READY is written only
after the first beat.

Then it waits for the file CMD and, as the owner it believes it still is,
tries every durable write it could make for the project, printing one JSON
line with the outcome of each (``"ok"`` or the error code):

* ``checkpoint`` — ``lifecycle.workspaces.checkpoint`` of its folder under its
  writer lease (``store.workspaces.lease(ws_id, generation)``);
* ``transition`` — ``ProjectStore.transition_status`` RUNNING → SUSPENDING
  with its generation;
* ``retransition`` — ``transition_status`` from the status it reads now to
  RECOVERING (a re-bring; the status matches, only the generation differs);
* ``bind`` — ``ProjectStore.bind_session`` with its generation;
* ``held`` — how many leases it holds after a renewal (``renew_leases`` then ``find_by_home_pod_id``),
  and ``lost`` — whether the renewal's lost counter moved (a takeover of one of its projects).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

DEADLINE_S = 120.0


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _heartbeat(url: str, pod_id: str, every: float, first_beat: threading.Event) -> None:
    from tenure.projects import Ownership, PodRegistry
    from tenure.store import open_store

    store = open_store(url)  # its own connection
    pods, ownership = PodRegistry(store), Ownership(store)
    while True:
        pods.heartbeat(pod_id)
        ownership.renew_leases(pod_id)
        first_beat.set()
        time.sleep(every)  # the beat cadence, not synchronisation


def main() -> None:
    url, objects_dir, data_dir, ref, ttl_s, ready, cmd, *rest = sys.argv[1:]
    heartbeat = float(rest[0]) if rest else 0.0
    tenant, name = ref.split("/", 1)
    from tenure.errors import TenureError
    from tenure.objects.local import LocalObjectStore
    from tenure.projects import LifecycleConfig, LifecycleService, Ownership, PodIdentity, PodRegistry, ProjectStore
    from tenure.states import ProjectStatus
    from tenure.store import open_store

    store = open_store(url)
    objects = LocalObjectStore(objects_dir)
    pod = PodIdentity.fresh(os.environ.get("TENURE_NODE_NAME"), os.environ.get("TENURE_POD_ENDPOINT"))
    PodRegistry(store).register(pod)
    lifecycle = LifecycleService(store, objects, data_dir, pod, config=LifecycleConfig(lease_ttl=float(ttl_s)))
    project = lifecycle.bring(tenant, name)
    folder = lifecycle.folder(project)
    for i in range(5):
        with open(os.path.join(folder, f"a{i}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"written by pod A ({pod.pod_id}), file {i}\n" * (i + 1))
    projects = ProjectStore(store)
    session = projects.create_session(project)
    if heartbeat > 0:
        first_beat = threading.Event()
        threading.Thread(target=_heartbeat, args=(url, pod.pod_id, heartbeat, first_beat), daemon=True).start()
        if not first_beat.wait(DEADLINE_S):
            raise SystemExit("the heartbeat never beat")
    _write_json(
        ready,
        {
            "pod_id": pod.pod_id,
            "node": pod.node_name,
            "generation": project.generation,
            "folder": folder,
            "workspace_id": project.workspace_id,
            "project_id": project.id,
            "session_id": session.id,
        },
    )

    deadline = time.monotonic() + DEADLINE_S
    while not os.path.exists(cmd):
        if time.monotonic() > deadline:
            raise SystemExit("no command came")
        time.sleep(0.005)

    out: dict[str, Any] = {"generation": project.generation}

    def attempt(key: str, fn: Any) -> None:
        try:
            fn()
            out[key] = "ok"
        except TenureError as exc:
            out[key] = exc.code

    def checkpoint() -> None:
        lease = store.workspaces.lease(project.workspace_id, project.generation)
        assert lease is not None, "pod A's own writer lease record exists"
        lifecycle.workspaces.checkpoint(project.workspace_id, folder, lease=lease)

    attempt("checkpoint", checkpoint)
    attempt(
        "transition",
        lambda: projects.transition_status(
            tenant, name, ProjectStatus.RUNNING, ProjectStatus.SUSPENDING, generation=project.generation
        ),
    )
    attempt(
        "retransition",
        lambda: projects.transition_status(
            tenant, name, projects.get(tenant, name).status, ProjectStatus.RECOVERING, generation=project.generation
        ),
    )
    attempt("bind", lambda: projects.bind_session(session.id, "conn-a", pod.pod_id, project.generation))
    renewal = Ownership(store).renew_leases(pod.pod_id)
    out["held"] = len(Ownership(store).find_by_home_pod_id(pod.pod_id))
    out["lost"] = renewal is not None and renewal.lost > 0
    print(json.dumps(out), flush=True)
    store.close()


if __name__ == "__main__":
    main()
