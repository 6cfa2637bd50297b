"""A deterministic interleaving harness for PostgreSQL (READ COMMITTED).

``interleave(point, first, competitor)`` runs ``first()`` on the store under
test; when ``first`` reaches the named fault point (inside its open
transaction), ``competitor(other)`` is started on a *second* store with its own
connections. The harness then waits until the competitor has either
committed (or failed) or is blocked on a row lock that ``first`` holds —
observed in ``pg_stat_activity``, never guessed with a sleep — and lets
``first`` go on. Both outcomes are returned, so a test asserts what the
pair of transactions left behind.

Without the fix a decision read in ``first`` goes stale: the competitor
commits in between and ``first`` writes on top of it. With the fix either
``first`` holds the lock that makes the competitor wait (and then re-read),
or ``first``'s own statement carries the whole precondition and matches
nothing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from tenure import faults
from tenure.store import Store, open_store

T = TypeVar("T")


@dataclass
class Outcome(Generic[T]):
    value: T | None = None
    error: BaseException | None = None

    def get(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def with_app_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["application_name"] = name
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def second_store(url: str) -> Iterator[tuple[Store, str]]:
    """Another store on the same database, its connections tagged with a unique application name."""
    name = f"tenure-competitor-{uuid.uuid4().hex[:8]}"
    other = open_store(with_app_name(url, name), auto_migrate=False)
    try:
        yield other, name
    finally:
        other.close()


def _blocked_or_done(url: str, app_name: str, thread: threading.Thread, timeout: float = 20.0) -> str:
    """Wait until the competitor finished or waits on a lock; say which."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as admin:
        while time.monotonic() < deadline:
            if not thread.is_alive():
                return "done"
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                (app_name,),
            ).fetchone()
            if row and row[0]:
                return "blocked"
            thread.join(0.005)
    raise AssertionError("the competitor neither finished nor blocked on a lock")


def interleave(
    url: str, point: str, first: Callable[[], T], competitor: Callable[[Store], Any]
) -> tuple[Outcome[T], Outcome[Any], str]:
    """Run ``first``; at ``point`` run ``competitor`` on a second connection (see the module docstring)."""
    mine: Outcome[T] = Outcome()
    theirs: Outcome[Any] = Outcome()
    seen: list[str] = []
    with second_store(url) as (other, app_name):

        def run_competitor() -> None:
            try:
                theirs.value = competitor(other)
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                theirs.error = exc

        thread = threading.Thread(target=run_competitor, name="competitor")

        def at_point() -> None:
            thread.start()
            seen.append(_blocked_or_done(url, app_name, thread))

        with faults.at(point, at_point):
            try:
                mine.value = first()
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                mine.error = exc
        if not seen:
            raise AssertionError(f"fault point {point!r} was never reached")
        thread.join(30)
        assert not thread.is_alive(), "the competitor never finished"
    return mine, theirs, seen[0]
