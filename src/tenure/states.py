"""Guarded state machines: one declarative edge table per machine, one check.

Every durable record with a lifecycle (snapshot, workspace, writer lease,
mount session, and the intake's package state) holds exactly one named state,
and every state change goes through :meth:`Machine.check` before it is
written. ``check`` rejects, with :class:`~tenure.errors.IllegalTransitionError`:

* a target the table has no edge to (a skipped state or a regression),
* a self-loop the machine does not declare,
* any move out of a terminal state,
* a guarded edge whose guard refuses the record (a resume to a state other
  than the one recorded, an undo of expiry after its grace period).

Guards are pure functions of a plain mapping (the record plus ``now``); they
do no I/O. The forced path, :meth:`Machine.force`, exists only for restart
reconciliation and lease takeover, each named by :class:`ForcePath`; it never
leaves a terminal state.

This module is pure: no I/O, no clock. The store repeats every guard inside
its writing statement (``WHERE state = :expected``), so a concurrent writer
loses with a conflict rather than overwriting.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, NoReturn, TypeVar

from tenure.errors import IllegalTransitionError

__all__ = [
    "Guard",
    "Machine",
    "ForcePath",
    "SnapshotState",
    "WorkspaceState",
    "LeaseState",
    "MountState",
    "SNAPSHOT",
    "WORKSPACE",
    "LEASE",
    "MOUNT",
    "PROJECT",
    "ProjectStatus",
    "MACHINES",
    "PUBLISHING_LEASE_STATES",
    "LIVE_LEASE_STATES",
    "mermaid",
]

S = TypeVar("S", bound=enum.Enum)

#: A guard sees the record (a mapping that includes ``now``), the source and
#: the target state, and returns ``None`` to allow the move or a sentence that
#: says why it is refused.
Guard = Callable[[Mapping[str, Any], Any, Any], "str | None"]


class ForcePath(enum.Enum):
    """The only two callers allowed to bypass the edge table."""

    RECONCILIATION = "reconciliation"
    TAKEOVER = "takeover"


@dataclass(frozen=True)
class Machine(Generic[S]):
    """A named state machine defined by its edge table.

    ``edges`` maps ``(source, target)`` to a guard or ``None``. A self-loop is
    legal only when it appears in ``edges``. ``terminal`` states have no
    outgoing edge; this is validated at definition time, together with
    reachability of every state from ``initial``.
    """

    name: str
    states: type[S]
    initial: S
    edges: Mapping[tuple[S, S], Guard | None]
    terminal: frozenset[S] = field(default_factory=frozenset)
    labels: Mapping[tuple[S, S], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for src, dst in self.edges:
            if src in self.terminal:
                raise ValueError(f"{self.name}: terminal state {src.name} has an edge to {dst.name}")
        reachable = {self.initial}
        frontier = [self.initial]
        while frontier:
            state = frontier.pop()
            for dst in self.targets(state):
                if dst not in reachable:
                    reachable.add(dst)
                    frontier.append(dst)
        missing = set(self.states) - reachable
        if missing:
            names = ", ".join(sorted(s.name for s in missing))
            raise ValueError(f"{self.name}: unreachable states: {names}")
        dead = {s for s in self.states if s not in self.terminal and not self.targets(s)}
        if dead:
            names = ", ".join(sorted(s.name for s in dead))
            raise ValueError(f"{self.name}: non-terminal states without exits: {names}")

    def targets(self, state: S) -> list[S]:
        """Every state with an edge from ``state``, in table order."""
        return [dst for (src, dst) in self.edges if src == state]

    def is_terminal(self, state: S) -> bool:
        return state in self.terminal

    def is_guarded(self, state: S, target: S) -> bool:
        return self.edges.get((state, target)) is not None

    def check(self, state: S, target: S, record: Mapping[str, Any] | None = None) -> S:
        """Return ``target`` if ``state → target`` is legal, else raise.

        ``record`` is what a guard sees; a guarded edge with no record is
        refused, so a caller cannot skip a guard by leaving it out.
        """
        state, target = self.states(state), self.states(target)
        if state in self.terminal:
            self._refuse(state, target, f"{state.name} is terminal")
        if (state, target) not in self.edges:
            why = "self-loop not allowed" if state == target else "no such edge"
            self._refuse(state, target, why)
        guard = self.edges[(state, target)]
        if guard is not None:
            if record is None:
                self._refuse(state, target, "guarded edge needs the record")
            refusal = guard(record, state, target)
            if refusal is not None:
                self._refuse(state, target, refusal)
        return target

    def allows(self, state: S, target: S, record: Mapping[str, Any] | None = None) -> bool:
        try:
            self.check(state, target, record)
        except IllegalTransitionError:
            return False
        return True

    def force(self, state: S, target: S, path: ForcePath) -> S:
        """The forced path: any move out of a non-terminal state.

        Only restart reconciliation and lease takeover call this, and they
        name themselves through ``path``. Terminal states stay terminal even
        here.
        """
        if not isinstance(path, ForcePath):
            raise TypeError("force() needs a ForcePath")
        state, target = self.states(state), self.states(target)
        if state in self.terminal and state != target:
            self._refuse(state, target, f"{state.name} is terminal, even for {path.value}")
        return target

    def _refuse(self, state: S, target: S, why: str) -> NoReturn:
        raise IllegalTransitionError(
            f"{self.name}: cannot move from {state.name} to {target.name}: {why}",
            machine=self.name,
            state=state.name,
            target=target.name,
            reason=why,
        )


def mermaid(machine: Machine[Any]) -> str:
    """The machine as a Mermaid ``stateDiagram-v2``, generated from its table."""
    lines = ["stateDiagram-v2", f"    [*] --> {machine.initial.name}"]
    for (src, dst), guard in machine.edges.items():
        label = machine.labels.get((src, dst)) or ("guarded" if guard is not None else "")
        suffix = f" : {label}" if label else ""
        lines.append(f"    {src.name} --> {dst.name}{suffix}")
    for state in machine.states:
        if state in machine.terminal:
            lines.append(f"    {state.name} --> [*]")
    return "\n".join(lines) + "\n"


def machine_doc(machine: Machine[Any], description: str) -> str:
    """The Markdown page ``docs/machines/<name>.md`` for one machine."""
    rows = []
    for (src, dst), guard in machine.edges.items():
        note = machine.labels.get((src, dst), "")
        rows.append(f"| {src.name} | {dst.name} | {'yes' if guard else ''} | {note} |")
    terminal = ", ".join(s.name for s in machine.states if s in machine.terminal) or "none"
    return (
        f"# The {machine.name} machine\n\n"
        "<!-- generated from the edge table by `python -m tenure.cli.docs`; do not edit -->\n\n"
        f"{description}\n\n"
        f"Initial state: {machine.initial.name}. Terminal: {terminal}.\n\n"
        f"```mermaid\n{mermaid(machine)}```\n\n"
        "| from | to | guarded | meaning |\n| --- | --- | --- | --- |\n" + "\n".join(rows) + "\n"
    )


def _machine(
    name: str,
    states: type[S],
    initial: S,
    terminal: Iterable[S],
    table: Iterable[tuple[S, S, str]],
    guards: Mapping[tuple[S, S], Guard] | None = None,
) -> Machine[S]:
    """A machine from its edge table: one row per edge, ``(source, target, meaning)``; ``guards`` by edge."""
    rows = list(table)
    guards = guards or {}
    return Machine(
        name=name,
        states=states,
        initial=initial,
        edges={(src, dst): guards.get((src, dst)) for src, dst, _ in rows},
        terminal=frozenset(terminal),
        labels={(src, dst): label for src, dst, label in rows},
    )


# --------------------------------------------------------------------------- snapshots


class SnapshotState(str, enum.Enum):
    """A snapshot record's state; values equal the database values."""

    UPLOADING = "UPLOADING"
    VALIDATING = "VALIDATING"
    READY = "READY"
    FAILED = "FAILED"
    DELETING = "DELETING"
    DELETED = "DELETED"
    DEGRADED = "DEGRADED"


