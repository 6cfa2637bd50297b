"""The change journal on real folders and real inotify: it never misses what a walk would find.

Expected results come from a full walk and read of the folder before and
after each interval, never from the journal. ``take`` drains the kernel queue
itself, so no test waits for the reader.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tenure.snapshots.journal import ChangeJournal, Changes, JournalHub, _Event, _Session

State = dict[bytes, tuple[object, ...]]


def walk(root: str) -> State:
    """(kind, mode, size, mtime_ns, content or target, link count) of every path below ``root``, ``b""`` included."""
    base = os.fsencode(root)
    out: State = {}
    stack = [b""]
    while stack:
        rel = stack.pop()
        path = base + b"/" + rel if rel else base
        s = os.lstat(path)
        kind = stat.S_IFMT(s.st_mode)
        if stat.S_ISDIR(s.st_mode):
            body: object = None
            stack += [rel + b"/" + n if rel else n for n in os.listdir(path)]
        elif stat.S_ISLNK(s.st_mode):
            body = os.readlink(path)
        else:
            body = Path(os.fsdecode(path)).read_bytes()
        out[rel] = (kind, s.st_mode, s.st_size, s.st_mtime_ns, body, s.st_nlink)
    return out


def differences(before: State, after: State) -> set[bytes]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def ancestors(path: bytes) -> list[bytes]:
    """``path`` itself, its parents, and the root ``b""``."""
    out = [path]
    while path:
        path = path.rpartition(b"/")[0]
        out.append(path)
    return out


def is_folder(entry: tuple[object, ...] | None) -> bool:
    return entry is not None and entry[0] == stat.S_IFDIR


def uncovered(before: State, after: State, changes: Changes | None) -> set[bytes]:
    """The differing paths ``changes`` does not cover (the rule of the journal's contract)."""
    if changes is None:
        return set()
    missed = set()
    for path in differences(before, after):
        old = before.get(path)
        if old is not None and not is_folder(old) and old[5] != 1:
            continue  # several links at the previous checkpoint: the caller's job
        if path and path.rpartition(b"/")[0] in changes.folders:
            continue
        if any(a in changes.trees for a in ancestors(path)):
            continue
        if any(a and a.rpartition(b"/")[0] in changes.folders and not is_folder(after.get(a)) for a in ancestors(path)):
            continue  # a folder above it is gone: its parent's listing says so
        if (is_folder(before.get(path)) or is_folder(after.get(path))) and path in changes.folders:
            continue
        missed.add(path)
    return missed


def misplaced_watches(journal: ChangeJournal, root: str) -> list[tuple[object, ...]]:
    """Where the journal's watch map disagrees with the kernel's own list of watches.

    ``/proc/self/fdinfo`` of the hub's inotify descriptor names each watch's inode, the watches of every
    journal on the hub: only the journal's own descriptors count. The folder at the path the journal holds
    for a watch must be that inode (a folder below the root mapped at a path that is not there is wrong
    too), and every folder below the root must be watched by one of them.
    """
    session = journal._session
    if session is None or session.closed or session.hub.closed:
        return []
    kernel = kernel_watches(session.hub)
    inodes = {os.lstat(folder).st_ino: os.path.relpath(folder, root) for folder, _, _ in os.walk(root)}
    out: list[tuple[object, ...]] = []
    for wd, rel in sorted(session.paths.items()):
        if wd in kernel:  # else removed, its IGNORED not read yet
            inode = folder_inode(root, rel)
            if inode is None:
                if kernel[wd] in inodes:  # a folder that is there, mapped at a path that is not
                    out.append(("wrong path", wd, rel, inodes[kernel[wd]]))
                continue  # else a deleted folder whose watch the kernel has not ended yet
            if inode != kernel[wd]:
                out.append(("wrong path", wd, rel))
    watched = {kernel[wd] for wd in session.paths if wd in kernel}
    for inode, folder in inodes.items():
        if inode not in watched:
            out.append(("not watched", folder))
    return out


def folder_inode(root: str, rel: bytes) -> int | None:
    """The inode of the folder at ``rel`` below ``root``, reached without a symlink on the way, or ``None``."""
    path = os.fsencode(root)
    for name in rel.split(b"/") if rel else []:
        path += b"/" + name
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return None
        except FileNotFoundError:
            return None
    return os.lstat(path).st_ino


def kernel_watches(hub: JournalHub) -> dict[int, int]:
    """Watch descriptor → inode of every watch of the hub's inotify instance, as the kernel lists them."""
    kernel = {}
    with open(f"/proc/self/fdinfo/{hub.fileno()}") as fh:
        for line in fh:
            found = re.match(r"inotify wd:([0-9a-f]+) ino:([0-9a-f]+)", line)
            if found:
                kernel[int(found.group(1), 16)] = int(found.group(2), 16)
    return kernel


NAMES = st.sampled_from(["a", "b", "c", "d"])
BODIES = st.binary(min_size=0, max_size=40)


class JournalMachine(RuleBasedStateMachine):
    """Random operations on a small tree; after each one, ``take`` must cover every difference a walk finds.

    The folder things move in from and out to has a journal of its own on the same hub, held to the same
    rule: a move between them is one journal's MOVED_FROM and the other's MOVED_TO on one inotify instance.
    """

    def __init__(self) -> None:
        super().__init__()
        self.base = tempfile.mkdtemp(prefix="journal-")
        self.root = os.path.join(self.base, "tree")
        self.outside = os.path.join(self.base, "outside")
        os.mkdir(self.root)
        os.mkdir(self.outside)
        self.hub = JournalHub()
        self.journal: ChangeJournal | None = None
        self.neighbour: ChangeJournal | None = None
        self.before: State = {}
        self.outside_before: State = {}
        self.counter = 0

    @initialize(layout=st.lists(st.tuples(st.lists(NAMES, min_size=1, max_size=3), BODIES), max_size=6))
    def build(self, layout: list[tuple[list[str], bytes]]) -> None:
        for parts, body in layout:
            target = os.path.join(self.root, *parts)
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "xb") as fh:
                    fh.write(body)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                continue  # a file or folder of that name is there already
        self.journal = ChangeJournal(self.root, hub=self.hub)
        self.journal.start()
        self.neighbour = ChangeJournal(self.outside, hub=self.hub)
        self.neighbour.start()
        self.before = walk(self.root)
        self.outside_before = walk(self.outside)

    # -- picking paths ----------------------------------------------------

    def paths(self, want: str) -> list[str]:
        out = []
        for rel, entry in sorted(walk(self.root).items()):
            kind = entry[0]
            if want == "file" and kind == stat.S_IFREG or want == "dir" and kind == stat.S_IFDIR and rel:
                out.append(os.fsdecode(rel))
            elif want == "any" and rel:
                out.append(os.fsdecode(rel))
        return out

    def pick(self, data: st.DataObject, want: str) -> str | None:
        choices = self.paths(want)
        return os.path.join(self.root, data.draw(st.sampled_from(choices))) if choices else None

    def new_name(self, data: st.DataObject) -> str:
        folder = data.draw(st.sampled_from(["", *self.paths("dir")]))
        self.counter += 1
        return os.path.join(self.root, folder, data.draw(st.sampled_from([f"n{self.counter}", "a", "b"])))

    # -- operations -------------------------------------------------------

    @rule(data=st.data(), body=BODIES, how=st.sampled_from(["w", "a"]))
    def write(self, data: st.DataObject, body: bytes, how: str) -> None:
        target = self.pick(data, "file") if data.draw(st.booleans()) else self.new_name(data)
        if target is not None and not os.path.isdir(target) and not os.path.islink(target):
            with open(target, how + "b") as fh:
                fh.write(body)

    @rule(data=st.data(), body=st.binary(min_size=1, max_size=8))
    def write_keeping_mtime(self, data: st.DataObject, body: bytes) -> None:
        target = self.pick(data, "file")
        if target is None:
            return
        s = os.lstat(target)
        with open(target, "r+b") as fh:
            fh.write(bytes(b ^ 0xFF for b in body))
        os.utime(target, ns=(s.st_atime_ns, s.st_mtime_ns))

    @rule(data=st.data(), mode=st.sampled_from([0o600, 0o644, 0o700, 0o755]))
    def chmod(self, data: st.DataObject, mode: int) -> None:
        target = self.pick(data, "any")
        if target is not None and not os.path.islink(target):
            if os.path.isdir(target):  # a folder its owner cannot search hides its content from the walk
                mode |= 0o700  # (not a change), as it does from a checkpoint, which refuses it as unreadable
            os.chmod(target, mode)

    @rule(data=st.data(), size=st.integers(0, 50))
    def truncate(self, data: st.DataObject, size: int) -> None:
        target = self.pick(data, "file")
        if target is not None:
            os.truncate(target, size)

    @rule(data=st.data())
    def rename(self, data: st.DataObject) -> None:
        source = self.pick(data, "any")
        if source is None:
            return
        dest = self.pick(data, "any") if data.draw(st.booleans()) else self.new_name(data)
        if dest is None or dest == source or (dest + "/").startswith(source + "/"):
            return
        try:
            os.rename(source, dest)
        except OSError as exc:  # a folder over a file or a non-empty folder, and the like: nothing happened
            assert exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST, errno.EINVAL)

    @rule(data=st.data(), body=BODIES)
    def move_in(self, data: st.DataObject, body: bytes) -> None:
        self.counter += 1
        made = os.path.join(self.outside, f"in{self.counter}")
        os.makedirs(os.path.join(made, "sub"))
        Path(made, "sub", "f").write_bytes(body)
        Path(made, "g").write_bytes(body)
        dest = self.new_name(data)
        if os.path.lexists(dest):
            shutil.rmtree(made)
            return
        os.rename(made, dest)

    @rule(data=st.data())
    def move_out(self, data: st.DataObject) -> None:
        source = self.pick(data, "any")
        if source is not None:
            self.counter += 1
            os.rename(source, os.path.join(self.outside, f"out{self.counter}"))

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        target = self.pick(data, "any")
        if target is None:
            return
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        else:
            os.unlink(target)

    @rule(data=st.data(), pointing=st.sampled_from(["a", "../x", "/nowhere"]))
    def symlink(self, data: st.DataObject, pointing: str) -> None:
        name = self.new_name(data)
        if not os.path.lexists(name):
            os.symlink(pointing, name)

    @rule(data=st.data(), pointing=st.sampled_from(["a", "b", "../x"]))
    def swap_for_a_symlink(self, data: st.DataObject, pointing: str) -> None:
        """A folder made, then moved away and its name given to a symlink, while the reader may be watching it."""
        name = self.new_name(data)
        away = self.new_name(data)
        if os.path.lexists(name) or os.path.lexists(away) or name == away:
            return
        os.makedirs(os.path.join(name, "x", "y"))
        os.rename(name, away)
        os.symlink(pointing, name)

    @rule(data=st.data())
    def hard_link(self, data: st.DataObject) -> None:
        source = self.pick(data, "file")
        name = self.new_name(data)
        if source is not None and not os.path.lexists(name):
            os.link(source, name)

    @rule(data=st.data(), body=st.binary(min_size=1, max_size=8))
    def transient_link(self, data: st.DataObject, body: bytes) -> None:
        """A second link made, written through and removed within one interval."""
        source = self.pick(data, "file")
        name = self.new_name(data)
        if source is not None and not os.path.lexists(name):
            os.link(source, name)
            with open(name, "ab") as fh:
                fh.write(body)
            os.unlink(name)

    @rule(data=st.data(), body=BODIES)
    def mkdir_with_files(self, data: st.DataObject, body: bytes) -> None:
        name = self.new_name(data)
        if not os.path.lexists(name):
            os.makedirs(os.path.join(name, "x", "y"))
            Path(name, "x", "y", "f").write_bytes(body)
            Path(name, "f").write_bytes(body)

    # -- the check --------------------------------------------------------

    @invariant()
    def journal_covers_the_walk(self) -> None:
        if self.journal is None or self.neighbour is None:
            return
        changes = self.journal.take()
        outside_changes = self.neighbour.take()
        after = walk(self.root)
        missed = uncovered(self.before, after, changes)
        assert not missed, (missed, changes, self.journal.reason, misplaced_watches(self.journal, self.root))
        assert self.journal.running
        assert not misplaced_watches(self.journal, self.root)
        self.before = after
        outside_after = walk(self.outside)
        missed = uncovered(self.outside_before, outside_after, outside_changes)
        assert not missed, (missed, outside_changes, self.neighbour.reason)
        assert self.neighbour.running
        assert not misplaced_watches(self.neighbour, self.outside)
        self.outside_before = outside_after

    def teardown(self) -> None:
        for journal in (self.journal, self.neighbour):
            if journal is not None:
                journal.close()
        self.hub.close()
        shutil.rmtree(self.base)


JournalMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_journal_never_misses_what_a_walk_finds = JournalMachine.TestCase


# -- targeted tests -----------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_bytes(b"one")
    (root / "top").write_bytes(b"top")
    return root


def started(root: Path, **kwargs: object) -> ChangeJournal:
    journal = ChangeJournal(str(root), **kwargs)  # type: ignore[arg-type]
    journal.start()
    assert journal.take() == Changes(frozenset(), frozenset())
    return journal


def test_take_before_start_is_a_doubt(tree: Path) -> None:
    with ChangeJournal(str(tree)) as journal:
        assert journal.take() is None
        assert not journal.running


def test_an_edit_names_its_folder(tree: Path) -> None:
    with started(tree) as journal:
        (tree / "a" / "b" / "f").write_bytes(b"two")
        assert journal.take() == Changes(frozenset({b"a/b"}), frozenset())
        assert journal.take() == Changes(frozenset(), frozenset())  # each take starts a new interval


def test_a_folder_rename_keeps_the_paths_of_its_whole_subtree(tree: Path) -> None:
    (tree / "a" / "b" / "c").mkdir()
    (tree / "x").mkdir()
    with started(tree) as journal:
        os.rename(tree / "a", tree / "x" / "moved")
        changes = journal.take()
        assert changes is not None
        assert b"x/moved" in changes.trees
        assert {b"", b"x"} <= changes.folders
        (tree / "x" / "moved" / "b" / "c" / "new").write_bytes(b"n")
        (tree / "x" / "moved" / "b" / "f").write_bytes(b"edited")
        assert journal.take() == Changes(frozenset({b"x/moved/b/c", b"x/moved/b"}), frozenset())


