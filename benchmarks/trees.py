"""Deterministic, seeded folder trees for the storage benchmarks.

Two shapes:

* ``mixed`` — about 20,000 files and 200 MB at scale 1: log-normally
  distributed sizes (most files a few KiB, some up to 4 MiB), ~60% of the
  files compressible text and ~40% random bytes, plus three files over 20 MB
  (a text log, a random blob, and a "database" of random pages interleaved
  with zeroed and text pages).
* ``small`` — 100,000 files of about 1 KiB (512..1536 bytes) at scale 1,
  70% text, 30% random bytes.

The same ``(spec, seed)`` always yields byte-identical trees (for a given
Python minor version). No two generated files are copies of each other, so
deduplication gains nothing on the first checkpoint: compression is the only
thing that shrinks it.

``modify`` applies the benchmark's change set: a seeded 1% of the non-empty
files each get one contiguous region of ``min(size, 4 KiB)`` overwritten in
place with fresh content (size kept), and, when the tree has large files,
1 MiB of text is appended to the first one. It returns the number of bytes
that differ afterwards, which is what "bytes changed" means in the results.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass

KIB = 1024
MIB = 1024 * 1024

EDIT_REGION = 4 * KIB
APPEND_BYTES = 1 * MIB
FILES_PER_DIR = 50
DIRS_PER_GROUP = 32

_WORDS_SEED_SALT = 0x5EED


@dataclass(frozen=True)
class TreeSpec:
    """What to generate. Sizes are in bytes."""

    name: str
    files: int
    small_bytes: int  # total bytes of the ordinary files (large files excluded)
    large_files: tuple[int, ...]
    text_fraction: float
    uniform_range: tuple[int, int] | None  # sizes drawn uniformly from this range instead of log-normally
    seed: int


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, "/"-separated
    size: int
    kind: str  # "text", "random" or "db"


@dataclass(frozen=True)
class Tree:
    spec: TreeSpec
    root: str
    entries: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def file_count(self) -> int:
        return len(self.entries)


@dataclass(frozen=True)
class Change:
    files_modified: int
    bytes_changed: int
    appended_to: str | None


def mixed_spec(scale: float = 1.0, seed: int = 1) -> TreeSpec:
    """About 20,000 files / 200 MB at scale 1 (three of them over 20 MB)."""
    large = tuple(int(s * MIB * scale) for s in (24, 30, 22))
    return TreeSpec(
        name="mixed",
        files=max(10, round(20_000 * scale)),
        small_bytes=int(200 * MIB * scale) - sum(large),
        large_files=large,
        text_fraction=0.6,
        uniform_range=None,
        seed=seed,
    )


def small_spec(scale: float = 1.0, seed: int = 2) -> TreeSpec:
    """100,000 files of about 1 KiB at scale 1."""
    files = max(10, round(100_000 * scale))
    return TreeSpec(
        name="small",
        files=files,
        small_bytes=files * KIB,
        large_files=(),
        text_fraction=0.7,
        uniform_range=(512, 1536),
        seed=seed,
    )


# --------------------------------------------------------------------------- content


class Content:
    """Seeded content source: random bytes, and text built from a fixed pool of lines."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        words_rng = random.Random(_WORDS_SEED_SALT)
        letters = "abcdefghijklmnopqrstuvwxyz"
        words = ["".join(words_rng.choices(letters, k=words_rng.randint(2, 10))) for _ in range(2_000)]
        self.lines = [
            (
                " " * words_rng.choice((0, 4, 8))
                + " ".join(words_rng.choices(words, k=words_rng.randint(3, 12)))
                + "\n"
            ).encode()
            for _ in range(20_000)
        ]

    def random_bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def text(self, n: int) -> bytes:
        if n <= 0:
            return b""
        out = bytearray()
        while len(out) < n:
            out += b"".join(self.rng.choices(self.lines, k=max(1, (n - len(out)) // 40 + 1)))
        return bytes(out[:n])

    def db_pages(self, n: int, page: int = 8 * KIB) -> bytes:
        """Random, zeroed and text pages, like a database file."""
        out = bytearray()
        while len(out) < n:
            pick = self.rng.random()
            if pick < 0.5:
                out += self.random_bytes(page)
            elif pick < 0.75:
                out += bytes(page)
            else:
                out += self.text(page)
        return bytes(out[:n])

    def of_kind(self, kind: str, n: int) -> bytes:
        if kind == "random":
            return self.random_bytes(n)
        if kind == "db":
            return self.db_pages(n)
        return self.text(n)


# --------------------------------------------------------------------------- layout


def _sizes(spec: TreeSpec, rng: random.Random) -> list[int]:
    count = spec.files - len(spec.large_files)
    if spec.uniform_range is not None:
        low, high = spec.uniform_range
        return [rng.randint(low, high) for _ in range(count)]
    raw = [min(rng.lognormvariate(math.log(2 * KIB), 1.5), 4.0 * MIB) for _ in range(count)]
    factor = spec.small_bytes / sum(raw)
    return [min(int(r * factor), 4 * MIB) for r in raw]


def _path(index: int, kind: str) -> str:
    leaf = index // FILES_PER_DIR
    ext = {"text": "txt", "random": "bin", "db": "db"}[kind]
    return f"g{leaf // DIRS_PER_GROUP:03d}/d{leaf:05d}/f{index:06d}.{ext}"


def plan(spec: TreeSpec) -> tuple[FileEntry, ...]:
    """The file list of ``spec``: paths, sizes and content kinds (no I/O)."""
    rng = random.Random(spec.seed)
    entries = [
        FileEntry(f"large/large{i}.{('log', 'bin', 'db')[i % 3]}", size, ("text", "random", "db")[i % 3])
        for i, size in enumerate(spec.large_files)
    ]
    for i, size in enumerate(_sizes(spec, rng)):
        kind = "text" if rng.random() < spec.text_fraction else "random"
        entries.append(FileEntry(_path(i, kind), size, kind))
    return tuple(entries)


def generate(spec: TreeSpec, root: str) -> Tree:
    """Write the tree of ``spec`` under ``root`` (which must not exist yet)."""
    os.makedirs(root)
    entries = plan(spec)
    content = Content(random.Random(spec.seed + 1))
    made: set[str] = set()
    for entry in entries:
        target = os.path.join(root, entry.path)
        parent = os.path.dirname(target)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        with open(target, "wb") as fh:
            fh.write(content.of_kind(entry.kind, entry.size))
    return Tree(spec, root, entries)


# --------------------------------------------------------------------------- changes


def _edit(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def modify(tree: Tree, fraction: float = 0.01, seed: int = 7) -> tuple[Tree, Change]:
    """Apply the benchmark's change set (see the module docstring) to ``tree`` in place."""
    rng = random.Random(seed)
    content = Content(random.Random(seed + 1))
    candidates = [e for e in tree.entries if e.size > 0 and not e.path.startswith("large/")]
    chosen = rng.sample(candidates, max(1, round(len(candidates) * fraction)))
    changed = 0
    for entry in chosen:
        length = min(entry.size, EDIT_REGION)
        offset = rng.randrange(entry.size - length + 1)
        _edit(os.path.join(tree.root, entry.path), offset, content.of_kind(entry.kind, length))
        changed += length
    entries = list(tree.entries)
    appended_to = None
    if tree.spec.large_files:
        first = entries[0]
        with open(os.path.join(tree.root, first.path), "ab") as fh:
            fh.write(content.text(APPEND_BYTES))
        entries[0] = FileEntry(first.path, first.size + APPEND_BYTES, first.kind)
        changed += APPEND_BYTES
        appended_to = first.path
    return Tree(tree.spec, tree.root, tuple(entries)), Change(len(chosen), changed, appended_to)


def walk_files(root: str) -> Iterator[str]:
    """Every regular file under ``root`` (absolute paths, depth first, sorted)."""
    with os.scandir(root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from walk_files(entry.path)
        elif entry.is_file(follow_symlinks=False):
            yield entry.path
