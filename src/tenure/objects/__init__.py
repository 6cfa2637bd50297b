"""Content-addressed, immutable object storage.

An object is a blob of plain bytes named by its BLAKE3 hash (64 hex digits),
stored zstd-compressed. :mod:`tenure.objects.codec` turns plain bytes into
``(oid, payload)`` and back, checking the hash on the way out; backends store
payloads only and never look inside them.

Backends implement :class:`ObjectStore` (``base.py``) and pass the shared
conformance suite in ``tests/contract/test_object_store.py``:

* ``file://PATH`` — a local folder (default), :mod:`tenure.objects.local`;
* ``postgresql://…`` — a table in PostgreSQL, :mod:`tenure.objects.postgres`;
* ``s3://BUCKET/PREFIX?endpoint=…&region=…`` — an S3-compatible bucket,
  :mod:`tenure.objects.s3` (the ``s3`` extra: boto3).
"""

from tenure.objects.base import BoundStore, ObjectMissingError, ObjectStore, open_object_store
from tenure.objects.codec import decode, encode, object_id

__all__ = ["ObjectStore", "ObjectMissingError", "BoundStore", "open_object_store", "encode", "decode", "object_id"]