def test_a_folder_made_with_files_before_its_watch_is_a_tree_and_then_watched(tree: Path) -> None:
    with started(tree) as journal:
        with journal._held():  # the reader cannot add the watch until the folder is full
            (tree / "new" / "deep").mkdir(parents=True)
            (tree / "new" / "deep" / "f").write_bytes(b"f")
        changes = journal.take()
        assert changes is not None and b"new" in changes.trees and b"" in changes.folders
        (tree / "new" / "deep" / "f").write_bytes(b"g")
        assert journal.take() == Changes(frozenset({b"new/deep"}), frozenset())


def test_folders_renamed_and_replaced_before_the_reader_saw_them_are_watched_at_their_final_paths(tree: Path) -> None:
    with started(tree) as journal:
        with journal._held():
            (tree / "d" / "sub").mkdir(parents=True)
            os.rename(tree / "d", tree / "e")
            (tree / "d").mkdir()
            os.rename(tree / "a", tree / "d" / "a")
        changes = journal.take()
        assert changes is not None and {b"d", b"e"} <= changes.trees
        (tree / "e" / "sub" / "f").write_bytes(b"f")
        (tree / "d" / "g").write_bytes(b"g")
        (tree / "d" / "a" / "b" / "f").write_bytes(b"edited")
        assert journal.take() == Changes(frozenset({b"e/sub", b"d", b"d/a/b"}), frozenset())


