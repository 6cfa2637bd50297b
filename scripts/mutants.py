#!/usr/bin/env python3
"""Named one-line mutants of fencing, publication, restore, GC and intake commit, against chosen tests.

Each mutant is (file, exact original line, replacement): the original line is
looked up (leading and trailing blanks ignored; with ``after``, only below
the first line that contains that text; otherwise it must occur exactly
once), replaced (keeping its indentation) in a *copy* of ``src/``, ``tests/``
and ``pyproject.toml`` in a temporary folder, and the mutant's tests run
there with ``PYTHONPATH`` pointing at the copy. The real tree is never
written to.

A mutant is *killed* when a test fails (or the run times out), *survived*
when every test passes. A survivor either needs a test or is listed with
``equivalent``, the reason it cannot change behaviour. Before the mutants,
the union of their tests runs once on the unmutated copy; if that fails, no
mutant is judged.

    .venv/bin/python scripts/mutants.py                 # all, two at a time
    .venv/bin/python scripts/mutants.py --only gc- -j 1 # the GC mutants, one at a time
    .venv/bin/python scripts/mutants.py --list          # names, files, tests

Exit status: 0 when every mutant that is not marked equivalent is killed,
1 when one survived, 2 when a mutant no longer applies (its line changed) or
the unmutated tests fail.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERIES = "src/tenure/store/sql/queries.sql"
WORKSPACES = "src/tenure/store/workspaces.py"
SERVICE = "src/tenure/workspaces/service.py"
RESTORE = "src/tenure/snapshots/restore.py"
GC = "src/tenure/snapshots/gc.py"
LOCAL = "src/tenure/objects/local.py"
COMMIT = "src/tenure/intake/commit.py"
STORAGE = "src/tenure/intake/storage.py"
WRITER = "src/tenure/intake/writer.py"
INBOX = "src/tenure/intake/inbox.py"

FENCE = "tests/contract/test_fence_terms.py"
STORE = "tests/contract/test_store.py"
PROJECTS = "tests/contract/test_projects.py"
REQ_STORAGE = "tests/integration/test_req_storage.py"
GRACE = "tests/integration/test_gc_grace_period.py"
DAMAGE = "tests/integration/snapshots/test_damage.py"
RESTORE_STATES = "tests/integration/snapshots/test_restore_states.py"
SERVICE_TESTS = "tests/integration/test_workspace_service.py"
DURABLE = "tests/integration/durability/test_durable_paths.py"
CRASH_GC = "tests/acceptance/test_crash_points.py::test_crash_during_gc"
INTAKE_DURABLE = "tests/integration/test_intake_commit_durability.py"
GUARDS = "tests/contract/test_guard_terms.py"
GC_PUBLICATION = "tests/integration/test_gc_concurrent_publication.py"

#: Why a term of a statement can be dropped without a change: the row was read under a lock and checked.
LOCKED_ROW = (
    "decided on the workspace row read under its lock (FOR UPDATE on PostgreSQL, the write lock on "
    "SQLite) and checked in Python just before; the SQL term is a second check nothing can change"
)


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    after: str | None = None
    equivalent: str | None = None


M = Mutant
MUTANTS: list[Mutant] = [
    # ------------------------------------------------------------------ fencing: a generation term dropped
    M(
        "fence-begin-checkpoint-generation",
        QUERIES,
        "WHERE id = :w AND state = :mounted AND writer_generation = :g",
        "WHERE id = :w AND state = :mounted",
        (FENCE,),
        after="-- name: workspace_begin_checkpoint",
    ),
    M(
        "fence-publish-generation",
        QUERIES,
        "AND pending_snapshot_id = :s AND writer_generation = :g",
        "AND pending_snapshot_id = :s",
        (FENCE,),
        after="-- name: workspace_publish",
    ),
    M(
        "fence-publish-live-lease",
        QUERIES,
        "AND l.state IN (:active, :releasing) AND l.expires_at > {now})",
        "AND 1 = 1)",
        (STORE,),
        after="-- name: workspace_publish",
    ),
    M(
        "fence-abandon-generation",
        QUERIES,
        "WHERE id = :w AND state = :checkpointing AND pending_key = :k AND writer_generation = :g",
        "WHERE id = :w AND state = :checkpointing AND pending_key = :k",
        (FENCE,),
        after="-- name: workspace_abandon_checkpoint",
    ),
    M(
        "fence-release-generation",
        QUERIES,
        "WHERE id = :w AND state = :mounted AND writer_generation = :g",
        "WHERE id = :w AND state = :mounted",
        (FENCE,),
        after="-- name: workspace_release",
        equivalent="finish_release first moves the lease with writer_lease_fenced_move, whose generation term "
        "refuses a stale writer in the same transaction; a newer writer's bump cannot commit in between "
        "(its retire of older leases waits for that lease row)",
    ),
    M(
        "fence-mark-validating-generation",
        QUERIES,
        "AND generation = (SELECT writer_generation FROM workspaces WHERE id = :w)",
        "AND 1 = 1",
        (FENCE,),
        after="-- name: snapshot_mark_validating",
    ),
    M(
        "fence-mark-validating-ticket-generation",
        QUERIES,
        "WHERE id = :s AND state = :e AND generation = :g",
        "WHERE id = :s AND state = :e",
        (FENCE,),
        after="-- name: snapshot_mark_validating",
    ),
    M(
        "fence-fail-snapshot-generation",
        QUERIES,
        "AND generation = (SELECT writer_generation FROM workspaces WHERE id = snapshots.workspace_id)",
        "AND 1 = 1",
        (FENCE,),
        after="-- name: snapshot_fail",
    ),
    M(
        "fence-fail-snapshot-ticket-generation",
        QUERIES,
        "WHERE id = :s AND state = :st AND generation = :g",
        "WHERE id = :s AND state = :st",
        (FENCE,),
        after="-- name: snapshot_fail",
    ),
    M(
        "fence-lease-renew-generation",
        QUERIES,
        "AND generation = (SELECT writer_generation FROM workspaces WHERE id = :w)",
        "AND 1 = 1",
        (FENCE,),
        after="-- name: writer_lease_renew",
    ),
    M(
        "fence-dispose-generation",
        QUERIES,
        "WHERE id = :id AND writer_generation = :g;",
        "WHERE id = :id;",
        (FENCE,),
        after="-- name: workspace_dispose",
        equivalent=LOCKED_ROW,
    ),
    M(
        "fence-dispose-check-inverted",
        WORKSPACES,
        "if ws.writer_generation != generation:",
        "if ws.writer_generation == generation:",
        (FENCE, "tests/integration/test_lifecycle.py::test_p64_close_fences_then_disposes_then_closes"),
        after="def dispose",
    ),
    M(
        "fence-new-writer-cas",
        QUERIES,
        "WHERE id = :id AND writer_generation = :old",
        "WHERE id = :id",
        (STORE,),
        after="-- name: workspace_bump_writer",
        equivalent=LOCKED_ROW,
    ),
    M(
        "fence-project-transition-generation",
        QUERIES,
        "WHERE tenant = :tn AND name = :n AND status = :e AND generation = :g\n",
        "WHERE tenant = :tn AND name = :n AND status = :e\n",
        (FENCE,),
    ),
    M(
        "fence-project-close-generation",
        QUERIES,
        "WHERE id = :id AND kind <> :system AND status <> :closed AND generation = :g\n",
        "WHERE id = :id AND kind <> :system AND status <> :closed\n",
        (FENCE,),
    ),
    M(
        "fence-unbind-generation",
        QUERIES,
        "AND EXISTS (SELECT 1 FROM projects p WHERE p.id = :p AND p.generation = :g);",
        "AND EXISTS (SELECT 1 FROM projects p WHERE p.id = :p);",
        (GUARDS, FENCE),
        after="-- name: sessions_unbind",
    ),
    M(
        "fence-claim-keeps-generation",
        QUERIES,
        "generation = CASE WHEN home_pod_id = :pod THEN generation ELSE generation + 1 END, updated_at = {now},",
        "generation = generation, updated_at = {now},",
        (PROJECTS,),
        after="-- name: project_claim",
    ),
    M(
        "fence-claim-ignores-live-lease",
        QUERIES,
        "OR ((claimed_at IS NULL OR claimed_at < {now} - :ttl)",
        "OR ((claimed_at IS NULL OR claimed_at <= {now})",
        (PROJECTS,),
        after="-- name: project_claim",
    ),
    # ------------------------------------------------------------------ publication
    M(
        "publish-version-term",
        QUERIES,
        "WHERE id = :w AND state = :checkpointing AND version = :v AND pending_key = :k",
        "WHERE id = :w AND state = :checkpointing AND pending_key = :k",
        (GUARDS,),
        after="-- name: workspace_publish",
    ),
    M(
        "publish-ready-from-any-state",
        QUERIES,
        "WHERE id = :s AND state = :validating",
        "WHERE id = :s",
        (GUARDS,),
        after="-- name: snapshot_mark_ready",
    ),
    M(
        "publish-key-replay-not-recognized",
        WORKSPACES,
        "if snap.state in (SnapshotState.READY, SnapshotState.DEGRADED):",
        "if snap.state not in (SnapshotState.READY, SnapshotState.DEGRADED):",
        (STORE,),
        after="def begin_checkpoint",
    ),
    M(
        "publish-skips-closure-check",
        SERVICE,
        "self._verify_closure(ticket.snapshot_id, built.objects, ticket.generation)",
        "pass",
        (REQ_STORAGE,),
    ),
    M(
        "publish-closure-check-sees-nothing-missing",
        SERVICE,
        "missing = closure - self.objects.has_many(closure)",
        "missing: set[str] = set()",
        (REQ_STORAGE,),
    ),
    M(
        "publish-mark-validating-skips-row-count",
        WORKSPACES,
        "if not rows:",
        "if False:",
        (FENCE, STORE),
        after='"snapshot_mark_validating"',
    ),
    M("publish-ready-skips-row-count", WORKSPACES, "if not ready:", "if False:", (GUARDS,)),
    M(
        "verify-never-degrades",
        SERVICE,
        "if (missing or corrupt) and snap.state is SnapshotState.READY:",
        "if False:",
        (RESTORE_STATES, REQ_STORAGE),
    ),
    M(
        "verify-never-repairs",
        SERVICE,
        "elif not (missing or corrupt) and sample >= 1.0 and snap.state is SnapshotState.DEGRADED:",
        "elif False:",
        (REQ_STORAGE,),
    ),
    # ------------------------------------------------------------------ restore
    M(
        "restore-ignores-missing-objects",
        RESTORE,
        "if (missing or listing.damaged) and not partial:",
        "if False:",
        (DAMAGE,),
    ),
    M(
        "restore-ignores-corrupt-objects",
        RESTORE,
        "if (m.corrupt or m.vanished) and not partial:",
        "if False:",
        (DAMAGE,),
    ),
    M(
        "restore-no-syncfs",
        RESTORE,
        "sync_filesystem(os.path.dirname(temp))  # same file system; temp may have lost its read bit",
        "pass",
        (f"{DURABLE}::test_restore_flushes_with_one_syncfs_not_per_file",),
        after="def _restore_streaming",
    ),
    M(
        "restore-no-parent-fsync",
        RESTORE,
        "fsync_dir(os.path.dirname(dest))",
        "pass",
        (f"{DURABLE}::test_restore_flushes_with_one_syncfs_not_per_file",),
    ),
    M(
        "restore-degraded-without-a-word",
        SERVICE,
        "if snap.state is SnapshotState.DEGRADED and not partial:",
        "if False:",
        (RESTORE_STATES,),
    ),
    M(
        "restore-deleting-without-a-flag",
        SERVICE,
        "if snap.state is SnapshotState.DELETING and not allow_deleting:",
        "if False:",
        (RESTORE_STATES,),
    ),
    # ------------------------------------------------------------------ GC
    M("gc-no-grace", GC, "elif created.timestamp() < mark_time - grace_s:", "elif True:", (GRACE,)),
    M(
        "gc-grace-inverted",
        GC,
        "elif created.timestamp() < mark_time - grace_s:",
        "elif created.timestamp() > mark_time - grace_s:",
        (GRACE,),
    ),
    M(
        "gc-ignores-upload-pins",
        GC,
        "doomed = [oid for oid in batch if oid not in pinned and oid not in reachable]",
        "doomed = [oid for oid in batch if oid not in reachable]",
        (STORE, SERVICE_TESTS),
    ),
    M(
        "gc-ignores-roots-published-after-the-mark",
        GC,
        "reachable |= _closure(root, objects, damaged)",
        "pass",
        (GC_PUBLICATION,),
        after="for root in new_roots - traced:",
    ),
    M(
        "gc-collects-deleting-snapshots",
        QUERIES,
        "AND (state IN (:uploading, :validating, :ready, :degraded, :deleting)",
        "AND (state IN (:uploading, :validating, :ready, :degraded)",
        (STORE,),
        after="-- name: gc_mark_roots",
        equivalent="the mark first moves every DELETING snapshot no pin names to DELETED (snapshots_collect_deleting, "
        "same transaction, GC lock held); the DELETING ones left are pinned, and pinned snapshots are roots "
        "through the query's other term",
    ),
    M(
        "gc-pinned-deleting-becomes-deleted",
        QUERIES,
        "WHERE state = :deleting AND id NOT IN (SELECT snapshot_id FROM pins WHERE snapshot_id IS NOT NULL);",
        "WHERE state = :deleting;",
        (STORE,),
    ),
    M(
        "gc-upload-pins-never-live",
        QUERIES,
        "WHERE p.expires_at IS NULL OR p.expires_at > {now};",
        "WHERE 1 = 0;",
        (STORE,),
        after="-- name: pin_objects_live",
    ),
    M("gc-batch-size-ignored", GC, "step = batch_size()", "step = BATCH", (CRASH_GC,)),
    M(
        "gc-delete-no-folder-fsync",
        LOCAL,
        "fsync_dir(parent)",
        "pass",
        (f"{DURABLE}::test_durable_path_keeps_the_persistence_rules",),
        after="def delete_many",
    ),
    M(
        "put-no-object-fsync",
        LOCAL,
        "fsync_file(fd)",
        "pass",
        (f"{DURABLE}::test_durable_path_keeps_the_persistence_rules",),
        after="def put_many",
    ),
    # ------------------------------------------------------------------ intake commit
    M(
        "intake-index-not-written",
        COMMIT,
        "storage.write_index(folder, published)",
        "pass",
        ("tests/integration/intake/test_api_layout.py", "tests/acceptance/intake/test_crash.py"),
    ),
    M(
        "intake-runtime-not-cleared",
        COMMIT,
        "workspace.write_runtime(None)",
        "pass",
        ("tests/integration/intake/test_api_layout.py", "tests/integration/intake/test_advance.py"),
        after="crash_point(INDEX_WRITTEN)",
    ),
    M(
        "intake-ack-without-checking-the-bytes",
        INBOX,
        "if _sha256_of(private) == item.sha256:",
        "if True:",
        ("tests/integration/intake/test_admission.py", "tests/acceptance/intake/test_crash.py"),
    ),
    M(
        "intake-publish-no-folder-fsync",
        STORAGE,
        "fsync_dir(folder)",
        "pass",
        (INTAKE_DURABLE,),
        after="def publish",
        equivalent="step 4 replaces current.json in the same folder and fsyncs that folder before anything is "
        "acknowledged (advance returns, the inbox original is removed), which makes the generation's "
        "name durable too; a failure before that acknowledges nothing",
    ),
    M("intake-generation-not-fsynced", WRITER, "fsync_file(fh.fileno())", "pass", (INTAKE_DURABLE,)),
]


# --------------------------------------------------------------------------- applying


class Stale(Exception):
    """The mutant's original line is not (or not uniquely) in the file any more."""


