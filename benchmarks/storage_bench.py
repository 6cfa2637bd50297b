"""Storage benchmark scenarios: tenure's CLI against tar|zstd and restic, in one run.

Every timed step runs as a child process. Its wall time and its peak RSS
(GNU ``time -f %M``: the largest RSS of the command and of the children it
waited for, e.g. both sides of a shell pipeline) are recorded.
Before every timed step the page cache is put in the same warm state for all
tools: ``sync`` flushes dirty pages of earlier steps, then every input of the
step (the source tree, the tool's repository or archive) is read once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trees

RESTIC_PASSWORD = "tenure-bench"  # restic refuses an empty password
READ_CHUNK = 1024 * 1024
GNU_TIME = "/usr/bin/time"


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class Measured:
    """One timed child process."""

    seconds: float
    peak_rss_kib: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def error(self) -> str:
        tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-3:]
        return f"exit {self.returncode}: " + " | ".join(tail)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "seconds": round(self.seconds, 4),
            "peak_rss_kib": self.peak_rss_kib,
            "returncode": self.returncode,
        }
        if not self.ok:
            data["error"] = self.error()
        return data


def rss_method() -> str:
    if os.access(GNU_TIME, os.X_OK):
        return f"{GNU_TIME} -f %M (peak RSS of the command and the children it waited for)"
    return "os.wait4 ru_maxrss (over-reports: includes the benchmark process's own peak, see README)"


def run_measured(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> Measured:
    """Run ``argv`` to completion; its wall time and peak RSS (itself and the children it reaped).

    The peak RSS comes from GNU time, whose child is forked from a small
    process: a child forked straight from this (large) Python process would
    report at least this process's own peak, which the kernel carries over
    the fork and exec.
    """
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r", suffix=".rss") as rss,
    ):
        wrapped = [GNU_TIME, "-q", "-o", rss.name, "-f", "%M", *argv] if os.access(GNU_TIME, os.X_OK) else list(argv)
        start = time.perf_counter()
        proc = subprocess.Popen(wrapped, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        peak = _last_int(rss.read()) if wrapped[0] == GNU_TIME else int(usage.ru_maxrss)
        return Measured(
            seconds, peak, proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace")
        )


def _last_int(text: str) -> int:
    """The number GNU time wrote last (it may precede it with a "Command exited ..." line)."""
    for line in reversed(text.strip().splitlines()):
        if line.strip().isdigit():
            return int(line.strip())
    return 0


def shell(script: str) -> list[str]:
    return ["bash", "-o", "pipefail", "-c", script]


# --------------------------------------------------------------------------- cache state and checks


def warm(*paths: str) -> None:
    """Flush dirty pages, then read every file under ``paths`` once (same cache state for every tool)."""
    os.sync()
    for path in paths:
        if os.path.isfile(path):
            _read_all(path)
        elif os.path.isdir(path):
            for name in trees.walk_files(path):
                _read_all(name)


def _read_all(path: str) -> None:
    try:
        with open(path, "rb", buffering=0) as fh:
            while fh.read(READ_CHUNK):
                pass
    except OSError:
        pass  # a file that vanished or is unreadable (e.g. a socket) costs nothing to skip


def tree_digest(root: str) -> str:
    """One hash over every file's relative path and content."""
    total = hashlib.sha256()
    for path in trees.walk_files(root):
        total.update(os.path.relpath(path, root).encode("utf-8", "surrogateescape") + b"\0")
        with open(path, "rb") as fh:
            total.update(hashlib.file_digest(fh, "sha256").digest())
    return total.hexdigest()


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


# --------------------------------------------------------------------------- tools


