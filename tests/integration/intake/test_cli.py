"""``tenure intake`` through the root ``tenure`` command (click's CliRunner) and as ``python -m``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tenure.cli.main import root as tenure
from tenure.intake import CheckpointStore, InboxProcessor, Workspace
from tests.support.intake import SRC, put, run_python


def invoke(*args: str, options: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """``tenure [OPTIONS] intake ARGS``, as the console script runs it."""
    result = CliRunner().invoke(tenure, [*options, "intake", *args], obj={})
    return result.exit_code, result.stdout, result.stderr


def test_init_poll_show_json(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    code, out, _ = invoke("init", str(root), "--json")
    assert code == 0 and json.loads(out)["root"] == str(root)
    ws = Workspace(root)
    put(ws, "a.zip")
    (ws.inbox / "junk").write_bytes(b"junk")
    code, out, _ = invoke("poll", str(root), "--max-jobs", "10", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["kind"], r["code"]) for r in results] == [("ACCEPTED", None), ("QUARANTINED", "not-a-zip")]
    code, out, _ = invoke("show", str(root), "--json")
    [package] = json.loads(out)["packages"]
    assert package["state"] == "VALIDATED" and package["generation"] == 1


PACKAGE_KEYS = {
    "case_id",
    "package_id",
    "generation",
    "analysis_revision",
    "state",
    "routing",
    "retry_count",
    "blocked",
    "checkpoints",
    "latest_step",
    "fingerprint",
    "path",
}


def test_json_documents_keep_their_documented_keys(tmp_path: Path) -> None:
    """The keys docs/cli.md lists for the intake documents."""
    root = tmp_path / "svc"
    code, out, _ = invoke("init", str(root), "--json")
    assert set(json.loads(out)) == {"root"}
    put(Workspace(root), "a.zip")
    code, out, _ = invoke("poll", str(root), "--json")
    [result] = json.loads(out)["results"]
    assert set(result) == {"kind", "input", "paths", "case_id", "package_id", "generation", "state", "code", "message"}
    code, out, _ = invoke("show", str(root), "--json")
    assert set(json.loads(out)) == {"packages"} and set(json.loads(out)["packages"][0]) == PACKAGE_KEYS
    code, out, _ = invoke("advance", str(root), "case-A", "pkg-1", "BUILDING_CASE", "--step-id", "s", "--json")
    assert set(json.loads(out)) == {"package"} and set(json.loads(out)["package"]) == PACKAGE_KEYS
    code, out, _ = invoke("show", str(root), "case-A", "--package", "pkg-1", "--json")
    document = json.loads(out)
    assert set(document) == {"package", "checkpoints"} and set(document["package"]) == PACKAGE_KEYS
    assert [set(c) for c in document["checkpoints"]] == [{"generation", "state", "step_id", "created_at", "path"}] * 2
    source = tmp_path / "src"
    source.mkdir()
    (source / "manifest.json").write_text(json.dumps({"case_id": "c", "package_id": "p"}))
    code, out, _ = invoke("pack", str(source), str(tmp_path / "p.zip"), "--json")
    assert set(json.loads(out)) == {"path", "fingerprint", "case_id", "package_id", "files"}


def test_global_json_flag_before_the_group(tmp_path: Path) -> None:
    Workspace(tmp_path / "svc")
    code, out, _ = invoke("poll", str(tmp_path / "svc"), options=("--json",))
    assert code == 0 and json.loads(out) == {"results": []}


def test_tables_for_humans(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    put(Workspace(root), "a.zip")
    code, out, _ = invoke("poll", str(root))
    assert code == 0 and "ACCEPTED" in out and "case-A" in out
    code, out, _ = invoke("show", str(root), "case-A")
    assert "VALIDATED" in out


def test_advance_block_resume_reopen(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    put(Workspace(root), "a.zip")
    invoke("poll", str(root))
    artifact = tmp_path / "notes.md"
    artifact.write_text("# notes")
    code, out, err = invoke(
        "advance",
        str(root),
        "case-A",
        "pkg-1",
        "building_case",
        "--step-id",
        "s1",
        "--details",
        '{"k": 1}',
        "--artifact",
        f"notes/n.md={artifact}",
        "--pointer",
        "notes=notes/n.md",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["package"]["state"] == "BUILDING_CASE"
    code, out, err = invoke(
        "block",
        str(root),
        "case-A",
        "pkg-1",
        "--step-id",
        "b",
        "--reason",
        "tool down",
        "--retry-at",
        "2000-01-01T00:00:00+00:00",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["package"]["retry_count"] == 1
    code, out, _ = invoke("resume", str(root), "case-A", "pkg-1", "--step-id", "r", "--json")
    assert json.loads(out)["package"]["state"] == "BUILDING_CASE"
    invoke("fail", str(root), "case-A", "pkg-1", "--step-id", "f")
    code, out, _ = invoke("reopen", str(root), "case-A", "pkg-1", "--step-id", "o", "--json")
    assert json.loads(out)["package"]["analysis_revision"] == 2
    code, out, _ = invoke("show", str(root), "case-A", "--package", "pkg-1", "--json")
    steps = [c["step_id"] for c in json.loads(out)["checkpoints"]]
    assert steps[1:] == ["s1", "b", "r", "f", "o"]
    assert CheckpointStore(Workspace(root)).current("case-A", "pkg-1").read("notes/n.md") == b"# notes"


def test_error_is_one_line_with_code(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    put(Workspace(root), "a.zip")
    invoke("poll", str(root))
    code, out, err = invoke("advance", str(root), "case-A", "pkg-1", "REPORTING", "--step-id", "skip")
    assert code == 4 and out == ""  # TransitionRefusedError is a ConflictError
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error[transition-skip]: ")
    assert "Traceback" not in err
    code, _, err = invoke(
        "advance", str(root), "case-A", "pkg-1", "REPORTING", "--step-id", "skip", options=("--debug",)
    )
    assert code == 4 and "Traceback" in err and "error[transition-skip]" in err


def test_missing_case_and_bad_option_errors(tmp_path: Path) -> None:
    Workspace(tmp_path / "svc")
    code, _, err = invoke("resume", str(tmp_path / "svc"), "nope", "nope", "--step-id", "x")
    assert code == 3 and err.startswith("error[case-not-found]: ")  # a NotFoundError
    code, _, err = invoke(
        "block", str(tmp_path / "svc"), "c", "p", "--step-id", "x", "--reason", "r", "--retry-at", "tomorrow"
    )
    assert code == 2 and err.startswith("error[invalid-input]: ")


@pytest.mark.parametrize("where", ["global", "after the subcommand"])
def test_json_error_is_one_document_on_stderr(tmp_path: Path, where: str) -> None:
    Workspace(tmp_path / "svc")
    args = ("resume", str(tmp_path / "svc"), "nope", "nope", "--step-id", "x")
    if where == "global":
        code, out, err = invoke(*args, options=("--json",))
    else:
        code, out, err = invoke(*args, "--json")
    assert code == 3 and out == ""
    document = json.loads(err)  # the whole of stderr is one JSON document
    assert list(document) == ["error"]
    assert document["error"]["code"] == "case-not-found"
    assert set(document["error"]) == {"code", "message", "hint", "retryable", "context"}
    assert document["error"]["context"] == {"case_id": "nope", "package_id": "nope"}


def test_json_error_for_bad_options_and_rejected_packages(tmp_path: Path) -> None:
    code, out, err = invoke(
        "block", str(tmp_path / "svc"), "c", "p", "--step-id", "x", "--reason", "r", "--retry-at", "tomorrow", "--json"
    )
    assert code == 2 and out == "" and json.loads(err)["error"]["code"] == "invalid-input"
    source = tmp_path / "src"
    source.mkdir()
    (source / "manifest.json").write_text("{")
    code, out, err = invoke("pack", str(source), str(tmp_path / "x.zip"), "--json")
    assert code == 7 and out == "" and json.loads(err)["error"]["code"] == "invalid-manifest"


def test_unreadable_artifact_is_invalid_input(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    put(Workspace(root), "a.zip")
    invoke("poll", str(root))
    code, out, err = invoke(
        "advance",
        str(root),
        "case-A",
        "pkg-1",
        "BUILDING_CASE",
        "--step-id",
        "s",
        "--artifact",
        f"notes.md={tmp_path / 'missing.md'}",
    )
    assert code == 2 and out == ""
    assert err.startswith("error[invalid-input]: ") and len(err.strip().splitlines()) == 1


def test_unexpected_exception_is_one_internal_line_exit_70(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: InboxProcessor, max_jobs: int = 100) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(InboxProcessor, "poll", broken)
    Workspace(tmp_path / "svc")
    code, out, err = invoke("poll", str(tmp_path / "svc"))
    assert code == 70 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error[internal]: RuntimeError: disk on fire")
    assert "Traceback" not in err
    code, out, err = invoke("poll", str(tmp_path / "svc"), options=("--debug",))
    assert code == 70 and out == ""
    assert "Traceback" in err and "RuntimeError: disk on fire" in err
    assert err.strip().splitlines()[-1].startswith("error[internal]: ")


def test_pack_builds_a_valid_package(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "manifest.json").write_text(json.dumps({"case_id": "c", "package_id": "p"}))
    (source / "log.txt").write_text("log")
    out = tmp_path / "svc" / "inbox" / "p.zip"
    out.parent.mkdir(parents=True)
    code, stdout, err = invoke("pack", str(source), str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["files"] == ["log.txt", "manifest.json"]
    code, stdout, _ = invoke("poll", str(tmp_path / "svc"), "--json")
    assert json.loads(stdout)["results"][0]["kind"] == "ACCEPTED"
    (source / "manifest.json").write_text("{")
    code, _, err = invoke("pack", str(source), str(tmp_path / "x.zip"))
    assert code == 7 and err.startswith("error[invalid-manifest]: ")


def test_module_entry_point_runs_through_the_root_group(tmp_path: Path) -> None:
    result = run_python(
        "import runpy; runpy.run_module('tenure.cli.intake', run_name='__main__')", env={"PYTHONPATH": SRC}
    )
    assert "Usage: tenure intake" in result.stdout + result.stderr

    def module(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tenure.cli.intake", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
            check=False,
        )

    done = module("init", str(tmp_path / "m"), "--json")
    assert done.returncode == 0 and (tmp_path / "m" / "inbox").is_dir()
    failed = module("resume", str(tmp_path / "m"), "nope", "nope", "--step-id", "x", "--json")
    assert failed.returncode == 3 and failed.stdout == ""
    assert json.loads(failed.stderr)["error"]["code"] == "case-not-found"


def test_an_error_class_with_its_own_code_carries_the_catalogue_hint() -> None:
    from tenure.intake.errors import CODES, CaseNotFoundError

    error = CaseNotFoundError("no case c")
    assert error.code == "case-not-found" and error.hint == CODES["case-not-found"][1]


def cli_bytes(*args: str) -> subprocess.CompletedProcess[bytes]:
    """``python -m tenure.cli.intake ARGS`` with a strict UTF-8 stdout and stderr, output kept as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "tenure.cli.intake", *args],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": SRC, "PYTHONIOENCODING": "utf-8:strict", "COLUMNS": "300"},
        check=False,
    )


