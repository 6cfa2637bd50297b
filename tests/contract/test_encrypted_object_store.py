"""Encryption at rest on every backend (docs/adr/0026-encryption-at-rest.md): sealed payloads, keyed ids,
wrong and missing keys, tampering, swapped payloads, rotation without re-upload."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator

import blake3
import pytest
from click.testing import CliRunner

from tenure.errors import TenureError
from tenure.objects import ObjectStore, open_object_store
from tenure.objects.base import open_backend
from tenure.objects.codec import PLAIN, CorruptObjectError, codec_of
from tenure.objects.crypto import (
    KEY_SLOTS,
    MAGIC,
    KeySource,
    SealedCodec,
    init_encryption,
    key_slots,
    rekey,
    unlock,
)

FAST = 1 << 10  # scrypt N for tests; the default (2**15) is exercised once
PASS = KeySource(passphrase="correct horse battery staple")


@pytest.fixture(
    params=["file", pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("s3", marks=pytest.mark.s3)]
)
def url(request, tmp_path) -> str:  # type: ignore[no-untyped-def]
    if request.param == "file":
        return f"file://{tmp_path}/objects"
    if request.param == "s3":
        from tests.support.s3_server import new_s3_url

        return new_s3_url(request.getfixturevalue("s3_endpoint"))
    from tests.conftest import new_pg_schema_url

    return new_pg_schema_url()


@pytest.fixture
def encrypted(url: str) -> Iterator[ObjectStore]:
    store = open_backend(url)
    init_encryption(store, PASS, scrypt_n=FAST)
    yield store
    store.close()


def _code(fn: object) -> str:
    with pytest.raises(TenureError) as info:
        fn()  # type: ignore[operator]
    return info.value.code


def test_sealed_round_trip_with_keyed_stable_ids(url: str, encrypted: ObjectStore) -> None:
    codec = codec_of(encrypted)
    assert isinstance(codec, SealedCodec) and codec.encrypted
    contents = [b"", b"x", os.urandom(1000), b"known plaintext " * 20_000]
    items = [codec.encode(c) for c in contents]
    assert encrypted.put_many(items) == 4
    for (oid, payload), plain in zip(items, contents):
        assert oid != blake3.blake3(plain).hexdigest(), "a keyed id does not confirm known plaintext"
        stored = encrypted.get(oid)
        assert stored == payload and stored.startswith(MAGIC)
        assert b"known plaintext" not in stored
        assert codec.decode(oid, stored) == plain
    again = open_object_store(url, PASS)
    try:
        assert [codec_of(again).object_id(c) for c in contents] == [oid for oid, _ in items], "stable per repository"
        assert codec_of(again).decode(items[3][0], again.get(items[3][0])) == contents[3]
    finally:
        again.close()


def test_two_repositories_name_the_same_content_differently(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = open_backend(f"file://{tmp_path}/a"), open_backend(f"file://{tmp_path}/b")
    ida = init_encryption(a, PASS, scrypt_n=FAST).object_id(b"same")
    idb = init_encryption(b, PASS, scrypt_n=FAST).object_id(b"same")
    assert ida != idb and PLAIN.object_id(b"same") not in (ida, idb)


def test_wrong_missing_and_unwanted_keys_are_refused(url: str, encrypted: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _code(lambda: open_object_store(url)) == "key-required"
    assert _code(lambda: open_object_store(url, KeySource(passphrase="wrong"))) == "wrong-key"
    keyfile = tmp_path / "key"
    keyfile.write_bytes(os.urandom(32))
    assert _code(lambda: open_object_store(url, KeySource(key_file=str(keyfile)))) == "wrong-key"
    plain_url = f"file://{tmp_path}/plain"
    assert _code(lambda: open_object_store(plain_url, PASS)) == "not-encrypted"
    open_object_store(plain_url).close()  # no key, unencrypted: opens with the plain codec


def test_wrong_key_message_never_shows_the_passphrase(url: str, encrypted: ObjectStore) -> None:
    secret = KeySource(passphrase="hunter2-secret")
    with pytest.raises(TenureError) as info:
        open_object_store(url, secret)
    assert "hunter2" not in str(info.value) and "hunter2" not in repr(secret)
    assert info.value.hint


def test_tampered_payload_fails_authentication_and_is_never_decoded(encrypted: ObjectStore) -> None:
    codec = codec_of(encrypted)
    oid, payload = codec.encode(b"precious " * 1000)
    encrypted.put_many([(oid, payload)])
    for bad in (
        payload[:-1] + bytes([payload[-1] ^ 1]),  # the tag
        payload[:30] + bytes([payload[30] ^ 0x80]) + payload[31:],  # the ciphertext
        payload[:6] + bytes([payload[6] ^ 1]) + payload[7:],  # the nonce
        payload[:20],  # truncated
        PLAIN.encode(b"precious " * 1000)[1],  # an unsealed zstd payload
    ):
        encrypted.delete_many([oid])
        encrypted.put_many([(oid, bad)])
        with pytest.raises(CorruptObjectError) as info:
            codec.decode(oid, encrypted.get(oid))
        assert info.value.code == "object-corrupt"


def test_payloads_swapped_between_two_ids_fail(encrypted: ObjectStore) -> None:
    codec = codec_of(encrypted)
    (a, pa), (b, pb) = codec.encode(b"alpha" * 100), codec.encode(b"beta" * 100)
    encrypted.put_many([(a, pb), (b, pa)])
    for oid in (a, b):
        with pytest.raises(CorruptObjectError, match="fails authentication"):
            codec.decode(oid, encrypted.get(oid))


def _snapshot(store: ObjectStore) -> dict[str, object]:
    return {oid: created for oid, created in store.list_ids() if not oid.startswith("key.")}


def test_rotation_rewraps_only_the_key(url: str, encrypted: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    codec = codec_of(encrypted)
    items = [codec.encode(os.urandom(5000)) for _ in range(20)]
    encrypted.put_many(items)
    before = _snapshot(encrypted)
    files = {}
    if url.startswith("file://"):
        root = url[len("file://") :]
        files = {oid: os.stat(os.path.join(root, oid[:2], oid)) for oid, _ in items}
    etags = _etags(encrypted)
    assert len(etags) == (len(items) if url.startswith("s3://") else 0)
    time.sleep(0.01)

    keyfile = tmp_path / "new.key"
    keyfile.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    new = KeySource(key_file=str(keyfile))
    slot = rekey(encrypted, PASS, new, scrypt_n=FAST)
    assert key_slots(encrypted) == [slot]
    assert _code(lambda: open_object_store(url, PASS)) == "wrong-key", "the old passphrase stops working"
    reopened = open_object_store(url, new)
    try:
        assert codec_of(reopened).decode(items[0][0], reopened.get(items[0][0]))
        assert codec_of(reopened).object_id(b"x") == codec.object_id(b"x"), "same data key, same ids"
        assert _snapshot(reopened) == before, "no object was rewritten"
    finally:
        reopened.close()
    for oid, st in files.items():
        now = os.stat(os.path.join(url[len("file://") :], oid[:2], oid))
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert _etags(encrypted) == etags, "no object in the bucket was uploaded again (each seal has a fresh nonce)"


def _etags(store: ObjectStore) -> dict[str, str]:
    """The ETag of every content object of an S3 store (empty for other backends)."""
    from tenure.objects.s3 import S3ObjectStore

    if not isinstance(store, S3ObjectStore):
        return {}
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=store._objects)
    return {
        entry["Key"]: entry["ETag"]
        for page in pages
        for entry in page.get("Contents", [])
        if not entry["Key"].rsplit("/", 1)[-1].startswith("key.")
    }


def test_rotation_keeping_the_old_copy_opens_with_either(url: str, encrypted: ObjectStore) -> None:
    new = KeySource(passphrase="second")
    rekey(encrypted, PASS, new, keep_old=True, scrypt_n=FAST)
    assert len(key_slots(encrypted)) == 2
    for key in (PASS, new):
        open_object_store(url, key).close()
    rekey(encrypted, new, new, scrypt_n=FAST)
    assert len(key_slots(encrypted)) == 1
    assert _code(lambda: open_object_store(url, PASS)) == "wrong-key"


def test_init_refuses_a_repository_that_holds_objects(url: str) -> None:
    store = open_backend(url)
    try:
        store.put_many([PLAIN.encode(b"old")])
        assert _code(lambda: init_encryption(store, PASS, scrypt_n=FAST)) == "objects-not-empty"
        assert key_slots(store) == []
    finally:
        store.close()


def test_init_twice_is_refused(encrypted: ObjectStore) -> None:
    assert _code(lambda: init_encryption(encrypted, PASS, scrypt_n=FAST)) == "objects-not-empty"


def test_key_object_records_scrypt_parameters_and_no_secret(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_backend(f"file://{tmp_path}/objects")
    init_encryption(store, KeySource(passphrase="pw-default-cost"))  # the default scrypt cost
    body = json.loads(store.get(KEY_SLOTS[0]))
    assert body["kek"]["type"] == "scrypt" and body["kek"]["n"] == 1 << 15 and body["kek"]["r"] == 8
    assert b"pw-default-cost" not in store.get(KEY_SLOTS[0])
    assert len(base64.b64decode(body["wrapped"])) == 32 + 16
    assert isinstance(
        unlock(open_backend(f"file://{tmp_path}/objects"), KeySource(passphrase="pw-default-cost")), SealedCodec
    )


def test_bad_key_files_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_backend(f"file://{tmp_path}/objects")
    short = tmp_path / "short"
    short.write_bytes(b"too short")
    assert _code(lambda: init_encryption(store, KeySource(key_file=str(short)))) == "bad-key-file"
    assert _code(lambda: init_encryption(store, KeySource(key_file=str(tmp_path / "absent")))) == "bad-key-file"
    raw = tmp_path / "raw"
    raw.write_bytes(os.urandom(32))
    init_encryption(store, KeySource(key_file=str(raw)))
    open_object_store(f"file://{tmp_path}/objects", KeySource(key_file=str(raw))).close()


def test_gc_never_collects_key_objects(url: str, encrypted: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tenure.snapshots.gc import collect
    from tenure.store import open_store

    objects, codec = encrypted, codec_of(encrypted)
    objects.put_many([codec.encode(b"unreferenced")])
    time.sleep(0.05)
    store = open_store(f"sqlite:///{tmp_path}/tenure.db")
    try:
        result = collect(store, objects, grace_s=0.0)
    finally:
        store.close()
    assert result.removed == 1
    assert key_slots(objects) == [KEY_SLOTS[0]]
    open_object_store(url, PASS).close()


def test_cli_init_status_rekey(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tenure.cli.main import root

    monkeypatch.setenv("TENURE_PASSPHRASE", "first passphrase")
    base = ["--data", str(tmp_path / "data"), "--json"]

    def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
        result = CliRunner().invoke(root, [*base, *args], obj={}, env=env)
        assert "first passphrase" not in result.output and "second" not in result.output
        return result.exit_code, json.loads(result.output or "{}")

    code, out = run("objects", "init", "--encrypt")
    assert code == 0 and out["encrypted"] is True
    code, out = run("objects", "status")
    assert out["encrypted"] is True and out["key_objects"] == ["key.0"]
    src = tmp_path / "src"
    src.mkdir()
    (src / "secret.txt").write_bytes(b"top secret contents\n" * 100)
    assert run("workspace", "create", "w")[0] == 0
    code, out = run("workspace", "checkpoint", "w", "--from", str(src))
    assert code == 0, out
    for path in (tmp_path / "data" / "objects").rglob("*"):
        if path.is_file() and len(path.name) == 64:
            assert path.read_bytes().startswith(MAGIC) and b"top secret" not in path.read_bytes()
    code, out = run("gc", env={"TENURE_PASSPHRASE": "nope"})
    assert code == 2 and out["error"]["code"] == "wrong-key"
    code, out = run("gc", env={"TENURE_PASSPHRASE": ""})
    assert code == 2 and out["error"]["code"] == "key-required"
    code, out = run("objects", "rekey", env={"TENURE_NEW_PASSPHRASE": "second"})
    assert code == 0 and out["key_objects"] == [out["key_object"]]
    code, out = run("workspace", "restore", "w", "--to", str(tmp_path / "back"))
    assert code == 2 and out["error"]["code"] == "wrong-key"
    code, out = run("workspace", "restore", "w", "--to", str(tmp_path / "back"), env={"TENURE_PASSPHRASE": "second"})
    assert code == 0, out
    assert (tmp_path / "back" / "secret.txt").read_bytes() == (src / "secret.txt").read_bytes()


@pytest.mark.s3
def test_cli_init_status_rekey_on_s3(tmp_path, s3_endpoint: str) -> None:  # type: ignore[no-untyped-def]
    """The same commands on an s3:// object store: init under a key file, status, a checkpoint whose objects are
    sealed in the bucket, rotation to a passphrase, and a restore that only the new key opens."""
    import boto3

    from tenure.cli.main import root
    from tests.support.s3_server import REGION, new_s3_url

    objects_url = new_s3_url(s3_endpoint, prefix="sealed")
    keyfile = tmp_path / "first.key"
    keyfile.write_bytes(os.urandom(32))
    base = ["--data", str(tmp_path / "data"), "--objects", objects_url, "--json"]
    first = {"TENURE_KEY_FILE": str(keyfile), "TENURE_PASSPHRASE": ""}

    def run(*args: str, env: dict[str, str]) -> tuple[int, dict[str, object]]:
        result = CliRunner().invoke(root, [*base, *args], obj={}, env=env)
        assert "second passphrase" not in result.output
        return result.exit_code, json.loads(result.output or "{}")

    nothing = {"TENURE_KEY_FILE": "", "TENURE_PASSPHRASE": ""}
    code, out = run("objects", "status", env=nothing)
    assert code == 0 and out["encrypted"] is False and out["key_objects"] == []
    code, out = run("objects", "init", "--encrypt", env=first)
    assert code == 0 and out["encrypted"] is True, out
    code, out = run("objects", "init", "--encrypt", env=first)
    assert code != 0 and out["error"]["code"] == "objects-not-empty", "encryption is chosen once, at creation"
    code, out = run("objects", "status", env=nothing)
    assert code == 0 and out["encrypted"] is True and out["key_objects"] == ["key.0"]
    assert out["identity"]
    src = tmp_path / "src"
    src.mkdir()
    (src / "secret.txt").write_bytes(b"top secret contents\n" * 100)
    assert run("workspace", "create", "w", env=first)[0] == 0
    code, out = run("workspace", "checkpoint", "w", "--from", str(src), env=first)
    assert code == 0, out

    bucket, prefix = objects_url[len("s3://") :].split("/", 1)[0], "sealed/objects/"
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name=REGION)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    content = [entry["Key"] for entry in listed if not entry["Key"][len(prefix) :].startswith("key.")]
    assert content, "the checkpoint stored objects in the bucket"
    for key in content:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert body.startswith(MAGIC) and b"top secret" not in body

    code, out = run("workspace", "restore", "w", "--to", str(tmp_path / "none"), env=nothing)
    assert code == 2 and out["error"]["code"] == "key-required"
    code, out = run("objects", "rekey", env={**first, "TENURE_NEW_PASSPHRASE": "second passphrase"})
    assert code == 0 and out["key_objects"] == [out["key_object"]] != ["key.0"], out
    slot = out["key_object"]
    code, out = run("objects", "status", env=nothing)
    assert code == 0 and out["encrypted"] is True and out["key_objects"] == [slot], "the old wrapped copy is gone"
    code, out = run("workspace", "restore", "w", "--to", str(tmp_path / "back"), env=first)
    assert code == 2 and out["error"]["code"] == "wrong-key"
    second = {"TENURE_KEY_FILE": "", "TENURE_PASSPHRASE": "second passphrase"}
    code, out = run("workspace", "restore", "w", "--to", str(tmp_path / "back"), env=second)
    assert code == 0, out
    assert (tmp_path / "back" / "secret.txt").read_bytes() == (src / "secret.txt").read_bytes()
