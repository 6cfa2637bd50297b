"""Reaching under a store: direct writes into its tables, and waiting on its clock."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from tenure.store import Store


def raw(store: Store, sql: str, params: tuple[Any, ...]) -> None:
    """A direct write into the store's tables (test-only: stands for a newer writer's committed claim)."""
    url = store.url
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url[len("sqlite:///") :]) as conn:
            conn.execute(sql, params)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), params)


def wait_past(store: Store, seconds: float) -> None:
    """Let the store clock advance by more than ``seconds``."""
    start = store.workspaces.now()
    while store.workspaces.now() - start <= seconds:
        time.sleep(seconds / 4)