#: Inbox names that must not reach a terminal raw: an escape sequence, rich markup with a C1 control and DEL,
#: and bytes that are not UTF-8 (Python holds them as lone surrogates).
HOSTILE_NAMES = {
    "\x1b[31mred.zip": "\\x1b[31mred.zip",
    "[bold]x\x9b\x7f.zip": "[bold]x\\x9b\\x7f.zip",
    os.fsdecode(b"\xff.zip"): "\\udcff.zip",
}


def test_plain_poll_escapes_control_characters_and_undecodable_names(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    inbox = Workspace(root).inbox
    for name in HOSTILE_NAMES:
        (inbox / name).write_bytes(b"junk")
    done = cli_bytes("poll", str(root))
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout
    out = done.stdout.decode("utf-8")  # strict: a lone surrogate would have failed the command
    assert not any("\x00" <= c < " " and c != "\n" or "\x7f" <= c <= "\x9f" for c in out)
    for shown in HOSTILE_NAMES.values():
        assert shown in out
    assert out.count("QUARANTINED") == 3


def test_json_poll_of_undecodable_names_is_valid_unicode(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    inbox = Workspace(root).inbox
    for name in HOSTILE_NAMES:
        (inbox / name).write_bytes(b"junk")
    done = cli_bytes("poll", str(root), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout.decode("utf-8"))
    json.dumps(document, ensure_ascii=False).encode("utf-8")  # no lone surrogate survives decoding
    inputs = {Path(r["input"]).name for r in document["results"]}
    # JSON escapes control characters itself; the undecodable byte becomes the text \udcff
    assert inputs == {"\x1b[31mred.zip", "[bold]x\x9b\x7f.zip", "\\udcff.zip"}


def test_error_line_escapes_the_names_it_quotes(tmp_path: Path) -> None:
    missing = os.fsdecode(os.fsencode(str(tmp_path)) + b"/\x1b]0;title\x07\xff")
    done = cli_bytes("poll", missing)
    assert done.returncode == 7 and done.stdout == b""
    assert b"\x1b" not in done.stderr and b"\x07" not in done.stderr
    [line] = done.stderr.decode("utf-8").splitlines()
    assert line.startswith("error[no-intake]: ") and "\\x1b]0;title\\x07\\udcff" in line
    done = cli_bytes("poll", missing, "--json")
    assert done.returncode == 7 and done.stdout == b""
    error = json.loads(done.stderr.decode("utf-8"))["error"]
    assert error["code"] == "no-intake" and error["context"]["root"].endswith("\x1b]0;title\x07\\udcff")
