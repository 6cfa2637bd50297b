"""Build → restore gives back exactly the folder: bytes, modes, mtimes, symlinks, hard links, empty folders.

The random trees use names up to 255 bytes, every kind of mode (0o000 files
and folders when running as root, which can still read them; setuid, setgid
and sticky bits), mtimes from 1901 to 2262 (before 1970 and after 2038, to
the nanosecond) and hard links across folders. Example counts stay modest;
under ``CI=true`` the ``ci`` profile of ``tests/conftest.py`` makes them
derandomized and gives each example a deadline.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tenure.objects import ObjectStore
from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree, iter_tree, restore_tree, tree_closure, verify_tree
from tenure.snapshots.fsutil import force_rmtree
from tests.support.folders import PAST_NS, describe, make_sample_tree, overrides_file_permissions, random_bytes

ODD_NAMES = [
    b"-rf",
    b"--",
    b"with space",
    b" lead",
    b"new\nline",
    b"tab\tbed",
    b".hidden",
    b"\xff\xfe raw",
    "ünïcødé ✓".encode(),
    "日本語".encode(),
    b"back\\slash",
    b"*?[glob]",
    b"x" * 200,
]


def _clean(name: bytes) -> bytes:
    """A legal file name from any bytes."""
    name = name.replace(b"/", b"_").replace(b"\0", b"_")[:255]
    return b"dot" + name if name in (b".", b"..") else name


AS_ROOT = overrides_file_permissions()  # root that reads and writes whatever the mode bits
LONG_NAMES = st.builds(
    lambda n, unit: (unit * 255)[:n],
    st.integers(240, 255),
    st.sampled_from([b"n", "é".encode(), "日".encode(), b"x-y"]),
)  # may end mid-character
NAMES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).map(os.fsencode),
    st.binary(min_size=1, max_size=12),
    st.sampled_from(ODD_NAMES),
    LONG_NAMES,
).map(_clean)
EPOCH_2038 = 2**31 * 10**9
MTIMES = st.one_of(
    st.integers(10**18, 1_700_000_000 * 10**9),
    st.just(PAST_NS),
    st.integers(-EPOCH_2038, -1),  # 1901-12-13 .. 1969-12-31T23:59:59.999999999
    st.integers(EPOCH_2038, 2**63 - 1),  # 2038-01-19 .. 2262-04-11 (the i64 limit)
    st.sampled_from([-1, 0, EPOCH_2038 - 1, EPOCH_2038, -EPOCH_2038]),
)
BIG_SIZES = [(1 << 20) - 1, 1 << 20, (2 << 20) + 12345, 5 << 20]
SIZES = st.one_of(*[st.integers(0, 3000)] * 6, st.sampled_from([0, 65536]), st.sampled_from(BIG_SIZES))


@dataclass(frozen=True)
class FileSpec:
    size: int
    seed: int
    mode: int
    mtime: int


@dataclass(frozen=True)
class LinkSpec:
    target: bytes
    mtime: int


@dataclass(frozen=True)
class DirSpec:
    entries: dict[bytes, FileSpec | LinkSpec | DirSpec]
    mode: int
    mtime: int


FILE_MODES = [0o644, 0o755, 0o600, 0o444, 0o4755, 0o2711, 0o1644, 0o7777] + ([0o000, 0o200] if AS_ROOT else [])
FILES = st.builds(FileSpec, SIZES, st.integers(0, 2**32), st.sampled_from(FILE_MODES), MTIMES)
LINKS = st.builds(LinkSpec, st.one_of(NAMES, st.sampled_from([b"../up", b"/etc/passwd", b"a/b/c", b"."])), MTIMES)
DIR_MODES = st.sampled_from([0o755, 0o700, 0o555, 0o1777, 0o2775, 0o7777] + ([0o000, 0o311] if AS_ROOT else []))


def _dirs(children: st.SearchStrategy, min_size: int = 0) -> st.SearchStrategy:  # type: ignore[type-arg]
    return st.builds(DirSpec, st.dictionaries(NAMES, children, min_size=min_size, max_size=8), DIR_MODES, MTIMES)


EMPTY_DIRS = st.builds(DirSpec, st.just({}), DIR_MODES, MTIMES)
ENTRIES = st.recursive(st.one_of(FILES, FILES, LINKS, EMPTY_DIRS), lambda c: _dirs(c, 1), max_leaves=30)
TREES = _dirs(ENTRIES, min_size=4)
DEEP = st.builds(lambda depth, leaf: _chain(depth, leaf), st.integers(20, 120), FILES)


def _chain(depth: int, leaf: FileSpec) -> DirSpec:
    spec = DirSpec({b"leaf": leaf}, 0o755, PAST_NS)
    for _ in range(depth):
        spec = DirSpec({b"d": spec}, 0o755, PAST_NS)
    return spec


def materialize(spec: DirSpec, path: bytes, files: list[bytes]) -> None:
    """Create ``spec`` at ``path``; folder modes and mtimes last (deepest first)."""
    for name, entry in spec.entries.items():
        child = os.path.join(path, name)
        if isinstance(entry, FileSpec):
            with open(child, "wb") as fh:
                fh.write(random_bytes(entry.size, entry.seed))
            os.chmod(child, entry.mode)
            os.utime(child, ns=(entry.mtime, entry.mtime))
            files.append(child)
        elif isinstance(entry, LinkSpec):
            os.symlink(entry.target, child)
            os.utime(child, ns=(entry.mtime, entry.mtime), follow_symlinks=False)
        else:
            os.mkdir(child)
            materialize(entry, child, files)


def finish_dirs(spec: DirSpec, path: bytes) -> None:
    for name, entry in spec.entries.items():
        if isinstance(entry, DirSpec):
            finish_dirs(entry, os.path.join(path, name))
    os.chmod(path, spec.mode)
    os.utime(path, ns=(spec.mtime, spec.mtime))


def _make(base: str, spec: DirSpec, links: list[tuple[int, int, bytes]]) -> bytes:
    src = os.fsencode(os.path.join(base, "src"))
    os.mkdir(src)
    files: list[bytes] = []
    materialize(spec, src, files)
    for source, folder_of, name in links:
        if not files:
            break
        target = files[source % len(files)]
        new = os.path.join(os.path.dirname(files[folder_of % len(files)]), (b"hl-" + name)[:255])
        if not os.path.lexists(new):
            os.link(target, new)
    finish_dirs(spec, src)
    return src


def longest_path(spec: DirSpec) -> int:
    """An upper bound of the relative paths ``spec`` creates, in bytes (a hard link may add 255 anywhere)."""
    longest = 255
    for name, entry in spec.entries.items():
        longest = max(longest, len(name) + (1 + longest_path(entry) if isinstance(entry, DirSpec) else 0))
    return longest


def check_round_trip(store: ObjectStore, base: str, src: bytes) -> None:
    before = describe(src)
    built = build_tree(os.fsdecode(src), store, index_path=os.path.join(base, "idx"), workers=2)
    assert built.files == sum(1 for e in before.entries.values() if e[0] == "file")
    assert built.root in built.objects
    assert tree_closure(built.root, store) == built.objects
    dest = os.path.join(base, "dest")
    restored = restore_tree(
        built.root, store, dest, index_path=os.path.join(base, "idx-dest"), durable=False, keep_special_bits=True
    )
    assert restored.complete and restored.files == built.files and restored.special_bits_dropped == ()
    after = describe(dest)
    assert after.entries == before.entries
    assert after.inode_groups == before.inode_groups
    again = build_tree(dest, store, index_path=os.path.join(base, "idx-dest"))
    assert again.root == built.root, "checking in a fresh restore gives the same root"
    assert verify_tree(built.root, store).ok

    plain = os.path.join(base, "plain")  # the default restore: everything but setuid, setgid, sticky on files
    restore_tree(built.root, store, plain, durable=False)
    assert describe(plain).entries == {rel: _without_special_bits(e) for rel, e in before.entries.items()}
    force_rmtree(plain)


def _without_special_bits(entry: tuple[object, ...]) -> tuple[object, ...]:
    kind, mode, *rest = entry
    if kind in ("file", "dir"):
        assert isinstance(mode, int)
        return (kind, mode & (0o777 if kind == "file" else 0o1777), *rest)
    return entry


ROUND_TRIP_SETTINGS = settings(
    max_examples=30,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@ROUND_TRIP_SETTINGS
@given(spec=TREES, links=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99), NAMES), max_size=10))
def test_random_trees_round_trip(tmp_path, spec: DirSpec, links: list[tuple[int, int, bytes]]) -> None:  # type: ignore[no-untyped-def]
    base = str(tmp_path / uuid.uuid4().hex)
    assume(len(base) + 64 + longest_path(spec) < 4000)  # the test builds the folder by path (PATH_MAX)
    store = LocalObjectStore(str(tmp_path / "objects"))
    os.mkdir(base)
    try:
        check_round_trip(store, base, _make(base, spec, links))
    finally:
        force_rmtree(base)


@settings(ROUND_TRIP_SETTINGS, max_examples=5)
@given(spec=DEEP)
def test_deep_nesting_round_trips(tmp_path, spec: DirSpec) -> None:  # type: ignore[no-untyped-def]
    store = LocalObjectStore(str(tmp_path / "objects"))
    base = str(tmp_path / uuid.uuid4().hex)
    os.mkdir(base)
    try:
        check_round_trip(store, base, _make(base, spec, []))
    finally:
        force_rmtree(base)


def test_sample_tree_round_trips_with_every_kind_of_entry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src")
    make_sample_tree(src)
    store = LocalObjectStore(str(tmp_path / "objects"))
    check_round_trip(store, str(tmp_path), os.fsencode(src))
    listed = {e.path: e for e in iter_tree(build_tree(src, store).root, store)}
    assert listed["dangling"].kind == "symlink" and listed["dangling"].target == "does/not/exist"
    assert listed["empty/nested-empty"].kind == "dir"
    assert listed["src/main.py"].mode == 0o755
    assert {listed["hard-main"].link, listed["src/main.py"].link} == {"hard-main", None}


def test_odd_names_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = os.fsencode(str(tmp_path / "src"))
    os.mkdir(src)
    for i, name in enumerate(ODD_NAMES):
        os.mkdir(os.path.join(src, name))
        with open(os.path.join(src, name, name), "wb") as fh:
            fh.write(b"content %d" % i)
    store = LocalObjectStore(str(tmp_path / "objects"))
    check_round_trip(store, str(tmp_path), src)


def test_empty_folder_round_trips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    os.utime(src, ns=(PAST_NS, PAST_NS))
    store = LocalObjectStore(str(tmp_path / "objects"))
    check_round_trip(store, str(tmp_path), os.fsencode(str(src)))


def _fd_describe(root: str) -> dict[str, tuple[object, ...]]:
    """Like ``describe``, through folder descriptors, so paths may exceed PATH_MAX."""
    out: dict[str, tuple[object, ...]] = {}
    for folder, _, names, dir_fd in os.fwalk(root):
        rel = os.path.relpath(folder, root)
        st = os.stat(dir_fd)
        out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
        for name in names:
            st = os.lstat(name, dir_fd=dir_fd)
            if stat.S_ISLNK(st.st_mode):
                out[os.path.join(rel, name)] = ("symlink", os.readlink(name, dir_fd=dir_fd), st.st_mtime_ns)
            else:
                with os.fdopen(os.open(name, os.O_RDONLY, dir_fd=dir_fd), "rb") as fh:
                    out[os.path.join(rel, name)] = (
                        "file",
                        stat.S_IMODE(st.st_mode),
                        st.st_mtime_ns,
                        st.st_ino,
                        fh.read(),
                    )
    inodes = {e[3] for e in out.values() if e[0] == "file"}
    numbered = {
        ino: i
        for i, ino in enumerate(
            sorted(inodes, key=lambda n: min(k for k, e in out.items() if e[0] == "file" and e[3] == n))
        )
    }
    return {k: (e[:3] + (numbered[e[3]],) + e[4:] if e[0] == "file" else e) for k, e in out.items()}


def test_paths_longer_than_path_max_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The build opens nothing by path, so it stores such trees; restore must write them back, not fail."""
    src = tmp_path / "src"
    src.mkdir()
    fd = os.open(src, os.O_RDONLY)
    try:
        for i in range(24):  # 24 × 250 bytes: well past PATH_MAX (4096)
            name = f"d{i:02d}" + "x" * 247
            os.mkdir(name, 0o750 if i % 2 else 0o755, dir_fd=fd)
            if i in (12, 23):
                w = os.open(f"file-{i}", os.O_WRONLY | os.O_CREAT, 0o640, dir_fd=fd)
                os.write(w, random_bytes((2 << 20) if i == 23 else 100, i))  # one chunked, one packed
                os.close(w)
                os.symlink("../elsewhere", f"link-{i}", dir_fd=fd)
                os.link(f"file-{i}", f"hard-{i}", src_dir_fd=fd, dst_dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.mkdir("empty", dir_fd=fd)
    finally:
        os.close(fd)
    store = LocalObjectStore(str(tmp_path / "objects"))
    built = build_tree(str(src), store)
    assert built.files == 4
    dest = tmp_path / "dest"
    restored = restore_tree(built.root, store, str(dest), index_path=str(tmp_path / "idx"))
    assert restored.complete and restored.files == 4
    assert _fd_describe(str(dest)) == _fd_describe(str(src))
    assert build_tree(str(dest), store, index_path=str(tmp_path / "idx")).root == built.root
    force_rmtree(str(dest))
    assert not dest.exists()


def _sealed_store(folder: str) -> LocalObjectStore:
    """A folder object store with encryption at rest (a key file: no scrypt per example)."""
    from tenure.objects.crypto import KeySource, init_encryption, is_encrypted, unlock

    key_file = folder + ".key"
    if not os.path.exists(key_file):
        with open(key_file, "wb") as fh:
            fh.write(os.urandom(32))
    store = LocalObjectStore(folder)
    key = KeySource(key_file=key_file)
    if is_encrypted(store):
        unlock(store, key)
    else:
        init_encryption(store, key)
    return store


@settings(ROUND_TRIP_SETTINGS, max_examples=10)
@given(spec=TREES, links=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99), NAMES), max_size=10))
def test_random_trees_round_trip_encrypted(tmp_path, spec: DirSpec, links: list[tuple[int, int, bytes]]) -> None:  # type: ignore[no-untyped-def]
    base = str(tmp_path / uuid.uuid4().hex)
    assume(len(base) + 64 + longest_path(spec) < 4000)
    store = _sealed_store(str(tmp_path / "objects"))
    os.mkdir(base)
    try:
        check_round_trip(store, base, _make(base, spec, links))
    finally:
        force_rmtree(base)


