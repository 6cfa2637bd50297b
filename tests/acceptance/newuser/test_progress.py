"""Progress on a terminal: a checkpoint shows files and bytes, and totals only once they are final."""

from __future__ import annotations

import os
import re
import threading

from tenure.objects.local import LocalObjectStore
from tenure.snapshots.build import build_tree
from tests.acceptance.newuser.helpers import ok, run_on_terminal

MiB = 1 << 20


def _tree(root: str, files: int = 120, big: int = 24 * MiB) -> int:
    """Small files in many folders plus one large file; returns the number of files."""
    for i in range(files):
        folder = os.path.join(root, f"d{i % 12}", f"e{i % 5}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{i}.bin"), "wb") as fh:
            fh.write(os.urandom(30_000 + i))
    with open(os.path.join(root, "big.bin"), "wb") as fh:
        fh.write(os.urandom(big))
    return files + 1


class Recorder:
    """A progress callback that also takes file counts, recording every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        with self.lock:
            self.calls.append(("bytes", (done, total)))

    def files(self, done: int, total: int, bytes_total: int, listed: bool) -> None:
        with self.lock:
            self.calls.append(("files", (done, total, bytes_total, listed)))


def test_a_build_reports_file_counts_and_its_totals_never_change_once_listed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    count = _tree(src)
    recorder = Recorder()
    built = build_tree(src, LocalObjectStore(str(tmp_path / "objects")), progress=recorder)
    files = [args for kind, args in recorder.calls if kind == "files"]
    assert files, "file counts are reported"
    listed_at = next(i for i, (kind, args) in enumerate(recorder.calls) if kind == "files" and args[3])
    for kind, args in recorder.calls[listed_at:]:
        if kind == "files":
            assert args[1] == count and args[2] == built.bytes_read and args[3], args
        else:
            assert args[1] == built.bytes_read, "the byte total is final once the folder is listed"
    assert files[-1] == (count, count, built.bytes_read, True)
    assert all(not args[3] or args[1] == count for args in files)
    assert [args[0] for args in files] == sorted(args[0] for args in files), "files done never goes back"
    byte_calls = [args for kind, args in recorder.calls if kind == "bytes"]
    assert byte_calls[-1] == (built.bytes_read, built.bytes_read)
    assert len(byte_calls) > 2, "a large file reports while it is read, not only once it is done"


_FRAME = re.compile(r"(\d[\d,]*)/(\d[\d,]*) files (\d+(?:\.\d)? \w+)/(\d+(?:\.\d)? \w+)")


def test_checkpoint_on_a_terminal_shows_files_bytes_and_final_totals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    count = _tree(src)
    data = str(tmp_path / "data")
    ok(["--data", data, "workspace", "create", "w"], cwd=str(tmp_path))
    code, out, shown = run_on_terminal(
        ["--data", data, "workspace", "checkpoint", "w", "--from", src], cwd=str(tmp_path), terminal_stderr=True
    )
    assert code == 0, shown
    assert "published: snapshot" in out
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    frames = _FRAME.findall(plain)
    assert frames, plain[-2000:]
    assert {f[1] for f in frames} == {str(count)}, "the file total shown is the final one"
    assert len({f[3] for f in frames}) == 1, "the byte total shown never grows"
    assert frames[-1][0] == frames[-1][1] == str(count) and frames[-1][2] == frames[-1][3]
    assert re.search(r"\d+(\.\d)? [kMG]?B/s", plain), "the rate is shown"


def test_bring_and_suspend_show_progress_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    here = str(tmp_path)
    ok(["project", "create", "acme/big"], cwd=here)
    folder = ok(["project", "bring", "acme/big"], cwd=here)["workspace_folder"]
    count = _tree(folder, files=40, big=8 * MiB)
    code, _, shown = run_on_terminal(["project", "suspend", "acme/big"], cwd=here, terminal_stderr=True)
    assert code == 0, shown
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    assert "checkpoint" in plain and f"{count}/{count} files" in plain
    code, _, shown = run_on_terminal(["project", "bring", "acme/big"], cwd=here, terminal_stderr=True)
    assert code == 0, shown
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    assert re.search(r"restore .*?(\d+\.\d MiB)/\1", plain), plain[-2000:]


def test_no_progress_line_without_a_terminal_or_under_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    _tree(src, files=5, big=2 * MiB)
    data = str(tmp_path / "data")
    ok(["--data", data, "workspace", "create", "w"], cwd=str(tmp_path))
    code, out, shown = run_on_terminal(
        ["--data", data, "--json", "workspace", "checkpoint", "w", "--from", src],
        cwd=str(tmp_path),
        terminal_stderr=True,
    )
    assert code == 0 and '"snapshot"' in out
    assert "checkpoint" not in shown and "files" not in shown, "under --json no progress line is drawn"
