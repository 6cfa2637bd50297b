"""PostgreSQL URLs that can never work fail at once with the server's own reason and a code that says what
to do; under ``--json`` stderr holds exactly the error document (no pool log lines), and a successful
command prints nothing on stderr."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.faults.support import error_of, ok_json, tenure

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