class _SwappedForASymlink(ChangeJournal):
    """While the reader watches a new folder ``n``, ``n`` moves to ``gone`` and a symlink to ``real`` takes
    its name: the race of a folder replaced by a symlink between its listing and its subfolders' watches."""

    swap = True

    def _add_watch(self, session: _Session, path: bytes, fd: int | None = None) -> int:
        wd = super()._add_watch(session, path, fd)
        if self.swap and path.endswith(b"/n"):
            self.swap = False
            root = Path(os.fsdecode(self._root))
            os.rename(root / "n", root / "gone")
            os.symlink("real", root / "n")
        return wd


def test_a_folder_swapped_for_a_symlink_while_watched_leaves_every_other_watch_at_its_path(tree: Path) -> None:
    """Watching ``n/sub`` through the symlink would give the watch of ``real/sub`` (already watched) the path
    ``n/sub``, then ``gone/sub`` when the rename's events come: an edit in ``real/sub`` named under another
    folder, not in doubt. Watches are added and folders listed through descriptors opened without
    following symlinks, so the walk stays on the folder it listed."""
    (tree / "real" / "sub").mkdir(parents=True)
    (tree / "real" / "sub" / "f").write_bytes(b"f")
    journal = _SwappedForASymlink(str(tree))
    with journal:
        journal.start()
        assert journal.take() == Changes(frozenset(), frozenset())
        with journal._held():  # n and n/sub both there before the reader sees n
            (tree / "n" / "sub").mkdir(parents=True)
        first = journal.take()
        second = journal.take()  # the swap's own events, when the walk was the first take's
        assert not journal.swap, "the race was not played"
        assert first is not None and second is not None
        assert {b"n", b"gone"} <= first.trees | second.trees
        assert not misplaced_watches(journal, str(tree))
        (tree / "real" / "sub" / "f").write_bytes(b"edited")
        (tree / "gone" / "sub" / "g").write_bytes(b"new")
        assert journal.take() == Changes(frozenset({b"real/sub", b"gone/sub"}), frozenset())


