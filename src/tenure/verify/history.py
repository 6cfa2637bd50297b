"""The history checker: a recorded multi-pod history in, the broken invariants out. Pure: no I/O, no clock.

A history is what a verification run saw, all on one clock — the **store clock** (seconds, as the
control-plane store's ``SELECT now()`` reads it; the kit reads it before and after every operation, so
its times are comparable with the store's own lease arithmetic). Any one clock would do as long as
every time in one history is read from it.

* :class:`Operation` — one client request: its kind, project, the pod that finally answered (after
  redirects), the generation it acted under when the answer says so, invoke and complete times,
  its outcome (``ok``; ``refused`` with the error code; ``unknown`` when the answer never came —
  the process died, the connection dropped) and a payload (``snapshot``: the snapshot id a
  checkpoint acknowledged; ``digest``: the content digest it acknowledged, when the kit knows it).
* :class:`Observation` — the store sampled: at a time, a project's holder pod, whether its lease is
  live, its generation, and whether the project wants an owner (a project that should run).
* :class:`PodSample` — the store sampled: at a time, a pod, whether it is live and has room.
* ``restored`` — per acknowledged checkpoint's snapshot id, the digest its restore produced
  (``None``: the restore failed).
* ``files`` — per snapshot the kit read back (acknowledged checkpoints, the snapshots durable writes named,
  every project's final head), its files as restored: relative path → SHA-256 of the bytes (``None``: the
  restore failed). ``final`` — per project, the snapshot that is its final state: its head once the kit
  healed every fault and suspended everything at the end (``None``: not known).

What the answer of a file write or a checkpoint names goes into its payload: a write's ``path``, the
``sha256`` of the bytes it sent, whether it asked to be ``durable`` (``?durable=true``), the ``lineage`` its
answer named (the ``Tenure-Lineage`` header) and, for a durable write, the ``snapshot`` the answer named; a
checkpoint's ``if_lineage`` (the ``Tenure-If-Lineage`` it sent, absent when it sent none) and ``lineage``
(the answer's, or for a ``412 lineage-changed`` the project's current one from the problem's context).

:func:`check` applies the seven rules (:data:`RULES`) and returns :class:`Violation` values.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Outcome(str, Enum):
    OK = "ok"
    REFUSED = "refused"
    UNKNOWN = "unknown"


class Kind(str, Enum):
    CLAIM = "claim"
    BRING = "bring"
    CHECKPOINT = "checkpoint"
    SUSPEND = "suspend"
    CLOSE = "close"
    WRITE = "write"
    READ = "read"
    RESTORE = "restore"
    READ_OWNER = "read-owner"


#: Kinds whose success means the answering pod held the project at that moment.
HOLDING = frozenset({Kind.CLAIM, Kind.BRING, Kind.CHECKPOINT, Kind.WRITE, Kind.READ})
#: Kinds that change the project's stored state (rule c).
WRITES = frozenset({Kind.CHECKPOINT, Kind.WRITE})

SINGLE_HOLDER = "single-holder"
GENERATION_ORDER = "generation-order"
STALE_WRITE = "stale-write"
CHECKPOINT_RESTORABLE = "checkpoint-restorable"
OWNERLESS = "ownerless"
DURABLE_WRITE_LOST = "durable-write-lost"
LINEAGE_CHECKPOINT_MISSES_WRITE = "lineage-checkpoint-misses-write"

#: Every rule, with what it requires.
RULES: dict[str, str] = {
    SINGLE_HOLDER: "at most one live holder per project at any store time",
    GENERATION_ORDER: "generations strictly increase per project across successive holders",
    STALE_WRITE: "no write accepted under a generation older than the newest one issued before it was invoked",
    CHECKPOINT_RESTORABLE: "every acknowledged checkpoint restores with exactly the content it acknowledged",
    OWNERLESS: "no project wanting an owner goes without a live one longer than TTL + one tick "
    "while a pod with room is live",
    DURABLE_WRITE_LOST: "every write acknowledged as durable is in the snapshot its answer names and, unless a later "
    "write of its path may have replaced it, in the final state",
    LINEAGE_CHECKPOINT_MISSES_WRITE: "a checkpoint acknowledged under Tenure-If-Lineage L holds every write "
    "acknowledged under lineage L before it (or a later write of the same path)",
}

#: Refusals answered before anything is written — the routing (a redirect, a later, not here), the write gate,
#: the lineage check, the request's own form, a pod never reached: a write refused so did not land. A write
#: with any other outcome (acknowledged, unknown, refused otherwise — a durable write whose checkpoint failed
#: was written first) may have.
REFUSED_BEFORE_WRITING = frozenset(
    {
        "redirected",
        "unreachable",
        "project-unavailable",
        "project-suspended",
        "project-closed",
        "project-not-found",
        "not-running-here",
        "project-quiescing",
        "lineage-changed",
        "bad-path",
        "not-a-file",
        "payload-too-large",
    }
)


@dataclass(frozen=True)
class Operation:
    id: int
    kind: Kind
    project: str
    pod: str | None
    invoked: float
    completed: float | None
    outcome: Outcome
    generation: int | None = None
    code: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "project": self.project,
            "pod": self.pod,
            "invoked": self.invoked,
            "completed": self.completed,
            "outcome": self.outcome.value,
            "generation": self.generation,
            "code": self.code,
            "payload": dict(self.payload),
        }


@dataclass(frozen=True)
class Observation:
    time: float
    project: str
    holder: str | None
    live: bool
    generation: int
    wants_owner: bool = True
    #: when the state was read over a span: its start (``time`` is its end; the state held at some moment
    #: between the two); None when it was read at ``time`` exactly
    read_from: float | None = None

    @property
    def earliest(self) -> float:
        return self.time if self.read_from is None else self.read_from


@dataclass(frozen=True)
class PodSample:
    time: float
    pod: str
    live: bool
    room: bool


@dataclass(frozen=True)
class Violation:
    rule: str
    project: str
    detail: str
    #: ids of the operations that show it (empty when only observations do)
    records: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "project": self.project, "detail": self.detail, "records": list(self.records)}


@dataclass(frozen=True)
class History:
    operations: Sequence[Operation] = ()
    observations: Sequence[Observation] = ()
    pods: Sequence[PodSample] = ()
    #: snapshot id → the digest its restore produced (None: the restore failed)
    restored: Mapping[str, str | None] = field(default_factory=dict)
    #: the project lease TTL the pods run with (seconds)
    ttl: float = 60.0
    #: one tick: how late a live pod with room may notice an ownerless project (its pull period and beat,
    #: plus the sampling period of whoever recorded the observations)
    tick: float = 5.0
    #: snapshot id → its files as restored (relative path → SHA-256 of the bytes); None: it did not restore
    files: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    #: project → the snapshot holding its final state (its head after the end); None: not known
    final: Mapping[str, str | None] = field(default_factory=dict)


def check(history: History) -> list[Violation]:
    """Every rule over ``history``; an empty list for a clean one."""
    by_project = _observations_by_project(history.observations)
    return [
        *single_holder(history.operations, by_project),
        *generation_order(history.operations, by_project),
        *stale_writes(history.operations, by_project),
        *checkpoints_restorable(history.operations, history.restored),
        *ownerless(by_project, history.pods, ttl=history.ttl, tick=history.tick),
        *durable_writes_lost(history.operations, history.files, history.final),
        *lineage_checkpoints_miss_writes(history.operations, history.files),
    ]


def _observations_by_project(observations: Iterable[Observation]) -> dict[str, list[Observation]]:
    grouped: dict[str, list[Observation]] = defaultdict(list)
    for o in observations:
        grouped[o.project].append(o)
    for seq in grouped.values():
        seq.sort(key=lambda o: o.time)
    return grouped


def _acknowledged(operations: Iterable[Operation], kinds: frozenset[Kind]) -> list[Operation]:
    return [op for op in operations if op.outcome is Outcome.OK and op.kind in kinds and op.completed is not None]


# ---------------------------------------------------------------------------------------------- rule a


def single_holder(operations: Sequence[Operation], by_project: Mapping[str, list[Observation]]) -> list[Violation]:
    """(a) Two live holders at one store time: two samples at one time naming different live holders, or a pod
    acknowledging a holding operation entirely inside another pod's unbroken live tenure (the same holder and
    generation sampled live before it was invoked and after it completed, and nothing else in between)."""
    found: list[Violation] = []
    for project, seq in by_project.items():
        at: dict[float, set[str]] = defaultdict(set)
        for o in seq:
            if o.live and o.holder is not None:
                at[o.time].add(o.holder)
        for time, holders in sorted(at.items()):
            if len(holders) > 1:
                found.append(
                    Violation(SINGLE_HOLDER, project, f"{len(holders)} live holders at {time:.3f}: {sorted(holders)}")
                )
    for op in _acknowledged(operations, HOLDING):
        seq = by_project.get(op.project, [])
        if op.pod is None or not seq:
            continue
        assert op.completed is not None
        times = [o.time for o in seq]
        before = bisect.bisect_right(times, op.invoked) - 1  # read at or before the invoke
        after = next((i for i in range(max(before, 0), len(seq)) if seq[i].earliest >= op.completed), len(seq))
        if before < 0 or after >= len(seq):
            continue
        span = seq[before : after + 1]
        first = span[0]
        if not first.live or first.holder in (None, op.pod):
            continue
        if all(o.live and o.holder == first.holder and o.generation == first.generation for o in span):
            found.append(
                Violation(
                    SINGLE_HOLDER,
                    op.project,
                    f"{op.kind.value} acknowledged by pod {op.pod} between {op.invoked:.3f} and {op.completed:.3f}"
                    f" while pod {first.holder} held the project live at generation {first.generation} throughout",
                    (op.id,),
                )
            )
    return found


# ---------------------------------------------------------------------------------------------- rule b


def generation_order(operations: Sequence[Operation], by_project: Mapping[str, list[Observation]]) -> list[Violation]:
    """(b) Per project, sampled generations never go back, a new holder comes with a higher generation, and one
    generation never belongs to two pods (samples and acknowledged holding operations together)."""
    found: list[Violation] = []
    for project, seq in by_project.items():
        previous: Observation | None = None
        for o in seq:
            if previous is not None:
                if o.generation < previous.generation:
                    found.append(
                        Violation(
                            GENERATION_ORDER,
                            project,
                            f"generation went back from {previous.generation} to {o.generation} at {o.time:.3f}",
                        )
                    )
                elif (
                    o.holder is not None
                    and previous.holder is not None
                    and o.holder != previous.holder
                    and o.generation <= previous.generation
                ):
                    found.append(
                        Violation(
                            GENERATION_ORDER,
                            project,
                            f"pod {o.holder} followed pod {previous.holder} at {o.time:.3f} with generation "
                            f"{o.generation}, not above {previous.generation}",
                        )
                    )
            if o.holder is not None:
                previous = o
    owners: dict[tuple[str, int], dict[str, tuple[int, ...]]] = defaultdict(dict)
    for project, seq in by_project.items():
        for o in seq:
            if o.holder is not None:
                owners[(project, o.generation)].setdefault(o.holder, ())
    for op in _acknowledged(operations, HOLDING):
        if op.pod is not None and op.generation is not None:
            pods = owners[(op.project, op.generation)]
            pods[op.pod] = (*pods.get(op.pod, ()), op.id)
    for (project, generation), pods in sorted(owners.items()):
        if len(pods) > 1:
            records = tuple(sorted(i for ids in pods.values() for i in ids))
            found.append(
                Violation(GENERATION_ORDER, project, f"generation {generation} held by pods {sorted(pods)}", records)
            )
    return found


# ---------------------------------------------------------------------------------------------- rule c


def stale_writes(operations: Sequence[Operation], by_project: Mapping[str, list[Observation]]) -> list[Violation]:
    """(c) A write acknowledged under a generation older than the newest generation issued (sampled, or
    acknowledged by a holding operation that completed) before the write was invoked.

    Only operations whose answer names their generation are judged (a checkpoint's new snapshot does; a
    file write's answer does not, so the kit records it without one)."""
    issued: dict[str, list[tuple[float, int, int | None]]] = defaultdict(list)
    for project, seq in by_project.items():
        issued[project] += [(o.time, o.generation, None) for o in seq]
    for op in _acknowledged(operations, HOLDING):
        if op.generation is not None:
            assert op.completed is not None
            issued[op.project].append((op.completed, op.generation, op.id))
    newest: dict[str, tuple[list[float], list[tuple[int, int | None]]]] = {}
    for project, events in issued.items():
        events.sort(key=lambda e: e[0])
        times: list[float] = []
        best: list[tuple[int, int | None]] = []
        top: tuple[int, int | None] = (-1, None)
        for time, generation, ident in events:
            if generation > top[0]:
                top = (generation, ident)
            times.append(time)
            best.append(top)
        newest[project] = (times, best)
    found: list[Violation] = []
    for op in _acknowledged(operations, WRITES):
        if op.generation is None or op.project not in newest:
            continue
        times, best = newest[op.project]
        i = bisect.bisect_left(times, op.invoked) - 1  # strictly before the invoke
        if i < 0:
            continue
        generation, ident = best[i]
        if op.generation < generation:
            records = (op.id,) if ident is None else (ident, op.id)
            found.append(
                Violation(
                    STALE_WRITE,
                    op.project,
                    f"{op.kind.value} acknowledged by pod {op.pod} under generation {op.generation}, invoked at "
                    f"{op.invoked:.3f} after generation {generation} was issued",
                    records,
                )
            )
    return found


# ---------------------------------------------------------------------------------------------- rule d


def checkpoints_restorable(operations: Sequence[Operation], restored: Mapping[str, str | None]) -> list[Violation]:
    """(d) Every acknowledged checkpoint's snapshot restores, with the digest it acknowledged when one is known.

    A project closed (or whose close may have happened: outcome unknown) has its snapshots disposed by design;
    its checkpoints are not judged."""
    closed = _closed(operations)
    found: list[Violation] = []
    for op in _acknowledged(operations, frozenset({Kind.CHECKPOINT})):
        snapshot = op.payload.get("snapshot")
        if op.project in closed or not isinstance(snapshot, str):
            continue
        if snapshot not in restored or restored[snapshot] is None:
            found.append(
                Violation(CHECKPOINT_RESTORABLE, op.project, f"snapshot {snapshot} does not restore", (op.id,))
            )
            continue
        expected = op.payload.get("digest")
        if expected is not None and restored[snapshot] != expected:
            found.append(
                Violation(
                    CHECKPOINT_RESTORABLE,
                    op.project,
                    f"snapshot {snapshot} acknowledged content {expected} but restores {restored[snapshot]}",
                    (op.id,),
                )
            )
    return found


# ---------------------------------------------------------------------------------------------- rule e


def _room_intervals(pods: Sequence[PodSample]) -> list[tuple[float, float]]:
    """Spans during which every pod sample showed some live pod with room (samples at one time are one batch)."""
    batches: dict[float, bool] = defaultdict(bool)
    for s in pods:
        batches[s.time] = batches[s.time] or (s.live and s.room)
    spans: list[tuple[float, float]] = []
    start: float | None = None
    last = 0.0
    for time in sorted(batches):
        if batches[time]:
            if start is None:
                start = time
            last = time
        elif start is not None:
            spans.append((start, last))  # room sampled until ``last``; nothing is assumed after it
            start = None
    if start is not None:
        spans.append((start, last))
    return spans


def _ownerless_spans(seq: Sequence[Observation]) -> list[tuple[float, float]]:
    """Spans a project wanted an owner without a live one: from its last live sample (or the first sample
    wanting one) to the next sample with a live owner (or the last sample)."""
    spans: list[tuple[float, float]] = []
    start: float | None = None
    last_live: float | None = None
    for o in seq:
        held = o.live and o.holder is not None
        if held or not o.wants_owner:
            if start is not None:
                spans.append((start, o.time))
                start = None
            last_live = o.time if held else None
        elif start is None:
            start = last_live if last_live is not None else o.time
    if start is not None and seq:
        spans.append((start, seq[-1].time))
    return spans


def ownerless(
    by_project: Mapping[str, list[Observation]], pods: Sequence[PodSample], *, ttl: float, tick: float
) -> list[Violation]:
    """(e) A project wanting an owner went without a live one for longer than ``ttl + tick`` while some pod with
    room was live the whole time."""
    room = _room_intervals(pods)
    limit = ttl + tick
    found: list[Violation] = []
    for project, seq in by_project.items():
        for start, end in _ownerless_spans(seq):
            for room_start, room_end in room:
                overlap = min(end, room_end) - max(start, room_start)
                if overlap > limit:
                    found.append(
                        Violation(
                            OWNERLESS,
                            project,
                            f"no live owner from {start:.3f} to {end:.3f} ({end - start:.2f} s; {overlap:.2f} s of it "
                            f"with a live pod with room) — more than TTL {ttl:g} s + tick {tick:g} s",
                        )
                    )
                    break
    return found


# ---------------------------------------------------------------------------------------------- rules f and g


def _closed(operations: Iterable[Operation]) -> set[str]:
    """Projects closed, or whose close may have happened (outcome unknown): their snapshots are disposed."""
    return {op.project for op in operations if op.kind is Kind.CLOSE and op.outcome is not Outcome.REFUSED}


def _file_write(op: Operation) -> tuple[str, str] | None:
    """The path and the SHA-256 of the bytes of a file write whose payload records them; None otherwise."""
    path, digest = op.payload.get("path"), op.payload.get("sha256")
    if op.kind is Kind.WRITE and isinstance(path, str) and isinstance(digest, str):
        return path, digest
    return None


def _may_have_landed(op: Operation) -> bool:
    """A file write that may have changed the folder: any but one refused before writing."""
    return op.kind is Kind.WRITE and not (op.outcome is Outcome.REFUSED and op.code in REFUSED_BEFORE_WRITING)


def _is_acknowledged(op: Operation) -> bool:
    return op.outcome is Outcome.OK and op.completed is not None


def _writes_by_project(operations: Iterable[Operation]) -> dict[str, list[Operation]]:
    grouped: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        if op.kind is Kind.WRITE:
            grouped[op.project].append(op)
    for seq in grouped.values():
        seq.sort(key=lambda o: (o.invoked, o.id))
    return grouped


def _possible(writes: Sequence[Operation], anchor: Operation, until: float | None) -> set[str] | None:
    """The bytes the path ``anchor`` wrote may hold once ``anchor`` took effect, for a reader that began at
    ``until`` (None: after every write): ``anchor``'s, or those of any other write of the path that may have
    landed after it — not refused before writing, not completed before ``anchor`` was invoked, invoked before
    ``until``. None when such a write records no path: it may have written any, nothing is known."""
    tracked = _file_write(anchor)
    assert tracked is not None
    path, digest = tracked
    possible = {digest}
    for w in writes:
        if w is anchor or not _may_have_landed(w):
            continue
        if w.completed is not None and w.completed <= anchor.invoked:
            continue
        if until is not None and w.invoked >= until:
            continue
        other = _file_write(w)
        if other is None:
            return None
        if other[0] == path:
            possible.add(other[1])
    return possible


def _held(held: str | None, writes: Sequence[Operation], path: str) -> str:
    """What a restored snapshot holds at ``path``, in words: no file, the bytes of a write the kit knows, other."""
    if held is None:
        return "no such file"
    by = [w for w in writes if _file_write(w) == (path, held)]
    if by:
        return f"the bytes of write #{by[-1].id}"
    return f"bytes no write of the kit sent (sha256 {held[:12]}…)"


def durable_writes_lost(
    operations: Sequence[Operation],
    files: Mapping[str, Mapping[str, str] | None],
    final: Mapping[str, str | None],
) -> list[Violation]:
    """(f) ``durable-write-lost``: acknowledged as durable means saved, through every fault.

    Judged per project not closed, for each path with an acknowledged durable write (answered 2xx to
    ``PUT …?durable=true``), in two parts:

    1. **its snapshot** — every acknowledged durable write D names a snapshot, and that snapshot, when the kit
       read it back (``files``), restores and holds at the path D's bytes or those of another write of the path
       that may have landed after D and was invoked before D was answered;
    2. **the final state** — the project's final snapshot (``final``: its head once the kit healed every fault
       and suspended everything), when known, restores and holds at the path the bytes of the path's latest
       *saved* write A, or of any other write of the path that may have landed after A. A saved write is an
       acknowledged durable write, or an acknowledged write whose bytes the restored snapshot of an
       acknowledged checkpoint invoked after it completed holds at the path: a later write replaces a durable
       one in the expectation only once it is acknowledged and a checkpoint showed it saved; until then a
       later write (plain or durable, acknowledged, unknown, or refused after writing) that may or may not
       have landed only adds its bytes to the set the path may hold.

    "May have landed": any outcome but a refusal answered before writing (:data:`REFUSED_BEFORE_WRITING`);
    "after A": not completed before A was invoked; "latest": the latest invoked. Writes are whole-file
    writes. A snapshot the kit did not read back is not judged, nor a path when a write that may have landed
    records no path (it may have written any)."""
    closed = _closed(operations)
    by_project = _writes_by_project(operations)
    checkpoints: dict[str, list[Operation]] = defaultdict(list)
    for op in _acknowledged(operations, frozenset({Kind.CHECKPOINT})):
        checkpoints[op.project].append(op)
    found: list[Violation] = []
    for project, writes in sorted(by_project.items()):
        if project in closed:
            continue
        durable = [
            (w, tracked[0])
            for w in writes
            if _is_acknowledged(w) and (tracked := _file_write(w)) is not None and w.payload.get("durable") is True
        ]
        for d, path in durable:
            snapshot = d.payload.get("snapshot")
            if not isinstance(snapshot, str):
                found.append(
                    Violation(
                        DURABLE_WRITE_LOST,
                        project,
                        f"durable write #{d.id} of {path} acknowledged naming no snapshot",
                        (d.id,),
                    )
                )
                continue
            if snapshot not in files:
                continue
            content = files[snapshot]
            if content is None:
                found.append(
                    Violation(
                        DURABLE_WRITE_LOST,
                        project,
                        f"snapshot {snapshot}, named by durable write #{d.id} of {path}, does not restore",
                        (d.id,),
                    )
                )
                continue
            possible = _possible(writes, d, d.completed)
            if possible is not None and content.get(path) not in possible:
                found.append(
                    Violation(
                        DURABLE_WRITE_LOST,
                        project,
                        f"durable write #{d.id} of {path} was acknowledged in snapshot {snapshot}, which holds "
                        f"{_held(content.get(path), writes, path)} there",
                        (d.id,),
                    )
                )
        last = final.get(project)
        if not durable or last is None or last not in files:
            continue
        content = files[last]
        if content is None:
            found.append(
                Violation(
                    DURABLE_WRITE_LOST,
                    project,
                    f"the final state (snapshot {last}) does not restore: {len(durable)} acknowledged durable "
                    "writes cannot be read back",
                    tuple(d.id for d, _ in durable),
                )
            )
            continue
        for path in sorted({path for _, path in durable}):
            saved: list[tuple[Operation, Operation | None]] = []
            for w in writes:
                tracked = _file_write(w)
                if tracked is None or tracked[0] != path or not _is_acknowledged(w):
                    continue
                if w.payload.get("durable") is True:
                    saved.append((w, None))
                    continue
                assert w.completed is not None
                by = next(
                    (
                        c
                        for c in checkpoints[w.project]
                        if c.invoked > w.completed
                        and isinstance(c.payload.get("snapshot"), str)
                        and (files.get(c.payload["snapshot"]) or {}).get(path) == tracked[1]
                    ),
                    None,
                )
                if by is not None:
                    saved.append((w, by))
            anchor, by = max(saved, key=lambda s: (s[0].invoked, s[0].id))
            possible = _possible(writes, anchor, None)
            if possible is None or content.get(path) in possible:
                continue
            how = "durable" if by is None else f"saved by checkpoint #{by.id}"
            found.append(
                Violation(
                    DURABLE_WRITE_LOST,
                    project,
                    f"{path} lost after acknowledged: the final state (snapshot {last}) holds "
                    f"{_held(content.get(path), writes, path)}, not the bytes of write #{anchor.id} ({how}) "
                    "or of a write that may have landed after it",
                    (anchor.id,) if by is None else (anchor.id, by.id),
                )
            )
    return found


def lineage_checkpoints_miss_writes(
    operations: Sequence[Operation], files: Mapping[str, Mapping[str, str] | None]
) -> list[Violation]:
    """(g) ``lineage-checkpoint-misses-write``: a checkpoint acknowledged under a lineage holds the writes made
    under it.

    A checkpoint acknowledged (2xx) with ``Tenure-If-Lineage: L`` (payload ``if_lineage``) names a snapshot;
    when the kit read it back (``files``), it holds, for every path with a write acknowledged under lineage L
    (its answer named lineage L) that completed before the checkpoint was invoked — the writes since the
    client's previous acknowledged checkpoint, and the earlier ones too, since the lineage did not change —
    the bytes of the latest such write A, or those of another write of the path that may have landed after
    A (not refused before writing, not completed before A was invoked) and was invoked before the checkpoint
    was answered. Not judged: a checkpoint refused (a ``412 lineage-changed`` is an outcome, not a fault) or
    unknown, one sent without ``Tenure-If-Lineage``, one whose snapshot did not restore or was not read back
    (``checkpoint-restorable`` judges that), a closed project's, and a path when a write that may have landed
    records no path."""
    closed = _closed(operations)
    by_project = _writes_by_project(operations)
    found: list[Violation] = []
    for c in _acknowledged(operations, frozenset({Kind.CHECKPOINT})):
        lineage, snapshot = c.payload.get("if_lineage"), c.payload.get("snapshot")
        if c.project in closed or not isinstance(lineage, int) or not isinstance(snapshot, str):
            continue
        content = files.get(snapshot)
        if content is None:
            continue
        writes = by_project.get(c.project, [])
        latest: dict[str, Operation] = {}
        for w in writes:
            tracked = _file_write(w)
            if (
                tracked is not None
                and _is_acknowledged(w)
                and w.payload.get("lineage") == lineage
                and w.completed is not None
                and w.completed < c.invoked
            ):
                latest[tracked[0]] = w  # sorted by invoke: the latest wins
        missing: list[tuple[str, Operation]] = []
        for path, a in sorted(latest.items()):
            possible = _possible(writes, a, c.completed)
            if possible is not None and content.get(path) not in possible:
                missing.append((path, a))
        if missing:
            listed = "; ".join(
                f"{path} (write #{a.id}; it holds {_held(content.get(path), writes, path)})" for path, a in missing
            )
            found.append(
                Violation(
                    LINEAGE_CHECKPOINT_MISSES_WRITE,
                    c.project,
                    f"checkpoint #{c.id} acknowledged under lineage {lineage} (snapshot {snapshot}) misses "
                    f"{len(missing)} write(s) acknowledged under that lineage: {listed}",
                    (c.id, *(a.id for _, a in missing)),
                )
            )
    return found