def apply(text: str, mutant: Mutant) -> str:
    lines = text.splitlines(keepends=True)
    start = 0
    if mutant.after is not None:
        marks = [i for i, line in enumerate(lines) if mutant.after in line]
        if not marks:
            raise Stale(f"{mutant.name}: no line containing {mutant.after!r} in {mutant.path}")
        start = marks[0] + 1
    hits = [i for i in range(start, len(lines)) if lines[i].strip() == mutant.original.strip()]
    if not hits or (mutant.after is None and len(hits) > 1):
        raise Stale(
            f"{mutant.name}: {mutant.original.strip()!r} occurs {len(hits)} times in {mutant.path}"
            + (f" after {mutant.after!r}" if mutant.after else "")
        )
    i = hits[0]
    line = lines[i]
    indent = line[: len(line) - len(line.lstrip())]
    ending = line[len(line.rstrip("\r\n")) :]
    lines[i] = indent + mutant.replacement.strip() + ending
    return "".join(lines)


def copy_tree(dest: str) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for folder in ("src", "tests"):
        shutil.copytree(os.path.join(ROOT, folder), os.path.join(dest, folder), ignore=ignore)
    shutil.copy2(os.path.join(ROOT, "pyproject.toml"), dest)


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    mutant: Mutant | None
    status: str  # killed, survived, stale, baseline-failed, baseline-ok
    by: str
    seconds: float


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run_tests(tree: str, tests: tuple[str, ...], timeout: float) -> tuple[int | None, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENURE_", "PYTEST_"))}
    env["PYTHONPATH"] = os.path.join(tree, "src")
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, out
    return done.returncode, done.stdout + done.stderr


def judge(mutant: Mutant, timeout: float) -> Outcome:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"tenure-mutant-{mutant.name}-") as tree:
        copy_tree(tree)
        target = os.path.join(tree, mutant.path)
        with open(target, encoding="utf-8") as fh:
            text = fh.read()
        try:
            mutated = apply(text, mutant)
        except Stale as exc:
            return Outcome(mutant, "stale", str(exc), time.monotonic() - start)
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(mutated)
        code, output = run_tests(tree, mutant.tests, timeout)
    took = time.monotonic() - start
    if code is None:
        return Outcome(mutant, "killed", f"timeout after {timeout:.0f}s", took)
    if code == 0:
        return Outcome(mutant, "survived", "", took)
    failed = _FAILED.search(output)
    if code == 1 and failed:
        return Outcome(mutant, "killed", failed.group(1), took)
    return Outcome(mutant, "killed", f"pytest exit {code}: " + (output.strip().splitlines() or ["?"])[-1], took)


