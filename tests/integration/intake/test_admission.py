"""Inbox admission: duplicates, conflicts, returning packages and the poll
contract (I-61, I-62, I-67..I-74, I-104..I-115, I-126)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig, Limits, Package, ResultKind, State, Workspace
from tests.support.intake import (
    admit,
    complete_package,
    future,
    is_stored_v2,
    past,
    put,
    rewrite_zip,
    to_building,
)


def kinds(results: list[Any]) -> list[ResultKind]:
    return [r.kind for r in results]


def elsewhere(
    ws: Workspace, tmp_path: Path, name: str = "elsewhere", upto: int | None = None
) -> tuple[Workspace, CheckpointStore]:
    """Another service holding copies of this case's generations (external work)."""
    other = Workspace(tmp_path / name)
    source, target = ws.case_dir("case-A", "pkg-1"), other.case_dir("case-A", "pkg-1")
    target.mkdir(parents=True)
    for zipped in sorted(source.glob("g*.zip")):
        if upto is None or int(zipped.stem[1:]) <= upto:
            shutil.copy(zipped, target / zipped.name)
    return other, CheckpointStore(other)


def deliver(ws: Workspace, package: Package | Path, name: str = "returning.zip") -> Any:
    """Deliver a package; a stored generation (format v2) travels as its complete package (ADR 0110)."""
    path = package.path if isinstance(package, Package) else package
    if is_stored_v2(path):
        path = complete_package(path, ws.root.parent / f"{ws.root.name}-{name}")
    shutil.copy(path, ws.inbox / name)
    [result] = [r for r in InboxProcessor(ws).poll() if r.input_path is not None]
    return result


def set_manifest(**fields: Any) -> Any:
    return lambda manifest: manifest.update(fields)


# --------------------------------------------------------------------------- duplicates


def test_i67_redelivery_is_duplicate_without_new_generation(ws: Workspace) -> None:
    original = put(ws, "a.zip")
    raw = original.read_bytes()
    InboxProcessor(ws).poll()
    CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    (ws.inbox / "again.zip").write_bytes(raw)
    results = InboxProcessor(ws).poll()
    assert kinds(results) == [ResultKind.DUPLICATE]
    assert results[0].generation == 2
    assert CheckpointStore(ws).generations("case-A", "pkg-1") == [1, 2]
    assert not (ws.inbox / "again.zip").exists()


def test_i68_receipt_travels_with_the_package(ws: Workspace, tmp_path: Path) -> None:
    raw = put(ws, "a.zip").read_bytes()
    InboxProcessor(ws).poll()
    CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    fresh = Workspace(tmp_path / "fresh")
    target = fresh.case_dir("case-A", "pkg-1")
    target.mkdir(parents=True)
    # only generation 2 travels, as a complete package (a v2 generation alone would lack its link)
    complete_package(ws.case_dir("case-A", "pkg-1") / "g00000002.zip", target / "g00000002.zip")
    (fresh.inbox / "redelivered.zip").write_bytes(raw)
    results = InboxProcessor(fresh).poll()
    assert kinds(results) == [ResultKind.DUPLICATE]
    assert CheckpointStore(fresh).generations("case-A", "pkg-1") == [2]


def test_i69_seen_generation_with_other_content_is_a_conflict(ws: Workspace) -> None:
    put(ws, "a.zip", files={"a.txt": b"first"})
    InboxProcessor(ws).poll()
    put(ws, "b.zip", files={"a.txt": b"second"})
    results = InboxProcessor(ws).poll()
    assert kinds(results) == [ResultKind.QUARANTINED]
    assert results[0].code == "generation-conflict"
    report = json.loads((Path(results[0].paths["quarantine"]) / "validation_error.json").read_text())
    assert report["code"] == "generation-conflict" and report["hint"]


def test_i69_same_returning_generation_with_other_content(ws: Workspace, tmp_path: Path) -> None:
    package = to_building(ws)
    altered = rewrite_zip(package.path, tmp_path / "alt.zip", changes={"extra.txt": b"not in the stored generation"})
    result = deliver(ws, altered)
    assert result.kind is ResultKind.QUARANTINED and result.code == "generation-conflict"


