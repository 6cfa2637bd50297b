"""The store clock on SQLite (SPEC §3.1: the host's clock) when a stamp lies in the reader's future.

A client whose clock ran ahead stamps ``claimed_at`` (project leases) or
``issued_at`` / ``expires_at`` (writer leases) in the future of a reader
whose clock is right. Such a lease counts as live until the reader's clock
passes the stamp plus the TTL: nobody takes it over early. The stamps are
written here as that client would have written them (the store's own
time expression shifted by an hour); the judgements are the real CLI's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.support.cli import error_of, ok_json, tenure

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
HOUR = 3600.0


def _sql(data: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"{data}/tenure.db") as conn:
        return conn.execute(statement, params).fetchall()


def _project(tmp_path: Path) -> str:
    data = str(tmp_path / "data")
    ok_json(tenure(["--data", data, "--json", "project", "create", "acme/web"]))
    claimed = ok_json(tenure(["--data", data, "--json", "project", "claim", "acme/web", "--pod-id", "pod-ahead"]))
    assert claimed["pod_id"] == "pod-ahead"
    return data


def _claim(data: str, pod: str) -> Any:
    return tenure(["--data", data, "--json", "project", "--lease-ttl", "60", "claim", "acme/web", "--pod-id", pod])


def test_claim_stamped_in_the_future_is_live_until_the_readers_clock_passes_it_plus_the_ttl(tmp_path: Path) -> None:
    data = _project(tmp_path)
    _sql(data, f"UPDATE projects SET claimed_at = {NOW} + ?", (HOUR,))
    refused = _claim(data, "pod-right")
    assert refused.returncode == 4
    assert error_of(refused)["code"] == "claim-rejected"
    shown = ok_json(tenure(["--data", data, "--json", "project", "--lease-ttl", "60", "show", "acme/web"]))
    assert shown["owner"]["pod_id"] == "pod-ahead" and shown["owner"]["live"] is True
    assert shown["owner"]["expires_in"] > HOUR  # the stamp plus the TTL, by the reader's clock


def test_claim_whose_stamp_plus_ttl_the_readers_clock_has_passed_is_taken_over(tmp_path: Path) -> None:
    data = _project(tmp_path)
    _sql(data, f"UPDATE projects SET claimed_at = {NOW} - ?", (61.0,))
    taken = ok_json(_claim(data, "pod-right"))
    assert taken["pod_id"] == "pod-right"


def _workspace_with_a_lease(tmp_path: Path, issued_in: float, ttl: float) -> tuple[str, str]:
    """A workspace whose current writer lease is ACTIVE for another holder, issued ``issued_in`` s from now."""
    data, src = str(tmp_path / "data"), tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    ok_json(tenure(["--data", data, "--json", "workspace", "create", "w"]))
    ok_json(tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", str(src)]))
    (src / "a.txt").write_text("b")
    _sql(
        data,
        f"UPDATE writer_leases SET state = 'ACTIVE', holder = 'writer-ahead', issued_at = {NOW} + ?,"
        f" expires_at = {NOW} + ? + ?"
        " WHERE generation = (SELECT writer_generation FROM workspaces WHERE name = 'w')",
        (issued_in, issued_in, ttl),
    )
    return data, str(src)


def test_writer_lease_issued_in_the_future_is_live_until_the_readers_clock_passes_it_plus_the_ttl(
    tmp_path: Path,
) -> None:
    data, src = _workspace_with_a_lease(tmp_path, HOUR, 60.0)
    result = tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", src])
    assert result.returncode == 4
    error = error_of(result)
    assert error["code"] == "lease-held" and error["context"]["holder"] == "writer-ahead"
    assert error["context"]["expires_in"] > HOUR


def test_writer_lease_past_its_stamp_plus_ttl_is_taken_over(tmp_path: Path) -> None:
    data, src = _workspace_with_a_lease(tmp_path, -61.0, 60.0)
    published = ok_json(tenure(["--data", data, "--json", "workspace", "checkpoint", "w", "--from", src]))
    assert published["snapshot"]["state"] == "READY"
