"""Persistence rules and crash states, checked on a recorded sequence of events.

:class:`Model` replays the events of one child process on a small model of
the folder it worked in: every file and folder is a node, and each node has
a *volatile* state (what the process sees) and a *persistent* state (what
survives power loss):

* a file's data (a version bumped by every write, and its size) becomes
  persistent when the file is fsynced (``fsync`` or ``fdatasync``);
* a folder's entries (names → nodes) become persistent when the folder is
  fsynced;
* ``syncfs`` (or ``sync``) of the file system makes everything persistent.

The rules (restic's write sequence; see docs/architecture.md, "Durability"):

(a) a file renamed (or hard-linked) into its final place had its data made
    durable after its last write and before the rename; a folder renamed
    into place had every file and folder entry below it made durable;
(b) after a rename (or create) into a folder, that folder is made durable
    before the operation is acknowledged;
(c) a new folder's parent is made durable before acknowledgement;
(d) after an unlink, the folder is made durable before acknowledgement.

They are checked against *scopes* (the paths an operation promises to keep):
rule (a) at every rename or link into a scope once the operation began (the
first ``begin…`` mark; setup before it is not judged), (b)–(d) and the data of
every file at each acknowledgement point, where the persistent view of each
scope (or of the scopes that point names) must equal the volatile one. An
acknowledgement point is a mark, or the first fsync of a named path after a
mark (a database commit), or the first unlink of a path under a named prefix
after a mark (an input removed once its outcome is stored).

:func:`crash_violations` replays the same events into crash states, as
ALICE and LazyFS do: at every step, the state a power loss would leave
(only what was synced; or, in the ``eager-names`` model, every name change
but only synced data) must hold, under each final name, the old content or
the new one, never a truncated or stale file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from tests.integration.durability.trace import (
    CLOSE,
    FSYNC,
    LINK,
    MARK,
    MKDIR,
    OPEN,
    RENAME,
    RMDIR,
    SYMLINK,
    SYNCFS,
    TRUNCATE,
    UNLINK,
    WRITE,
    Event,
)


@dataclass(frozen=True)
class Scope:
    """``root`` (a file or folder) must be durable at each acknowledgement, as created below ``base``.

    Paths under ``exclude`` (e.g. the object store's ``tmp``) are not promised.
    """

    root: str
    base: str
    exclude: tuple[str, ...] = ()

    def covers(self, path: str) -> bool:
        return _under(path, self.root) and not any(_under(path, x) for x in self.exclude)


@dataclass(frozen=True)
class Ack:
    """An acknowledgement point: the mark ``label``, or the first sync of one of ``sync_of`` after it, or the
    first unlink of a path starting with one of ``removal_of`` after it.

    ``scopes`` names the roots of the scopes judged there (empty: every scope).
    """

    label: str
    sync_of: tuple[str, ...] = ()
    removal_of: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Window:
    """Crash states from mark ``begin`` to mark ``ack``: each of ``finals`` old or new, new at ``ack``."""

    begin: str
    ack: str
    finals: tuple[str, ...]


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def device_of(path: str) -> int:
    """The device of ``path``, or of its nearest existing ancestor."""
    while True:
        try:
            return os.stat(path).st_dev
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                raise
            path = parent


class Node:
    __slots__ = ("entries", "ino", "kind", "pentries", "psize", "pver", "size", "ver")

    def __init__(self, ino: int, kind: str) -> None:
        self.ino = ino
        self.kind = kind
        self.entries: dict[str, Node] = {}
        self.pentries: dict[str, Node] = {}
        self.ver = self.size = self.pver = self.psize = 0

    def persist(self) -> None:
        self.pver, self.psize = self.ver, self.size
        if self.kind == "dir":
            self.pentries = dict(self.entries)

    def data_durable(self) -> bool:
        return (self.pver, self.psize) == (self.ver, self.size)


State = tuple[int, int, int] | None  # (ino, version, size) of what a name shows, or absent


@dataclass
class Model:
    """The volatile and persistent state of ``workdir`` while events are applied (see the module docstring)."""

    workdir: str
    scopes: Sequence[Scope] = ()
    same_fs: Callable[[str | None], bool] = field(default=lambda _path: True)
    violations: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._inos = itertools.count()
        self.root = Node(next(self._inos), "dir")
        self.nodes = [self.root]
        self.fds: dict[int, Node] = {}
        self.pos: dict[int, int] = {}
        self.last_op: dict[tuple[int, str], tuple[str, int]] = {}
        self.armed = False  # rule (a) applies from the first ``begin…`` mark on (not to the setup)

    # ------------------------------------------------------------------ paths

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.workdir)

    def _parts(self, path: str | None) -> list[str] | None:
        if path is None or not _under(path, self.workdir):
            return None
        rel = os.path.relpath(path, self.workdir)
        return [] if rel == "." else rel.split("/")

    def _new(self, kind: str) -> Node:
        node = Node(next(self._inos), kind)
        self.nodes.append(node)
        return node

    def lookup(self, path: str, *, persistent: bool = False) -> Node | None:
        parts = self._parts(path)
        if parts is None:
            return None
        node: Node | None = self.root
        for part in parts:
            if node is None or node.kind != "dir":
                return None
            node = (node.pentries if persistent else node.entries).get(part)
        return node

    def _ensure(self, path: str, kind: str) -> Node | None:
        """The node at ``path``; one made up (as durable) when the trace never showed it created."""
        parts = self._parts(path)
        if parts is None:
            return None
        node = self.root
        for i, part in enumerate(parts):
            child = node.entries.get(part)
            if child is None:
                child = self._new(kind if i == len(parts) - 1 else "dir")
                node.entries[part] = node.pentries[part] = child
                self.unknown.append("/".join(parts[: i + 1]))
            node = child
        return node

    def _parent(self, path: str) -> tuple[Node, str] | None:
        parts = self._parts(path)
        if not parts:
            return None
        parent = self._ensure(os.path.dirname(path), "dir")
        return (parent, parts[-1]) if parent is not None and parent.kind == "dir" else None

    def _fd_node(self, event: Event) -> Node | None:
        if event.fd is not None and event.fd in self.fds:
            return self.fds[event.fd]
        if event.path is not None and self._parts(event.path) is not None:
            return self.lookup(event.path) or self._ensure(event.path, "file")
        return None

    def _enter(self, parent: Node, name: str, node: Node | None, op: str, index: int) -> None:
        if node is None:
            parent.entries.pop(name, None)
        else:
            parent.entries[name] = node
        self.last_op[(parent.ino, name)] = (op, index)

    # ------------------------------------------------------------------ events

    def apply(self, event: Event, index: int) -> bool:
        """Apply one event; True when it changed the model (or is a mark)."""
        kind = event.kind
        if kind == MARK:
            self.armed = self.armed or event.label.startswith("begin")
            return True
        if kind == OPEN:
            if event.fd is not None:
                self.fds.pop(event.fd, None)
                self.pos.pop(event.fd, None)
            if event.path is None or self._parts(event.path) is None:
                return False
            node = self.lookup(event.path)
            if node is None:
                where = self._parent(event.path)
                if where is None:
                    return False
                node = self._new("file")
                self._enter(where[0], where[1], node, "create" if event.creat else "found", index)
                if not event.creat:
                    where[0].pentries[where[1]] = node
                    self.unknown.append(self.rel(event.path))
            if event.trunc and node.kind == "file" and node.size:
                node.size, node.ver = 0, node.ver + 1
            if event.fd is not None:
                self.fds[event.fd], self.pos[event.fd] = node, 0
            self._count(kind)
            return True
        if kind == CLOSE:
            if event.fd is not None:
                self.fds.pop(event.fd, None)
                self.pos.pop(event.fd, None)
            return False
        if kind in (WRITE, TRUNCATE):
            node = self._fd_node(event)
            if node is None or node.kind != "file":
                return False
            if kind == TRUNCATE:
                node.size = event.size
            else:
                at = event.offset
                if at is None:
                    at = node.size if event.append else self.pos.get(event.fd or -1, 0)
                    if event.fd is not None:
                        self.pos[event.fd] = at + event.size
                node.size = max(node.size, at + event.size)
            node.ver += 1
            self._count(kind)
            return True
        if kind == FSYNC:
            node = self._fd_node(event)
            if node is None:
                return False
            node.persist()
            self._count(kind)
            return True
        if kind == SYNCFS:
            if not self.same_fs(event.path):
                return False
            for node in self.nodes:
                node.persist()
            self._count(kind)
            return True
        if kind == RENAME:
            return self._rename(event, index)
        if kind in (MKDIR, SYMLINK, LINK):
            target = event.path2 if kind == LINK else event.path
            where = self._parent(target) if target is not None else None
            if where is None or target is None:
                return False
            if kind == LINK:
                found = self.lookup(event.path) if event.path is not None else None
                if found is None and event.path is not None and self._parts(event.path) is not None:
                    self.unknown.append(self.rel(event.path))
                node = found or self._new("file")
                if self.armed and any(s.covers(target) for s in self.scopes):
                    self.violations.extend(
                        self._not_durable_below(
                            node, event.path or target, f"before it was linked to {self.rel(target)}"
                        )
                    )
                    self._count("link into scope")
            else:
                node = self._new("dir" if kind == MKDIR else "symlink")
            self._enter(where[0], where[1], node, kind, index)
            self._count(kind)
            return True
        if kind in (UNLINK, RMDIR):
            where = self._parent(event.path) if event.path is not None else None
            if where is None:
                return False
            self._enter(where[0], where[1], None, "unlink", index)
            self._count(kind)
            return True
        return False

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _rename(self, event: Event, index: int) -> bool:
        src, dst = event.path, event.path2
        if src is None or dst is None or src == dst:
            return False
        source = self._parent(src)
        node = source[0].entries.get(source[1]) if source is not None else None
        target = self._parent(dst)
        if target is None:
            if source is not None:
                self._enter(source[0], source[1], None, "rename-away", index)
                return True
            return False
        if node is None:
            node = self._new("file")
            self.unknown.append(self.rel(src))
        if self.armed and any(s.covers(dst) for s in self.scopes):
            self.violations.extend(self._not_durable_below(node, src, f"before it was renamed to {self.rel(dst)}"))
            self._count("rename into scope")
        if source is not None:
            self._enter(source[0], source[1], None, "rename-away", index)
        self._enter(target[0], target[1], node, "rename", index)
        self._count(RENAME)
        return True

    def _not_durable_below(self, node: Node, path: str, when: str) -> list[str]:
        """Rule (a) for ``node`` (a file, or a folder and everything below it)."""
        found: list[str] = []
        stack = [(node, path)]
        while stack and len(found) < 5:
            current, where = stack.pop()
            if current.kind == "file" and not current.data_durable():
                found.append(
                    f"(a) data of {self.rel(where)} was not fsynced (nor covered by a syncfs) "
                    f"after its last write, {when}"
                )
            if current.kind == "dir":
                if current.entries != current.pentries:
                    found.append(
                        f"(a) entries of folder {self.rel(where)} were not fsynced (nor covered by a syncfs), {when}"
                    )
                stack.extend((child, os.path.join(where, name)) for name, child in sorted(current.entries.items()))
        return found

    # ------------------------------------------------------------------ acknowledgement

    def ack_violations(self, label: str, roots: Iterable[str] = ()) -> list[str]:
        """Rules (b)–(d) and durable data: each scope's (with ``roots``: those scopes') persistent view
        equals its volatile view."""
        chosen = set(roots)
        found: list[str] = []
        for scope in self.scopes:
            if not chosen or scope.root in chosen:
                found += self._scope_violations(scope, label)
        return found

    def _entry_problem(self, parent: Node, parent_path: str, name: str, label: str) -> str | None:
        if parent.entries.get(name) is parent.pentries.get(name):
            return None
        path = os.path.join(parent_path, name)
        op = self.last_op.get((parent.ino, name), ("unknown", -1))[0]
        folder = self.rel(parent_path)
        rule = {
            "rename": "(b)",
            "create": "(b)",
            "link": "(b)",
            "symlink": "(b)",
            "mkdir": "(c)",
            "unlink": "(d)",
            "rename-away": "(d)",
        }.get(op, "(?)")
        what = {
            "mkdir": "is a new folder but its parent",
            "unlink": "was removed but its folder",
            "rename-away": "was renamed away but its folder",
        }.get(op, f"entered its folder ({op}) but")
        return f"{rule} {self.rel(path)} {what} {folder} was not fsynced (nor covered by a syncfs) before {label}"

    def _scope_violations(self, scope: Scope, label: str) -> list[str]:
        found: list[str] = []
        base = self.lookup(scope.base)
        if base is None:
            return [f"scope base {self.rel(scope.base)} does not exist at {label}"]
        node: Node | None = base
        here = scope.base
        for part in os.path.relpath(scope.root, scope.base).split("/") if scope.root != scope.base else []:
            assert node is not None
            problem = self._entry_problem(node, here, part, label)
            if problem:
                found.append(problem)
            node, here = node.entries.get(part), os.path.join(here, part)
            if node is None:
                return found
        stack = [(node, here)]
        while stack:
            current, where = stack.pop()
            assert current is not None
            if current.kind == "file" and not current.data_durable():
                found.append(f"(a) data of {self.rel(where)} was not fsynced (nor covered by a syncfs) before {label}")
            if current.kind != "dir":
                continue
            for name in sorted(set(current.entries) | set(current.pentries)):
                path = os.path.join(where, name)
                if not scope.covers(path):
                    continue
                problem = self._entry_problem(current, where, name, label)
                if problem:
                    found.append(problem)
                elif name in current.entries:
                    stack.append((current.entries[name], path))
        return found

    # ------------------------------------------------------------------ crash states

    def crash_state(self, path: str, model: str) -> State:
        """What ``path`` shows after a power loss now: ``lazy`` keeps only synced state; ``eager-names``
        also keeps every name change (data still only as synced)."""
        node = self.lookup(path, persistent=model == "lazy")
        if node is None:
            return None
        return (node.ino, node.pver, node.psize)

    def volatile_state(self, path: str) -> State:
        node = self.lookup(path)
        return None if node is None else (node.ino, node.ver, node.size)


def _mark_positions(events: Sequence[Event]) -> dict[str, int]:
    return {e.label: i for i, e in enumerate(events) if e.kind == MARK}


def ack_positions(events: Sequence[Event], acks: Iterable[Ack]) -> tuple[dict[int, list[str]], list[str]]:
    """Where each acknowledgement point is (checked before the event there is applied), and problems."""
    points, problems = _ack_points(events, acks)
    return {i: [label for label, _ack in found] for i, found in points.items()}, problems


def _ack_points(events: Sequence[Event], acks: Iterable[Ack]) -> tuple[dict[int, list[tuple[str, Ack]]], list[str]]:
    marks = _mark_positions(events)
    where: dict[int, list[tuple[str, Ack]]] = {}
    problems: list[str] = []
    for ack in acks:
        start = marks.get(ack.label)
        if start is None:
            problems.append(f"mark {ack.label!r} is missing from the trace")
            continue
        if ack.sync_of:
            sync = next(
                (i for i in range(start, len(events)) if events[i].kind == FSYNC and events[i].path in ack.sync_of),
                None,
            )
            if sync is None:
                problems.append(f"no fsync of {', '.join(ack.sync_of)} after mark {ack.label!r}")
                continue
            name = os.path.basename(events[sync].path or "")
            where.setdefault(sync, []).append((f"the fsync of {name} after {ack.label!r}", ack))
        elif ack.removal_of:
            gone = next(
                (
                    i
                    for i in range(start, len(events))
                    if events[i].kind == UNLINK and (events[i].path or "").startswith(ack.removal_of)
                ),
                None,
            )
            if gone is None:
                problems.append(f"no unlink of {', '.join(ack.removal_of)}… after mark {ack.label!r}")
                continue
            name = os.path.basename(events[gone].path or "")
            where.setdefault(gone, []).append((f"the unlink of {name} after {ack.label!r}", ack))
        else:
            where.setdefault(start, []).append((ack.label, ack))
    return where, problems


def check_rules(
    events: Sequence[Event],
    workdir: str,
    scopes: Sequence[Scope],
    acks: Sequence[Ack],
    same_fs: Callable[[str | None], bool] = lambda _p: True,
) -> tuple[list[str], Model]:
    """Every violation of rules (a)–(d) in ``events``; and the model after the last event."""
    model = Model(workdir, scopes, same_fs)
    where, problems = _ack_points(events, acks)
    model.violations.extend(problems)
    for i, event in enumerate(events):
        for label, ack in where.get(i, ()):
            model.violations.extend(model.ack_violations(label, ack.scopes))
        model.apply(event, i)
    return model.violations, model


def crash_violations(
    events: Sequence[Event],
    workdir: str,
    windows: Sequence[Window],
    model: str = "lazy",
    same_fs: Callable[[str | None], bool] = lambda _p: True,
) -> list[str]:
    """Crash states in each window that hold neither the old nor the new content under a final name."""
    marks = _mark_positions(events)
    problems = [
        f"mark {label!r} is missing from the trace" for w in windows for label in (w.begin, w.ack) if label not in marks
    ]
    if problems:
        return problems
    # The new content of each final name: its volatile state at the window's acknowledgement.
    new: dict[tuple[int, str], State] = {}
    replay = Model(workdir, same_fs=same_fs)
    for i, event in enumerate(events):
        for n, w in enumerate(windows):
            if marks[w.ack] == i:
                for f in w.finals:
                    new[(n, f)] = replay.volatile_state(f)
        replay.apply(event, i)
    replay = Model(workdir, same_fs=same_fs)
    old: dict[tuple[int, str], State] = {}
    reported: set[tuple[int, str]] = set()
    for i, event in enumerate(events):
        changed = replay.apply(event, i)
        for n, w in enumerate(windows):
            begin, ack = marks[w.begin], marks[w.ack]
            if i == begin:
                for f in w.finals:
                    old[(n, f)] = replay.crash_state(f, model)
            if not changed or not begin <= i <= ack:
                continue
            for f in w.finals:
                if (n, f) in reported:
                    continue
                state = replay.crash_state(f, model)
                allowed = [new[(n, f)]] if i == ack else [old[(n, f)], new[(n, f)]]
                if state not in allowed:
                    reported.add((n, f))
                    problems.append(
                        f"[{model}] a crash after event {i} ({_short(event, workdir)}) leaves "
                        f"{os.path.relpath(f, workdir)} {_describe(state, old[(n, f)], new[(n, f)])}"
                        f"{' at ' + w.ack if i == ack else ''}; expected the old or the new content"
                    )
    return problems


def _short(event: Event, workdir: str) -> str:
    paths = [os.path.relpath(p, workdir) for p in (event.path, event.path2) if p is not None]
    return " ".join([event.kind, *paths, event.label]).strip()


def _describe(state: State, old: State, new: State) -> str:
    if state == old:
        return "as it was before (absent)" if state is None else "with its old content"
    if state is None:
        return "absent"
    if new is not None and state[0] == new[0]:
        return f"with the new file but only {state[2]} of {new[2]} bytes durable (version {state[1]}/{new[1]})"
    return f"as another file ({state[2]} bytes durable)"
