"""Verifying a stored tree: read objects back and re-hash them.

Tree objects are always read and re-hashed (the listing needs them). The
store is asked once, with ``has_many``, which data objects it lacks. Then
every data object (``sample=1.0``) or a random fraction of them (at least
one when there are any; ``seed`` makes the choice repeatable) is read back
and decoded, which checks its hash. The lost paths are every file using a
missing or corrupt object, and every folder whose tree object is damaged.

:func:`set_aside` moves objects found corrupt out of the object store's
way (``ObjectStore.set_aside``); the workspace service calls it after a
verify or a restore finds any.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from tenure.errors import IntegrityError
from tenure.objects import ObjectMissingError, ObjectStore
from tenure.objects.codec import codec_of
from tenure.snapshots.errors import TreeFormatError
from tenure.snapshots.results import VerifyResult
from tenure.snapshots.walk import load_listing


def verify_tree(
    root: str, objects: ObjectStore, *, sample: float = 1.0, seed: int | None = None, workers: int | None = None
) -> VerifyResult:
    """Check that every object below ``root`` is stored and intact (see the module docstring)."""
    listing = load_listing(root, objects, workers, with_ids=True)
    id_damage = listing.tree_missing | listing.tree_corrupt
    if not listing.damaged and not id_damage and listing.ids != listing.data_oids():
        raise TreeFormatError(
            f"tree {root}: the data ids its root lists do not match its files", oid=root, problem="bad-ids"
        )
    users: dict[str, list[bytes]] = {}
    for rel, item in listing.files:
        for oid, _, _ in item.refs:
            users.setdefault(oid, []).append(rel)
    present = objects.has_many(users)
    missing = set(users) - present
    chosen = _choose(sorted(present), sample, seed)
    with ThreadPoolExecutor(workers or os.cpu_count() or 1, thread_name_prefix="tenure-verify") as pool:
        checks = list(pool.map(lambda oid: _check(objects, oid), chosen))
    corrupt = {oid for oid, (state, _) in zip(chosen, checks) if state == "corrupt"}
    missing |= {oid for oid, (state, _) in zip(chosen, checks) if state == "missing"}
    tree_missing, tree_corrupt = listing.tree_problems()
    lost = {os.fsdecode(rel) for oid in missing | corrupt for rel in users[oid]}
    lost_paths = tuple(sorted(lost | set(listing.lost_folders())))
    return VerifyResult(
        root=root,
        checked=len(listing.trees) + len(chosen),
        bytes_checked=sum(listing.trees.values()) + sum(size for _, size in checks),
        missing=frozenset(missing | tree_missing),
        corrupt=frozenset(corrupt | tree_corrupt),
        lost_paths=lost_paths,
    )


def _choose(oids: list[str], sample: float, seed: int | None) -> list[str]:
    if sample >= 1.0 or not oids:
        return oids
    if sample <= 0.0:
        return []
    count = min(len(oids), max(1, math.ceil(sample * len(oids))))
    return random.Random(seed).sample(oids, count)


def _check(objects: ObjectStore, oid: str) -> tuple[str, int]:
    """``("ok" | "missing" | "corrupt", stored size)``."""
    try:
        payload = objects.get(oid)
    except ObjectMissingError:
        return "missing", 0
    try:
        codec_of(objects).decode(oid, payload)
    except IntegrityError:
        return "corrupt", len(payload)
    return "ok", len(payload)


def set_aside(objects: ObjectStore, oids: Iterable[str]) -> frozenset[str]:
    """Move aside every object of ``oids`` that is stored and still does not hash to its id; return them.

    Each one is read and decoded again first, so an object stored afresh
    since it was found corrupt is left alone. A known-bad object is thereby
    a missing one: ``has_many`` no longer reports it, so the next checkpoint
    of a folder that holds its content stores it again (the build asks the
    store about every id it reuses), and a later verify finds it intact.
    """
    codec = codec_of(objects)
    bad: list[tuple[str, bytes]] = []
    for oid in sorted(set(oids)):
        try:
            payload = objects.get(oid)
        except ObjectMissingError:
            continue
        try:
            codec.decode(oid, payload)
        except IntegrityError:
            bad.append((oid, payload))
    if bad:
        objects.set_aside(bad)
    return frozenset(oid for oid, _ in bad)