_S = SnapshotState
SNAPSHOT: Machine[SnapshotState] = _machine(
    "snapshot",
    SnapshotState,
    _S.UPLOADING,
    [_S.DELETED],
    [
        (_S.UPLOADING, _S.VALIDATING, "objects uploaded"),
        (_S.UPLOADING, _S.FAILED, "upload failed"),
        (_S.VALIDATING, _S.READY, "closure verified, head advanced (one transaction)"),
        (_S.VALIDATING, _S.FAILED, "closure incomplete"),
        (_S.READY, _S.DELETING, "logical delete"),
        (_S.READY, _S.DEGRADED, "verify found missing or corrupt objects"),
        (_S.DEGRADED, _S.READY, "repaired"),
        (_S.DEGRADED, _S.DELETING, "logical delete"),
        (_S.FAILED, _S.DELETING, "collect a failed upload"),
        (_S.DELETING, _S.DELETED, "garbage collected"),
    ],
)

#: Snapshot states a new workspace may use as its base.
BASE_STATES = frozenset({SnapshotState.READY})
#: Snapshot states whose objects must never be collected (readable).
READABLE_SNAPSHOT_STATES = frozenset(
    {
        SnapshotState.UPLOADING,
        SnapshotState.VALIDATING,
        SnapshotState.READY,
        SnapshotState.DEGRADED,
        SnapshotState.DELETING,
    }
)


