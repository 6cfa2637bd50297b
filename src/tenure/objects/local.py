"""Object store in a local folder: ``<root>/<oid[:2]>/<oid>``.

Write sequence per batch (restic's): write each payload to a temp file in
``<root>/tmp``, fsync it, rename it into place, then fsync every directory
that received an entry, once, and the root. Only then does ``put_many``
return, so an acknowledged object survives power loss. A write that fails
removes its temp files; a crash leaves at most stray temp files, which
:meth:`LocalObjectStore.clean_temp` (run by ``tenure gc``) removes once they
are an hour old. The
root and ``tmp`` are created with their parents synced, by the first write:
opening and reading need no write access, so a read-only copy of an object
folder (without ``tmp``) can be restored from.

The URL names an absolute folder (``file:///srv/objects``); an empty or
relative path, which would quietly resolve against the current folder, is
refused with ``bad-objects-url``. Operating-system errors become
``object-store-read-only`` (a read-only or foreign folder), ``disk-full``
(no space, quota or file-size limit) or ``object-store-unavailable``.

An object whose final file already exists is not trusted to be durable: a
writer that crashed after its rename, before its folder fsync, leaves a file
that lives only in the page cache until the kernel flushes it. ``put_many``
therefore fsyncs such a file and its folder (once per batch, with the new
ones) before it acknowledges it. It does not re-hash it: a final name is
only ever given to a file whose data was synced first, so durability, not
content, is what is in doubt (``snapshot verify`` re-hashes content).

The folder's identity is ``<root>/tenure-objects.json`` (a UUID), written
by the first write that needs it and read without writing, so a read-only
folder that has one can be used to read. The control-plane store it is bound
to is in ``<root>/tenure-objects-store.json``, written once the same way by the
first store that binds it. Objects found corrupt are moved
into ``<root>/corrupt/`` (``set_aside``), which object listings skip.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from tenure.errors import ConfigurationError, ObjectStoreError
from tenure.fsio import (
    FULL_ERRNOS,
    READ_ONLY_ERRNOS,
    atomic_write,
    fsync_dir,
    fsync_file,
    make_dirs_durable,
    sync_filesystem,
    write_all,
)
from tenure.objects.base import CORRUPT_FOLDER, ObjectMissingError, ObjectStoreReadOnlyError
from tenure.objects.identity import IDENTITY_FILE, STORE_FILE, BadIdentityError, JsonRecords


class ObjectStoreFullError(ObjectStoreError):
    """No space (or quota, or file-size limit) is left for objects."""

    code = "disk-full"
    http_status = 507  # as every disk-full
    default_hint = (
        "free space on the file system that holds the object folder (or raise the quota or `ulimit -f`"
        " that stopped the write), then retry"
    )


#: A temp file untouched for this long was left by a writer that died (:meth:`LocalObjectStore.clean_temp`).
ABANDONED_TEMP_S = 3600.0
#: What a failed write of each record (tenure.objects.identity) could not do: its error's message, ``{root}`` the
#: folder.
_CREATING = {
    IDENTITY_FILE: "give the object folder {root} its identity (it has none yet, and one is needed before anything"
    " is stored)",
    STORE_FILE: "record in the object folder {root} the store it is bound to (needed before anything is stored)",
}


def os_error(exc: OSError, what: str, path: str) -> ObjectStoreError:
    """The one translation of an operating-system error of the object folder into tenure's errors."""
    if exc.errno in READ_ONLY_ERRNOS:
        return ObjectStoreReadOnlyError(f"cannot {what}: {exc}", path=path)
    if exc.errno in FULL_ERRNOS:
        return ObjectStoreFullError(f"cannot {what}: {exc}", path=path)
    return ObjectStoreError(f"cannot {what}: {exc}", path=path)


def local_root(url: str) -> str:
    """The folder of a ``file:///ABSOLUTE/PATH`` (or ``file://localhost/ABSOLUTE/PATH``) URL."""
    path = url[len("file://") :]
    if path.startswith("localhost/"):
        path = path[len("localhost") :]
    if not path.startswith("/") or os.path.normpath(path) == "/":
        raise ConfigurationError(
            f"object store URL {url!r} does not name an absolute folder other than / (an empty or relative"
            " path would resolve against the current folder)",
            hint="use file:///absolute/path/to/objects",
            code="bad-objects-url",
        )
    return path