def baseline(mutants: list[Mutant], timeout: float) -> Outcome:
    tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tenure-mutant-baseline-") as tree:
        copy_tree(tree)
        code, output = run_tests(tree, tests, timeout * 4)
    took = time.monotonic() - start
    if code == 0:
        return Outcome(None, "baseline-ok", "", took)
    failed = _FAILED.search(output)
    return Outcome(None, "baseline-failed", failed.group(1) if failed else output[-2000:], took)


def table(outcomes: list[Outcome]) -> str:
    rows = [("mutant", "file", "result", "by")]
    for o in outcomes:
        assert o.mutant is not None
        result = o.status
        by = o.by
        if o.status == "survived" and o.mutant.equivalent:
            result, by = "survived (equivalent)", o.mutant.equivalent
        elif o.status == "killed" and o.mutant.equivalent:
            result = "killed (marked equivalent: check the reason)"
        rows.append((o.mutant.name, o.mutant.path.replace("src/tenure/", ""), result, by))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
        if n == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 20)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="run mutants whose name contains this")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="mutants judged at once (default 2)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's test run")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run on the unmutated copy")
    parser.add_argument("--check", action="store_true", help="only check that every mutant still applies")
    args = parser.parse_args(argv)

    names = [m.name for m in MUTANTS]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        print(f"duplicate mutant names: {sorted(duplicates)}", file=sys.stderr)
        return 2
    chosen = [m for m in MUTANTS if not args.only or any(part in m.name for part in args.only)]
    if args.list:
        for m in chosen:
            print(
                f"{m.name}\n    {m.path}: {m.original.strip()!r} -> {m.replacement.strip()!r}\n"
                f"    tests: {' '.join(m.tests)}"
            )
        return 0
    if args.check:
        stale = []
        for m in chosen:
            with open(os.path.join(ROOT, m.path), encoding="utf-8") as fh:
                text = fh.read()
            try:
                apply(text, m)
            except Stale as exc:
                stale.append(str(exc))
        for line in stale:
            print(f"STALE: {line}", file=sys.stderr)
        print(f"{len(chosen) - len(stale)} of {len(chosen)} mutants apply")
        return 2 if stale else 0
    if not args.no_baseline:
        print(f"baseline: the tests of {len(chosen)} mutants on the unmutated tree ...", flush=True)
        base = baseline(chosen, args.timeout)
        if base.status != "baseline-ok":
            print(f"the unmutated tree fails {base.by}; no mutant judged", file=sys.stderr)
            return 2
        print(f"baseline passed in {base.seconds:.0f}s", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(judge, m, args.timeout) for m in chosen]
        outcomes = []
        for future in futures:
            outcome = future.result()
            outcomes.append(outcome)
            assert outcome.mutant is not None
            print(f"  {outcome.mutant.name}: {outcome.status} {outcome.by} ({outcome.seconds:.0f}s)", flush=True)
    print()
    print(table(outcomes))
    judged = [o for o in outcomes if o.status != "stale"]
    killed = [o for o in judged if o.status == "killed"]
    survivors = [o for o in judged if o.status == "survived"]
    unexplained = [o for o in survivors if not (o.mutant and o.mutant.equivalent)]
    stale = [o for o in outcomes if o.status == "stale"]
    print()
    if judged:
        print(
            f"killed {len(killed)} of {len(judged)} ({100 * len(killed) / len(judged):.0f}%); "
            f"{len(survivors) - len(unexplained)} equivalent survivors, {len(unexplained)} unexplained"
        )
    for o in stale:
        print(f"STALE: {o.by}", file=sys.stderr)
    if stale:
        return 2
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
