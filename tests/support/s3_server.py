"""A real S3 endpoint for the tests: moto's server mode, started on loopback once per test process.

``s3_endpoint`` (session-scoped) starts ``moto_server`` from the ``moto[server]`` package as a subprocess
on a free port, points botocore at throw-away credentials (and at no shared config file, so the host's
profile cannot leak in) and kills the server at the end. ``new_s3_url`` makes an empty bucket and returns
its ``s3://`` URL. Outside CI a server that cannot start skips the S3 tests with one reason; with
``CI=true`` it fails them, as tests/conftest.py does for PostgreSQL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

REGION = "us-east-1"
_state: dict[str, str] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unavailable(reason: str) -> None:
    from tests.conftest import IN_CI

    if IN_CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def _wait_until_up(proc: subprocess.Popen[bytes], endpoint: str, timeout: float = 30.0) -> str | None:
    """None once the server answers HTTP, else why it did not."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"moto_server exited with status {proc.returncode}"
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return None
        except urllib.error.HTTPError:
            return None  # it answers
        except OSError:
            time.sleep(0.1)
    return f"moto_server did not answer at {endpoint} within {timeout:.0f} s"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of a moto S3 server of this test process, with credentials for it in the environment."""
    if "error" in _state:
        _unavailable(_state["error"])
    server = os.path.join(os.path.dirname(sys.executable), "moto_server")
    if not os.path.exists(server):
        _state["error"] = f"moto's server is not installed ({server}); pip install 'moto[server]'"
        _unavailable(_state["error"])
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        failure = _wait_until_up(proc, endpoint)
        if failure:
            _state["error"] = failure
            _unavailable(failure)
        _state["endpoint"] = endpoint
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ACCESS_KEY_ID", "tenure-test")
            env.setenv("AWS_SECRET_ACCESS_KEY", "tenure-test-secret")
            env.delenv("AWS_SESSION_TOKEN", raising=False)
            env.delenv("AWS_PROFILE", raising=False)
            env.setenv("AWS_CONFIG_FILE", os.devnull)
            env.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
            env.setenv("AWS_EC2_METADATA_DISABLED", "true")
            yield endpoint
    finally:
        proc.kill()
        proc.wait()


def make_bucket(endpoint: str) -> str:
    import boto3

    bucket = f"tenure-{uuid.uuid4().hex[:20]}"
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION).create_bucket(Bucket=bucket)
    return bucket


def new_s3_url(endpoint: str, prefix: str = "objects-root") -> str:
    """The URL of a fresh, empty bucket (under ``prefix``) on the test server."""
    return f"s3://{make_bucket(endpoint)}/{prefix}?endpoint={endpoint}&region={REGION}"


@pytest.fixture
def s3_url(s3_endpoint: str) -> str:
    return new_s3_url(s3_endpoint)