def test_sample_tree_round_trips_encrypted_with_every_object_sealed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tenure.objects.codec import PLAIN, codec_of
    from tenure.objects.crypto import MAGIC

    src = str(tmp_path / "src")
    make_sample_tree(src)
    store = _sealed_store(str(tmp_path / "objects"))
    check_round_trip(store, str(tmp_path), os.fsencode(src))
    built = build_tree(src, store)
    plain_root = build_tree(src, LocalObjectStore(str(tmp_path / "plain-objects"))).root
    assert built.root != plain_root, "tree objects are named by the keyed id too"
    for oid in built.objects:
        payload = store.get(oid)
        assert payload.startswith(MAGIC)
        assert codec_of(store).decode(oid, payload) and oid != PLAIN.object_id(codec_of(store).decode(oid, payload))


@pytest.fixture(params=["plain", "encrypted"])
def s3_objects(request, tmp_path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectStore]:  # type: ignore[no-untyped-def]
    """An object store in a fresh bucket of the test's S3 server, encrypted (under a key file) or not.

    The encrypted one also answers every existence check from listings, in pages of 3 (the small trees of
    these tests rarely put 4 asked ids under one prefix, the threshold at which ``has_many`` lists), so
    both of its paths run under the engine.
    """
    from tenure.objects import open_object_store
    from tenure.objects import s3 as s3mod
    from tenure.objects.crypto import KeySource, init_encryption
    from tests.support.s3_server import new_s3_url

    store = open_object_store(new_s3_url(s3_endpoint, prefix="round-trip"))
    if request.param == "encrypted":
        monkeypatch.setattr(s3mod, "LIST_MIN_IDS", 1)
        monkeypatch.setattr(s3mod, "LIST_PAGE", 3)
        key_file = tmp_path / "s3.key"
        key_file.write_bytes(os.urandom(32))
        init_encryption(store, KeySource(key_file=str(key_file)))
    yield store
    store.close()


