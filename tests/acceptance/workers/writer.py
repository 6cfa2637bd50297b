"""A writer process for fencing tests.

    python -m tests.acceptance.workers.writer STORE_URL WORKSPACE HOLDER ROOT READY_FILE GO_FILE

Acquires a writer lease (taking over), starts a checkpoint, writes
READY_FILE, waits until GO_FILE exists, then tries to publish and prints one
JSON line: {"ok": true, "snapshot": …} or {"ok": false, "code": …}.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    url, workspace, holder, root, ready, go = sys.argv[1:7]
    from tenure.errors import TenureError
    from tenure.store import open_store

    store = open_store(url)
    lease = store.workspaces.acquire(workspace, holder, 30, takeover=True)
    ticket = store.workspaces.begin_checkpoint(lease, f"{holder}-key")
    store.workspaces.mark_uploaded(ticket, root, 1, 1, 1, [])
    with open(ready, "w") as fh:
        fh.write(str(lease.generation))
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        snap = store.workspaces.publish(lease, ticket)
        print(json.dumps({"ok": True, "snapshot": snap.id, "generation": lease.generation}))
    except TenureError as exc:
        print(json.dumps({"ok": False, "code": exc.code, "generation": lease.generation}))
    store.close()


if __name__ == "__main__":
    main()