# --------------------------------------------------------------------------- workspaces


class WorkspaceState(str, enum.Enum):
    CREATING = "CREATING"
    IDLE = "IDLE"
    MOUNTED = "MOUNTED"
    CHECKPOINTING = "CHECKPOINTING"
    EXPIRING = "EXPIRING"
    DELETED = "DELETED"
    FAILED = "FAILED"


def _within_grace(record: Mapping[str, Any], _src: Any, _dst: Any) -> str | None:
    since: datetime | None = record.get("expiring_since")
    grace: timedelta = record.get("grace", timedelta(0))
    now: datetime = record["now"]
    if since is None or now > since + grace:
        return "the grace period for undoing the expiry has ended"
    return None


def _no_live_writer(record: Mapping[str, Any], _src: Any, _dst: Any) -> str | None:
    if record.get("live_writer"):
        return "a writer lease is still ACTIVE or RELEASING"
    return None


_W = WorkspaceState
WORKSPACE: Machine[WorkspaceState] = _machine(
    "workspace",
    WorkspaceState,
    _W.CREATING,
    [_W.DELETED],
    [
        (_W.CREATING, _W.IDLE, "created (empty or forked from a READY snapshot)"),
        (_W.CREATING, _W.FAILED, "creation failed"),
        (_W.IDLE, _W.MOUNTED, "writer lease acquired"),
        (_W.MOUNTED, _W.CHECKPOINTING, "checkpoint started"),
        (_W.CHECKPOINTING, _W.MOUNTED, "published (same transaction as head advance) or abandoned"),
        (_W.MOUNTED, _W.IDLE, "writer lease released"),
        (_W.IDLE, _W.EXPIRING, "retention ended"),
        (_W.MOUNTED, _W.EXPIRING, "retention ended under a live writer: waits"),
        (_W.EXPIRING, _W.IDLE, "undo, only within the grace period"),
        (_W.EXPIRING, _W.DELETED, "only with no live writer"),
        (_W.FAILED, _W.CREATING, "retry creation"),
        (_W.FAILED, _W.IDLE, "recovered"),
        (_W.FAILED, _W.EXPIRING, "retire"),
        (_W.FAILED, _W.DELETED, "tear down"),
    ],
    guards={(_W.EXPIRING, _W.IDLE): _within_grace, (_W.EXPIRING, _W.DELETED): _no_live_writer},
)


# --------------------------------------------------------------------------- writer leases


