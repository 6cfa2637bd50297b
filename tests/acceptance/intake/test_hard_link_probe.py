"""I-130: a folder that cannot hold hard links is refused with ``no-hard-links``, by the real CLI.

No file system without hard links can be mounted here (the kernel has no
FAT, and a FUSE file system would need root and more packages), so the test
builds a small ``LD_PRELOAD`` library at test time: its ``link`` and
``linkat`` fail with EPERM, as a file system without hard links answers, for
paths under the folder named by ``TENURE_TEST_NO_LINKS_UNDER`` and call the
real functions for every other path. Skipped without Linux or a C compiler.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tenure.intake import Workspace
from tests.support.intake import SRC

SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The absolute form of path as seen from dirfd (AT_FDCWD or an open folder), or path itself. */
static const char *absolute(int dirfd, const char *path, char *buf) {
    char dir[PATH_MAX];
    if (path == NULL || path[0] == '/') return path;
    if (dirfd == AT_FDCWD) {
        if (getcwd(dir, sizeof dir) == NULL) return path;
    } else {
        char proc[64];
        ssize_t n;
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", dirfd);
        n = readlink(proc, dir, sizeof dir - 1);
        if (n < 0) return path;
        dir[n] = '\0';
    }
    snprintf(buf, PATH_MAX, "%s/%s", dir, path);
    return buf;
}

static int refused(int dirfd, const char *path) {
    char buf[PATH_MAX];
    const char *root = getenv("TENURE_TEST_NO_LINKS_UNDER");
    const char *full = absolute(dirfd, path, buf);
    size_t n;
    if (root == NULL || full == NULL) return 0;
    n = strlen(root);
    return strncmp(full, root, n) == 0 && (full[n] == '/' || full[n] == '\0');
}

int link(const char *old, const char *new) {
    int (*real)(const char *, const char *);
    if (refused(AT_FDCWD, old) || refused(AT_FDCWD, new)) {
        errno = EPERM;
        return -1;
    }
    real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "link");
    return real(old, new);
}

int linkat(int olddirfd, const char *old, int newdirfd, const char *new, int flags) {
    int (*real)(int, const char *, int, const char *, int);
    if (refused(olddirfd, old) || refused(newdirfd, new)) {
        errno = EPERM;
        return -1;
    }
    real = (int (*)(int, const char *, int, const char *, int))dlsym(RTLD_NEXT, "linkat");
    return real(olddirfd, old, newdirfd, new, flags);
}
"""

#: What ``Workspace`` lays out before it probes for hard links: the folders and the idle runtime file.
LAYOUT = {
    "inbox",
    "quarantine",
    "cache",
    "cases",
    "outbox",
    "review",
    "runtime",
    "runtime/locks",
    "runtime/current_job.json",
}


@pytest.fixture
def no_links_shim(tmp_path: Path) -> Path:
    """The compiled ``LD_PRELOAD`` library (in its own folder beside the test's folders)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not sys.platform.startswith("linux") or compiler is None:
        pytest.skip("needs Linux (LD_PRELOAD) and a C compiler")
    folder = tmp_path / "shim"
    folder.mkdir()
    (folder / "no_links.c").write_text(SHIM_C)
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(folder / "no_links.so"), str(folder / "no_links.c"), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return folder / "no_links.so"


def without_links(shim: Path, under: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m tenure.cli.intake ARGS`` where ``link``/``linkat`` under ``under`` fail with EPERM."""
    env = {**os.environ, "PYTHONPATH": SRC, "LD_PRELOAD": str(shim), "TENURE_TEST_NO_LINKS_UNDER": str(under)}
    return subprocess.run(
        [sys.executable, "-m", "tenure.cli.intake", *args], capture_output=True, text=True, env=env, check=False
    )


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_the_shim_refuses_links_only_under_its_folder(no_links_shim: Path, tmp_path: Path) -> None:
    """The preloaded library is in force in the CLI's interpreter, and only for the folder it names."""
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    code = (
        "import os, sys\n"
        "for folder in sys.argv[1:]:\n"
        "    open(os.path.join(folder, 'a'), 'w').close()\n"
        "    try:\n"
        "        os.link(os.path.join(folder, 'a'), os.path.join(folder, 'b'))\n"
        "        print('linked')\n"
        "    except PermissionError:\n"
        "        print('refused')\n"
    )
    env = {**os.environ, "LD_PRELOAD": str(no_links_shim), "TENURE_TEST_NO_LINKS_UNDER": str(tmp_path / "in")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "in"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "linked"]


def test_i130_init_on_a_folder_without_hard_links_fails_with_no_hard_links(no_links_shim: Path, tmp_path: Path) -> None:
    root = tmp_path / "svc"
    done = without_links(no_links_shim, root, "init", str(root))
    assert done.returncode == 7 and done.stdout == ""  # an intake error
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error[no-hard-links]: {root} does not support hard links: ")
    assert "Traceback" not in done.stderr
    assert tree(root) == LAYOUT  # the probe and its link are gone
    assert json.loads((root / "runtime" / "current_job.json").read_text()) is None
    assert {p.name for p in tmp_path.iterdir()} == {"shim", "svc"}
    done = without_links(no_links_shim, root, "init", str(root), "--json")
    assert done.returncode == 7 and done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["code"] == "no-hard-links" and error["context"] == {"root": str(root)}
    assert tree(root) == LAYOUT


def test_i130_poll_on_a_folder_without_hard_links_fails_before_touching_the_inbox(
    no_links_shim: Path, tmp_path: Path
) -> None:
    root = tmp_path / "svc"
    Workspace(root)
    (root / "inbox" / "a.zip").write_bytes(b"not yet read")
    done = without_links(no_links_shim, root, "poll", str(root))
    assert done.returncode == 7 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error[no-hard-links]: ") and "Traceback" not in done.stderr
    assert tree(root) == LAYOUT | {"inbox/a.zip"}
    assert (root / "inbox" / "a.zip").read_bytes() == b"not yet read"
