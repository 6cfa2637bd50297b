"""Folders to check in and compare: sample trees, what a restore must reproduce, the real CLI's JSON."""

from __future__ import annotations

import json
import os
import random
import stat
import time
from pathlib import Path
from typing import Any

from tests.support.procs import tenure


def make_tree(root: str, seed: int = 1, files: int = 40) -> None:
    rnd = random.Random(seed)
    os.makedirs(os.path.join(root, "empty", "nested"), exist_ok=True)
    for i in range(files):
        sub = os.path.join(root, f"d{i % 5}", f"e{i % 3}")
        os.makedirs(sub, exist_ok=True)
        size = rnd.choice([0, 10, 1000, 70_000])
        with open(os.path.join(sub, f"f{i}.txt"), "wb") as fh:
            fh.write(rnd.randbytes(size))
    with open(os.path.join(root, "big.bin"), "wb") as fh:
        fh.write(rnd.randbytes(3_000_000))
    os.symlink("d0/e0/f0.txt", os.path.join(root, "link"))
    os.symlink("nowhere", os.path.join(root, "dangling"))
    os.chmod(os.path.join(root, "d0", "e0", "f0.txt"), 0o755)


def describe(root: str) -> dict[str, Any]:
    """Everything a restore must reproduce, keyed by relative path."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif not stat.S_ISREG(st.st_mode):
                out[rel] = ("special", stat.S_IFMT(st.st_mode))
            else:
                with open(path, "rb") as fh:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns, fh.read())
    return out


def cli_json(data: str, *args: str, **env: str) -> Any:
    result = tenure(["--data", data, "--json", *args], **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def write_tree(root: Path) -> dict[str, bytes]:
    """A folder with small files (packed together) and one large file (chunked); returns its content."""
    files = {f"small/{i:02d}.txt": f"small file {i}\n".encode() * (i + 1) for i in range(12)}
    files["large.bin"] = random.Random(3).randbytes(3 << 20)  # fixed content: the same chunks every run
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (time.time() - 3600, time.time() - 3600))  # old enough for the index to trust
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