def test_stale_generation_never_seen(ws: Workspace, tmp_path: Path) -> None:
    to_building(ws)
    _, store = elsewhere(ws, tmp_path)
    newer = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    jumped = rewrite_zip(newer.path, tmp_path / "g7.zip", manifest=set_manifest(generation=7))
    assert deliver(ws, jumped).kind is ResultKind.ACCEPTED
    unseen = rewrite_zip(newer.path, tmp_path / "g5.zip", manifest=set_manifest(generation=5))
    result = deliver(ws, unseen, "g5.zip")
    assert result.kind is ResultKind.QUARANTINED and result.code == "stale-package"
    assert deliver(ws, jumped, "g7-again.zip").kind is ResultKind.DUPLICATE


# --------------------------------------------------------------------------- returning


def test_i62_only_fresh_new_packages_are_validated(ws: Workspace, tmp_path: Path) -> None:
    fresh = admit(ws)
    assert fresh.state is State.VALIDATED
    package = CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    other = Workspace(tmp_path / "other")
    result = deliver(other, package)
    assert result.kind is ResultKind.ACCEPTED and result.state == "BUILDING_CASE"
    assert CheckpointStore(other).current("case-A", "pkg-1").state is State.BUILDING_CASE
    assert CheckpointStore(other).generations("case-A", "pkg-1") == [2]


def test_i61_returning_routing_preserved(ws: Workspace, tmp_path: Path) -> None:
    package = to_building(ws)
    _, store = elsewhere(ws, tmp_path)
    newer = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    routed = rewrite_zip(newer.path, tmp_path / "r.zip", manifest=set_manifest(generation=5, routing="review"))
    result = deliver(ws, routed)
    assert result.kind is ResultKind.ACCEPTED
    current = CheckpointStore(ws).current("case-A", "pkg-1")
    assert current.routing == "review" and current.generation == 5
    assert package.routing == "cases"


def test_i74_newer_generation_manifest_is_authoritative(ws: Workspace, tmp_path: Path) -> None:
    to_building(ws)
    _, store = elsewhere(ws, tmp_path)
    newer = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    external = rewrite_zip(
        newer.path,
        tmp_path / "e.zip",
        manifest=set_manifest(generation=7, state="HYPOTHESIZING", analysis_revision=3, history={"revisions": 3}),
    )
    assert deliver(ws, external).kind is ResultKind.ACCEPTED
    current = CheckpointStore(ws).current("case-A", "pkg-1")
    assert (current.state, current.analysis_revision, current.generation) == (State.HYPOTHESIZING, 3, 7)
    advanced = CheckpointStore(ws).advance("case-A", "pkg-1", "DIAGNOSING", step_id="d")
    assert advanced.generation == 8


def test_i70_protected_files_must_be_kept(ws: Workspace, tmp_path: Path) -> None:
    admit(ws, files={"evidence/log.txt": b"original"}, protected_files=["evidence/log.txt"])
    CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    _, store = elsewhere(ws, tmp_path)
    newer = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    changed = rewrite_zip(newer.path, tmp_path / "c.zip", changes={"evidence/log.txt": b"tampered"})
    assert deliver(ws, changed).code == "returning-protected-changed"
    unprotected = rewrite_zip(newer.path, tmp_path / "u.zip", manifest=set_manifest(protected_files=[]))
    assert deliver(ws, unprotected, "u.zip").code == "returning-protected-changed"
    assert deliver(ws, newer, "ok.zip").kind is ResultKind.ACCEPTED


def test_i71_lineage_must_extend_the_stored_chain(ws: Workspace, tmp_path: Path) -> None:
    to_building(ws)
    _, store = elsewhere(ws, tmp_path, upto=1)
    store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="another-start")
    forked = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    result = deliver(ws, forked)
    assert result.kind is ResultKind.QUARANTINED and result.code == "returning-lineage-broken"


