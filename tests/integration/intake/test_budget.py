"""What judging an input costs is bounded by what it needs, not by what its headers carry (ADR 0108).

* the scan keeps a few hundred bytes an entry and its name: a central header's
  extra field and comment (up to 1,024 bytes each) stay in the file, and the
  writer copies central headers from there;
* the entry counts are judged while the directory is read, so an archive
  that lists more producer entries than ``max_entries`` is refused at the
  first one over, not after every header is held;
* an admission parses the manifest once and encodes its members once: the
  next generation's manifest is joined from the members it keeps, the
  manifest the writer stored is compared with what it wrote instead of parsed
  again, and nothing is deep-copied;
* the generations validated in a process are kept within a memory bound;
* the numbers of a manifest are checked in time linear in its size, whatever
  their length.

Memory is measured with ``tracemalloc`` and work by counting calls, so the
checks hold on a loaded machine; the timings at the limits are in
docs/intake.md.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tenure.intake import CheckpointStore, InboxProcessor, IntakeConfig, Limits, ResultKind, Workspace, read_package
from tenure.intake.errors import PackageRejectedError
from tenure.intake.pack import new_manifest, write_package
from tests.integration.intake.hostile_corpus import Member, assemble
from tests.support.intake import run_python

MiB = 1024 * 1024
#: a 1,024-byte extra field of a tag no reader knows, and a 1,024-byte comment: the most a header may carry
LONG_EXTRA = struct.pack("<HH", 0xCAFE, 1020) + b"e" * 1020
LONG_COMMENT = b"c" * 1024


def long_headers(count: int) -> tuple[bytes, int]:
    """A valid package of ``count`` empty files whose central headers are as long as allowed; and the size of
    its central directory."""
    manifest = json.dumps(new_manifest("case-long", "pkg")).encode()
    members = [Member(b"manifest.json", manifest)]
    members += [
        Member(
            f"d{i // 100:03d}/{i:06d}".encode() + b"n" * 1013,
            b"",
            method=0,
            central={"extra": LONG_EXTRA, "comment": LONG_COMMENT},
        )
        for i in range(count)
    ]
    layout: list[int] = []
    raw = assemble(members, with_layout=lambda found: layout.append(found.cd_size))
    return raw, layout[0]


def traced_peak(action: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        try:
            result: Any = action()
        except PackageRejectedError as error:
            result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_directory_of_long_headers_is_judged_without_holding_them(tmp_path: Path) -> None:
    """3,000 entries with 1 KiB names, extra fields and comments: a central directory of 8.9 MiB. The scan and
    the whole validation hold the names and a little per entry, about half the directory (it held 2.3 times
    the directory, every header whole and its name twice)."""
    raw, cd_size = long_headers(3000)
    path = tmp_path / "long.zip"
    path.write_bytes(raw)
    read_package(path)  # imports and compiles the schemas outside the measurement
    package, peak = traced_peak(lambda: read_package(path))
    assert len(package.files) == 3001
    assert cd_size > 8.5 * MiB
    assert peak < cd_size, (peak, cd_size)


def test_an_archive_over_max_entries_is_refused_at_the_first_entry_over(tmp_path: Path) -> None:
    """The end record's count is under ``max_entries + max_checkpoints``; the directory is read until the
    producer entries pass ``max_entries``, and nothing read is kept."""
    raw, _ = long_headers(3000)
    path = tmp_path / "many.zip"
    path.write_bytes(raw)
    config = IntakeConfig(limits=Limits(max_entries=1000, max_checkpoints=2500))
    error, peak = traced_peak(lambda: read_package(path, config))
    assert isinstance(error, PackageRejectedError) and error.code == "too-many-entries"
    assert peak < 3 * MiB, peak


def _manifest_of_small_lists(size: int) -> dict[str, Any]:
    manifest = new_manifest("case-json", "pkg")
    item = [[[[[]]]]]
    count = (size - len(json.dumps(manifest, separators=(",", ":")))) // (len(json.dumps(item)) + 1)
    manifest["metadata"] = {"lists": [[[[[]]]] for _ in range(count)]}
    return manifest


def test_an_admission_parses_the_manifest_once_and_encodes_it_once(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 256 KiB manifest of small lists: the admission and two advances parse it once (the input's) and
    encode it once (the input's members, from which each generation's form is joined). It was parsed four
    times and encoded eighteen (six per generation: the size check, the fingerprint, the surrogate check,
    the advance's size check, the writer, each twice over), after a deep copy each advance."""
    big = 100_000
    calls = {"loads": 0, "dumps": 0}
    real_loads, real_dumps = json.loads, json.dumps

    def loads(text: Any, *args: Any, **kwargs: Any) -> Any:
        calls["loads"] += len(text) > big
        return real_loads(text, *args, **kwargs)

    def dumps(value: Any, *args: Any, **kwargs: Any) -> str:
        text = real_dumps(value, *args, **kwargs)
        calls["dumps"] += len(text) > big
        return text

    manifest = _manifest_of_small_lists(256 * 1024)
    write_package(ws.inbox / "in.zip", manifest, {"input/report.txt": b"r"})
    monkeypatch.setattr(json, "loads", loads)
    monkeypatch.setattr(json, "dumps", dumps)
    [result] = InboxProcessor(ws).poll()
    assert (result.kind, result.code) == (ResultKind.ACCEPTED, None)
    store = CheckpointStore(ws)
    admitted = store.current("case-json", "pkg")
    built = store.advance("case-json", "pkg", "BUILDING_CASE", step_id="b")
    interpreting = store.advance("case-json", "pkg", "INTERPRETING", step_id="i")
    monkeypatch.undo()
    assert calls == {"loads": 1, "dumps": 1}
    assert interpreting.manifest["metadata"] is admitted.manifest["metadata"], "shared, not copied"
    assert built.manifest["metadata"] == manifest["metadata"]
    stored = json.loads(interpreting.read("manifest.json"))
    assert stored == dict(interpreting.manifest)


