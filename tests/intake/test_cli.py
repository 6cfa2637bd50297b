"""``tenure intake`` through click's CliRunner and as ``python -m``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.intake.intake_support import SRC, put, run_python
from tenure.cli.intake import intake
from tenure.intake import CheckpointStore, Workspace


def invoke(*args: str, obj: dict[str, object] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(intake, list(args), obj=obj)
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
    assert [(r["kind"], r["code"]) for r in results] == [("ACCEPTED", None),
                                                         ("QUARANTINED", "not-a-zip")]
    code, out, _ = invoke("show", str(root), "--json")
    [package] = json.loads(out)["packages"]
    assert package["state"] == "VALIDATED" and package["generation"] == 1


def test_global_json_flag_in_ctx_obj(tmp_path: Path) -> None:
    code, out, _ = invoke("poll", str(tmp_path / "svc"), obj={"json": True})
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
    code, out, err = invoke("advance", str(root), "case-A", "pkg-1", "building_case",
                            "--step-id", "s1", "--details", '{"k": 1}',
                            "--artifact", f"notes/n.md={artifact}", "--pointer",
                            "notes=notes/n.md", "--json")
    assert code == 0, err
    assert json.loads(out)["package"]["state"] == "BUILDING_CASE"
    code, out, err = invoke("block", str(root), "case-A", "pkg-1", "--step-id", "b",
                            "--reason", "tool down", "--retry-at", "2000-01-01T00:00:00+00:00",
                            "--json")
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
    assert CheckpointStore(Workspace(root)).current("case-A", "pkg-1").read("notes/n.md") == \
        b"# notes"


def test_error_is_one_line_with_code(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    put(Workspace(root), "a.zip")
    invoke("poll", str(root))
    code, out, err = invoke("advance", str(root), "case-A", "pkg-1", "REPORTING",
                            "--step-id", "skip")
    assert code == 4 and out == ""  # TransitionRefusedError is a ConflictError
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error[transition-skip]: ")
    assert "Traceback" not in err
    code, _, err = invoke("--debug", "advance", str(root), "case-A", "pkg-1", "REPORTING",
                          "--step-id", "skip")
    assert code == 4 and "Traceback" in err and "error[transition-skip]" in err


def test_missing_case_and_bad_option_errors(tmp_path: Path) -> None:
    code, _, err = invoke("resume", str(tmp_path / "svc"), "nope", "nope", "--step-id", "x")
    assert code == 3 and err.startswith("error[case-not-found]: ")  # a NotFoundError
    code, _, err = invoke("block", str(tmp_path / "svc"), "c", "p", "--step-id", "x",
                          "--reason", "r", "--retry-at", "tomorrow")
    assert code == 2 and err.startswith("error[invalid-input]: ")


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


def test_module_entry_point(tmp_path: Path) -> None:
    result = run_python("import runpy; runpy.run_module('tenure.cli.intake', run_name='__main__')",
                        env={"PYTHONPATH": SRC})
    assert "Usage" in result.stdout or "Usage" in result.stderr
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tenure.cli.intake", "init", str(tmp_path / "m"),
                           "--json"], capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": SRC}, check=False)
    assert done.returncode == 0 and (tmp_path / "m" / "inbox").is_dir()
