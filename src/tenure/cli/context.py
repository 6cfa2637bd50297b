"""Global options → configuration → services, opened lazily once per command."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import click

from tenure.errors import ConfigurationError


@dataclass
class Config:
    data_dir: str
    db_url: str
    objects_url: str

    @classmethod
    def resolve(cls, data: str | None, db: str | None, objects: str | None) -> Config:
        data_dir = os.path.abspath(data or os.environ.get("TENURE_DATA") or ".tenure")
        try:
            os.makedirs(data_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"cannot create data folder {data_dir}: {exc}", code="bad-data-dir") from exc
        return cls(
            data_dir=data_dir,
            db_url=db or os.environ.get("TENURE_DB") or f"sqlite:///{data_dir}/tenure.db",
            objects_url=objects or os.environ.get("TENURE_OBJECTS") or f"file://{data_dir}/objects",
        )


@dataclass
class Services:
    config: Config
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def store(self) -> Any:
        if "store" not in self._cache:
            from tenure.store import open_store

            self._cache["store"] = open_store(self.config.db_url)
        return self._cache["store"]

    @property
    def objects(self) -> Any:
        if "objects" not in self._cache:
            from tenure.objects import open_object_store

            self._cache["objects"] = open_object_store(self.config.objects_url)
        return self._cache["objects"]

    @property
    def workspaces(self) -> Any:
        if "workspaces" not in self._cache:
            from tenure.workspaces import WorkspaceService

            self._cache["workspaces"] = WorkspaceService(self.store, self.objects, self.config.data_dir)
        return self._cache["workspaces"]

    def close(self) -> None:
        for key in ("store", "objects"):
            if key in self._cache:
                self._cache[key].close()


def services(ctx: click.Context) -> Services:
    root = ctx.find_root().obj
    if "services" not in root:
        root["services"] = Services(Config.resolve(root.get("data"), root.get("db"), root.get("objects")))
        ctx.find_root().call_on_close(root["services"].close)
    return root["services"]  # type: ignore[no-any-return]