def test_the_generations_kept_validated_stay_within_a_memory_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each admission keeps its new generation validated in memory; past the bound the oldest go, so a pass
    over many large inputs judges each within the memory of the first."""
    import tenure.intake.storage as storage

    ws = Workspace(tmp_path / "ws")
    for i in range(4):
        manifest = new_manifest(f"case-{i}", "pkg", metadata={"pad": "p" * 200_000})
        write_package(ws.inbox / f"{i}.zip", manifest, {"input/report.txt": b"r"})
    monkeypatch.setattr(storage, "_CACHE_BYTES", 2 * 48 * 200_000 + 2 * 48 * 1000)
    storage._validated.clear()
    results = InboxProcessor(ws).poll()
    assert [r.kind for r in results] == [ResultKind.ACCEPTED] * 4
    kept = [package.case_id for package in storage._validated.values()]
    assert kept == ["case-2", "case-3"], kept
    assert sum(storage._validated.weights.values()) <= storage._CACHE_BYTES
    assert CheckpointStore(ws).current("case-0", "pkg").generation == 1, "an evicted generation is read again"


_JUDGE_NUMBERS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
from tenure.intake.canonical import strict_json_loads
for size in (900_000, 450_000):
    for text in (
        "[1." + "0" * size + "1]",  # a fraction of many digits
        "[" + "1" * size + ".5]",  # an integer part of many digits: beyond a double
        "[1" + "0" * size + "]",  # an integer of many digits: beyond 2**53 (and the parser's digit limit)
        "[0.5, 1." + "0" * size + "e5]",  # an exponent after a long mantissa
    ):
        try:
            strict_json_loads(text.encode())
            print("accepted")
        except ValueError:
            print("refused")
"""


def test_numbers_of_any_length_are_checked_in_linear_time() -> None:
    """A manifest may hold one number of nearly a mebibyte of digits; checking it must not backtrack through
    them (a pattern that did took hours on a 900,000-digit fraction). Judged in a child capped at 20 s of
    CPU."""
    done = run_python(_JUDGE_NUMBERS, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["accepted", "refused", "refused", "accepted"] * 2