def test_i72_revision_may_not_go_down(ws: Workspace, tmp_path: Path) -> None:
    to_building(ws)
    _, store = elsewhere(ws, tmp_path)
    newer = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    raised = rewrite_zip(
        newer.path,
        tmp_path / "r3.zip",
        manifest=set_manifest(generation=9, analysis_revision=3, history={"revisions": 3}),
    )
    assert deliver(ws, raised).kind is ResultKind.ACCEPTED
    lowered = rewrite_zip(newer.path, tmp_path / "r1.zip", manifest=set_manifest(generation=10))
    result = deliver(ws, lowered, "lower.zip")
    assert result.kind is ResultKind.QUARANTINED and result.code == "returning-revision-lowered"


def test_i73_history_cannot_be_erased(ws: Workspace, tmp_path: Path) -> None:
    to_building(ws)
    CheckpointStore(ws).advance(
        "case-A",
        "pkg-1",
        "BUILDING_CASE",
        step_id="r",
        artifacts={"reports/r1.md": b"# one"},
        artifact_pointers={"report": "reports/r1.md"},
    )
    _, store = elsewhere(ws, tmp_path)
    newer = store.advance("case-A", "pkg-1", "INTERPRETING", step_id="i")

    def drop_pointer(manifest: dict[str, Any]) -> None:
        del manifest["artifacts"]["report"]

    erased = rewrite_zip(newer.path, tmp_path / "e.zip", changes={"reports/r1.md": None}, manifest=drop_pointer)
    result = deliver(ws, erased)
    assert result.kind is ResultKind.QUARANTINED and result.code == "returning-history-erased"
    replaced = rewrite_zip(newer.path, tmp_path / "x.zip", changes={"reports/r1.md": b"# two"})
    assert deliver(ws, replaced, "x.zip").code == "returning-history-erased"


# --------------------------------------------------------------------------- the poll contract


def test_i104_validates_the_cached_copy_not_the_live_file(ws: Workspace) -> None:
    path = put(ws, "a.zip")

    def scribble(event: str, entry: Path) -> None:
        if event == "cached":
            entry.write_bytes(b"the producer rewrote this file")

    [result] = InboxProcessor(ws, observer=scribble).poll()
    assert result.kind is ResultKind.ACCEPTED
    assert result.code == "input-changed"
    assert path.read_bytes() == b"the producer rewrote this file"


def test_i105_i106_valid_admitted_invalid_quarantined_same_pass(ws: Workspace) -> None:
    (ws.inbox / "0-broken.zip").write_bytes(b"PK\x03\x04 truncated")
    put(ws, "1-good.zip", "case-good")
    (ws.inbox / "2-text.txt").write_text("hello")
    put(ws, "3-good.zip", "case-good-2")
    results = InboxProcessor(ws).poll()
    assert kinds(results) == [ResultKind.QUARANTINED, ResultKind.ACCEPTED, ResultKind.QUARANTINED, ResultKind.ACCEPTED]
    assert [r.code for r in results] == ["truncated-zip", None, "not-a-zip", None]
    reports = [json.loads((q / "validation_error.json").read_text()) for q in ws.quarantine.iterdir()]
    assert {r["code"] for r in reports} == {"truncated-zip", "not-a-zip"}
    assert all(r["message"] and r["hint"] for r in reports)
    assert list(ws.inbox.iterdir()) == []


