"""Zips the intake did not make.

(a) Every ``*.zip`` shipped in the running Python's test folder (and the system Python's, if there is one) is polled:
whatever it is, the result is never ERROR and the file never stays in the inbox.

(b) Packages archived by ordinary tools (Info-ZIP ``zip`` with and without extra fields, streamed to a pipe, stored,
with zip64 records forced;
``jar``; Python's ``zipfile`` stored, deflated, through a non-seekable stream and with a comment) are admitted and
their stored generation reads back. Folder entries are allowed.
"""

from __future__ import annotations

import glob
import io
import json
import os
import shutil
import subprocess
import sysconfig
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from tenure.intake import InboxProcessor, ResultKind, Workspace
from tenure.intake.pack import new_manifest
from tenure.intake.storage import CaseStorage


def _foreign_zips() -> list[Path]:
    roots = [Path(sysconfig.get_paths()["stdlib"]) / "test", *map(Path, sorted(glob.glob("/usr/lib/python3*/test")))]
    found: dict[Path, None] = {}
    for root in roots:
        if root.is_dir():
            for path in sorted(root.rglob("*.zip")):
                if path.is_file():
                    found[path.resolve()] = None
    return list(found)


FOREIGN = _foreign_zips()


@pytest.mark.skipif(not FOREIGN, reason="no *.zip in the Python test folders")
@pytest.mark.parametrize("source", FOREIGN, ids=[str(p) for p in FOREIGN])
def test_foreign_zip_is_judged_never_error(tmp_path: Path, source: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    shutil.copyfile(source, ws.inbox / source.name)
    results = [r for r in InboxProcessor(ws).poll(max_jobs=10) if r.input_path is not None]
    assert [r.kind for r in results if r.kind is ResultKind.ERROR] == [], [r.to_dict() for r in results]
    assert len(results) == 1
    assert results[0].kind in (ResultKind.ACCEPTED, ResultKind.DUPLICATE, ResultKind.QUARANTINED)
    if results[0].kind is ResultKind.QUARANTINED:
        assert results[0].code
    assert os.listdir(ws.inbox) == []


# --------------------------------------------------------------------------- (b) legit tools

FILES = {
    "input/report.txt": b"the report\n" * 50,
    "input/empty.txt": b"",
    "input/nested/deeper/data.bin": bytes(range(256)) * 40,
    "docs/readme.md": "# r\u00e9sum\u00e9\n".encode(),
}


def _package_folder(root: Path, case: str) -> Path:
    folder = root / "src"
    for name, data in FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (folder / "manifest.json").write_text(json.dumps(new_manifest(case, "pkg"), indent=2))
    return folder


def _run(args: list[str], cwd: Path, stdout: BinaryIO | None = None) -> None:
    done = subprocess.run(args, cwd=cwd, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert done.returncode == 0, (args, done.stderr)


def _need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"{tool} is not installed")
    return found


def _zip(*options: str) -> Callable[[Path, Path], None]:
    def build(folder: Path, out: Path) -> None:
        _run([_need("zip"), "-q", "-r", *options, str(out), "."], folder)

    return build


def _zip_to_pipe(folder: Path, out: Path) -> None:
    """``zip`` writing to a pipe cannot seek back: it writes data descriptors."""
    zip_exe = _need("zip")
    with open(out, "wb") as fh:
        producer = subprocess.Popen([zip_exe, "-q", "-r", "-", "."], cwd=folder, stdout=subprocess.PIPE)
        assert producer.stdout is not None
        shutil.copyfileobj(producer.stdout, fh)
        assert producer.wait() == 0


def _jar(folder: Path, out: Path) -> None:
    _run([_need("jar"), "cfM", str(out), "-C", str(folder), "."], folder)


def _walk(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*"))


def _python(method: int, comment: bytes = b"", folders: bool = True) -> Callable[[Path, Path], None]:
    def build(folder: Path, out: Path) -> None:
        with zipfile.ZipFile(out, "w", method) as zf:
            zf.comment = comment
            for path in _walk(folder):
                if path.is_dir() and not folders:
                    continue
                zf.write(path, path.relative_to(folder).as_posix())

    return build


class _NoSeek(io.RawIOBase):
    """A write-only stream that cannot seek or tell, like a pipe."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data: bytes) -> int:  # type: ignore[override]
        return self.sink.write(data)

    def tell(self) -> int:
        raise OSError("not seekable")

    def seek(self, *args: object) -> int:
        raise OSError("not seekable")


def _python_unseekable(folder: Path, out: Path) -> None:
    """Python's zipfile on a stream it cannot seek writes data descriptors (flag bit 3)."""
    with open(out, "wb") as sink, zipfile.ZipFile(_NoSeek(sink), "w", zipfile.ZIP_DEFLATED) as zf:
        for path in _walk(folder):
            if path.is_file():
                zf.writestr(path.relative_to(folder).as_posix(), path.read_bytes())
    with zipfile.ZipFile(out) as check:
        assert all(info.flag_bits & 0x08 for info in check.infolist())


TOOLS: dict[str, Callable[[Path, Path], None]] = {
    "zip-X": _zip("-X"),
    "zip-default-extras": _zip(),
    "zip-no-folder-entries": _zip("-D"),
    "zip-stored": _zip("-0"),
    "zip-force-zip64": _zip("-fz"),
    "zip-best": _zip("-9", "-X"),
    "zip-to-pipe": _zip_to_pipe,
    "jar-cfM": _jar,
    "python-stored": _python(zipfile.ZIP_STORED),
    "python-deflated": _python(zipfile.ZIP_DEFLATED),
    "python-files-only": _python(zipfile.ZIP_DEFLATED, folders=False),
    "python-unseekable": _python_unseekable,
    "python-comment": _python(zipfile.ZIP_DEFLATED, comment=b"built by hand, nothing hidden here"),
}


@pytest.mark.parametrize("tool", list(TOOLS), ids=list(TOOLS))
def test_package_archived_by_a_legit_tool_is_admitted(tmp_path: Path, tool: str) -> None:
    case = f"foreign-{tool}"
    folder = _package_folder(tmp_path, case)
    out = tmp_path / f"{tool}.zip"
    TOOLS[tool](folder, out)
    ws = Workspace(tmp_path / "ws")
    shutil.copyfile(out, ws.inbox / out.name)
    results = [r for r in InboxProcessor(ws).poll() if r.input_path is not None]
    assert [(r.kind.value, r.code, r.message) for r in results] == [("ACCEPTED", None, None)]
    assert os.listdir(ws.inbox) == []
    stored = CaseStorage(ws).load_current(case, "pkg")
    assert stored is not None and stored.generation == results[0].generation
    for name, data in FILES.items():
        assert stored.read(name) == data
