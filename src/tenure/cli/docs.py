"""Generate ``docs/machines/*.md`` from the edge tables.

Run ``python -m tenure.cli.docs [FOLDER]``; a test fails when the committed
pages differ from what this writes.
"""

from __future__ import annotations

import sys
from typing import Any

from tenure.states import DESCRIPTIONS, MACHINES, Machine, write_docs


def documented_machines() -> dict[str, tuple[Machine[Any], str]]:
    """Every machine that has a page in ``docs/machines/``."""
    machines = {name: (m, DESCRIPTIONS[name]) for name, m in MACHINES.items()}
    from tenure.intake import machine as intake_machine

    machines.update(intake_machine.documented_machines())
    return machines


if __name__ == "__main__":  # pragma: no cover - docs generator
    for path in write_docs(sys.argv[1] if len(sys.argv) > 1 else "docs/machines", documented_machines()):
        print(path)