def tenure_command() -> list[str]:
    """The ``tenure`` CLI of the interpreter running the benchmarks (its venv), else from PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "tenure")
    if os.access(beside, os.X_OK):
        return [beside]
    found = shutil.which("tenure")
    return [found] if found else [sys.executable, "-m", "tenure.cli.main"]


@dataclass
class Tenure:
    """The tenure CLI with a fresh data folder (SQLite store, local objects).

    With ``key_file`` the object store is encrypted at rest under that key file (``tenure objects init
    --encrypt``, untimed, before the workspace is created) and every command is given ``--key-file``: a key
    file, not a passphrase, so no scrypt runs in a timed step.
    """

    data_dir: str
    workspace: str = "bench"
    key_file: str | None = None

    def _argv(self, *args: str) -> list[str]:
        key = ["--key-file", self.key_file] if self.key_file else []
        return [*tenure_command(), "--data", self.data_dir, *key, "--json", *args]

    def create(self) -> Measured:
        if self.key_file:
            sealed = run_measured(self._argv("objects", "init", "--encrypt"))
            if not sealed.ok:
                return sealed
        return run_measured(self._argv("workspace", "create", self.workspace))

    def checkpoint(self, src: str) -> tuple[Measured, dict[str, Any]]:
        warm(src, self.data_dir)
        done = run_measured(self._argv("workspace", "checkpoint", self.workspace, "--from", src))
        return done, _json_or_empty(done.stdout) if done.ok else {}

    def restore(self, dest: str) -> Measured:
        warm(self.data_dir)
        return run_measured(self._argv("workspace", "restore", self.workspace, "--to", dest))


@dataclass
class TarZstd:
    """``tar -c | zstd -1 -T0`` to one file, and back."""

    archive: str

    def pack(self, src: str, *, synced: bool = False) -> Measured:
        """``synced``: then ``sync``, the archive durable, as a checkpoint's objects are."""
        warm(src)
        then = " && sync" if synced else ""
        return run_measured(shell(f"tar -C {_q(src)} -cf - . | zstd -q -1 -T0 -o {_q(self.archive)}{then}"))

    def unpack(self, dest: str, *, synced: bool = False) -> Measured:
        """``synced``: then ``sync``, the tree durable, as a restore's is before its rename."""
        os.makedirs(dest)
        warm(self.archive)
        then = " && sync" if synced else ""
        return run_measured(shell(f"zstd -q -d -c {_q(self.archive)} | tar -C {_q(dest)} -xf -{then}"))


@dataclass
class Restic:
    """restic with a local repository and its own cache folder (the default cache behaviour)."""

    repo: str
    cache: str
    binary: str = "restic"

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RESTIC_REPOSITORY": self.repo,
            "RESTIC_PASSWORD": RESTIC_PASSWORD,
            "RESTIC_CACHE_DIR": self.cache,
        }

    def init(self) -> Measured:
        return run_measured([self.binary, "init"], env=self.env)

    def backup(self, src: str) -> tuple[Measured, dict[str, Any]]:
        warm(src, self.repo, self.cache)
        done = run_measured([self.binary, "backup", "--json", "--host", "bench", "."], env=self.env, cwd=src)
        return done, _restic_summary(done.stdout)

    def restore(self, dest: str) -> Measured:
        warm(self.repo, self.cache)
        return run_measured([self.binary, "restore", "latest", "--target", dest], env=self.env)

    def version(self) -> str:
        done = run_measured([self.binary, "version"], env=self.env)
        return done.stdout.strip()


