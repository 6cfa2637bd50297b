"""Many change journals on one inotify instance (a :class:`JournalHub`), on real folders and real inotify.

Each journal must stay exactly what it is alone: its own watches, changes and
doubt, whatever the other journals on the hub see. The instance count comes
from ``/proc/self/fd``, the kernel's watches from ``/proc/self/fdinfo``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tenure.pod.journals import FolderJournals
from tenure.snapshots.journal import ChangeJournal, Changes, JournalHub
from tests.integration.snapshots.test_journal import kernel_watches, misplaced_watches

NOTHING = Changes(frozenset(), frozenset())


def inotify_instances() -> int:
    """How many inotify instances this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            continue  # the descriptor of the listing itself, closed by now
    return count


def project(path: Path) -> Path:
    """A small folder: ``top``, ``sub/f``, ``sub/deep/g``."""
    (path / "sub" / "deep").mkdir(parents=True)
    (path / "top").write_bytes(b"top")
    (path / "sub" / "f").write_bytes(b"f")
    (path / "sub" / "deep" / "g").write_bytes(b"g")
    return path


def on(hub: JournalHub, folder: Path) -> ChangeJournal:
    journal = ChangeJournal(str(folder), hub=hub)
    journal.start()
    assert journal.take() == NOTHING
    return journal


def wd_of(journal: ChangeJournal, rel: bytes) -> int:
    session = journal._session
    assert session is not None
    return next(wd for wd, path in session.paths.items() if path == rel)


def test_two_hundred_journals_on_one_hub_use_one_inotify_instance(tmp_path: Path) -> None:
    """More journals than the per-user limit of instances (128 by default) allows, each one exact."""
    folders = [project(tmp_path / f"p{i}") for i in range(200)]
    before = inotify_instances()
    with JournalHub() as hub:
        journals = [on(hub, folder) for folder in folders]
        assert inotify_instances() == before + 1
        assert hub.journals == 200
        for i, folder in enumerate(folders):
            (folder / "sub" / "deep" / "g").write_bytes(b"edit %d" % i)
        for journal in journals:
            assert journal.take() == Changes(frozenset({b"sub/deep"}), frozenset())
            assert journal.watches == 3
        for journal in journals:
            journal.close()
        assert hub.journals == 0
        hub.drain()  # the IGNORED of every removed watch
        assert kernel_watches(hub) == {}
        assert hub.watches == 0
    assert inotify_instances() == before


def test_a_journal_without_a_hub_makes_its_own_and_closes_it(tmp_path: Path) -> None:
    folder = project(tmp_path / "p")
    before = inotify_instances()
    with ChangeJournal(str(folder)) as journal:
        journal.start()
        assert journal.hub is not None and inotify_instances() == before + 1
        (folder / "top").write_bytes(b"edit")
        assert journal.take() == Changes(frozenset({b""}), frozenset())
    assert inotify_instances() == before


