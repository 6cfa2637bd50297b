"""Global options → configuration → services, opened lazily once per command."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from tenure.errors import ConfigurationError, NotFoundError

if TYPE_CHECKING:  # imported lazily at run time so that `tenure --help` stays fast
    from tenure.objects import ObjectStore
    from tenure.objects.crypto import KeySource
    from tenure.store import Store
    from tenure.workspaces import WorkspaceService


@dataclass
class Config:
    data_dir: str
    db_url: str
    objects_url: str
    #: The key of an encrypted object store (--passphrase-file / --key-file, TENURE_PASSPHRASE / TENURE_KEY_FILE).
    key: KeySource | None = None

    @classmethod
    def resolve(cls, data: str | None, db: str | None, objects: str | None, create: bool = True) -> Config:
        """The configuration; ``create`` False (commands that only use existing data) creates nothing.

        Without ``create``, a SQLite store that does not exist is refused with
        ``no-tenure-data`` instead of being created empty.
        """
        data_dir = os.path.abspath(data or os.environ.get("TENURE_DATA") or ".tenure")
        check_urls(db or os.environ.get("TENURE_DB"), objects or os.environ.get("TENURE_OBJECTS"))
        if create:
            try:
                os.makedirs(data_dir, exist_ok=True)
            except OSError as exc:
                raise ConfigurationError(f"cannot create data folder {data_dir}: {exc}", code="bad-data-dir") from exc
        usable(data_dir)
        config = cls(
            data_dir=data_dir,
            db_url=db or os.environ.get("TENURE_DB") or f"sqlite:///{data_dir}/tenure.db",
            objects_url=objects or os.environ.get("TENURE_OBJECTS") or f"file://{data_dir}/objects",
        )
        if not create:
            no_tenure_data(config)
        return config


def check_urls(db_url: str | None, objects_url: str | None) -> None:
    """Refuse, before anything is opened or created, a store or object URL that names no usable place.

    ``sqlite:///`` and ``sqlite:///:memory:`` would be a throw-away database;
    ``file://`` with an empty or relative path would put objects in the
    current folder (``bad-store-url`` / ``bad-objects-url``).
    """
    if db_url and db_url.startswith("sqlite:///"):
        from tenure.store.connector import sqlite_path

        sqlite_path(db_url)
    if objects_url and objects_url.startswith("file://"):
        from tenure.objects.local import local_root

        local_root(objects_url)


def usable(data_dir: str) -> None:
    """Refuse a data folder that exists but is not a folder this user can list and enter."""
    if not os.path.exists(data_dir):
        return
    if not os.path.isdir(data_dir):
        raise ConfigurationError(
            f"data folder {data_dir} is not a folder",
            code="data-dir-unusable",
            path=data_dir,
            hint="point --data / TENURE_DATA at a folder",
        )
    if not os.access(data_dir, os.R_OK | os.X_OK):
        raise ConfigurationError(
            f"data folder {data_dir} cannot be read by this user",
            code="data-dir-unusable",
            path=data_dir,
            hint="give this user read and search (r-x) permission on the data folder, or run tenure as its owner",
        )


def no_tenure_data(config: Config) -> None:
    """Refuse a SQLite store that does not exist: a mistyped path must not become a fresh, empty store."""
    if not config.db_url.startswith("sqlite:///"):
        return
    path = config.db_url[len("sqlite:///") :]
    if os.path.isfile(path):
        return
    default = path == os.path.join(config.data_dir, "tenure.db")
    where = f"data folder {config.data_dir}" if default else f"store {path}"
    raise NotFoundError(
        f"no tenure data here: the {where} does not exist",
        code="no-tenure-data",
        path=path,
        data_dir=config.data_dir,
        hint="start with `tenure workspace create NAME` (or `tenure project create TENANT/NAME`), run from the"
        " folder that holds .tenure, or point --data / TENURE_DATA at an existing data folder",
    )


@dataclass
class Services:
    config: Config

    _store: Store | None = None
    _objects: ObjectStore | None = None
    _workspaces: WorkspaceService | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            from tenure.store import open_store

            self._store = open_store(self.config.db_url)
        return self._store

    @property
    def objects(self) -> ObjectStore:
        if self._objects is None:
            from tenure.objects import open_object_store

            self._objects = open_object_store(self.config.objects_url, self.config.key)
        return self._objects

    @property
    def workspaces(self) -> WorkspaceService:
        if self._workspaces is None:
            from tenure.workspaces import WorkspaceService

            self._workspaces = WorkspaceService(self.store, self.objects, self.config.data_dir)
        return self._workspaces

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        if self._objects is not None:
            self._objects.close()


def services(ctx: click.Context, create: bool | None = None) -> Services:
    """The command's services, opened once: the first call decides ``create`` (default True).

    Commands that only read or change existing data pass ``create=False``
    first: on a path with no tenure data they fail with ``no-tenure-data``
    and leave nothing behind.
    """
    root = ctx.find_root().obj
    if "services" not in root:
        config = Config.resolve(root.get("data"), root.get("db"), root.get("objects"), create=create is not False)
        config.key = key_source(ctx)
        root["services"] = Services(config)
        ctx.find_root().call_on_close(root["services"].close)
    return root["services"]  # type: ignore[no-any-return]


def key_source(ctx: click.Context) -> KeySource | None:
    """The object store key the global options or the environment give, ``None`` when none is given."""
    from tenure.objects.crypto import KeySource

    root = ctx.find_root().obj
    return KeySource.resolve(passphrase_file=root.get("passphrase_file"), key_file=root.get("key_file"))
