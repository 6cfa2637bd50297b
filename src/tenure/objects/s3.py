"""Object store in an S3-compatible bucket: ``s3://BUCKET/PREFIX?endpoint=…&region=…``.

Layout under the prefix: ``objects/<oid>`` (the id first, so keys spread
over the service's partitions), the identity ``tenure-objects.json``, the
control-plane store it is bound to ``tenure-objects-store.json`` (written once
by the first store that binds it) and objects found corrupt under
``corrupt/<oid>.<random>``.

* **Never an overwrite.** Every object is written with ``If-None-Match: *``
  (a single PUT, or a multipart upload whose completion carries it, for
  payloads from ``MULTIPART_THRESHOLD`` up). A ``412 PreconditionFailed``
  means the id is stored already, which for content-addressed objects is
  success. A service that refuses the header fails with
  ``object-store-no-conditional-writes``; one that ignores it is not
  supported (docs/operations.md).
* **Durable when acknowledged.** S3 acknowledges a PUT once it is stored
  durably, so ``sync`` has nothing to do.
* **Batches.** ``put_many``, ``get``-free existence checks and deletes run on
  a bounded thread pool (``max_workers``, default 16). ``has_many`` walks a
  sorted listing for the ids of a 2-hex-digit prefix that holds several of
  them, and asks with HEAD for the rest (docs/adr/0025-s3-object-store.md).
* **Retries.** botocore's adaptive retry mode: exponential backoff with
  jitter and a client-side rate limit on throttling (``max_attempts``,
  default 5).
* **No secrets in the URL.** Credentials come from botocore's standard chain
  (environment, shared config and credential files, a ``profile``, instance
  or container roles). A URL with ``user:password@`` is refused with
  ``credentials-in-objects-url``.

Failures become ``object-store-bucket-missing``, ``object-store-access-denied``
(a write refused by policy is ``object-store-read-only``, as for a folder),
``object-store-unreachable`` or ``object-store-unavailable``.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

from tenure.errors import ConfigurationError, ObjectStoreError

try:
    import boto3
    import botocore.exceptions
    from botocore.config import Config
except ImportError as missing:  # pragma: no cover - the s3 extra is part of the test extra
    raise ConfigurationError(
        f"s3:// object stores need boto3, which is not installed ({missing})",
        hint="pip install 'tenure[s3]'",
        code="s3-client-missing",
    ) from missing

from tenure.objects.base import CORRUPT_FOLDER, ObjectMissingError, ObjectStoreReadOnlyError
from tenure.objects.identity import IDENTITY_FILE, STORE_FILE, BadIdentityError, JsonRecords

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
else:
    S3Client = Any

T = TypeVar("T")
R = TypeVar("R")

#: Payloads from this size up are written as a multipart upload (parts of ``PART_SIZE``).
MULTIPART_THRESHOLD = 64 << 20
PART_SIZE = 16 << 20
#: ``has_many`` walks a listing for a 2-hex-digit prefix holding at least this many of the asked ids.
LIST_MIN_IDS = 4
LIST_PAGE = 1000
DELETE_BATCH = 1000
#: What a failed write of each record (tenure.objects.identity) could not do.
_CREATING = {
    IDENTITY_FILE: "give the object store its identity",
    STORE_FILE: "record the store the object store is bound to",
}
#: The URL's query parameters.
PARAMETERS = ("endpoint", "region", "profile", "addressing", "max_workers", "max_attempts")


class BucketMissingError(ObjectStoreError):
    """The bucket the URL names does not exist (or is not visible at that endpoint and region)."""

    code = "object-store-bucket-missing"
    retryable = False
    default_hint = "create the bucket, or correct the bucket, endpoint= or region= of --objects"


class AccessDeniedError(ObjectStoreError):
    """The S3 service refused the credentials, or found none, or the policy refuses a read or a listing."""

    code = "object-store-access-denied"
    retryable = False
    default_hint = (
        "give tenure credentials through the standard AWS environment variables, shared credential files or a"
        " profile, with s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on the bucket and prefix"
    )


class EndpointUnreachableError(ObjectStoreError):
    """No answer from the S3 endpoint (refused, timed out, name not resolved)."""

    code = "object-store-unreachable"
    default_hint = (
        "check the endpoint= of --objects and that the S3 service runs and is reachable from here, then retry"
    )


class NoConditionalWritesError(ObjectStoreError):
    """The S3-compatible service refuses ``If-None-Match`` on writes, which tenure needs to never overwrite."""

    code = "object-store-no-conditional-writes"
    retryable = False
    default_hint = "use an S3 service (or a newer version) that supports conditional writes (If-None-Match: *)"


def _bad_url(url: str, why: str) -> ConfigurationError:
    shown = re.sub(r"//[^/?#@]*@", "//***@", url)  # an endpoint= with credentials is refused, never echoed
    return ConfigurationError(
        f"object store URL {shown!r}: {why}",
        hint="use s3://BUCKET/PREFIX?endpoint=http://HOST:PORT&region=REGION (credentials from the environment)",
        code="bad-objects-url",
    )


class S3Location:
    """A parsed ``s3://`` URL: bucket, key prefix and client settings; never credentials."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "s3":
            raise _bad_url(url, "not an s3:// URL")
        if "@" in parts.netloc:
            raise ConfigurationError(
                "the object store URL carries credentials (user:password@); tenure never stores them",
                hint="remove them from --objects and give them through AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,"
                " a shared credentials file or a profile (profile=NAME or AWS_PROFILE)",
                code="credentials-in-objects-url",
            )
        if not parts.netloc:
            raise _bad_url(url, "no bucket")
        self.bucket = parts.netloc
        prefix = parts.path.strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        query: dict[str, str] = {}
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key not in PARAMETERS:
                raise _bad_url(url, f"unknown parameter {key!r} (known: {', '.join(PARAMETERS)})")
            query[key] = value
        self.endpoint = query.get("endpoint") or None
        if self.endpoint is not None:
            ep = urlsplit(self.endpoint)
            if ep.scheme not in ("http", "https") or not ep.netloc:
                raise _bad_url(url, "endpoint= must be an http:// or https:// URL")
            if ep.username or ep.password:
                raise ConfigurationError(
                    "the object store URL's endpoint carries credentials; tenure never stores them",
                    hint="give them through the standard AWS environment variables, files or a profile",
                    code="credentials-in-objects-url",
                )
        self.region = query.get("region") or None
        self.profile = query.get("profile") or None
        self.addressing = query.get("addressing") or ("path" if self.endpoint else "auto")
        if self.addressing not in ("path", "virtual", "auto"):
            raise _bad_url(url, "addressing= is path, virtual or auto")
        self.max_workers = _int_param(url, query, "max_workers", 16, 1, 256)
        self.max_attempts = _int_param(url, query, "max_attempts", 5, 1, 20)
        # The URL as given (it carries no secret): what the control-plane store records.
        self.url = url


