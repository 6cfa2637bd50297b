"""PostgreSQL URLs that can never work fail at once with the server's own reason and a code that says what
to do; under ``--json`` stderr holds exactly the error document (no pool log lines), and a successful
command prints nothing on stderr."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tenure.errors import StoreError
from tenure.store.postgres import CHECKOUT_TIMEOUT_S, PostgresConnector
from tenure.verify.cluster import Proxy
from tests.support.cli import error_of, ok_json, tenure

pytestmark = pytest.mark.postgres


def _server(pg_url: str) -> str:
    """``postgresql://USER@HOST:PORT`` of the test server (from a working URL)."""
    parts = urlsplit(pg_url)
    return f"{parts.scheme}://{parts.netloc}"


def _run(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return tenure(["--data", str(tmp_path / "data"), "--db", url, "--json", *args])


def test_missing_database_is_store_not_found_with_the_servers_message(tmp_path: Path, pg_url: str) -> None:
    result = _run(tmp_path, f"{_server(pg_url)}/tenure_no_such_database", "workspace", "list")
    assert result.returncode == 2
    error = error_of(result)
    assert error["code"] == "store-not-found" and error["retryable"] is False
    assert 'database "tenure_no_such_database" does not exist' in error["message"]


def test_unknown_role_is_store_auth_with_the_servers_message(tmp_path: Path, pg_url: str) -> None:
    parts = urlsplit(pg_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    result = _run(tmp_path, f"postgresql://tenure_no_such_role@{host}{parts.path}", "workspace", "create", "w")
    assert result.returncode == 2
    error = error_of(result)
    assert error["code"] == "store-auth" and 'role "tenure_no_such_role" does not exist' in error["message"]


@pytest.mark.parametrize("suffix", ["/postgres?no_such_option=1", ":99999/postgres", "[::1/postgres"])
def test_malformed_url_is_bad_store_url(tmp_path: Path, pg_url: str, suffix: str) -> None:
    server = _server(pg_url)
    url = server.rsplit("@", 1)[0] + "@" + suffix if suffix.startswith("[") else server + suffix
    result = _run(tmp_path, url, "workspace", "list")
    assert result.returncode == 2
    assert error_of(result)["code"] == "bad-store-url"


def test_refused_connection_is_store_unreachable_and_retryable(tmp_path: Path, pg_url: str) -> None:
    result = _run(tmp_path, "postgresql://postgres@127.0.0.1:1/postgres", "workspace", "list")
    assert result.returncode == 5
    error = error_of(result)
    assert error["code"] == "store-unreachable" and error["retryable"] is True
    assert "Connection refused" in error["message"]


def test_password_in_the_url_is_not_printed(tmp_path: Path, pg_url: str) -> None:
    result = _run(tmp_path, "postgresql://someone:s3cret@127.0.0.1:1/postgres", "workspace", "list")
    assert "s3cret" not in result.stderr and "s3cret" not in result.stdout
    assert error_of(result)["code"] == "store-unreachable"


def test_success_on_postgresql_prints_one_document_and_nothing_on_stderr(tmp_path: Path, pg_url: str) -> None:
    assert ok_json(_run(tmp_path, pg_url, "workspace", "create", "w"))["name"] == "w"
    listed = ok_json(_run(tmp_path, pg_url, "workspace", "list"))
    assert [w["name"] for w in listed] == ["w"]


def test_a_store_cut_off_answers_store_unreachable_at_once_and_recovers_when_it_heals(pg_url: str) -> None:
    """Cut from the server, every transaction fails with ``store-unavailable`` (retryable) well inside the pool's full
    checkout wait (a pod answers its clients instead of holding them), and the same connector works again
    once the server can be reached."""
    target = urlsplit(pg_url)
    proxy = Proxy((target.hostname or "127.0.0.1", target.port or 5432))
    connector = PostgresConnector(proxy.url(pg_url), max_size=2)
    try:
        with connector.transaction() as tx:
            assert tx.execute_sql("SELECT 1 AS one") == [{"one": 1}]
        proxy.cut()
        codes = []
        for _ in range(4):
            started = time.monotonic()
            with pytest.raises(StoreError) as caught:
                with connector.transaction() as tx:
                    tx.execute_sql("SELECT 1 AS one")
            codes.append(caught.value.code)
            assert time.monotonic() - started < CHECKOUT_TIMEOUT_S / 2, "not held for the full checkout wait"
        assert set(codes) == {"store-unavailable"}
        assert connector.reachable is False
        proxy.heal()

        def works() -> bool:
            try:
                with connector.transaction() as tx:
                    return tx.execute_sql("SELECT 1 AS one") == [{"one": 1}]
            except StoreError:
                return False

        deadline = time.monotonic() + 60
        while not works():
            assert time.monotonic() < deadline, "the connector never reconnected after the cut healed"
            time.sleep(0.1)  # polling the store's answer, not a synchronization
        assert connector.reachable is True
    finally:
        connector.close()
        proxy.close()
