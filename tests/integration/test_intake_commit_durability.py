"""The intake commit sequence keeps the persistence rules (intake spec "Commit sequence"; SPEC §3.5).

A package generation, the cached input and the local index / runtime files
are each written under a temporary name, fsynced, then given their final
name; the folder that received the name is fsynced before the call returns,
and an acknowledged inbox original's removal is fsynced too. Otherwise a
power cut after a confirmed ``advance`` or admission could lose it.

Recorded in process: every ``os.fsync`` (by the path its descriptor names)
and every link, rename, replace and unlink, in order, while one admission
and one ``advance`` run on a real intake workspace. tests/integration/durability/ checks
the storage side's writes the same way, under strace too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tenure.intake import CheckpointStore, InboxProcessor, ResultKind, Workspace
from tenure.intake.inbox import ACK_PREFIX
from tests.support.intake import put

Event = tuple[str, ...]


class Recorder:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[Event] = []
        real_fsync, real_link, real_rename, real_replace, real_unlink = (
            os.fsync,
            os.link,
            os.rename,
            os.replace,
            os.unlink,
        )

        def fsync(fd: int) -> None:
            self.events.append(("fsync", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))))
            real_fsync(fd)

        def two(kind: str, real):  # type: ignore[no-untyped-def]
            def call(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
                real(src, dst, *args, **kwargs)
                self.events.append((kind, os.path.realpath(os.fsdecode(src)), os.path.realpath(os.fsdecode(dst))))

            return call

        def unlink(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            real_unlink(path, *args, **kwargs)
            self.events.append(("unlink", os.path.realpath(os.fsdecode(path))))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "link", two("link", real_link))
        monkeypatch.setattr(os, "rename", two("rename", real_rename))
        monkeypatch.setattr(os, "replace", two("replace", real_replace))
        monkeypatch.setattr(os, "unlink", unlink)

    def named(self, root: Path) -> list[Event]:
        """Every link, rename or replace that gave a file its final name under ``root``."""
        top = os.path.realpath(root)
        return [
            e
            for e in self.events
            if e[0] in ("link", "rename", "replace")
            and e[2].startswith(top + os.sep)
            and not os.path.basename(e[2]).startswith(ACK_PREFIX)  # the original's private name, not a publication
        ]

    def problems(self, root: Path, inbox: Path) -> list[str]:
        out = []
        for i, event in enumerate(self.events):
            if event in self.named(root):
                _, src, dst = event
                if ("fsync", src) not in self.events[:i]:
                    out.append(f"{dst} was named before its data was fsynced (as {src})")
                if ("fsync", os.path.dirname(dst)) not in self.events[i + 1 :]:
                    out.append(f"{dst}: its folder was not fsynced after it was named")
            elif event[0] == "unlink" and os.path.dirname(event[1]) == os.path.realpath(inbox):
                if ("fsync", os.path.dirname(event[1])) not in self.events[i + 1 :]:
                    out.append(f"{event[1]}: acknowledged, but the inbox folder was not fsynced after the removal")
        return out


def generations(recorder: Recorder, root: Path) -> list[str]:
    return [os.path.basename(e[2]) for e in recorder.named(root) if os.path.basename(e[2]).startswith("g0")]


def test_admission_makes_the_generation_the_cache_and_the_acknowledgement_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(tmp_path / "ws")
    put(ws, "incoming.zip")
    recorder = Recorder(monkeypatch)
    results = [r for r in InboxProcessor(ws).poll() if r.input_path is not None]
    assert [r.kind for r in results] == [ResultKind.ACCEPTED]
    assert generations(recorder, ws.root) == ["g00000001.zip"]
    assert any(os.path.dirname(e[2]) == os.path.realpath(ws.root / "cache") for e in recorder.named(ws.root))
    assert not (ws.inbox / "incoming.zip").exists()
    assert recorder.problems(ws.root, ws.inbox) == []


def test_advance_makes_the_new_generation_and_the_index_durable_before_returning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(tmp_path / "ws")
    put(ws, "incoming.zip")
    assert [r.kind for r in InboxProcessor(ws).poll() if r.input_path is not None] == [ResultKind.ACCEPTED]
    recorder = Recorder(monkeypatch)
    package = CheckpointStore(ws).advance("case-A", "pkg-1", "BUILDING_CASE", step_id="start")
    assert package.generation == 2
    assert generations(recorder, ws.root) == ["g00000002.zip"]
    named = {os.path.basename(e[2]) for e in recorder.named(ws.root)}
    assert "current.json" in named, "the local index is replaced atomically"
    assert recorder.problems(ws.root, ws.inbox) == []