@pytest.mark.s3
@settings(ROUND_TRIP_SETTINGS, max_examples=10)
@given(spec=TREES, links=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99), NAMES), max_size=10))
def test_random_trees_round_trip_on_s3(
    tmp_path, s3_objects: ObjectStore, spec: DirSpec, links: list[tuple[int, int, bytes]]
) -> None:  # type: ignore[no-untyped-def]
    """The same property with the objects in an S3 bucket (moto's server), plain and encrypted; fewer
    examples, since every object is an HTTP request. The examples share one bucket, as a repository does."""
    base = str(tmp_path / uuid.uuid4().hex)
    assume(len(base) + 64 + longest_path(spec) < 4000)
    os.mkdir(base)
    try:
        check_round_trip(s3_objects, base, _make(base, spec, links))
    finally:
        force_rmtree(base)


@pytest.mark.s3
def test_sample_tree_round_trips_on_s3(tmp_path, s3_objects: ObjectStore) -> None:  # type: ignore[no-untyped-def]
    """Every kind of entry, once, on S3; encrypted, every object in the bucket is sealed."""
    from tenure.objects.codec import codec_of
    from tenure.objects.crypto import MAGIC

    src = str(tmp_path / "src")
    make_sample_tree(src)
    check_round_trip(s3_objects, str(tmp_path), os.fsencode(src))
    built = build_tree(src, s3_objects)
    assert built.objects and all(
        s3_objects.get(oid).startswith(MAGIC) == codec_of(s3_objects).encrypted for oid in built.objects
    )