def _int_param(url: str, query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad_url(url, f"{name}= must be a whole number") from None
    if not low <= value <= high:
        raise _bad_url(url, f"{name}= must be from {low} to {high}")
    return value


def _status(exc: botocore.exceptions.ClientError) -> tuple[str, int]:
    response: Any = exc.response
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def _is_missing(exc: botocore.exceptions.ClientError) -> bool:
    code, status = _status(exc)
    return code in ("NoSuchKey", "404", "NotFound") or (status == 404 and code != "NoSuchBucket")


def _exists_already(exc: botocore.exceptions.ClientError) -> bool:
    code, status = _status(exc)
    return code == "PreconditionFailed" or status == 412


_CREDENTIALS = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired"}
)


class S3ObjectStore(JsonRecords):
    """Objects in an S3-compatible bucket (see the module docstring)."""

    def __init__(self, url: str, *, client: S3Client | None = None) -> None:
        self.location = S3Location(url)
        self.url = self.location.url
        self.bucket = self.location.bucket
        self._objects = f"{self.location.prefix}objects/"
        self._corrupt = f"{self.location.prefix}{CORRUPT_FOLDER}/"
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        if client is None:
            try:
                session = boto3.session.Session(profile_name=self.location.profile)
                config = Config(
                    region_name=self.location.region,
                    retries={"mode": "adaptive", "max_attempts": self.location.max_attempts},
                    max_pool_connections=self.location.max_workers,
                    connect_timeout=5,
                    read_timeout=60,
                    s3=cast(Any, {"addressing_style": self.location.addressing}),
                    user_agent_extra="tenure",
                )
                client = session.client("s3", endpoint_url=self.location.endpoint, config=config)
            except botocore.exceptions.BotoCoreError as exc:
                raise self._error(exc, "set up the S3 client") from exc
        self.client: S3Client = client
        with self._failing("open the bucket"):
            self.client.head_bucket(Bucket=self.bucket)

    # ------------------------------------------------------------------ errors

    def _error(self, exc: Exception, what: str, *, write: bool = False) -> ObjectStoreError:
        where = f"s3://{self.bucket}/{self.location.prefix}"
        message = f"cannot {what} in {where}"
        if isinstance(exc, botocore.exceptions.ClientError):
            code, status = _status(exc)
            detail = f"{message}: {code or status} {exc}"
            if code == "NoSuchBucket" or (what == "open the bucket" and status == 404):
                return BucketMissingError(f"{message}: the bucket {self.bucket} does not exist", bucket=self.bucket)
            if code in _CREDENTIALS:
                return AccessDeniedError(f"{detail} (the credentials were refused)", bucket=self.bucket)
            if code == "AccessDenied" or status == 403:
                if write:
                    return ObjectStoreReadOnlyError(
                        detail,
                        bucket=self.bucket,
                        hint="grant s3:PutObject and s3:DeleteObject on the bucket and prefix, or run only"
                        " commands that read",
                    )
                return AccessDeniedError(detail, bucket=self.bucket)
            if code == "NotImplemented" or status == 501:
                return NoConditionalWritesError(detail, bucket=self.bucket)
            return ObjectStoreError(detail, bucket=self.bucket)
        if isinstance(exc, (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError)):
            return AccessDeniedError(f"{message}: no credentials found ({exc})", bucket=self.bucket)
        if isinstance(
            exc,
            (
                botocore.exceptions.EndpointConnectionError,
                botocore.exceptions.ConnectTimeoutError,
                botocore.exceptions.ProxyConnectionError,
            ),
        ):
            return EndpointUnreachableError(f"{message}: {exc}", bucket=self.bucket, endpoint=self.location.endpoint)
        return ObjectStoreError(f"{message}: {exc}", bucket=self.bucket)

    def _failing(self, what: str, *, write: bool = False) -> _Failing:
        return _Failing(self, what, write)

    # ------------------------------------------------------------------ helpers

    def _key(self, oid: str) -> str:
        return f"{self._objects}{oid}"

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``fn`` over ``items`` on the bounded pool (in this thread for one item); the first error is raised."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.location.max_workers, thread_name_prefix="tenure-s3")
            pool = self._pool
        return list(pool.map(fn, items))

    # ------------------------------------------------------------------ the contract

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        batch: dict[str, bytes] = {}
        for oid, payload in items:
            batch.setdefault(oid, payload)
        return sum(self._map(self._put_one, list(batch.items())))

    def _put_one(self, item: tuple[str, bytes]) -> bool:
        """Store one object unless its id is stored; True if this call stored it."""
        oid, payload = item
        key = self._key(oid)
        with self._failing(f"write object {oid}", write=True):
            try:
                if len(payload) >= MULTIPART_THRESHOLD:
                    self._put_multipart(key, payload)
                else:
                    self.client.put_object(Bucket=self.bucket, Key=key, Body=payload, IfNoneMatch="*")
            except botocore.exceptions.ClientError as exc:
                if _exists_already(exc):
                    return False
                if _status(exc)[0] == "ConditionalRequestConflict":  # a concurrent writer of the same id won
                    return not self._exists(key) and self._put_one(item)
                raise
        return True

    def _put_multipart(self, key: str, payload: bytes) -> None:
        """A multipart upload completed with ``If-None-Match: *`` (the transfer manager cannot pass it)."""
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        try:
            parts: list[Any] = []
            view = memoryview(payload)
            for number, start in enumerate(range(0, len(payload), PART_SIZE), start=1):
                etag = self.client.upload_part(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload,
                    PartNumber=number,
                    Body=bytes(view[start : start + PART_SIZE]),
                )["ETag"]
                parts.append({"ETag": etag, "PartNumber": number})
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
            )
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            except Exception:  # noqa: BLE001 - the first failure is the one to report; a lifecycle rule cleans up
                pass
            raise

    def get(self, oid: str) -> bytes:
        with self._failing(f"read object {oid}"):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self._key(oid))
            except botocore.exceptions.ClientError as exc:
                if _is_missing(exc):
                    raise ObjectMissingError(f"object {oid} is missing from {self.url}", oid=oid) from None
                raise
            # StreamingBody.read checks the length against Content-Length: never partial bytes.
            return response["Body"].read()

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if _is_missing(exc):
                return False
            raise
        return True

    def has_many(self, oids: Iterable[str]) -> set[str]:
        wanted = sorted(set(oids))
        if not wanted:
            return set()
        groups: dict[str, list[str]] = {}
        for oid in wanted:
            groups.setdefault(oid[:2], []).append(oid)
        dense = [group for group in groups.values() if len(group) >= LIST_MIN_IDS]
        ask = [oid for group in groups.values() if len(group) < LIST_MIN_IDS for oid in group]
        found: set[str] = set()
        with self._failing("check objects"):
            for present, left in self._map(self._walk, dense):
                found |= present
                ask += left
            found.update(oid for oid, there in zip(ask, self._map(lambda o: self._exists(self._key(o)), ask)) if there)
        return found

    def _walk(self, group: list[str]) -> tuple[set[str], list[str]]:
        """Answer sorted ids sharing a 2-digit prefix from the listing, page by page from the next unanswered id.

        A page that answers only one id says the listing is sparse there: the rest are returned to be asked
        with HEAD, so a walk never costs more requests than HEADs would.
        """
        prefix = f"{self._objects}{group[0][:2]}"
        found: set[str] = set()
        at = 0
        while at < len(group):
            page = self.client.list_objects_v2(
                Bucket=self.bucket, Prefix=prefix, StartAfter=self._key(group[at])[:-1], MaxKeys=LIST_PAGE
            )
            listed = [entry["Key"][len(self._objects) :] for entry in page.get("Contents", []) if "Key" in entry]
            last = listed[-1] if listed and page.get("IsTruncated") else None
            names = set(listed)
            begin = at
            while at < len(group) and (last is None or group[at] <= last):
                if group[at] in names:
                    found.add(group[at])
                at += 1
            if at - begin <= 1 and at < len(group):
                return found, group[at:]
        return found, []

    def list_ids(self) -> Iterator[tuple[str, datetime]]:
        with self._failing("list objects"):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._objects)
            for page in pages:
                for entry in page.get("Contents", []):
                    modified = entry.get("LastModified") or datetime.now(UTC)
                    yield entry["Key"][len(self._objects) :], modified

    def delete_many(self, oids: Iterable[str]) -> int:
        present = sorted(self.has_many(oids))
        with self._failing("delete objects", write=True):
            for start in range(0, len(present), DELETE_BATCH):
                chunk = present[start : start + DELETE_BATCH]
                response = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": self._key(oid)} for oid in chunk], "Quiet": True}
                )
                errors = response.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise ObjectStoreError(
                        f"cannot delete {len(errors)} objects in s3://{self.bucket}/{self.location.prefix}:"
                        f" {first.get('Code')} {first.get('Message')} ({first.get('Key')})",
                        bucket=self.bucket,
                    )
        return len(present)

    def sync(self) -> None:
        """Nothing to do: S3 acknowledges a write once it is durable."""

    # ------------------------------------------------------------------ identity and corrupt objects

    # identity, ensure_identity, bound_store and bind_store: JsonRecords, over the three primitives below.

    def _read_record(self, name: str, what: str) -> bytes | None:
        """The bytes stored under ``<prefix>NAME``, ``None`` when there are none; never writes."""
        with self._failing(f"read the object store's {what}"):
            try:
                return self.client.get_object(Bucket=self.bucket, Key=f"{self.location.prefix}{name}")["Body"].read()
            except botocore.exceptions.ClientError as exc:
                if _is_missing(exc):
                    return None
                raise

    def _bad_record(self, name: str, what: str) -> BadIdentityError:
        key = f"{self.location.prefix}{name}"
        return BadIdentityError(f"the {what} object s3://{self.bucket}/{key} is not valid", key=key)

    def _create_record(self, name: str, body: bytes) -> None:
        """``<prefix>NAME`` written with ``If-None-Match: *``: of racing writers the first one's stays (the caller
        reads it back)."""
        with self._failing(_CREATING[name], write=True):
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=f"{self.location.prefix}{name}", Body=body, IfNoneMatch="*"
                )
            except botocore.exceptions.ClientError as exc:
                if not _exists_already(exc):
                    raise

    def set_aside(self, corrupt: Iterable[tuple[str, bytes]]) -> int:
        """Copy each object that still holds exactly the given bytes to ``corrupt/<oid>.<random>`` (only if
        its ETag is still the one read), then delete it: ``has_many`` no longer reports it."""
        moved = 0
        for oid, payload in corrupt:
            key = self._key(oid)
            with self._failing(f"move corrupt object {oid} aside", write=True):
                try:
                    response = self.client.get_object(Bucket=self.bucket, Key=key)
                    if response["Body"].read() != payload:
                        continue  # stored afresh meanwhile: not the bad one
                    self.client.copy_object(
                        Bucket=self.bucket,
                        Key=f"{self._corrupt}{oid}.{uuid.uuid4().hex}",
                        CopySource={"Bucket": self.bucket, "Key": key},
                        CopySourceIfMatch=response["ETag"],
                    )
                except botocore.exceptions.ClientError as exc:
                    if _is_missing(exc) or _exists_already(exc):
                        continue
                    raise
                self.client.delete_object(Bucket=self.bucket, Key=key)
                moved += 1
        return moved

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
        self.client.close()


class _Failing:
    """Context manager: S3 and botocore failures become tenure's object-store errors."""

    def __init__(self, store: S3ObjectStore, what: str, write: bool) -> None:
        self.store, self.what, self.write = store, what, write

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> Literal[False]:
        if isinstance(exc, (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)):
            raise self.store._error(exc, self.what, write=self.write) from exc
        return False