class LeaseState(str, enum.Enum):
    ISSUED = "ISSUED"
    ACTIVE = "ACTIVE"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"
    EXPIRED = "EXPIRED"
    REVOKED = "REVOKED"


_L = LeaseState
LEASE: Machine[LeaseState] = _machine(
    "writer-lease",
    LeaseState,
    _L.ISSUED,
    [_L.RELEASED, _L.EXPIRED, _L.REVOKED],
    [
        (_L.ISSUED, _L.ACTIVE, "writer started"),
        (_L.ISSUED, _L.EXPIRED, "never activated before its TTL"),
        (_L.ISSUED, _L.REVOKED, "superseded by a newer generation"),
        (_L.ACTIVE, _L.RELEASING, "clean unmount begins (final checkpoint allowed)"),
        (_L.ACTIVE, _L.EXPIRED, "not renewed before its TTL"),
        (_L.ACTIVE, _L.REVOKED, "operator, or superseded by a newer generation"),
        (_L.RELEASING, _L.RELEASED, "final checkpoint done"),
        (_L.RELEASING, _L.EXPIRED, "release not finished before its TTL"),
        (_L.RELEASING, _L.REVOKED, "superseded by a newer generation"),
    ],
)

#: The publication predicate: only these lease states may publish.
PUBLISHING_LEASE_STATES = frozenset({LeaseState.ACTIVE, LeaseState.RELEASING})
#: A workspace may not be deleted while a lease is in one of these states.
LIVE_LEASE_STATES = PUBLISHING_LEASE_STATES


# --------------------------------------------------------------------------- mounts


class MountState(str, enum.Enum):
    """A pod's local materialization of a workspace (host-local record).

    MOUNTING: the folder is being restored; not yet usable.
    MOUNTED: the folder is live and may be written.
    CHECKPOINTING: a checkpoint of the folder is in flight.
    UNMOUNTING: the final checkpoint is committed; local cleanup remains.
    CLOSED: torn down or fenced; terminal.
    """

    MOUNTING = "MOUNTING"
    MOUNTED = "MOUNTED"
    CHECKPOINTING = "CHECKPOINTING"
    UNMOUNTING = "UNMOUNTING"
    CLOSED = "CLOSED"


_M = MountState
MOUNT: Machine[MountState] = _machine(
    "mount",
    MountState,
    _M.MOUNTING,
    [_M.CLOSED],
    [
        (_M.MOUNTING, _M.MOUNTED, "folder materialized and verified"),
        (_M.MOUNTING, _M.CLOSED, "mount failed; nothing was written"),
        (_M.MOUNTED, _M.CHECKPOINTING, "checkpoint started"),
        (_M.CHECKPOINTING, _M.MOUNTED, "checkpoint published or abandoned"),
        (_M.CHECKPOINTING, _M.UNMOUNTING, "final checkpoint published"),
        (_M.MOUNTED, _M.UNMOUNTING, "unmount with nothing to publish"),
        (_M.UNMOUNTING, _M.CLOSED, "folder removed"),
    ],
)

# --------------------------------------------------------------------------- projects


class ProjectStatus(str, enum.Enum):
    """A project's lifecycle status (intent), written only by the lifecycle service."""

    INIT = "INIT"
    RECOVERING = "RECOVERING"
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    CLOSED = "CLOSED"


_P = ProjectStatus
PROJECT: Machine[ProjectStatus] = _machine(
    "project",
    ProjectStatus,
    _P.INIT,
    [_P.CLOSED],
    [
        (_P.INIT, _P.RECOVERING, "bring step 2"),
        (_P.SUSPENDED, _P.RECOVERING, "bring step 2 (resume)"),
        (_P.SUSPENDING, _P.RECOVERING, "bring after a crash mid-suspend"),
        (_P.RUNNING, _P.RECOVERING, "bring by a pod that is not running it (takeover, restart)"),
        (_P.RECOVERING, _P.RUNNING, "bring step 5"),
        (_P.RUNNING, _P.SUSPENDING, "suspend step 1"),
        (_P.SUSPENDING, _P.SUSPENDED, "suspend step 4"),
        (_P.INIT, _P.SUSPENDED, "suspend of a never-recovered project: no workspace work"),
        (_P.INIT, _P.CLOSED, "close"),
        (_P.RECOVERING, _P.CLOSED, "close"),
        (_P.RUNNING, _P.CLOSED, "close"),
        (_P.SUSPENDING, _P.CLOSED, "close"),
        (_P.SUSPENDED, _P.CLOSED, "close"),
    ],
)


