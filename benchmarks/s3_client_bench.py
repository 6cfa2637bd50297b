"""boto3 against obstore for the object store's calls (put, get, exists) on an S3 endpoint.

Usage: python benchmarks/s3_client_bench.py [ENDPOINT]. Without an endpoint it starts moto's server on a
free loopback port. Each client stores, reads and checks N objects of 4 KiB, 256 KiB and 4 MiB, one at a
time and with 16 threads, and prints objects per second and the client's CPU time per call (the server's
not counted). docs/adr/0025-s3-object-store.md records a run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

SIZES = {"4KiB": 4 << 10, "256KiB": 256 << 10, "4MiB": 4 << 20}
COUNT = {"4KiB": 200, "256KiB": 100, "4MiB": 24}
THREADS = 16
BUCKET = "bench-bucket"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def boto3_ops(endpoint: str) -> dict[str, Callable[..., object]]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", config=Config(max_pool_connections=THREADS)
    )

    def put(key: str, body: bytes) -> None:
        client.put_object(Bucket=BUCKET, Key=key, Body=body, IfNoneMatch="*")

    def get(key: str) -> bytes:
        return bytes(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def head(key: str) -> None:
        client.head_object(Bucket=BUCKET, Key=key)

    return {"put": put, "get": get, "exists": head}


def obstore_ops(endpoint: str) -> dict[str, Callable[..., object]]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        endpoint=endpoint,
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )

    def put(key: str, body: bytes) -> None:
        obstore.put(store, key, body, mode="create")

    def get(key: str) -> bytes:
        return bytes(obstore.get(store, key).bytes())

    def head(key: str) -> None:
        obstore.head(store, key)

    return {"put": put, "get": get, "exists": head}


def run(name: str, ops: dict[str, Callable[..., object]]) -> None:
    pool = ThreadPoolExecutor(THREADS)
    for label, size in SIZES.items():
        n = COUNT[label]
        body = os.urandom(size)
        for mode in ("serial", "16 threads"):
            keys = [f"{name}/{uuid.uuid4().hex}" for _ in range(n)]
            line = []
            for op in ("put", "get", "exists"):
                call = ops[op]
                args = [(k, body) if op == "put" else (k,) for k in keys]
                start, cpu = time.perf_counter(), time.process_time()
                if mode == "serial":
                    for a in args:
                        call(*a)
                else:
                    list(pool.map(lambda a: call(*a), args))  # noqa: B023
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                line.append(f"{op} {n / wall:5.0f}/s {1000 * cpu / n:5.2f} ms cpu")
            print(f"{name:8} {label:7} {mode:10} " + "  ".join(line), flush=True)
    pool.shutdown()


def main() -> None:
    server = None
    if len(sys.argv) > 1:
        endpoint = sys.argv[1]
    else:
        port = free_port()
        moto = os.path.join(os.path.dirname(sys.executable), "moto_server")
        server = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stderr=subprocess.DEVNULL)
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        for name, make in (("boto3", boto3_ops), ("obstore", obstore_ops)):
            run(name, make(endpoint))
    finally:
        if server is not None:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