def _q(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"


def _json_or_empty(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _restic_summary(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        data = _json_or_empty(line)
        if data.get("message_type") == "summary":
            return data
    return {}


# --------------------------------------------------------------------------- result rows


@dataclass(frozen=True)
class Row:
    """One line of the results table: tenure's value against a baseline, and the aim for their ratio."""

    tree: str
    measure: str
    unit: str  # "s", "B" or "MiB"
    tenure: float | None
    baseline: float | None
    baseline_label: str
    aim: float | None  # the ratio tenure/baseline must not exceed this (None: information only)
    aim_label: str
    strict: bool = False  # "under" (strict) rather than "within"
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.tenure is None or not self.baseline:
            return None
        return self.tenure / self.baseline

    @property
    def met(self) -> bool | None:
        ratio = self.ratio
        if ratio is None or self.aim is None:
            return None
        return ratio < self.aim if self.strict else ratio <= self.aim

    def to_dict(self) -> dict[str, Any]:
        return {
            "tree": self.tree,
            "measure": self.measure,
            "unit": self.unit,
            "tenure": self.tenure,
            "baseline": self.baseline,
            "baseline_label": self.baseline_label,
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "aim": self.aim,
            "aim_label": self.aim_label,
            "met": self.met,
            "note": self.note,
        }


def seconds_of(done: Measured | None) -> float | None:
    return done.seconds if done is not None and done.ok else None


def rss_mib(done: Measured | None) -> float | None:
    return done.peak_rss_kib / 1024 if done is not None and done.ok else None


def failure(*steps: tuple[str, Measured | None]) -> str:
    """A note naming the first failed step, if any."""
    for name, done in steps:
        if done is None:
            return f"{name}: not run"
        if not done.ok:
            return f"{name} failed ({done.error()})"
    return ""


# --------------------------------------------------------------------------- scenario


@dataclass
class Scenario:
    """Everything measured on one tree."""

    tree: trees.Tree
    workdir: str
    restic_binary: str | None
    steps: dict[str, Measured] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)  # seconds of every repeat
    facts: dict[str, Any] = field(default_factory=dict)

    def path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    def step(self, name: str, done: Measured) -> Measured:
        self.steps[name] = done
        state = "ok" if done.ok else f"FAILED {done.error()}"
        print(f"  {name:<35} {done.seconds:8.2f} s  {done.peak_rss_kib / 1024:7.1f} MiB  {state}", flush=True)
        return done


def run_scenario(
    tree: trees.Tree,
    workdir: str,
    restic_binary: str | None,
    repeat: int = 1,
    log: Callable[[str], None] = print,
    encryption: bool = True,
) -> Scenario:
    """Full checkpoint, restore, 1% change, incremental checkpoint — for tenure and the baselines.

    The full backups and the restores run ``repeat`` times each (a fresh data
    folder, repository, archive or target every time) and report the median
    run; the incremental backups run once, on the state the last full backup
    left. Nothing is deleted until the scenario is over: on a file system
    mounted with ``discard``, freeing a large tree slows the writes of the
    next step, which would penalize whichever tool runs after a deletion.

    With ``encryption``, tenure's full checkpoint and restore also run with
    encryption at rest (a fresh encrypted data folder under one key file),
    each right after its plain counterpart, for the cost-of-encryption rows.
    """
    sc = Scenario(tree, workdir, restic_binary)
    tars: list[TarZstd] = []
    tenures: list[Tenure] = []
    sealed: list[Tenure] = []
    restics: list[Restic] = []
    source_digest = tree_digest(tree.root)
    key_file = _new_key_file(sc.path("bench.key")) if encryption else None

    log(
        f"[{tree.spec.name}] full backup of {tree.file_count} files, {tree.total_bytes / 1e6:.1f} MB"
        f" (median of {repeat})"
    )
    median_of(sc, "tar|zstd pack", repeat, lambda: _fresh_pack(sc, tars, tree.root))
    median_of(sc, "tar|zstd pack + sync", repeat, lambda: _fresh_pack(sc, tars, tree.root, synced=True))
    checkpoints = [("tenure checkpoint (full)", lambda: _fresh_checkpoint(sc, tenures, tree.root))]
    if key_file is not None:  # interleaved with the plain runs, so drifting load hits both alike
        checkpoints.append(
            (ENCRYPTED_FULL, lambda: _fresh_checkpoint(sc, sealed, tree.root, key_file, "sealed_checkpoint"))
        )
    medians_of(sc, checkpoints, repeat)
    if restic_binary is not None:
        median_of(sc, "restic backup (full)", repeat, lambda: _fresh_backup(sc, restics, restic_binary, tree.root))

    log(f"[{tree.spec.name}] restore (median of {repeat}, each checked against the source)")
    _restores(sc, "tar|zstd unpack", tars[-1].unpack, source_digest, repeat)
    _restores(sc, "tar|zstd unpack + sync", functools.partial(tars[-1].unpack, synced=True), source_digest, repeat)
    restores = [("tenure restore", _restore_attempt(sc, "tenure restore", tenures[-1].restore, source_digest))]
    if sealed:
        restores.append((ENCRYPTED_RESTORE, _restore_attempt(sc, ENCRYPTED_RESTORE, sealed[-1].restore, source_digest)))
    medians_of(sc, restores, repeat)
    if restics:
        _restores(sc, "restic restore", restics[-1].restore, source_digest, repeat)

    modified, change = trees.modify(tree)
    sc.facts["change"] = {
        "files_modified": change.files_modified,
        "bytes_changed": change.bytes_changed,
        "appended_to": change.appended_to,
    }
    log(
        f"[{tree.spec.name}] incremental after modifying {change.files_modified} files "
        f"({change.bytes_changed / 1e6:.2f} MB changed)"
    )
    done, result = tenures[-1].checkpoint(modified.root)
    sc.step("tenure checkpoint (incr)", done)
    sc.facts["incremental_checkpoint"] = result
    sc.step("bare walk", bare_walk(modified.root))
    if restics:
        done, summary = restics[-1].backup(modified.root)
        sc.step("restic backup (incr)", done)
        sc.facts["restic_incremental"] = summary
    sc.facts["tenure_data_bytes"] = _du(tenures[-1].data_dir)
    return sc


BARE_WALK = """
import os, sys
def walk(fd):
    with os.scandir(fd) as it:
        entries = list(it)
    for e in entries:
        e.stat(follow_symlinks=False)
        if e.is_dir(follow_symlinks=False):
            sub = os.open(e.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                walk(sub)
            finally:
                os.close(sub)
walk(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY))
"""


def bare_walk(src: str) -> Measured:
    """The floor of any checkpoint without a change journal: ``os.scandir`` and an ``lstat`` of every entry."""
    warm(src)
    return run_measured([sys.executable, "-c", BARE_WALK, src])


def median_of(sc: Scenario, name: str, repeat: int, attempt: Callable[[], Measured]) -> Measured:
    """Run ``attempt`` ``repeat`` times; record every time and keep the median run (or the first failure)."""
    return medians_of(sc, [(name, attempt)], repeat)[0]


def medians_of(sc: Scenario, attempts: Sequence[tuple[str, Callable[[], Measured]]], repeat: int) -> list[Measured]:
    """:func:`median_of` for several steps whose runs alternate, in turn forwards and backwards (A B, B A,
    A B, …): a ratio between them is skewed neither by load drifting during the run nor by which one runs
    first. A step stops repeating at its first failure."""
    runs: dict[str, list[Measured]] = {name: [] for name, _ in attempts}
    for round_ in range(repeat):
        for name, attempt in attempts if round_ % 2 == 0 else list(reversed(attempts)):
            if all(r.ok for r in runs[name]):
                runs[name].append(attempt())
    chosen = []
    for name, _ in attempts:
        done = runs[name]
        sc.samples[name] = [round(r.seconds, 4) for r in done]
        failed = [r for r in done if not r.ok]
        chosen.append(sc.step(name, failed[0] if failed else sorted(done, key=lambda r: r.seconds)[len(done) // 2]))
    return chosen


def _fresh_pack(sc: Scenario, tars: list[TarZstd], src: str, *, synced: bool = False) -> Measured:
    tars.append(TarZstd(sc.path(f"tree-{len(tars)}.tar.zst")))
    return tars[-1].pack(src, synced=synced)


ENCRYPTED_FULL = "tenure checkpoint (full, encrypted)"
ENCRYPTED_RESTORE = "tenure restore (encrypted)"


def _new_key_file(path: str) -> str:
    """A key file of 32 random bytes (the key of the encrypted runs)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(os.urandom(32))
    os.chmod(path, 0o600)
    return path


def _fresh_checkpoint(
    sc: Scenario, tenures: list[Tenure], src: str, key_file: str | None = None, fact: str = "full_checkpoint"
) -> Measured:
    folder = "tenure-sealed-data" if key_file else "tenure-data"
    tenures.append(Tenure(sc.path(f"{folder}-{len(tenures)}"), key_file=key_file))
    created = tenures[-1].create()
    if not created.ok:
        return created
    done, result = tenures[-1].checkpoint(src)
    sc.facts[fact] = result
    return done


def _fresh_backup(sc: Scenario, restics: list[Restic], binary: str, src: str) -> Measured:
    n = len(restics)
    restics.append(Restic(sc.path(f"restic-repo-{n}"), sc.path(f"restic-cache-{n}"), binary))
    created = restics[-1].init()
    if not created.ok:
        return created
    done, summary = restics[-1].backup(src)
    sc.facts["restic_full"] = summary
    return done


def _restores(sc: Scenario, name: str, restore: Callable[[str], Measured], expected: str, repeat: int) -> None:
    median_of(sc, name, repeat, _restore_attempt(sc, name, restore, expected))


def _restore_attempt(
    sc: Scenario, name: str, restore: Callable[[str], Measured], expected: str
) -> Callable[[], Measured]:
    """One restore into a new folder per call; the first is checked against the source tree."""
    base = sc.path("restored-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"))
    count = 0

    def attempt() -> Measured:
        nonlocal count
        dest = f"{base}-{count}"
        count += 1
        done = restore(dest)
        if done.ok and count == 1:
            same = tree_digest(dest) == expected
            sc.facts[f"{name} identical"] = same
            if not same:
                print(f"  {name}: restored tree DIFFERS from the source", flush=True)
        return done

    return attempt


def _du(path: str) -> int:
    return sum(os.lstat(p).st_size for p in trees.walk_files(path)) if os.path.isdir(path) else 0


def peak_rss_run(tree: trees.Tree, workdir: str) -> dict[str, Measured]:
    """Checkpoint and restore one tree with a fresh data folder (for peak memory)."""
    tenure = Tenure(os.path.join(workdir, "tenure-data"))
    tenure.create()
    checkpoint, _ = tenure.checkpoint(tree.root)
    dest = os.path.join(workdir, "restored")
    restore = tenure.restore(dest)
    remove(dest)
    return {"checkpoint": checkpoint, "restore": restore}


# --------------------------------------------------------------------------- rows


def rows_for(sc: Scenario, rss_small: dict[str, Measured], small_label: str) -> list[Row]:
    """The results table rows of one scenario."""
    name = sc.tree.spec.name
    s = sc.steps
    full, incr, restore = (
        s.get("tenure checkpoint (full)"),
        s.get("tenure checkpoint (incr)"),
        s.get("tenure restore"),
    )
    rows = [
        Row(
            name,
            "full checkpoint",
            "s",
            seconds_of(full),
            seconds_of(s.get("tar|zstd pack")),
            "tar -c | zstd -1 -T0",
            1.2,
            "≤ 1.2×",
            note=failure(("tenure checkpoint", full), ("tar|zstd", s.get("tar|zstd pack"))),
        ),
        Row(
            name,
            "full checkpoint vs an archive + sync",
            "s",
            seconds_of(full),
            seconds_of(s.get("tar|zstd pack + sync")),
            "tar -c | zstd -1 -T0 && sync",
            None,
            "info (both durable)",
            note=failure(("tenure checkpoint", full), ("tar|zstd + sync", s.get("tar|zstd pack + sync"))),
        ),
        Row(
            name,
            "incremental checkpoint (1% changed)",
            "s",
            seconds_of(incr),
            seconds_of(full),
            "tenure full checkpoint",
            0.10,
            "≤ 10%",
            note=failure(("tenure full", full), ("tenure incremental", incr)),
        ),
        Row(
            name,
            "incremental checkpoint vs bare walk",
            "s",
            seconds_of(incr),
            seconds_of(s.get("bare walk")),
            "scandir + lstat of every entry",
            2.0,
            "≤ 2×",
            note=failure(("tenure incremental", incr), ("bare walk", s.get("bare walk"))),
        ),
        _new_bytes_row(sc),
        Row(
            name,
            "restore",
            "s",
            seconds_of(restore),
            seconds_of(s.get("tar|zstd unpack")),
            "zstd -d | tar -x",
            1.0,
            "≤ 1×",
            note=_restore_note(sc, restore, s.get("tar|zstd unpack")),
        ),
        Row(
            name,
            "restore vs unpacking + sync",
            "s",
            seconds_of(restore),
            seconds_of(s.get("tar|zstd unpack + sync")),
            "zstd -d | tar -x && sync",
            None,
            "info (both durable)",
            note=failure(("tenure restore", restore), ("tar|zstd unpack + sync", s.get("tar|zstd unpack + sync"))),
        ),
    ]
    if ENCRYPTED_FULL in s or ENCRYPTED_RESTORE in s:
        rows += _encryption_rows(sc)
    if sc.restic_binary is not None:
        rows += _restic_rows(sc)
    for what, big in (("checkpoint", full), ("restore", restore)):
        small = rss_small.get(what)
        rows.append(
            Row(
                name,
                f"peak RSS, {what}",
                "MiB",
                rss_mib(big),
                rss_mib(small),
                f"same, {small_label}",
                1.5,
                "≤ 1.5× (bounded)",
                note=failure((f"tenure {what}", big), (f"tenure {what} ({small_label})", small)),
            )
        )
    return rows


def _new_bytes_row(sc: Scenario) -> Row:
    snap = sc.facts.get("incremental_checkpoint", {}).get("snapshot", {})
    changed = sc.facts.get("change", {}).get("bytes_changed")
    new = snap.get("bytes_new")
    return Row(
        sc.tree.spec.name,
        "new bytes stored by the incremental",
        "B",
        None if new is None else float(new),
        None if changed is None else float(changed),
        "bytes changed",
        3.0,
        "< 3×",
        strict=True,
        note=failure(("tenure incremental", sc.steps.get("tenure checkpoint (incr)"))),
    )


def _restore_note(sc: Scenario, restore: Measured | None, baseline: Measured | None) -> str:
    note = failure(("tenure restore", restore), ("tar|zstd unpack", baseline))
    if not note and sc.facts.get("tenure restore identical") is False:
        note = "restored tree differs from the source"
    return note


def _encryption_rows(sc: Scenario) -> list[Row]:
    """The cost of encryption at rest: the same full checkpoint and restore, encrypted against plain."""
    name, s = sc.tree.spec.name, sc.steps
    full, sealed_full = s.get("tenure checkpoint (full)"), s.get(ENCRYPTED_FULL)
    restore, sealed_restore = s.get("tenure restore"), s.get(ENCRYPTED_RESTORE)
    restore_note = failure(("encrypted restore", sealed_restore), ("plain restore", restore))
    if not restore_note and sc.facts.get(f"{ENCRYPTED_RESTORE} identical") is False:
        restore_note = "restored tree differs from the source"
    return [
        Row(
            name,
            "full checkpoint, encrypted vs plain",
            "s",
            seconds_of(sealed_full),
            seconds_of(full),
            "tenure full checkpoint (plain)",
            None,
            "info",
            note=failure(("encrypted checkpoint", sealed_full), ("plain checkpoint", full)),
        ),
        Row(
            name,
            "restore, encrypted vs plain",
            "s",
            seconds_of(sealed_restore),
            seconds_of(restore),
            "tenure restore (plain)",
            None,
            "info",
            note=restore_note,
        ),
    ]


def _restic_rows(sc: Scenario) -> list[Row]:
    name, s = sc.tree.spec.name, sc.steps
    pairs = (
        ("full checkpoint vs restic", "tenure checkpoint (full)", "restic backup (full)", "restic backup", 0.4),
        ("incremental vs restic", "tenure checkpoint (incr)", "restic backup (incr)", "restic backup (2nd)", 0.2),
        ("restore vs restic", "tenure restore", "restic restore", "restic restore", 0.4),
    )
    rows = [
        Row(
            name,
            measure,
            "s",
            seconds_of(s.get(ours)),
            seconds_of(s.get(theirs)),
            label,
            aim,
            f"≤ {aim:g}×",
            note=failure((ours, s.get(ours)), (theirs, s.get(theirs))),
        )
        for measure, ours, theirs, label, aim in pairs
    ]
    added = sc.facts.get("restic_incremental", {}).get("data_added")
    snap = sc.facts.get("incremental_checkpoint", {}).get("snapshot", {})
    new = snap.get("bytes_new")
    rows.append(
        Row(
            name,
            "new bytes stored vs restic",
            "B",
            None if new is None else float(new),
            None if added is None else float(added),
            "restic data_added",
            None,
            "info",
        )
    )
    return rows