class LocalObjectStore(JsonRecords):
    """The default backend: one file per object in a local folder."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = f"file://{self.root}"
        self._tmp = os.path.join(self.root, "tmp")
        self._writable = False
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise ConfigurationError(
                f"object store {self.root} is not a folder",
                code="bad-objects-url",
                hint="point --objects at a folder",
                path=self.root,
            )

    def _make_writable(self) -> None:
        """Before the first write: create the root and ``tmp`` with their parents synced.

        A root that already exists is synced with the folders above it: another program (or a writer
        that crashed) may have created them without syncing, and an object is durable only once every
        name on its path is.
        """
        if not self._writable:
            found = os.path.isdir(self.root)
            make_dirs_durable(self._tmp)
            if found:
                _sync_ancestors(self.root)
            self._writable = True

    def _path(self, oid: str) -> str:
        return os.path.join(self.root, oid[:2], oid)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        staged: list[tuple[str, str]] = []
        seen: set[str] = set()
        dirs: set[str] = set()
        try:
            self._make_writable()
            for oid, payload in items:
                if oid in seen:
                    continue
                seen.add(oid)
                final = self._path(oid)
                if _sync_existing(final):
                    dirs.add(os.path.dirname(final))
                    continue
                tmp = os.path.join(self._tmp, f"{oid}.{uuid.uuid4().hex}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
                try:
                    try:
                        write_all(fd, payload)
                        fsync_file(fd)
                    finally:
                        os.close(fd)
                except BaseException:
                    _unlink_quietly(tmp)  # half written (a full disk): it must not hold the space
                    raise
                staged.append((tmp, final))
            for tmp, final in staged:
                parent = os.path.dirname(final)
                if parent not in dirs:
                    os.makedirs(parent, exist_ok=True)
                    dirs.add(parent)
                os.rename(tmp, final)
            for parent in sorted(dirs):
                fsync_dir(parent)
            if dirs:
                fsync_dir(self.root)
        except BaseException as exc:
            for tmp, _ in staged:
                _unlink_quietly(tmp)  # renamed into place already, or written in full and now given up
            if isinstance(exc, OSError):
                raise os_error(exc, f"write objects under {self.root}", self.root) from exc
            raise
        return len(staged)

    def get(self, oid: str) -> bytes:
        try:
            with open(self._path(oid), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            raise ObjectMissingError(f"object {oid} is missing from {self.url}", oid=oid) from None
        except OSError as exc:
            raise ObjectStoreError(f"cannot read object {oid}: {exc}", oid=oid, path=self.root) from exc

    def has_many(self, oids: Iterable[str]) -> set[str]:
        return {oid for oid in oids if os.path.exists(self._path(oid))}

    def list_ids(self) -> Iterator[tuple[str, datetime]]:
        try:
            prefixes = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return  # nothing was ever written
        except OSError as exc:
            raise ObjectStoreError(f"cannot list objects under {self.root}: {exc}", path=self.root) from exc
        for prefix in prefixes:
            if len(prefix) != 2:
                continue
            folder = os.path.join(self.root, prefix)
            try:
                with os.scandir(folder) as entries:
                    found = [(entry.name, entry.stat().st_mtime) for entry in entries]
            except OSError as exc:
                raise ObjectStoreError(f"cannot list objects under {folder}: {exc}", path=folder) from exc
            for name, mtime in found:
                yield name, datetime.fromtimestamp(mtime, UTC)

    def delete_many(self, oids: Iterable[str]) -> int:
        removed = 0
        dirs = set()
        try:
            for oid in oids:
                try:
                    os.unlink(self._path(oid))
                except FileNotFoundError:
                    continue
                removed += 1
                dirs.add(os.path.dirname(self._path(oid)))
            for parent in dirs:
                fsync_dir(parent)
        except OSError as exc:
            raise os_error(exc, f"delete objects under {self.root}", self.root) from exc
        return removed

    def clean_temp(self, older_than: float = ABANDONED_TEMP_S) -> int:
        """Remove temp files a crashed writer left behind: those not modified for ``older_than`` s; how many.

        A writer holds a temp file only within one ``put_many`` (or identity
        write), from its write to its rename, and removes it itself when the
        write fails; one untouched for that long belongs to a process that
        died (``tenure gc`` calls this). Never a young one, whatever the
        GC's grace: it may be a live writer's.
        """
        now = time.time()
        removed = 0
        try:
            with os.scandir(self._tmp) as scan:
                entries = list(scan)
            for entry in entries:
                try:
                    if now - entry.stat(follow_symlinks=False).st_mtime <= older_than:
                        continue
                    os.unlink(entry.path)
                except FileNotFoundError:
                    continue  # renamed into place or removed meanwhile
                removed += 1
        except FileNotFoundError:
            return removed  # no write ever happened here
        except OSError as exc:
            raise os_error(exc, f"remove abandoned temp files under {self._tmp}", self.root) from exc
        return removed

    def sync(self) -> None:
        """One ``syncfs`` of the object folder's file system: objects another writer left unsynced become durable."""
        try:
            sync_filesystem(self.root)
        except OSError as exc:
            raise ObjectStoreError(f"cannot sync the object folder {self.root}: {exc}", path=self.root) from exc

    # -------------------------------------------------------------- identity and corrupt objects
    # identity, ensure_identity, bound_store and bind_store: JsonRecords, over the three primitives below.

    def _read_record(self, name: str, what: str) -> bytes | None:
        """The bytes of ``<root>/NAME``, ``None`` when there is no such file; never writes."""
        path = os.path.join(self.root, name)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ObjectStoreError(
                f"cannot read the {what} of the object folder {self.root}: {exc}", path=path
            ) from exc

    def _bad_record(self, name: str, what: str) -> BadIdentityError:
        path = os.path.join(self.root, name)
        return BadIdentityError(f"the {what} file {path} of the object folder is not valid", path=path)

    def _create_record(self, name: str, body: bytes) -> None:
        """``<root>/NAME`` written once: staged with ``atomic_write``, then hard-linked into place, so that of
        two writers racing, the first one's stays (the caller reads it back); the root is fsynced."""
        final = os.path.join(self.root, name)
        try:
            self._make_writable()
            staged = os.path.join(self._tmp, f"{name}.{uuid.uuid4().hex}")
            atomic_write(staged, body, mode=0o444)
            try:
                os.link(staged, final)
            except FileExistsError:
                pass  # another writer's came first: it stays
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP) or os.path.exists(final):
                    raise
                os.rename(staged, final)  # no hard links on this file system
            finally:
                if os.path.exists(staged):
                    os.unlink(staged)
            fsync_dir(self.root)
        except OSError as exc:
            raise os_error(exc, _CREATING[name].format(root=self.root), self.root) from exc

    def set_aside(self, corrupt: Iterable[tuple[str, bytes]]) -> int:
        """Move each object whose file still holds exactly the given bytes into ``<root>/corrupt/``
        (as ``<oid>.<random>``), then fsync both folders: ``has_many`` no longer reports it."""
        target = os.path.join(self.root, CORRUPT_FOLDER)
        moved = 0
        dirs: set[str] = set()
        try:
            for oid, payload in corrupt:
                path = self._path(oid)
                try:
                    with open(path, "rb") as fh:
                        if fh.read() != payload:
                            continue  # stored afresh meanwhile: not the bad one
                except FileNotFoundError:
                    continue
                if not moved:
                    make_dirs_durable(target)
                os.rename(path, os.path.join(target, f"{oid}.{uuid.uuid4().hex}"))
                dirs.add(os.path.dirname(path))
                moved += 1
            if moved:
                for parent in sorted(dirs | {target}):
                    fsync_dir(parent)
        except OSError as exc:
            raise os_error(exc, f"move corrupt objects aside into {target}", self.root) from exc
        return moved

    def close(self) -> None:
        pass


def _sync_ancestors(folder: str) -> None:
    """fsync ``folder`` and each folder above it on the same file system (those this user may open)."""
    device = os.stat(folder).st_dev
    current = folder
    while True:
        try:
            fsync_dir(current)
        except PermissionError:
            if current == folder:
                raise
        parent = os.path.dirname(current)
        if parent == current:
            return
        try:
            if os.stat(parent).st_dev != device:
                return
        except OSError:
            return
        current = parent


def _unlink_quietly(path: str) -> None:
    """Remove a temp file this writer made, if it is still there; a failure to do so leaves it to ``clean_temp``."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _sync_existing(final: str) -> bool:
    """fsync the object file at ``final`` if it exists (a crashed writer's may not be durable yet)."""
    try:
        fd = os.open(final, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fsync_file(fd)
    finally:
        os.close(fd)
    return True