def test_excluded_folders_are_never_reported(tree: Path) -> None:
    (tree / ".tenure").mkdir()
    with started(tree, exclude=[b".tenure"]) as journal:
        (tree / ".tenure" / "index").write_bytes(b"i")
        (tree / ".tenure" / "sub").mkdir()
        (tree / ".tenure" / "sub" / "x").write_bytes(b"x")
        os.link(tree / ".tenure" / "sub" / "x", tree / ".tenure" / "sub" / "y")
        os.chmod(tree / ".tenure", 0o700)
        assert journal.take() == Changes(frozenset(), frozenset())


def test_a_hard_link_inside_the_folder_is_a_doubt(tree: Path) -> None:
    with started(tree) as journal:
        os.link(tree / "top", tree / "a" / "second")
        assert journal.take() is None
        assert journal.reason is not None and "links" in journal.reason
        assert journal.take() == Changes(frozenset(), frozenset())  # the next interval is normal


def test_a_link_made_written_and_removed_within_an_interval_is_a_doubt(tree: Path) -> None:
    with started(tree) as journal:
        os.link(tree / "top", tree / "a" / "tmp")
        with open(tree / "a" / "tmp", "ab") as fh:
            fh.write(b"through the second name")
        os.unlink(tree / "a" / "tmp")
        assert journal.take() is None


def test_a_created_file_moved_on_inside_the_folder_is_no_doubt(tree: Path) -> None:
    """An atomic save (write a temporary name, rename over the real one) is the common case."""
    with started(tree) as journal:
        with journal._held():
            (tree / "a" / ".top.tmp").write_bytes(b"saved")
            os.rename(tree / "a" / ".top.tmp", tree / "a" / "b" / "f")
        assert journal.take() == Changes(frozenset({b"a", b"a/b"}), frozenset())


def test_a_link_moved_into_a_folder_that_has_left_is_a_doubt(tree: Path, tmp_path: Path) -> None:
    """The MOVED_TO lands on the last events of a folder moved out: the link left, it did not move on inside."""
    (tree / "x").mkdir()
    with started(tree) as journal:
        before = walk(str(tree))
        with journal._held():  # one batch: the folder's watch is dropped before its MOVED_TO is read
            os.rename(tree / "x", tmp_path / "x")
            os.link(tree / "a" / "b" / "f", tree / "a" / "second")
            with open(tree / "a" / "second", "ab") as fh:
                fh.write(b" through the second name")
            os.rename(tree / "a" / "second", tmp_path / "x" / "second")
        changes = journal.take()
        assert b"a/b/f" in uncovered(before, walk(str(tree)), Changes(frozenset({b"", b"a"}), frozenset()))
        assert changes is None
        assert journal.reason is not None and "created and is gone" in journal.reason