class PodState(str, enum.Enum):
    """A pod row's status."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"


_D = PodState
POD: Machine[PodState] = _machine(
    "pod",
    PodState,
    _D.STARTING,
    [_D.STOPPED],
    [
        (_D.STARTING, _D.RUNNING, "start-up done (lock, reconciliation, re-derive, boot pull)"),
        (_D.STARTING, _D.DRAINING, "drain asked for during start-up"),
        (_D.STARTING, _D.STOPPED, "start-up failed"),
        (_D.RUNNING, _D.DRAINING, "SIGTERM, SIGINT or tenure pods drain"),
        (_D.RUNNING, _D.STOPPED, "stop without projects to hand over"),
        (_D.DRAINING, _D.STOPPED, "every project handed over"),
    ],
)


#: Every storage machine, by name (the intake registers its own).
MACHINES: dict[str, Machine[Any]] = {m.name: m for m in (SNAPSHOT, WORKSPACE, LEASE, MOUNT, PROJECT, POD)}

DESCRIPTIONS: dict[str, str] = {
    "project": (
        "A project's status is its lifecycle intent, written only by the lifecycle service and "
        "fenced by the project's generation. Ownership (the lease) is a separate axis: a claim "
        "never changes the status. RECOVERING and SUSPENDING are transient; a crash there is "
        "finished by the next bring or suspend. bring from RECOVERING skips the status step "
        "(there is no self-loop)."
    ),
    "snapshot": (
        "A snapshot is an immutable root tree. Only READY snapshots may be a workspace "
        "base. DEGRADED marks a published snapshot with missing or corrupt objects; it "
        "stays readable for its intact files and returns to READY once repaired. "
        "DELETING and DELETED are separate transactions: logical deletion, then garbage "
        "collection."
    ),
    "workspace": (
        "A workspace is a mutable folder with one durable head pointer. CHECKPOINTING "
        "exists so a crash mid-publish has an unambiguous resume target; the move back to "
        "MOUNTED commits in the same transaction as the head advance. Lease takeover may "
        "force a workspace out of any non-terminal state (the named takeover path)."
    ),
    "writer-lease": (
        "A writer lease carries the fencing generation. A new writer gets a fresh row at a "
        "strictly higher generation; the terminal states never leave. Only ACTIVE and "
        "RELEASING leases may publish."
    ),
    "pod": (
        "A pod is one process running tenure serve; a restart is a new pod. Nothing is placed "
        "on a pod until it is RUNNING (its /readyz). DRAINING hands every project over "
        "(engines stopped, checkpoint, lease released); STOPPED is final. A pod killed with "
        "SIGKILL stays RUNNING in its row; its liveness ends with its heartbeat and its "
        "projects' leases with the lease TTL."
    ),
    "mount": (
        "A mount is one pod's local materialization of a workspace, recorded in the "
        "host-local mount store with its writer lease id and generation. Restart "
        "reconciliation may force a mount straight to CLOSED (the named reconciliation "
        "path)."
    ),
}


def write_docs(folder: str, machines: Mapping[str, tuple[Machine[Any], str]]) -> list[str]:
    """Write one Markdown page per machine into ``folder``; return the paths."""
    import os

    os.makedirs(folder, exist_ok=True)
    written = []
    for name, (machine, description) in machines.items():
        path = os.path.join(folder, f"{name}.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(machine_doc(machine, description))
        written.append(path)
    return written