def test_a_change_in_one_folder_never_appears_in_another_journal_s_interval(tmp_path: Path) -> None:
    a, b, c = (project(tmp_path / name) for name in ("a", "b", "c"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with JournalHub() as hub:
        ja, jb, jc = on(hub, a), on(hub, b), on(hub, c)

        def takes() -> tuple[Changes | None, Changes | None, Changes | None]:
            out = ja.take(), jb.take(), jc.take()
            assert None not in out, (ja.reason, jb.reason, jc.reason)
            for journal, folder in ((ja, a), (jb, b), (jc, c)):
                assert not misplaced_watches(journal, str(folder))
            return out

        (a / "top").write_bytes(b"edit")
        (a / "new").mkdir()
        os.rename(a / "sub", a / "renamed")
        assert takes() == (Changes(frozenset({b""}), frozenset({b"new", b"renamed"})), NOTHING, NOTHING)

        (a / "renamed" / "deep" / "g").write_bytes(b"edit")
        assert takes() == (Changes(frozenset({b"renamed/deep"}), frozenset()), NOTHING, NOTHING)

        # From one journal's folder to another's: a moved out, b moved in; then b's alone.
        os.rename(a / "renamed", b / "moved")
        assert takes() == (
            Changes(frozenset({b""}), frozenset()),
            Changes(frozenset({b""}), frozenset({b"moved"})),
            NOTHING,
        )
        (b / "moved" / "deep" / "g").write_bytes(b"edit again")
        (b / "moved" / "f").write_bytes(b"edit")
        assert takes() == (NOTHING, Changes(frozenset({b"moved/deep", b"moved"}), frozenset()), NOTHING)

        # Out of every journal: no one hears of it again.
        os.rename(b / "moved", elsewhere / "moved")
        assert takes() == (NOTHING, Changes(frozenset({b""}), frozenset()), NOTHING)
        (elsewhere / "moved" / "deep" / "g").write_bytes(b"unwatched")
        assert takes() == (NOTHING, NOTHING, NOTHING)

        (c / "sub" / "f").write_bytes(b"edit")
        assert takes() == (NOTHING, NOTHING, Changes(frozenset({b"sub"}), frozenset()))


def test_an_overflow_puts_every_journal_on_the_hub_in_doubt_once(tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    folders = [project(tmp_path / f"p{i}") for i in range(5)]
    with JournalHub() as hub:
        journals = [on(hub, folder) for folder in folders]
        before = inotify_instances()
        noisy = folders[0]
        with journals[0]._held():  # the hub reads nothing: the kernel's queue overflows
            for i in range(limit // 2 + 10):  # two alternating events per step: the kernel merges only repeats
                os.utime(noisy / "top", ns=(i, i))
                os.utime(noisy / "sub" / "f", ns=(i, i))
            (folders[3] / "made-during-the-overflow").mkdir()
        for journal in journals:  # the other journals' events may be the ones lost: all in doubt
            assert journal.take() is None
            assert journal.reason is not None and "overflow" in journal.reason
        assert inotify_instances() == before  # the hub replaced its instance: still one
        (folders[3] / "made-during-the-overflow" / "f").write_bytes(b"watched again")
        for folder in folders:
            (folder / "sub" / "deep" / "g").write_bytes(b"edit")
        for i, (journal, folder) in enumerate(zip(journals, folders, strict=True)):
            named = {b"sub/deep", b"made-during-the-overflow"} if i == 3 else {b"sub/deep"}
            assert journal.take() == Changes(frozenset(named), frozenset())
            assert journal.take() == NOTHING
            assert not misplaced_watches(journal, str(folder))


def test_closing_one_journal_leaves_the_others_exact(tmp_path: Path) -> None:
    """Nested folders share their watch descriptors: closing one journal removes only what no other holds."""
    outer = project(tmp_path / "outer")
    beside = project(tmp_path / "beside")
    with JournalHub() as hub:
        jo, jb = on(hub, outer), on(hub, beside)
        inner = on(hub, outer / "sub")
        assert wd_of(inner, b"") == wd_of(jo, b"sub") and wd_of(inner, b"deep") == wd_of(jo, b"sub/deep")
        (outer / "sub" / "deep" / "g").write_bytes(b"both see it")
        assert jo.take() == Changes(frozenset({b"sub/deep"}), frozenset())
        assert inner.take() == Changes(frozenset({b"deep"}), frozenset())

        inner.close()
        hub.drain()
        assert wd_of(jo, b"sub/deep") in kernel_watches(hub)
        assert not misplaced_watches(jo, str(outer))
        (outer / "sub" / "deep" / "g").write_bytes(b"outer alone")
        (beside / "top").write_bytes(b"edit")
        assert jo.take() == Changes(frozenset({b"sub/deep"}), frozenset())
        assert jb.take() == Changes(frozenset({b""}), frozenset())

        again = on(hub, outer / "sub")
        jo.close()
        hub.drain()
        assert not misplaced_watches(again, str(outer / "sub"))
        assert wd_of(again, b"deep") in kernel_watches(hub)
        (outer / "sub" / "deep" / "g").write_bytes(b"inner alone")
        (outer / "top").write_bytes(b"no one's now")
        assert again.take() == Changes(frozenset({b"deep"}), frozenset())
        assert jb.take() == NOTHING

        jb.close()
        again.close()
        hub.drain()
        assert kernel_watches(hub) == {}


def test_a_removed_folder_s_watch_leaves_its_journals_and_never_reaches_another(tmp_path: Path) -> None:
    """A watch descriptor leaves every journal holding it at its IN_IGNORED; the journals that add watches
    next get only their own events, whether or not the hub read that IN_IGNORED before they added them."""
    a = project(tmp_path / "a")
    with JournalHub() as hub:
        ja = on(hub, a)
        for round_ in range(20):
            (a / "x" / "y").mkdir(parents=True)
            inner = ChangeJournal(str(a / "x"), hub=hub)  # shares the descriptor of x with ja
            inner.start()
            made = ja.take()
            assert made is not None and b"x" in made.trees  # (and x/y, if watched before y was made)
            x_wd = wd_of(ja, b"x")
            assert wd_of(inner, b"") == x_wd

            shutil.rmtree(a / "x")  # x's IN_IGNORED is queued; the reader may or may not read it first
            b = project(tmp_path / f"b{round_}")
            jb = on(hub, b)  # new watches, on the instance x's watch was on
            (b / "sub" / "f").write_bytes(b"b's own")
            assert ja.take() == Changes(frozenset({b"", b"x"}), frozenset())  # x lost y, then a lost x
            assert inner.take() is None and not inner.running  # its root is gone: in doubt for good
            assert jb.take() == Changes(frozenset({b"sub"}), frozenset())
            session = ja._session
            assert session is not None and x_wd not in session.paths
            assert x_wd not in hub._wds  # unmapped from every holder, not routed to anyone any more
            assert not misplaced_watches(ja, str(a)) and not misplaced_watches(jb, str(b))

            (a / "top").write_bytes(b"edit %d" % round_)
            (b / "top").write_bytes(b"edit %d" % round_)
            assert ja.take() == Changes(frozenset({b""}), frozenset())
            assert jb.take() == Changes(frozenset({b""}), frozenset())
            inner.close()
            jb.close()


def test_a_journal_on_a_closed_hub_is_in_doubt(tmp_path: Path) -> None:
    folder = project(tmp_path / "p")
    hub = JournalHub()
    journal = on(hub, folder)
    hub.close()
    (folder / "top").write_bytes(b"unseen")
    assert journal.take() is None and not journal.running
    assert journal.changed()
    journal.close()


def test_folder_journals_use_one_hub_for_all_their_projects(tmp_path: Path) -> None:
    count = 150  # more than the per-user limit of instances (128 by default)
    folders = [project(tmp_path / f"p{i}") for i in range(count)]
    journals = FolderJournals(walk_every=1000)
    before = inotify_instances()
    try:
        for i, folder in enumerate(folders):
            interval = journals.interval(f"p{i}", 1, str(folder))
            assert interval is not None and interval.changes == NOTHING
        assert len(journals) == count
        assert inotify_instances() == before + 1
        hub = journals.hub
        assert hub is not None and hub.journals == count
        assert {entry.journal.hub for entry in journals._entries.values()} == {hub}

        (folders[7] / "sub" / "f").write_bytes(b"edit")
        assert journals.changed("p7")
        assert not journals.changed("p8")
        interval = journals.interval("p7", 1, str(folders[7]))
        assert interval is not None and interval.changes == Changes(frozenset({b"sub"}), frozenset())
        assert not journals.changed("p7")

        journals.keep(f"p{i}" for i in range(100))  # projects that stopped running here
        assert len(journals) == 100 and hub.journals == 100 and not hub.closed
        moved = journals.interval("p9", 2, str(folders[9]))  # a new generation: a new journal, the same hub
        assert moved is not None and journals.hub is hub and hub.journals == 100
        (folders[9] / "top").write_bytes(b"edit")
        interval = journals.interval("p9", 2, str(folders[9]))
        assert interval is not None and interval.changes == Changes(frozenset({b""}), frozenset())
    finally:
        journals.close()
    assert journals.hub is None and hub.closed
    assert inotify_instances() == before