def test_a_link_from_outside_written_through_the_outside_name_is_not_seen(tree: Path, tmp_path: Path) -> None:
    """The documented limit: why the caller must still walk from time to time."""
    with started(tree) as journal:
        before = walk(str(tree))
        os.link(tree / "top", tmp_path / "outside-name")
        with open(tmp_path / "outside-name", "ab") as fh:
            fh.write(b" changed from outside")
        changes = journal.take()
        after = walk(str(tree))
        assert b"top" in differences(before, after)  # the walk sees it
        assert changes == Changes(frozenset(), frozenset())  # the journal does not


def test_an_overflowing_queue_is_a_doubt_then_the_journal_goes_on(tree: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    with started(tree) as journal:
        with journal._held():
            for i in range(limit // 2 + 10):  # two alternating events per step: the kernel merges only repeats
                os.utime(tree / "top", ns=(i, i))
                os.utime(tree / "a" / "b" / "f", ns=(i, i))
            (tree / "made-during-the-overflow").mkdir()
        assert journal.take() is None
        assert journal.reason is not None and "overflow" in journal.reason
        (tree / "made-during-the-overflow" / "f").write_bytes(b"watched again")
        assert journal.take() == Changes(frozenset({b"made-during-the-overflow"}), frozenset())


class _WatchLimit(ChangeJournal):
    """The watch limit, simulated for folders named ``full`` (the seam of the module)."""

    full = True

    def _add_watch(self, session: _Session, path: bytes, fd: int | None = None) -> int:
        if self.full and path.endswith(b"/full"):
            raise OSError(errno.ENOSPC, "inotify watch limit reached")
        return super()._add_watch(session, path, fd)


def test_a_watch_that_cannot_be_added_is_a_doubt_until_it_can(tree: Path) -> None:
    journal = _WatchLimit(str(tree))
    with journal:
        journal.start()
        (tree / "full").mkdir()
        assert journal.take() is None
        assert journal.reason is not None and "could not be added" in journal.reason
        assert journal.take() is None  # the rebuilt watches still miss it
        journal.full = False
        assert journal.take() is None  # this take rebuilds them all
        (tree / "full" / "f").write_bytes(b"f")
        assert journal.take() == Changes(frozenset({b"full"}), frozenset())


def test_an_unknown_watch_is_a_doubt(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    with started(tree) as journal:
        session = journal._session
        assert session is not None
        with journal._held():
            session.inotify.add_watch(str(tmp_path / "elsewhere"), 0x100)  # a watch the journal never made
            (tmp_path / "elsewhere" / "f").write_bytes(b"f")
        assert journal.take() is None
        assert journal.reason is not None and "unknown watch" in journal.reason
        (tree / "top").write_bytes(b"again")
        assert journal.take() == Changes(frozenset({b""}), frozenset())


class _FailsOnce(ChangeJournal):
    failed = False

    def _apply(self, session: _Session, events: list[_Event]) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the reader broke")
        super()._apply(session, events)


def test_a_failing_reader_is_a_doubt_then_the_journal_goes_on(tree: Path) -> None:
    with _FailsOnce(str(tree)) as journal:
        journal.start()
        (tree / "top").write_bytes(b"lost event")
        assert journal.take() is None
        assert journal.reason is not None and "the reader broke" in journal.reason
        (tree / "a" / "b" / "f").write_bytes(b"seen")
        assert journal.take() == Changes(frozenset({b"a/b"}), frozenset())


@pytest.mark.parametrize("how", ["moved", "deleted"])
def test_the_root_moved_or_deleted_is_a_doubt_for_good(tree: Path, how: str) -> None:
    with started(tree) as journal:
        if how == "moved":
            os.rename(tree, tree.parent / "elsewhere")
        else:
            shutil.rmtree(tree)
        assert journal.take() is None
        tree.mkdir(exist_ok=True)
        (tree / "f").write_bytes(b"a new folder at the same path")
        assert journal.take() is None
        assert not journal.running
