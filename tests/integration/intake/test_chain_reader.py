"""The checkpoint-chain reader rejects every kind of corruption (I-08..I-14),
and managed storage is checked against its names (I-31, I-37)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tenure.intake import CheckpointStore, IntakeConfig, LifecycleError, Limits, Package, Workspace, read_package
from tenure.intake.errors import PackageRejectedError
from tenure.intake.package import checkpoint_path
from tests.support.intake import admit, complete_package, rewrite_zip, to_building


@pytest.fixture
def stored(ws: Workspace) -> Package:
    """A stored generation 4 with a four-checkpoint chain."""
    to_building(ws)
    store = CheckpointStore(ws)
    store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="progress")
    return store.advance("case-A", "pkg-1", "INTERPRETING", step_id="interpret")


def reject(
    stored: Package, tmp_path: Path, code: str, config: IntakeConfig | None = None, **rewrite: Any
) -> PackageRejectedError:
    out = rewrite_zip(stored.path, tmp_path / "corrupt.zip", **rewrite)
    with pytest.raises(PackageRejectedError) as caught:
        read_package(out, config)
    assert caught.value.code == code, caught.value
    return caught.value


def older(stored: Package, index: int = 1) -> str:
    return stored.chain[index].path


def setter(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda document: document.update(fields)


def test_valid_chain_reads_back(stored: Package, tmp_path: Path) -> None:
    package = read_package(complete_package(stored.path, tmp_path / "complete.zip"))
    assert [c.step_id for c in package.chain] == ["interpret", "progress", "start", package.chain[-1].step_id]


def test_i08_link_escaping_the_package(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "checkpoint-path", edit={stored.chain[0].path: setter(previous="../../outside.json")})


def test_i08_pointer_outside_checkpoint_folder(stored: Package, tmp_path: Path) -> None:
    def point_elsewhere(manifest: dict[str, Any]) -> None:
        manifest["artifacts"]["lifecycle_checkpoint"] = "input/report.txt"

    reject(stored, tmp_path, "checkpoint-path", manifest=point_elsewhere)


def test_i08_file_not_named_after_its_step(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "checkpoint-path", edit={older(stored): setter(step_id="renamed")})


def test_i08_link_to_missing_checkpoint(stored: Package, tmp_path: Path) -> None:
    reject(
        stored,
        tmp_path,
        "checkpoint-missing",
        edit={stored.chain[0].path: setter(previous=checkpoint_path("never-written"))},
    )


def test_i09_cycle(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "checkpoint-cycle", edit={older(stored, 2): setter(previous=older(stored, 1))})


def test_i09_self_link(stored: Package, tmp_path: Path) -> None:
    latest = stored.chain[0].path
    reject(stored, tmp_path, "checkpoint-cycle", edit={latest: setter(previous=latest)})


@pytest.mark.parametrize("field", ["state", "previous_state"])
def test_i10_unknown_state(stored: Package, tmp_path: Path, field: str) -> None:
    reject(stored, tmp_path, "checkpoint-state", edit={older(stored): setter(**{field: "PONDERING"})})


def test_i10_unknown_manifest_state(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "invalid-manifest", manifest=setter(state="PONDERING"))


def test_i11_generation_backwards(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "checkpoint-order", edit={older(stored, 2): setter(generation=9)})


def test_i11_revision_backwards(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "checkpoint-order", edit={older(stored, 2): setter(analysis_revision=5)})


def test_i11_checkpoint_newer_than_manifest(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "checkpoint-order", edit={stored.chain[0].path: setter(generation=7)})


@pytest.mark.parametrize("field", ["case_id", "package_id"])
def test_i12_identity_differs(stored: Package, tmp_path: Path, field: str) -> None:
    reject(stored, tmp_path, "checkpoint-identity", edit={older(stored): setter(**{field: "other"})})


@pytest.mark.parametrize(
    "manifest_change",
    [
        {"state": "HYPOTHESIZING"},
        {"analysis_revision": 2, "history": {"revisions": 2}},
        {"routing": "outbox"},
        {"retry_count": 3},
    ],
)
def test_i13_latest_disagrees_with_manifest(stored: Package, tmp_path: Path, manifest_change: dict[str, Any]) -> None:
    error = reject(stored, tmp_path, "checkpoint-mismatch", manifest=setter(**manifest_change))
    assert error.context["fields"]


def test_i13_older_latest_checkpoint_is_not_compared(stored: Package, tmp_path: Path) -> None:
    """A newer generation made elsewhere: the manifest is authoritative (I-74)."""
    out = rewrite_zip(stored.path, tmp_path / "newer.zip", manifest=setter(generation=9, state="HYPOTHESIZING"))
    assert read_package(out).state.value == "HYPOTHESIZING"


def test_i14_checkpoint_read_is_capped(stored: Package, tmp_path: Path) -> None:
    config = IntakeConfig(limits=Limits(manifest_bytes=4096))
    padded = json.dumps(json.loads(stored.read(older(stored)))) + " " * 5000
    reject(stored, tmp_path, "checkpoint-too-large", config=config, changes={older(stored): padded.encode()})


def test_checkpoint_not_json_or_not_schema(stored: Package, tmp_path: Path) -> None:
    reject(stored, tmp_path, "checkpoint-invalid", changes={older(stored): b"{not json"})
    reject(stored, tmp_path, "checkpoint-invalid", edit={older(stored): lambda d: d.pop("source")})
    reject(stored, tmp_path, "checkpoint-invalid", edit={older(stored): setter(created_at="soon")})


def test_orphan_checkpoint(stored: Package, tmp_path: Path) -> None:
    orphan = checkpoint_path("orphan")
    reject(stored, tmp_path, "checkpoint-orphan", changes={orphan: stored.read(older(stored))})
    reject(stored, tmp_path, "checkpoint-path", changes={"history/checkpoints/notes.txt": b"x"})


def test_i31_generation_file_checked_against_manifest(ws: Workspace, stored: Package) -> None:
    folder = stored.path.parent
    shutil.copy(folder / "g00000001.zip", folder / "g00000005.zip")
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).current("case-A", "pkg-1")
    assert caught.value.code == "storage-corrupt"
    (folder / "g00000005.zip").unlink()
    other = to_building(ws, "case-B")
    shutil.copy(other.path, folder / "g00000005.zip")
    with pytest.raises(LifecycleError) as caught:
        CheckpointStore(ws).current("case-A", "pkg-1")
    assert caught.value.code == "storage-corrupt"


def test_i37_truncated_newest_generation_reported(ws: Workspace, stored: Package) -> None:
    data = stored.path.read_bytes()
    stored.path.unlink()  # the file is immutable (shared inode with caches): replace it
    stored.path.write_bytes(data[: len(data) // 2])
    store = CheckpointStore(ws)
    with pytest.raises(LifecycleError) as caught:
        store.current("case-A", "pkg-1")
    assert caught.value.code == "storage-corrupt"
    with pytest.raises(LifecycleError) as caught:
        store.advance("case-A", "pkg-1", "HYPOTHESIZING", step_id="h")
    assert caught.value.code == "storage-corrupt"
    assert store.generations("case-A", "pkg-1") == [1, 2, 3, 4]


def test_i37_corrupt_case_is_an_error_not_a_quarantine(ws: Workspace, stored: Package) -> None:
    from tenure.intake import InboxProcessor, ResultKind
    from tests.support.intake import put

    stored.path.unlink()
    stored.path.write_bytes(b"garbage")
    inbox_file = put(ws, "again.zip")
    results = InboxProcessor(ws).poll()
    [result] = [r for r in results if r.input_path is not None]
    assert result.kind is ResultKind.ERROR and result.code == "storage-corrupt"
    assert inbox_file.exists()
    assert list(ws.quarantine.iterdir()) == []


def test_manifest_rules(ws: Workspace, tmp_path: Path) -> None:
    package = admit(ws)
    reject(package, tmp_path, "invalid-manifest", manifest=lambda m: m.pop("routing"))
    reject(package, tmp_path, "invalid-manifest", manifest=setter(history={"revisions": 3}))
    reject(
        package,
        tmp_path,
        "invalid-manifest",
        manifest=setter(blocked={"reason": "x", "retry_at": "2030-01-01T00:00:00", "resume_state": "BUILDING_CASE"}),
    )
    reject(package, tmp_path, "invalid-package", manifest=setter(protected_files=["nope.txt"]))
    reject(package, tmp_path, "missing-manifest", changes={"manifest.json": None})
    reject(package, tmp_path, "invalid-manifest", changes={"manifest.json": b'{"a": 1, "a": 2}'})
