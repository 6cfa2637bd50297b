"""The S3 backend against a real S3 endpoint (moto's server, tests/support/s3_server.py): conditional writes,
multipart uploads, batch existence checks, identity, set-aside, URL and error codes, and two pods that share
one bucket and one PostgreSQL store."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tenure.errors import ConfigurationError, TenureError
from tenure.objects import decode, encode, open_object_store
from tenure.objects import s3 as s3mod
from tenure.objects.s3 import S3ObjectStore
from tests.support.s3_server import REGION, new_s3_url

pytestmark = pytest.mark.s3


@pytest.fixture
def store(s3_url: str) -> Iterator[S3ObjectStore]:
    opened = S3ObjectStore(s3_url)
    yield opened
    opened.close()


def raw_client(store: S3ObjectStore) -> Any:
    return boto3.client("s3", endpoint_url=store.location.endpoint, region_name=REGION)


def record_calls(store: S3ObjectStore) -> list[str]:
    """The names of the S3 operations ``store`` sends from now on."""
    calls: list[str] = []
    store.client.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    return calls


def test_conditional_put_never_overwrites_an_existing_object(store: S3ObjectStore) -> None:
    oid, payload = encode(b"the original")
    assert store.put_many([(oid, payload)]) == 1
    calls = record_calls(store)
    assert store.put_many([(oid, b"another payload under the same key")]) == 0
    assert store._put_one((oid, b"and another, through the single-object path")) is False
    assert calls == ["PutObject", "PutObject"], "the write itself refuses: no HEAD before the PUT"
    assert decode(oid, store.get(oid)) == b"the original"
    body = raw_client(store).get_object(Bucket=store.bucket, Key=store._key(oid))["Body"].read()
    assert body == payload, "the stored object is the first one, byte for byte"


def test_an_object_written_by_someone_else_first_is_kept(store: S3ObjectStore) -> None:
    oid, payload = encode(b"written elsewhere")
    raw_client(store).put_object(Bucket=store.bucket, Key=store._key(oid), Body=payload)
    assert store.put_many([(oid, b"not it")]) == 0
    assert store.get(oid) == payload


def test_large_objects_go_up_in_parts_and_never_overwrite(
    store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3mod, "MULTIPART_THRESHOLD", 6 << 20)
    monkeypatch.setattr(s3mod, "PART_SIZE", 5 << 20)
    oid, payload = encode(os.urandom(11 << 20))
    assert len(payload) >= 6 << 20
    calls = record_calls(store)
    assert store.put_many([(oid, payload)]) == 1
    assert calls == ["CreateMultipartUpload"] + ["UploadPart"] * 3 + ["CompleteMultipartUpload"]
    assert store.get(oid) == payload
    assert store.put_many([(oid, os.urandom(7 << 20))]) == 0, "the completion carries If-None-Match"
    assert store.get(oid) == payload
    client = raw_client(store)
    assert not client.list_multipart_uploads(Bucket=store.bucket).get("Uploads"), "a refused upload is aborted"


def test_has_many_walks_dense_prefixes_and_heads_the_rest(store: S3ObjectStore) -> None:
    stored = [encode(f"stored {i}".encode()) for i in range(500)]
    store.put_many(stored)
    absent = [encode(f"absent {i}".encode())[0] for i in range(1100)]
    calls = record_calls(store)
    asked = [oid for oid, _ in stored] + absent
    assert store.has_many(asked) == {oid for oid, _ in stored}
    assert calls.count("ListObjectsV2") <= 256 and calls.count("HeadObject") < len(asked) // 2, (
        "dense prefixes are answered from listings, not one HEAD per id"
    )
    calls.clear()
    few = [stored[0][0], absent[0], stored[1][0]]
    assert store.has_many(few) == {stored[0][0], stored[1][0]}
    assert set(calls) == {"HeadObject"}, "a small batch is asked with HEADs"


def test_has_many_walk_is_exact_at_page_boundaries(store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3mod, "LIST_PAGE", 3)
    monkeypatch.setattr(s3mod, "LIST_MIN_IDS", 2)
    stored = sorted(f"ab{i:062x}" for i in range(0, 40, 2))  # one prefix, every second id stored
    store.put_many([(oid, b"x") for oid in stored])
    asked = sorted(f"ab{i:062x}" for i in range(40)) + ["ab" + "f" * 62, "ab"]
    assert store.has_many(asked) == set(stored)
    assert store.has_many(stored[5:9]) == set(stored[5:9])


def test_identity_is_written_once_and_racing_writers_agree(s3_url: str) -> None:
    stores = [S3ObjectStore(s3_url) for _ in range(4)]
    assert stores[0].identity() is None
    found: list[str] = []
    threads = [threading.Thread(target=lambda s=s: found.append(s.ensure_identity())) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 1 and len(found) == 4
    assert all(s.identity() == found[0] for s in stores)
    for s in stores:
        s.close()


def test_set_aside_moves_only_the_bad_bytes_out_of_sight(store: S3ObjectStore) -> None:
    good_oid, good = encode(b"good")
    bad_oid, _ = encode(b"meant to be this")
    store.put_many([(good_oid, good), (bad_oid, b"garbage")])
    assert store.set_aside([(good_oid, b"not what is stored"), (bad_oid, b"garbage")]) == 1
    assert store.has_many([good_oid, bad_oid]) == {good_oid}
    listed = raw_client(store).list_objects_v2(Bucket=store.bucket, Prefix=store._corrupt)["Contents"]
    assert [entry["Key"].split("/")[-1].split(".")[0] for entry in listed] == [bad_oid]
    _, right = encode(b"meant to be this")
    assert store.put_many([(bad_oid, right)]) == 1, "a known-bad object is a missing one: stored afresh"


def test_url_refuses_secrets_and_unknown_parameters(s3_endpoint: str) -> None:
    with pytest.raises(ConfigurationError) as secret:
        open_object_store(f"s3://AKIAEXAMPLE:hunter2@bucket/p?endpoint={s3_endpoint}")
    assert secret.value.code == "credentials-in-objects-url"
    assert "hunter2" not in str(secret.value)
    with pytest.raises(ConfigurationError) as echoed:
        open_object_store("s3://bucket/p?endpoint=http://AKIAEXAMPLE:hunter2@host:9000&unknown=1")
    assert echoed.value.code == "bad-objects-url" and "hunter2" not in str(echoed.value)
    with pytest.raises(ConfigurationError) as in_endpoint:
        open_object_store("s3://bucket/p?endpoint=http://AKIAEXAMPLE:hunter2@host:9000")
    assert in_endpoint.value.code == "credentials-in-objects-url" and "hunter2" not in str(in_endpoint.value)
    for bad in ("s3:///prefix", "s3://bucket/p?secret_key=x", "s3://bucket?endpoint=ftp://x", "s3://b?max_workers=0"):
        with pytest.raises(ConfigurationError) as refused:
            open_object_store(bad)
        assert refused.value.code == "bad-objects-url", bad


def test_missing_bucket_and_unreachable_endpoint_have_their_codes(s3_endpoint: str) -> None:
    with pytest.raises(TenureError) as missing:
        open_object_store(f"s3://no-such-bucket-here/p?endpoint={s3_endpoint}&region={REGION}")
    assert missing.value.code == "object-store-bucket-missing" and not missing.value.retryable
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TenureError) as unreachable:
        open_object_store(f"s3://bucket/p?endpoint=http://127.0.0.1:{port}&region={REGION}&max_attempts=1")
    assert unreachable.value.code == "object-store-unreachable" and unreachable.value.retryable


def test_refusals_by_the_service_have_their_codes(store: S3ObjectStore) -> None:
    oid, payload = encode(b"x")
    with Stubber(store.client) as stub:
        stub.add_client_error("get_object", "AccessDenied", http_status_code=403)
        with pytest.raises(TenureError) as denied:
            store.get(oid)
        assert denied.value.code == "object-store-access-denied"
        stub.add_client_error("put_object", "AccessDenied", http_status_code=403)
        with pytest.raises(TenureError) as read_only:
            store.put_many([(oid, payload)])
        assert read_only.value.code == "object-store-read-only", "as for a read-only folder: reads still work"
        stub.add_client_error("put_object", "InvalidAccessKeyId", http_status_code=403)
        with pytest.raises(TenureError) as refused:
            store.put_many([(oid, payload)])
        assert refused.value.code == "object-store-access-denied"
        stub.add_client_error("put_object", "NotImplemented", http_status_code=501)
        with pytest.raises(TenureError) as unconditional:
            store.put_many([(oid, payload)])
        assert unconditional.value.code == "object-store-no-conditional-writes"
        stub.add_client_error("head_object", "SlowDown", http_status_code=503)
        with pytest.raises(TenureError) as slow:
            store.has_many([oid])
        assert slow.value.code == "object-store-unavailable" and slow.value.retryable


@pytest.mark.postgres
def test_two_pods_share_one_bucket_and_one_postgres_store(s3_endpoint: str, tmp_path: Path) -> None:
    """A checkpoint made on one pod restores on another, byte for byte: each has its own data folder."""
    from tenure.store import open_store
    from tenure.workspaces import WorkspaceService
    from tests.conftest import new_pg_schema_url
    from tests.support.trees import describe, make_tree

    db_url, objects_url = new_pg_schema_url(), new_s3_url(s3_endpoint, prefix="fleet/objects")
    opened: list[Any] = []

    def pod(name: str) -> WorkspaceService:
        store, objects = open_store(db_url), open_object_store(objects_url)
        opened.extend([store, objects])
        return WorkspaceService(store, objects, str(tmp_path / name / "data"), holder=f"pod-{name}")

    try:
        a, b = pod("a"), pod("b")
        src = str(tmp_path / "src")
        make_tree(src, files=30)
        a.create("w")
        first = a.checkpoint("w", src).snapshot
        b.restore("w", str(tmp_path / "on-b"))
        assert describe(str(tmp_path / "on-b")) == describe(src)
        with open(os.path.join(tmp_path / "on-b", "big.bin"), "ab") as fh:
            fh.write(b"written on b")
        second = b.checkpoint("w", str(tmp_path / "on-b")).snapshot
        assert second.parent_id == first.id
        a.restore("w", str(tmp_path / "back-on-a"))
        assert describe(str(tmp_path / "back-on-a")) == describe(str(tmp_path / "on-b"))
        assert a.object_store_id == b.object_store_id is not None
        assert b.verify(second.id).ok
    finally:
        for thing in opened:
            thing.close()
