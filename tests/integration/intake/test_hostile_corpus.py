"""Every class of the hostile corpus (``hostile_corpus.py``) is quarantined with one of its codes, next to a valid
package that is admitted in the same poll; nothing stays in the inbox, nothing is written outside the workspace, and
a second poll has nothing left to do. The corpus's benign twins are admitted and their stored generation reads back.
A 4,000,000-entry claim is refused from the end record, with little memory."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Iterable
from pathlib import Path

import pytest

from tenure.intake import InboxProcessor, IntakeConfig, PollResult, ResultKind, Workspace, read_package
from tenure.intake.errors import PackageRejectedError
from tenure.intake.storage import CaseStorage
from tests.integration.intake.hostile_corpus import (
    BENIGN,
    CORPUS,
    CORPUS_CONFIG,
    FOUR_MILLION,
    Benign,
    Hostile,
    write_many_entries,
)
from tests.support.intake import POLL, put, run_python

MiB = 1024 * 1024


def _workspace(tmp_path: Path) -> Workspace:
    # nested, so that anything escaping the workspace still lands under tmp_path, where it is seen
    return Workspace(tmp_path / "outer" / "inner" / "ws", CORPUS_CONFIG)


def _listing(top: Path, skip: Path) -> set[tuple[bytes, int]]:
    """Every path under ``top`` (bytes, any name) with its size, except the ``skip`` subtree."""
    found: set[tuple[bytes, int]] = set()
    skip_b = os.fsencode(skip)
    for folder, dirs, files in os.walk(os.fsencode(top)):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) != skip_b]
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            found.add((path, os.lstat(path).st_size if name in files else -1))
    return found


def _inbox_file(ws: Workspace, filename: bytes, raw: bytes) -> bytes:
    path = os.path.join(os.fsencode(ws.inbox), filename)
    with open(path, "xb") as fh:
        fh.write(raw)
    return path


def _result_for(results: Iterable[PollResult], filename: bytes) -> PollResult:
    found = [r for r in results if r.input_path is not None and os.fsencode(r.input_path.name) == filename]
    assert len(found) == 1, (filename, results)
    return found[0]


def _describe(result: PollResult) -> tuple[str, str | None, str | None]:
    return result.kind.value, result.code, result.message


def _poll_with_valid(tmp_path: Path, filename: bytes, raw: bytes) -> tuple[Workspace, PollResult, list[PollResult]]:
    """Poll ``raw`` (as ``filename``) next to a valid package; check what holds for every input."""
    ws = _workspace(tmp_path)
    _inbox_file(ws, filename, raw)
    put(ws, "valid.zip", "valid-case")
    before = _listing(tmp_path, ws.root)
    results = InboxProcessor(ws).poll(max_jobs=100)
    assert not [_describe(r) for r in results if r.kind is ResultKind.ERROR]
    valid = _result_for(results, b"valid.zip")
    assert valid.kind is ResultKind.ACCEPTED, _describe(valid)
    assert os.listdir(os.fsencode(ws.inbox)) == []
    again = InboxProcessor(ws).poll(max_jobs=100)
    assert [_describe(r) for r in again if r.input_path is not None or r.kind is ResultKind.ERROR] == []
    assert _listing(tmp_path, ws.root) == before
    assert CaseStorage(ws).load_current("valid-case", "pkg-1") is not None
    return ws, _result_for(results, filename), results


@pytest.mark.parametrize("hostile", list(CORPUS.values()), ids=list(CORPUS))
def test_hostile_input_is_quarantined_with_its_code(tmp_path: Path, hostile: Hostile) -> None:
    raw = hostile.build()
    ws, result, _ = _poll_with_valid(tmp_path, hostile.filename, raw)
    assert result.kind is ResultKind.QUARANTINED, _describe(result)
    assert result.code in hostile.codes, (_describe(result), sorted(hostile.codes))
    folders = list(ws.quarantine.iterdir())
    assert len(folders) == 1
    assert {"package.zip", "validation_error.json"} <= set(os.listdir(folders[0]))
    assert (folders[0] / "package.zip").read_bytes() == raw
    report = json.loads((folders[0] / "validation_error.json").read_bytes())
    assert report["code"] == result.code
    assert len(list(ws.cases.iterdir())) == 1  # the valid package's case only


@pytest.mark.parametrize("benign", list(BENIGN.values()), ids=list(BENIGN))
def test_benign_twin_is_admitted_and_reads_back(tmp_path: Path, benign: Benign) -> None:
    ws, result, _ = _poll_with_valid(tmp_path, benign.filename, benign.build())
    assert result.kind is ResultKind.ACCEPTED, _describe(result)
    assert result.case_id is not None and result.package_id is not None
    stored = CaseStorage(ws).load_current(result.case_id, result.package_id)
    assert stored is not None and stored.generation == result.generation
    assert list(ws.quarantine.iterdir()) == []


def test_poll_in_a_child_process_reports_the_hostile_corpus_as_json(tmp_path: Path) -> None:
    """The CLI-facing form: every corpus input in one inbox, one poll in a fresh interpreter; the JSON
    results (which carry the odd input names) are written and every input is quarantined."""
    ws = _workspace(tmp_path)
    picked = [CORPUS[n] for n in ("inbox-name-not-utf8", "inbox-name-escape", "name-control-escape", "trailing-junk")]
    for hostile in picked:
        _inbox_file(ws, hostile.filename, hostile.build())
    done = run_python(POLL, str(ws.root), "100")
    assert done.returncode == 0, done.stderr
    kinds = [r["kind"] for r in json.loads(done.stdout) if r["input"] is not None]
    assert kinds == ["QUARANTINED"] * len(picked)
    assert os.listdir(os.fsencode(ws.inbox)) == []


def test_four_million_entry_claim_is_refused_from_the_end_record(tmp_path: Path) -> None:
    path = tmp_path / "claim.zip"
    path.write_bytes(CORPUS["zip64-count-claim-4m"].build())
    tracemalloc.start()
    try:
        with pytest.raises(PackageRejectedError) as caught:
            read_package(path, IntakeConfig())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.code == "too-many-entries"
    assert peak < 100 * MiB


_JUDGE_LARGE = """
import json, resource, sys, tracemalloc
from pathlib import Path
# guards, not measurements: an implementation that walks the directory fails here instead of
# eating the machine (the judgement itself needs a small fraction of both)
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_CPU, (30, 30))
from tenure.intake import read_package
from tenure.intake.errors import PackageRejectedError
tracemalloc.start()
try:
    read_package(Path(sys.argv[1]))
    code = "ACCEPTED"
except PackageRejectedError as error:
    code = error.code
except MemoryError:
    code = "MemoryError"
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"code": code, "peak": peak}))
"""


def test_four_million_listed_entries_are_refused_without_reading_the_directory(tmp_path: Path) -> None:
    """An archive under the 256 MiB limit whose directory really lists 4,000,000 entries is refused as
    too-many-entries from its end records, in a child process capped at 1 GiB of address space and 30 s
    of CPU."""
    path = tmp_path / "four-million.zip"
    size = write_many_entries(path, FOUR_MILLION)
    assert size < IntakeConfig().limits.archive_bytes
    done = run_python(_JUDGE_LARGE, str(path), timeout=300)
    path.unlink()
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    outcome = json.loads(done.stdout)
    assert outcome["code"] == "too-many-entries", outcome
    assert outcome["peak"] < 100 * MiB, outcome
