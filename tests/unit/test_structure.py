"""Structural rules a reviewer would otherwise check by hand.

* one fsync helper and one atomic-write helper (:mod:`tenure.fsio`): no other
  module calls ``os.fsync`` or defines its own;
* the lifecycle service talks to the workspace service, never to the
  ``tenure.store`` package;
* claim-or-raise exists once (the ownership façade).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tenure

SRC = Path(tenure.__file__).parent


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(SRC.rglob("*.py"))]


def _calls(tree: ast.AST, owner: str, attr: str) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == attr
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == owner
    ]


def test_only_fsio_calls_fsync() -> None:
    offenders = [
        f"{p.relative_to(SRC)}:{line}"
        for p, tree in _modules()
        if p.name != "fsio.py" or p.parent != SRC
        for line in _calls(tree, "os", "fsync") + _calls(tree, "os", "fdatasync")
    ]
    assert offenders == [], "use tenure.fsio.fsync_file / fsync_dir"


def test_fsync_and_atomic_write_helpers_are_defined_once() -> None:
    defined: dict[str, list[str]] = {}
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and (
                node.name.startswith(("fsync", "atomic_write")) or node.name in ("write_all", "make_dirs_durable")
            ):
                defined.setdefault(node.name, []).append(str(path.relative_to(SRC)))
    assert defined.pop("atomic_write_json") == ["intake/fsio.py"]  # JSON encoding over atomic_write
    assert defined == {
        name: ["fsio.py"] for name in ("fsync_file", "fsync_dir", "write_all", "make_dirs_durable", "atomic_write")
    }


def _imported_modules(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_lifecycle_reaches_storage_only_through_the_workspace_service() -> None:
    tree = ast.parse((SRC / "projects" / "lifecycle.py").read_text(encoding="utf-8"))
    imported = _imported_modules(tree)
    assert not [m for m in imported if m == "tenure.store" or m.startswith("tenure.store.")]
    assert "tenure.workspaces" in imported
    uses_store = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr in ("workspaces", "snapshots")
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "store"
    ]
    assert uses_store == [], "call the workspace service, not self.store.workspaces / self.store.snapshots"


def test_claim_or_raise_exists_once() -> None:
    raisers = [
        f"{p.relative_to(SRC)}"
        for p, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.Raise)
        and isinstance(n.exc, ast.Call)
        and isinstance(n.exc.func, ast.Name)
        and n.exc.func.id == "ClaimRejectedError"
    ]
    assert raisers == ["projects/facade.py"]