def test_i107_oversized_goes_straight_to_quarantine(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", IntakeConfig(limits=Limits(archive_bytes=4096)))
    big = ws.inbox / "big.zip"
    big.write_bytes(os.urandom(10_000))
    raw = big.read_bytes()
    [result] = InboxProcessor(ws).poll()
    assert result.kind is ResultKind.QUARANTINED and result.code == "archive-too-large"
    assert list(ws.cache.iterdir()) == []
    assert (Path(result.paths["quarantine"]) / "package.zip").read_bytes() == raw
    assert not big.exists()


def test_i108_due_blocked_resumed_once_future_deferred(ws: Workspace) -> None:
    store = CheckpointStore(ws)
    to_building(ws, "due")
    to_building(ws, "later")
    store.block("due", "pkg-1", step_id="b", reason="x", retry_at=past())
    store.block("later", "pkg-1", step_id="b", reason="x", retry_at=future())
    results = InboxProcessor(ws).poll()
    by_case = {r.case_id: r for r in results}
    assert by_case["due"].kind is ResultKind.RESUMED
    assert by_case["due"].state == "BUILDING_CASE"
    assert by_case["later"].kind is ResultKind.DEFERRED
    again = InboxProcessor(ws).poll()
    assert kinds(again) == [ResultKind.DEFERRED]
    assert store.current("due", "pkg-1").generation == 4
    assert store.current("due", "pkg-1").latest.step_id == "resume:g00000003"  # type: ignore[union-attr]


def test_i109_max_jobs_bounds_admissions(ws: Workspace) -> None:
    for i in range(5):
        put(ws, f"{i}.zip", f"case-{i}")
    results = InboxProcessor(ws).poll(max_jobs=2)
    assert kinds(results) == [ResultKind.ACCEPTED] * 2
    assert sorted(p.name for p in ws.inbox.iterdir()) == ["2.zip", "3.zip", "4.zip"]


def test_i110_deferred_and_busy_do_not_use_max_jobs(ws: Workspace) -> None:
    store = CheckpointStore(ws)
    for name in ("b1", "b2"):
        to_building(ws, name)
        store.block(name, "pkg-1", step_id="b", reason="x", retry_at=future())
    put(ws, "1-busy.zip", "held")
    put(ws, "2-free.zip", "free")
    lock = ws.case_lock("held")
    assert lock.acquire()
    try:
        results = InboxProcessor(ws).poll(max_jobs=1)
    finally:
        lock.release()
    assert kinds(results) == [ResultKind.BUSY, ResultKind.ACCEPTED, ResultKind.DEFERRED, ResultKind.DEFERRED]
    assert results[0].code == "case-busy" and (ws.inbox / "1-busy.zip").exists()


def test_i112_corrupt_records_quarantined(ws: Workspace, tmp_path: Path) -> None:
    package = to_building(ws)
    corrupt = rewrite_zip(
        package.path, tmp_path / "c.zip", edit={package.chain[0].path: lambda d: d.update(case_id="other")}
    )
    result = deliver(ws, corrupt)
    assert result.kind is ResultKind.QUARANTINED and result.code == "checkpoint-identity"


@pytest.mark.parametrize("broken", ["cache", "cases"])
def test_i113_infrastructure_failure_leaves_input_pending(ws: Workspace, broken: str) -> None:
    path = put(ws, "a.zip")
    folder = ws.root / broken
    shutil.rmtree(folder)
    folder.write_text("not a folder any more")
    results = InboxProcessor(ws).poll()
    assert results and all(r.kind is ResultKind.ERROR for r in results)
    assert results[0].code == "io-error" and results[0].input_path == path
    assert path.exists() and list(ws.quarantine.iterdir()) == []


def test_i114_changed_producer_file_not_acknowledged(ws: Workspace) -> None:
    path = put(ws, "a.zip")

    def change(event: str, entry: Path) -> None:
        if event == "published":
            with open(entry, "ab") as fh:
                fh.write(b"appended")

    [result] = InboxProcessor(ws, observer=change).poll()
    assert result.kind is ResultKind.ACCEPTED and result.code == "input-changed"
    assert path.exists()


def test_i115_symlink_input_rejected_not_followed(ws: Workspace, tmp_path: Path) -> None:
    outside = put(ws, "real.zip")
    target = tmp_path / "outside.zip"
    shutil.move(outside, target)
    (ws.inbox / "link.zip").symlink_to(target)
    [result] = InboxProcessor(ws).poll()
    assert result.kind is ResultKind.QUARANTINED and result.code == "symlink-input"
    assert target.exists() and not (ws.inbox / "link.zip").is_symlink()
    assert list(ws.cache.iterdir()) == [] and list(ws.cases.iterdir()) == []
    report = json.loads((Path(result.paths["quarantine"]) / "validation_error.json").read_text())
    assert report["link_target"] == str(target)


def test_i126_inputs_in_name_order_hidden_skipped(ws: Workspace) -> None:
    put(ws, "b.zip", "case-b")
    put(ws, "a.zip", "case-a")
    put(ws, ".uploading.zip", "case-hidden")
    [result] = InboxProcessor(ws).poll(max_jobs=1)
    assert result.case_id == "case-a"
    assert (ws.inbox / ".uploading.zip").exists()
