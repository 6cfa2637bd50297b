"""Package format v1 and its fingerprint (I-02..I-07, I-15, I-17, I-20, I-65,
I-66, I-118)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tenure.intake import CheckpointStore, InboxProcessor, ResultKind, State, Workspace, read_package
from tenure.intake.canonical import step_hash
from tenure.intake.errors import PackageRejectedError
from tenure.intake.pack import new_manifest, pack_directory, write_package
from tenure.intake.schema import CHECKPOINT_SCHEMA, MANIFEST_SCHEMA, schema_errors, schema_text
from tests.support.intake import admit, put, rewrite_zip, to_building


def test_i02_manifest_is_authoritative(ws: Workspace) -> None:
    package = to_building(ws)
    returning = rewrite_zip(package.path, ws.inbox / "g00000001-NEW-case-Z.zip")
    del returning
    results = InboxProcessor(ws).poll()
    assert [r.kind for r in results] == [ResultKind.DUPLICATE]
    assert results[0].case_id == "case-A" and results[0].generation == 2


def test_i03_checkpoint_artifact_path(ws: Workspace) -> None:
    package = to_building(ws)
    assert package.latest is not None
    assert package.latest.path == f"history/checkpoints/{step_hash('start')}.json"
    assert json.loads(package.read(package.latest.path))["step_id"] == "start"


def test_i04_pointer_names_latest(ws: Workspace) -> None:
    package = to_building(ws)
    package = CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    assert package.manifest["artifacts"]["lifecycle_checkpoint"] == f"history/checkpoints/{step_hash('i')}.json"


def test_i05_links_reach_the_first(ws: Workspace) -> None:
    to_building(ws)
    package = CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    path = package.manifest["artifacts"]["lifecycle_checkpoint"]
    seen = []
    while path is not None:
        data = json.loads(package.read(path))
        seen.append(data["state"])
        path = data["previous"]
    assert seen == ["INTERPRETING", "BUILDING_CASE", "VALIDATED"]


def test_i07_every_checkpoint_matches_shipped_schema(ws: Workspace) -> None:
    to_building(ws)
    package = CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    for checkpoint in package.chain:
        assert schema_errors(CHECKPOINT_SCHEMA, json.loads(package.read(checkpoint.path))) == []
    assert schema_errors(MANIFEST_SCHEMA, json.loads(package.read("manifest.json"))) == []
    assert '"$id"' in schema_text(CHECKPOINT_SCHEMA)


def test_i07_schema_inside_archive_is_ignored(ws: Workspace, tmp_path: Path) -> None:
    package = admit(ws)
    permissive = json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema"}).encode()
    out = rewrite_zip(
        package.path,
        tmp_path / "x.zip",
        changes={
            "checkpoint-v1.schema.json": permissive,
            "manifest-v1.schema.json": permissive,
            "schemas/manifest-v1.schema.json": permissive,
        },
        manifest=lambda m: m.update(routing="nowhere"),
    )
    with pytest.raises(PackageRejectedError) as caught:
        read_package(out)
    assert caught.value.code == "invalid-manifest"


def test_i15_analysis_current_json_is_not_worker_state(ws: Workspace) -> None:
    garbage = b'{"state": "HANDED_OFF", "generation": 99'
    admit(ws, files={"analysis/current.json": garbage, "a.txt": b"a"})
    store = CheckpointStore(ws)
    package = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    assert package.state is State.BUILDING_CASE and package.generation == 2
    assert package.read("analysis/current.json") == garbage


def test_i17_checkpoints_outside_analysis_revisions(ws: Workspace) -> None:
    admit(ws, files={"analysis/revisions/1/report.md": b"frozen"})
    package = CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b")
    assert all(c.path.startswith("history/checkpoints/") for c in package.chain)
    assert [f for f in package.files if f.startswith("analysis/")] == ["analysis/revisions/1/report.md"]


def test_i20_generations_alone_reproduce_the_chain(ws: Workspace, tmp_path: Path) -> None:
    to_building(ws)
    original = CheckpointStore(ws).advance("case-A", "pkg-1", "INTERPRETING", step_id="i")
    fresh = Workspace(tmp_path / "fresh")
    source = ws.case_dir("case-A", "pkg-1")
    target = fresh.case_dir("case-A", "pkg-1")
    target.mkdir(parents=True)
    for zipped in source.glob("g*.zip"):
        shutil.copy(zipped, target / zipped.name)
    copy = CheckpointStore(fresh).current("case-A", "pkg-1")
    assert [c.data for c in copy.chain] == [c.data for c in original.chain]
    assert copy.fingerprint == original.fingerprint


def rezip(source: Path, out: Path, method: int, reverse: bool, pretty: bool) -> Path:
    with zipfile.ZipFile(source) as src:
        entries = [(i.filename, src.read(i)) for i in src.infolist()]
    if reverse:
        entries.reverse()
    with zipfile.ZipFile(out, "w", method) as dst:
        for name, data in entries:
            if name == "manifest.json":
                document = json.loads(data)
                data = json.dumps(dict(reversed(list(document.items()))), indent=8 if pretty else None).encode()
            dst.writestr(name, data)
    return out


def test_i65_fingerprint_covers_paths_and_bytes(ws: Workspace, tmp_path: Path) -> None:
    base = write_package(tmp_path / "a.zip", new_manifest("c", "p"), {"x/1.txt": b"one"})
    renamed = write_package(tmp_path / "b.zip", new_manifest("c", "p"), {"x/2.txt": b"one"})
    changed = write_package(tmp_path / "c.zip", new_manifest("c", "p"), {"x/1.txt": b"One"})
    meta = write_package(tmp_path / "d.zip", new_manifest("c", "p", metadata={"k": 1}), {"x/1.txt": b"one"})
    fingerprints = {p.fingerprint for p in (base, renamed, changed, meta)}
    assert len(fingerprints) == 4


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_i66_rezipped_copy_is_duplicate(ws: Workspace, tmp_path: Path, method: int) -> None:
    original = put(ws, "original.zip", files={"a.txt": b"alpha", "b/c.txt": b"gamma" * 50})
    copy = rezip(original, tmp_path / "copy", method, reverse=True, pretty=True)
    assert copy.read_bytes() != original.read_bytes()
    assert read_package(copy).fingerprint == read_package(original).fingerprint
    shutil.move(copy, ws.inbox / "zz-some-other-name.data")
    results = InboxProcessor(ws).poll()
    assert [r.kind for r in results] == [ResultKind.ACCEPTED, ResultKind.DUPLICATE]
    assert CheckpointStore(ws).generations("case-A", "pkg-1") == [1]


def test_i118_pack_directory(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "logs").mkdir(parents=True)
    (source / "logs" / "run.log").write_bytes(b"log")
    (source / "manifest.json").write_text(
        json.dumps({"case_id": "c", "package_id": "p", "protected_files": ["logs/run.log"]})
    )
    package = pack_directory(source, tmp_path / "out.zip")
    assert package.state is State.NEW and package.generation == 0
    assert package.files == ["logs/run.log", "manifest.json"]
    assert package.protected_files == ["logs/run.log"]
    (source / "manifest.json").write_text(json.dumps({"case_id": "c"}))
    with pytest.raises(PackageRejectedError) as caught:
        pack_directory(source, tmp_path / "out2.zip")
    assert caught.value.code == "invalid-manifest"


def test_generations_with_zip64_fields_read_back(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's zip64 forms, made to appear on a small package: with the limit above which offsets, sizes
    and the directory go to zip64 fields lowered to 64 bytes, new entries carry zip64 sizes, copied central
    headers are rebuilt with zip64 offsets, and the end records are zip64; tenure and zipfile read it all."""
    import tenure.intake.writer as writer

    monkeypatch.setattr(writer, "_ZIP64_LIMIT", 64)
    put(ws, "a.zip", files={"input/report.txt": b"a report " * 20, "input/small.txt": b"s"})
    [result] = InboxProcessor(ws).poll()
    assert (result.kind, result.code) == (ResultKind.ACCEPTED, None)
    store = CheckpointStore(ws)
    advanced = store.advance("case-A", "pkg-1", "BUILDING_CASE", step_id="b", artifacts={"out/x.txt": b"x" * 100})
    exported = store.export("case-A", "pkg-1", ws.root / "export.zip")
    for path in (advanced.path, exported.path):
        with zipfile.ZipFile(path) as zf:
            assert zf.testzip() is None
            assert zf.read("input/report.txt") == b"a report " * 20
        raw = path.read_bytes()
        assert b"PK\x06\x06" in raw and b"PK\x06\x07" in raw, "zip64 end record and locator"
    assert read_package(exported.path).fingerprint == advanced.fingerprint
    assert advanced.read("out/x.txt") == b"x" * 100


def test_a_manifest_given_with_tuples_is_read_back_as_json(tmp_path: Path) -> None:
    """A caller's manifest is stored as JSON and the package read back holds what JSON reads (lists), so the
    shipped schema judges it as any reader would."""
    from tenure.intake.writer import PackageWriter

    manifest = {**new_manifest("case-T", "pkg"), "protected_files": ("input/a.txt",)}
    written = PackageWriter().write(tmp_path, manifest, additions={"input/a.txt": b"a"})
    assert written.manifest["protected_files"] == ["input/a.txt"]
