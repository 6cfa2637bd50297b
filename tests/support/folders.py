"""Shared helpers for the tree-engine tests: describing and generating folders."""

from __future__ import annotations

import os
import random
import stat
from dataclasses import dataclass, field

PAST_NS = 1_600_000_000 * 10**9  # 2020-09-13: well outside the racy window


@dataclass(frozen=True)
class Described:
    """Everything a restore must reproduce, keyed by relative path (bytes)."""

    entries: dict[bytes, tuple[object, ...]]
    inode_groups: frozenset[frozenset[bytes]] = field(default_factory=frozenset)


def describe(root: str | bytes) -> Described:
    """Kind, mode, mtime_ns and content (or link target) of every path; hard-link groups."""
    root_b = os.fsencode(root)
    entries: dict[bytes, tuple[object, ...]] = {}
    inodes: dict[int, set[bytes]] = {}
    stack = [b""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root_b, rel) if rel else root_b
        st = os.lstat(path)
        mode, mtime = stat.S_IMODE(st.st_mode), st.st_mtime_ns
        if stat.S_ISDIR(st.st_mode):
            entries[rel] = ("dir", mode, mtime)
            stack += [os.path.join(rel, name) if rel else name for name in os.listdir(path)]
        elif stat.S_ISLNK(st.st_mode):
            entries[rel] = ("symlink", os.readlink(path), mtime)
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb") as fh:
                entries[rel] = ("file", mode, mtime, fh.read())
            inodes.setdefault(st.st_ino, set()).add(rel)
        else:
            entries[rel] = ("special", stat.S_IFMT(st.st_mode))
    groups = frozenset(frozenset(g) for g in inodes.values() if len(g) > 1)
    return Described(entries, groups)


def overrides_file_permissions() -> bool:
    """Whether this process reads and writes files whatever their mode bits say.

    That is root with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, not merely uid 0: ``make test`` also runs
    restore, snapshot and intake tests as root without those two capabilities.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            effective = next(int(line.split()[1], 16) for line in fh if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return os.geteuid() == 0
    dac_override, dac_read_search = 1 << 1, 1 << 2
    return effective & (dac_override | dac_read_search) == dac_override | dac_read_search


def write_file(path: str | bytes, data: bytes, *, mode: int = 0o644, mtime_ns: int = PAST_NS) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def random_bytes(size: int, seed: int, *, compressible: bool = False) -> bytes:
    rng = random.Random(seed)
    if not compressible:
        return rng.randbytes(size)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"\n", b" ", b"epsilon"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words)
    return bytes(out[:size])


def set_tree_times(root: str | bytes, mtime_ns: int = PAST_NS) -> None:
    """Give every folder, file and symlink below ``root`` (and root) an old mtime, deepest first."""
    root_b = os.fsencode(root)
    for folder, dirs, files in os.walk(root_b, topdown=False):
        for name in files + dirs:
            os.utime(os.path.join(folder, name), ns=(mtime_ns, mtime_ns), follow_symlinks=False)
        os.utime(folder, ns=(mtime_ns, mtime_ns))


def make_sample_tree(root: str, *, big: int = 3 << 20) -> None:
    """A small tree with every kind of entry the engine stores."""
    os.makedirs(os.path.join(root, "src", "pkg"))
    os.makedirs(os.path.join(root, "empty", "nested-empty"))
    write_file(os.path.join(root, "src", "main.py"), b"print('hello')\n", mode=0o755)
    write_file(os.path.join(root, "src", "pkg", "data.txt"), random_bytes(5000, 1, compressible=True))
    write_file(os.path.join(root, "big.bin"), random_bytes(big, 2))
    write_file(os.path.join(root, "empty-file"), b"")
    os.symlink("src/main.py", os.path.join(root, "link-to-main"))
    os.symlink("does/not/exist", os.path.join(root, "dangling"))
    os.link(os.path.join(root, "src", "main.py"), os.path.join(root, "hard-main"))
    set_tree_times(root)
