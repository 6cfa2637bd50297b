"""Mutated packages: whatever the damage (flipped bytes, truncation, insertion, a duplicated slice, two packages
spliced), one poll ends the input ACCEPTED, DUPLICATE or QUARANTINED with a code, never ERROR, and the inbox is empty
afterwards; an accepted input's stored generation reads back."""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenure.intake import InboxProcessor, ResultKind, Workspace
from tenure.intake.storage import CaseStorage
from tests.integration.intake.hostile_corpus import CORPUS_CONFIG, Member, assemble, package_members


@functools.cache
def _bases() -> tuple[bytes, ...]:
    """Valid packages of several shapes (deflated, stored, data descriptors, a folder entry, a comment)."""
    files = {"input/report.txt": b"report " * 30, "input/empty.txt": b"", "input/a/b/c.bin": bytes(range(200))}
    deflated = assemble(package_members("fuzz-a", files=files))
    stored = assemble(package_members("fuzz-b", files=files, method=0), comment=b"comment")
    described = assemble([*package_members("fuzz-c", descriptor=True)], zip64=True)
    folder = Member(b"input/", b"", method=0, mode=0o040755)
    with_folder = assemble([folder, *package_members("fuzz-d", files=files)])
    return deflated, stored, described, with_folder


@dataclass(frozen=True)
class Flip:
    at: int
    mask: int

    def __call__(self, raw: bytes) -> bytes:
        if not raw:
            return raw
        out = bytearray(raw)
        out[self.at % len(out)] ^= self.mask
        return bytes(out)


@dataclass(frozen=True)
class Truncate:
    at: int

    def __call__(self, raw: bytes) -> bytes:
        return raw[: self.at % (len(raw) + 1)]


@dataclass(frozen=True)
class Insert:
    at: int
    data: bytes

    def __call__(self, raw: bytes) -> bytes:
        at = self.at % (len(raw) + 1)
        return raw[:at] + self.data + raw[at:]


@dataclass(frozen=True)
class Duplicate:
    start: int
    length: int
    at: int

    def __call__(self, raw: bytes) -> bytes:
        start = self.start % (len(raw) + 1)
        at = self.at % (len(raw) + 1)
        return raw[:at] + raw[start : start + self.length] + raw[at:]


@dataclass(frozen=True)
class Splice:
    other: int
    cut: int
    cut_other: int

    def __call__(self, raw: bytes) -> bytes:
        second = _bases()[self.other % len(_bases())]
        return raw[: self.cut % (len(raw) + 1)] + second[self.cut_other % (len(second) + 1) :]


Mutation = Flip | Truncate | Insert | Duplicate | Splice
POSITION = st.integers(min_value=0, max_value=1 << 16)
SIGNATURES = st.sampled_from([b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06", b"PK\x07\x08"])
MUTATION: st.SearchStrategy[Mutation] = st.one_of(
    st.builds(Flip, POSITION, st.integers(min_value=1, max_value=255)),
    st.builds(Truncate, POSITION),
    st.builds(Insert, POSITION, st.binary(min_size=1, max_size=64) | SIGNATURES),
    st.builds(Duplicate, POSITION, st.integers(min_value=1, max_value=400), POSITION),
    st.builds(Splice, st.integers(min_value=0, max_value=3), POSITION, POSITION),
)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(base=st.integers(min_value=0, max_value=3), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_package_is_never_an_error(base: int, mutations: list[Mutation]) -> None:
    raw = _bases()[base]
    for mutation in mutations:
        raw = mutation(raw)
    with tempfile.TemporaryDirectory(prefix="intake-fuzz-") as folder:
        ws = Workspace(Path(folder) / "ws", CORPUS_CONFIG)
        (ws.inbox / "mutant.zip").write_bytes(raw)
        results = [r for r in InboxProcessor(ws).poll(max_jobs=10) if r.input_path is not None]
        assert len(results) == 1, [r.to_dict() for r in results]
        result = results[0]
        assert result.kind in (ResultKind.ACCEPTED, ResultKind.DUPLICATE, ResultKind.QUARANTINED), result.to_dict()
        if result.kind is ResultKind.QUARANTINED:
            assert result.code, result.to_dict()
        assert os.listdir(ws.inbox) == []
        if result.kind is ResultKind.ACCEPTED:
            assert result.case_id is not None and result.package_id is not None
            stored = CaseStorage(ws).load_current(result.case_id, result.package_id)
            assert stored is not None and stored.generation == result.generation
