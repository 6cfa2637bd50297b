"""The new user's story through the real CLI: one run with another --objects must not lose the workspace.

A checkpoint with the usual object store, then one with another
``--objects``: refused with ``object-store-mismatch`` (exit 2) naming both
identities and URLs, nothing published, nothing created there. Back on the
usual object store everything works. Read-only object folders: one with its
identity can still be read; one without is refused only when a checkpoint
needs to write it. And a corrupt object: verify sets it aside, a checkpoint
of the intact folder stores it again, the old snapshot verifies READY.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from tests.support.cli import error_of, ok_json, tenure, unprivileged
from tests.support.trees import read_tree, write_tree

IDENTITY = "tenure-objects.json"


def _cli(tmp_path: Path, *args: str, prefix: list[str] | None = None) -> Any:
    return tenure(["--json", *args], cwd=str(tmp_path), prefix=prefix or [])


def _chmod_tree(root: Path, writable: bool) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            mode = os.stat(name).st_mode
            os.chmod(name, (mode | stat.S_IWUSR) if writable else (mode & ~0o222))


def test_a_checkpoint_with_another_object_store_is_refused_and_the_usual_one_keeps_working(tmp_path: Path) -> None:
    src = tmp_path / "notes"
    write_tree(src)
    ok_json(_cli(tmp_path, "workspace", "create", "notes"))
    first = ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src)))["snapshot"]
    usual = tmp_path / ".tenure" / "objects"
    identity = json.loads((usual / IDENTITY).read_text())["identity"]

    (src / "today.txt").write_text("written on the day the other object store was tried\n")
    other = tmp_path / "elsewhere"
    refused = _cli(tmp_path, "--objects", f"file://{other}", "workspace", "checkpoint", "notes", "--from", str(src))
    assert refused.returncode == 2, refused.stderr
    error = error_of(refused)
    assert error["code"] == "object-store-mismatch"
    assert identity in error["message"] and f"file://{usual}" in error["message"]
    assert f"file://{other}" in error["message"] and f"file://{usual}" in error["hint"]
    assert not other.exists()  # nothing written there
    listed = ok_json(_cli(tmp_path, "snapshot", "list", "notes"))
    assert [s["id"] for s in listed] == [first["id"]]  # nothing published

    again = ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src)))
    assert not again["unchanged"]
    head = again["snapshot"]["id"]
    assert ok_json(_cli(tmp_path, "snapshot", "verify", head))["ok"]
    ok_json(_cli(tmp_path, "workspace", "restore", "notes", "--to", str(tmp_path / "out")))
    assert read_tree(tmp_path / "out") == read_tree(src)


def _store_identity(db: Path) -> str:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return str(conn.execute("SELECT identity FROM store_identity").fetchone()[0])


def _two_stores_one_object_folder(tmp_path: Path, *, legacy: bool) -> None:
    """The usual store with a checkpoint; a second data folder pointed at the usual object folder is refused."""
    mine, theirs = tmp_path / "notes", tmp_path / "theirs"
    write_tree(mine)
    write_tree(theirs)
    (theirs / "only-theirs.txt").write_text("the second store's own file\n")
    ok_json(_cli(tmp_path, "workspace", "create", "notes"))
    ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(mine)))
    usual = tmp_path / ".tenure" / "objects"
    record = usual / "tenure-objects-store.json"
    if legacy and record.exists():  # bound by an earlier tenure: the object folder names no store yet
        os.chmod(record, 0o644)
        os.unlink(record)
    before = sorted(p.name for p in usual.rglob("*"))

    other = ["--data", str(tmp_path / "B")]
    ok_json(_cli(tmp_path, *other, "workspace", "create", "wb"))
    refused = _cli(
        tmp_path, *other, "--objects", f"file://{usual}", "workspace", "checkpoint", "wb", "--from", str(theirs)
    )
    assert refused.returncode == 2, refused.stderr
    error = error_of(refused)
    assert error["code"] == "object-store-taken" and str(usual) in error["message"]
    usual_store = _store_identity(tmp_path / ".tenure" / "tenure.db")
    assert error["context"]["store_identity"] == _store_identity(tmp_path / "B" / "tenure.db") != usual_store
    assert error["context"]["bound_store"] == (None if legacy else usual_store)
    assert "own" in error["hint"]
    assert sorted(p.name for p in usual.rglob("*")) == before  # nothing written there
    assert ok_json(_cli(tmp_path, *other, "snapshot", "list", "wb")) == []

    # gc of the usual store, then everything of it still restores; the second store works on its own objects.
    ok_json(_cli(tmp_path, "gc", "--grace", "0"))
    ok_json(_cli(tmp_path, "workspace", "restore", "notes", "--to", str(tmp_path / "out")))
    assert read_tree(tmp_path / "out") == read_tree(mine)
    assert json.loads(record.read_text())["store"] == usual_store  # legacy: recorded by the usual store's run
    ok_json(_cli(tmp_path, *other, "workspace", "checkpoint", "wb", "--from", str(theirs)))
    ok_json(_cli(tmp_path, *other, "workspace", "restore", "wb", "--to", str(tmp_path / "out-b")))
    assert read_tree(tmp_path / "out-b") == read_tree(theirs)


def test_a_second_store_on_the_object_folder_of_another_is_refused_and_gc_keeps_everything(tmp_path: Path) -> None:
    _two_stores_one_object_folder(tmp_path, legacy=False)


def test_a_second_store_on_an_object_folder_an_earlier_tenure_bound_is_refused_too(tmp_path: Path) -> None:
    _two_stores_one_object_folder(tmp_path, legacy=True)


def test_a_read_only_object_folder_with_its_identity_can_be_read(tmp_path: Path) -> None:
    src = tmp_path / "notes"
    write_tree(src)
    ok_json(_cli(tmp_path, "workspace", "create", "notes"))
    snap = ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src)))["snapshot"]
    objects = tmp_path / ".tenure" / "objects"
    _chmod_tree(objects, writable=False)
    try:
        listed = _cli(tmp_path, "snapshot", "list", "notes", prefix=unprivileged())
        restored = _cli(tmp_path, "workspace", "restore", "notes", "--to", str(tmp_path / "out"), prefix=unprivileged())
        verified = _cli(tmp_path, "snapshot", "verify", snap["id"], prefix=unprivileged())
    finally:
        _chmod_tree(objects, writable=True)
    assert [s["id"] for s in ok_json(listed)] == [snap["id"]]
    assert restored.returncode == 0, restored.stderr
    assert read_tree(tmp_path / "out") == read_tree(src)
    assert json.loads(verified.stdout)["ok"], verified.stderr


def test_a_read_only_object_folder_without_identity_is_refused_only_when_a_checkpoint_writes(tmp_path: Path) -> None:
    src = tmp_path / "notes"
    write_tree(src)
    ok_json(_cli(tmp_path, "workspace", "create", "notes"))
    snap = ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src)))["snapshot"]
    # As a data folder written before identities: no identity file, no binding in the store.
    objects = tmp_path / ".tenure" / "objects"
    os.chmod(objects / IDENTITY, 0o644)
    os.unlink(objects / IDENTITY)
    import sqlite3

    with sqlite3.connect(tmp_path / ".tenure" / "tenure.db") as conn:
        conn.execute("DELETE FROM object_store_binding")
    (src / "today.txt").write_text("new\n")
    _chmod_tree(objects, writable=False)
    try:
        restored = _cli(tmp_path, "workspace", "restore", "notes", "--to", str(tmp_path / "out"), prefix=unprivileged())
        refused = _cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src), prefix=unprivileged())
    finally:
        _chmod_tree(objects, writable=True)
    assert restored.returncode == 0, restored.stderr
    assert refused.returncode == 5
    error = error_of(refused)
    assert error["code"] == "object-store-read-only" and "identity" in error["message"]
    assert [s["id"] for s in ok_json(_cli(tmp_path, "snapshot", "list", "notes"))] == [snap["id"]]
    # Writable again: adopted on first use, and the checkpoint publishes.
    done = ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src)))
    assert not done["unchanged"] and (objects / IDENTITY).exists()


def test_verify_sets_a_corrupt_object_aside_and_a_checkpoint_of_the_intact_folder_repairs_it(tmp_path: Path) -> None:
    src = tmp_path / "notes"
    write_tree(src)
    ok_json(_cli(tmp_path, "workspace", "create", "notes"))
    old = ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src)))["snapshot"]
    objects = tmp_path / ".tenure" / "objects"
    victim = max((p for p in objects.glob("??/*")), key=lambda p: p.stat().st_size)  # a chunk of the large file
    data = bytearray(victim.read_bytes())
    for i in range(len(data) // 2, len(data)):
        data[i] ^= 0x5A
    os.chmod(victim, 0o644)
    victim.write_bytes(bytes(data))

    damaged = _cli(tmp_path, "snapshot", "verify", old["id"])
    assert damaged.returncode == 6, damaged.stderr
    report = json.loads(damaged.stdout)
    assert report["snapshot"]["state"] == "DEGRADED" and report["set_aside"] == [victim.name]
    assert not victim.exists() and [p.name.split(".")[0] for p in (objects / "corrupt").iterdir()] == [victim.name]

    repaired = ok_json(_cli(tmp_path, "workspace", "checkpoint", "notes", "--from", str(src)))
    assert not repaired["unchanged"] and repaired["snapshot"]["state"] == "READY"
    assert victim.exists()
    healed = ok_json(_cli(tmp_path, "snapshot", "verify", old["id"]))
    assert healed["ok"] and healed["snapshot"]["state"] == "READY"
    ok_json(_cli(tmp_path, "workspace", "restore", "notes", "--snapshot", old["id"], "--to", str(tmp_path / "out")))
    assert read_tree(tmp_path / "out") == read_tree(src)
