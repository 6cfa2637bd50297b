"""P-24: only the ownership module mentions the lease columns, in Python and through the queries it runs.

The schema and the named query files hold them too; a query that names them
may run only from ``tenure/projects/ownership.py``.
"""

from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALLOWED = {os.path.join("src", "tenure", "projects", "ownership.py")}


def test_p24_only_the_ownership_module_reads_home_pod_id_and_claimed_at() -> None:
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "src", "tenure", "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if rel in ALLOWED:
            continue
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if re.search(r"\b(home_pod_id|claimed_at|pod_bound|lease_renewed_at)\b", line):
                    offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "only tenure/projects/ownership.py may read the lease columns:\n" + "\n".join(offenders)


def test_p24_only_the_ownership_module_runs_queries_on_home_pod_id_and_claimed_at() -> None:
    from tenure.store.queries import STORE, load
    from tests.unit.test_queries import query_calls

    lease_queries = {
        q.name
        for q in load(STORE).blocks()
        if re.search(r"\b(home_pod_id|claimed_at|pod_bound|lease_renewed_at)\b", q.sql)
    }
    assert lease_queries, "the claim and the holder queries name the lease columns"
    offenders = [
        f"{module}:{line}: {name}"
        for module, line, name, _ in query_calls()
        if name in lease_queries and module != "tenure/projects/ownership.py"
    ]
    assert not offenders, "only tenure/projects/ownership.py may run queries on the lease columns:\n" + "\n".join(
        offenders
    )


def test_p113_removed_operations_do_not_exist() -> None:
    sources = "\n".join(
        open(p, encoding="utf-8").read()
        for p in glob.glob(os.path.join(ROOT, "src", "tenure", "**", "*.py"), recursive=True)
    )
    assert "find_permanent_orphans" not in sources and "clear_stale_home_nodes" not in sources
