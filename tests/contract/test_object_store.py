"""One conformance suite every object-store backend passes."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tenure.objects import ObjectMissingError, ObjectStore, decode, encode, open_object_store
from tenure.objects.codec import CorruptObjectError


@pytest.fixture(
    params=["file", pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("s3", marks=pytest.mark.s3)]
)
def backend(request, tmp_path) -> Iterator[ObjectStore]:  # type: ignore[no-untyped-def]
    if request.param == "file":
        store = open_object_store(f"file://{tmp_path}/objects")
    elif request.param == "s3":
        from tests.support.s3_server import new_s3_url

        store = open_object_store(new_s3_url(request.getfixturevalue("s3_endpoint")))
    else:
        from tests.conftest import new_pg_schema_url

        store = open_object_store(new_pg_schema_url())
    yield store
    store.close()


def test_put_get_round_trip(backend: ObjectStore) -> None:
    items = [encode(os.urandom(n)) for n in (0, 1, 1000, 300_000)]
    assert backend.put_many(items) == 4
    for oid, payload in items:
        assert backend.get(oid) == payload


def test_put_is_idempotent_and_never_overwrites(backend: ObjectStore) -> None:
    oid, payload = encode(b"hello")
    assert backend.put_many([(oid, payload)]) == 1
    assert backend.put_many([(oid, b"something else")]) == 0
    assert decode(oid, backend.get(oid)) == b"hello"


def test_duplicates_in_one_batch_count_once(backend: ObjectStore) -> None:
    item = encode(b"same")
    assert backend.put_many([item, item, item]) == 1


def test_has_many_answers_for_a_batch(backend: ObjectStore) -> None:
    stored = [encode(f"o{i}".encode()) for i in range(50)]
    backend.put_many(stored)
    absent = [encode(f"x{i}".encode())[0] for i in range(50)]
    assert backend.has_many([o for o, _ in stored] + absent) == {o for o, _ in stored}
    assert backend.has_many([]) == set()


def test_missing_object_raises_object_missing(backend: ObjectStore) -> None:
    with pytest.raises(ObjectMissingError) as info:
        backend.get("0" * 64)
    assert info.value.code == "object-missing"


def test_list_and_delete(backend: ObjectStore) -> None:
    stored = [encode(f"d{i}".encode()) for i in range(10)]
    backend.put_many(stored)
    listed = {oid for oid, _ in backend.list_ids()}
    assert {o for o, _ in stored} <= listed
    assert backend.delete_many([stored[0][0], stored[1][0], "f" * 64]) == 2
    assert backend.has_many([o for o, _ in stored]) == {o for o, _ in stored[2:]}


def test_the_first_store_bound_stays_and_is_not_an_object(backend: ObjectStore) -> None:
    from tenure.objects import BoundStore

    assert backend.bound_store() is None
    first, second = BoundStore("store-1", "sqlite:///a.db"), BoundStore("store-2", "postgresql://u:***@h/db")
    assert backend.bind_store(first) == first
    assert backend.bind_store(second) == first, "a second store replaced the first"
    assert backend.bound_store() == first
    assert list(backend.list_ids()) == []  # the record is not content: GC and lists never see it


def test_decode_detects_corruption() -> None:
    oid, payload = encode(b"payload")
    other_oid, other = encode(b"other")
    with pytest.raises(CorruptObjectError):
        decode(oid, other)
    with pytest.raises(CorruptObjectError):
        decode(oid, b"not zstd at all")
    assert decode(other_oid, other) == b"other"


def test_local_object_lives_at_its_content_address_read_only_with_no_temp_file_left(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The folder layout of docs/snapshots-format.md. Durability (the object file and its folder fsynced
    before put_many returns) is not visible in the files afterwards; tests/integration/durability/ records the
    system calls of a put and checks it, and fails with each of those fsyncs removed
    (tests/integration/durability/test_mutants.py)."""
    import stat

    store = open_object_store(f"file://{tmp_path}/o")
    oid, payload = encode(b"x" * 100)
    assert store.put_many([(oid, payload)]) == 1
    path = tmp_path / "o" / oid[:2] / oid
    assert path.read_bytes() == payload
    assert stat.S_IMODE(path.stat().st_mode) & 0o222 == 0, "objects are immutable: no write bit"
    assert sorted(os.listdir(tmp_path / "o")) == sorted([oid[:2], "tmp"])
    assert not os.listdir(tmp_path / "o" / "tmp"), "no temp files remain after an acknowledged write"


def test_unknown_url_is_a_configuration_error() -> None:
    from tenure.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as info:
        open_object_store("ftp://nowhere")
    assert info.value.code == "bad-objects-url"
