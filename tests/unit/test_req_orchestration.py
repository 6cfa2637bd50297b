"""Who orchestrates and who decides (white-box): P-36 and P-115.

P-36: the lifecycle service is the only orchestrator. ``transition_status``
and the store's ``close`` are called only from tenure/projects/lifecycle.py,
and the project store operations orchestrate nothing: they reach no
workspace, snapshot or object code and fire no engine event.

P-115: the ownership façade enforces a placement decision and never makes
one: every claim in tenure is made for the claiming pod itself, and the
façade reads nothing a placement decision is made from (pod lists, scores,
selectors, candidates).
"""

from __future__ import annotations

import ast
import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src", "tenure")
LIFECYCLE = "projects/lifecycle.py"
STORE_OPERATIONS = ("projects/store.py", "projects/ownership.py")


def modules() -> dict[str, ast.Module]:
    out = {}
    for path in glob.glob(os.path.join(SRC, "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as fh:
            out[os.path.relpath(path, SRC).replace(os.sep, "/")] = ast.parse(fh.read(), path)
    return out


def calls(tree: ast.AST, method: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
    ]


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_p36_transition_status_is_called_only_by_the_lifecycle_service() -> None:
    found = {rel: len(calls(tree, "transition_status")) for rel, tree in modules().items()}
    callers = {rel for rel, n in found.items() if n}
    assert callers == {LIFECYCLE}, f"transition_status called from {sorted(callers)}"
    assert found[LIFECYCLE] >= 5, "bring (2 steps) and suspend (3 steps) all go through transition_status"


def test_p36_the_store_close_is_called_only_by_the_lifecycle_service() -> None:
    # ProjectStore.close(tenant, name, closed_group_id, generation) takes four; LifecycleService.close three at
    # most; every other close() none
    callers = {
        rel
        for rel, tree in modules().items()
        for call in calls(tree, "close")
        if len(call.args) + len(call.keywords) >= 4
    }
    assert callers == {LIFECYCLE}, f"the store close is called from {sorted(callers)}"


@pytest.mark.parametrize("rel", STORE_OPERATIONS)
def test_p36_store_operations_orchestrate_nothing(rel: str) -> None:
    tree = modules()[rel]
    reached = {
        m
        for m in imported(tree)
        if m.startswith(
            ("tenure.workspaces", "tenure.snapshots", "tenure.objects", "tenure.projects.lifecycle", "tenure.faults")
        )
    }
    assert reached == set(), f"{rel} imports {sorted(reached)}"
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} | {
        node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
    }
    assert not {
        n
        for n in names
        if "Engines" in n
        or n in ("engines", "publish", "emit", "init_folder", "suspend_folder", "dispose", "checkpoint", "restore")
    }


def test_p115_every_claim_is_made_for_the_claiming_pod_itself() -> None:
    claims = [(rel, call) for rel, tree in modules().items() for call in calls(tree, "claim")]
    assert claims, "the façade and bring's renewal claim"
    for rel, call in claims:
        pod = call.args[2] if len(call.args) > 2 else next(k.value for k in call.keywords if k.arg == "pod_id")
        assert ast.unparse(pod) == "self.pod.pod_id", f"{rel}:{call.lineno} claims for {ast.unparse(pod)}"


def test_p115_the_facade_reads_nothing_a_placement_decision_is_made_from() -> None:
    tree = modules()["projects/facade.py"]
    used = {
        node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    deciding = {
        "list",
        "list_with_liveness",
        "find_projects_needing_owner",
        "find_pending_placement",
        "sum_score_by_home_pod_id",
        "find_by_home_pod_id",
        "find_running_by_home_pod_id",
        "mark_pending_placement",
        "set_placement",
    }
    assert used & deciding == set()
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not {a for a in attributes if a.startswith("placement") or a in ("labels", "capacity", "score")}


def test_p115_the_facade_claims_whatever_the_placement_says(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Eligibility is the placement service's question: a selector the pod does not match does not stop a claim."""
    from tenure.projects import OwnershipFacade, PodIdentity, PodRegistry, ProjectStore
    from tenure.store import open_store

    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    try:
        projects = ProjectStore(store)
        projects.create("acme", "gpu-job")
        projects.set_placement("acme", "gpu-job", {"gpu": "yes"}, 50.0)
        pod = PodIdentity.fresh("cpu-node")
        PodRegistry(store).register(pod, labels={"gpu": "no"})
        claimed = OwnershipFacade(store, pod).claim_for_local_pod("acme", "gpu-job")
        assert claimed.home_node == "cpu-node" and claimed.placement_selector == {"gpu": "yes"}
    finally:
        store.close()
