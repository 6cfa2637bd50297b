"""The real CLI, paused inside a checkpoint once it holds the workspace's writer lease.

    python -m tests.acceptance.newuser.paused_cli READY_FILE GO_FIFO TENURE_ARGS...

Runs ``tenure TENURE_ARGS`` in this process. When the checkpoint is about to
read the folder (its writer lease acquired), it creates READY_FILE and blocks
until a line can be read from the FIFO GO_FIFO, then carries on.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    ready, go = sys.argv[1:3]
    from tenure.cli.main import root
    from tenure.workspaces import service

    build_tree = service.build_tree

    def paused(*args: Any, **kwargs: Any) -> Any:
        with open(ready, "w") as fh:
            fh.write("lease held")
        with open(go) as fh:  # blocks until the test opens the FIFO and writes
            fh.readline()
        return build_tree(*args, **kwargs)

    service.build_tree = paused  # type: ignore[assignment]
    root.main(args=sys.argv[3:], prog_name="tenure", obj={})


if __name__ == "__main__":
    main()
