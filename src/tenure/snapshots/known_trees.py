"""The tree hint: which tree-layer objects the last build of an index stored or checked (S-12).

A build computes every folder's record and its id; an id the object store
already holds is trusted only if this hint names it — the last build of the
same index stored that object itself or read it back and found it to be what
its id says. Any other tree-layer object found stored is read back and
decoded first, and one that is not what its id says is moved aside and
stored again from the build's own record (:func:`tenure.snapshots.verify.set_aside`).
An unchanged folder thus costs no read; a folder whose record is new to this
index but already stored (another workspace's, a lost hint) costs one, once.

File: next to the index (``INDEX.trees``), in the envelope of
:func:`tenure.snapshots.index.read_hint` (``TENURE-TREES\\n`` version:u8
blake3(frame):32), the frame a zstd frame of the sorted raw 32-byte ids.
Like the index it is a local hint written by this process only: missing,
damaged or foreign, it loads as empty (every tree found stored is read
back once), never as an error. Later damage to a trusted object is found by
``snapshot verify`` (S-22), as for the data objects the index knows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tenure.snapshots.index import read_hint, write_hint

MAGIC = b"TENURE-TREES\n"
VERSION = 1
_ID = 32
_HEX = re.compile(r"[0-9a-f]{64}")


def hint_path(index_path: str) -> str:
    """Where the tree hint of the index at ``index_path`` lives."""
    return index_path + ".trees"


def load(index_path: str | None) -> frozenset[str]:
    """The tree ids the hint of the index at ``index_path`` names (empty when there is none that checks out)."""
    if index_path is None:
        return frozenset()
    read = read_hint(hint_path(index_path), MAGIC, VERSION)
    if read is None or len(read[0]) % _ID:
        return frozenset()
    raw = read[0]
    return frozenset(raw[i : i + _ID].hex() for i in range(0, len(raw), _ID))


def save(index_path: str, oids: Iterable[str]) -> None:
    """Atomically replace the tree hint of the index at ``index_path`` with ``oids`` (content ids only)."""
    raw = b"".join(bytes.fromhex(oid) for oid in sorted(oids) if _HEX.fullmatch(oid))
    write_hint(hint_path(index_path), MAGIC, VERSION, raw)
