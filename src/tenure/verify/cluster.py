"""``tenure verify cluster``: real pods on a user's PostgreSQL, a seeded workload, injected faults, a checked history.

The kit starts N ``tenure serve`` processes, each with its own data folder and its own TCP proxy in front of
PostgreSQL (so one pod can be cut from the store), drives one client thread per project over the pods' HTTP
API (following 307 redirects and 503 Retry-After), injects faults one at a time, samples ownership from the
store, and at the end suspends everything, restores every acknowledged checkpoint and hands the recorded
history to :func:`tenure.verify.history.check`.

Times are store-clock seconds (``SELECT`` of the store's ``now``), read before and after every request and
around every sample; when the store cannot be read (it is restarting) the kit's own estimate of the store
clock (monotonic time plus the last measured offset) stands in.

``plant`` corrupts the recorded history before it is checked, to show the checker catching a violation end to
end; the pods themselves are unchanged. ``plant_bug`` instead starts every pod through the test-only launcher
:mod:`tenure.verify.planted`, which plants a real fencing bug in the pod processes. After a pause or a cut past
the TTL the kit probes the faulted pod with a write and a checkpoint of a project it held and another pod took
over, sent straight to it (no redirect followed): a sound pod refuses or redirects them; a bugged one
acknowledges the checkpoint under its older generation, which the ``stale-write`` rule reports.

Part of the workload asks for what a client is told is saved (ADR 0042): a seeded fraction of the file writes
is sent with ``?durable=true`` (``durable_fraction``), and a fraction of the checkpoints with
``Tenure-If-Lineage`` (``lineage_fraction``) naming the lineage the client last saw in an answer's
``Tenure-Lineage`` header (a ``412 lineage-changed`` is recorded as an outcome, and the client takes the new
lineage from the problem's context). Every write records its path and the SHA-256 of its bytes; at the end
the kit reads back every snapshot a checkpoint or a durable write named and every project's final head, so
the ``durable-write-lost`` and ``lineage-checkpoint-misses-write`` rules can compare them with what the
client was told.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from tenure.objects import open_object_store
from tenure.projects.ownership import Ownership
from tenure.projects.pods import PodRegistry
from tenure.projects.store import ProjectStore
from tenure.store import Store, open_store
from tenure.verify.history import (
    CHECKPOINT_RESTORABLE,
    DURABLE_WRITE_LOST,
    GENERATION_ORDER,
    LINEAGE_CHECKPOINT_MISSES_WRITE,
    OWNERLESS,
    REFUSED_BEFORE_WRITING,
    RULES,
    SINGLE_HOLDER,
    STALE_WRITE,
    History,
    Kind,
    Observation,
    Operation,
    Outcome,
    PodSample,
    Violation,
    check,
)
from tenure.verify.planted import BUGS
from tenure.workspaces import WorkspaceService

TENANT = "verify"
#: every fault the kit knows; ``skew`` needs ``faketime`` on PATH, ``pg-restart`` a command
FAULTS = ("kill", "stop", "renewal-pause", "drain", "partition", "skew", "pg-restart")
WANTS_OWNER_STATUSES = frozenset({"INIT", "RECOVERING", "RUNNING"})
#: the request header a lineage-conditional checkpoint carries, and the answer header it is learned from
IF_LINEAGE, LINEAGE = "Tenure-If-Lineage", "Tenure-Lineage"
#: the faults after which a holder left without a final checkpoint: the saved-write probes go around them
SAVED_PROBE_FAULTS = frozenset({"kill", "stop", "renewal-pause", "partition"})
#: the beat's renewal statement: the renewal-pause fault stops the pod right after it, inside its transaction
RENEWAL_STATEMENT = "pod_renew_lease"


@dataclass(frozen=True)
class ClusterConfig:
    db: str
    objects: str | None = None
    pods: int = 3
    projects: int = 4
    duration: float = 30.0
    seed: int = 0
    faults: tuple[str, ...] = FAULTS
    beat: float = 0.2
    lease_ttl: float = 2.0
    liveness_ttl: float = 1.0
    pull_every: float = 0.2
    sample_every: float = 0.1
    pg_restart_cmd: str | None = None
    plant: str | None = None
    #: a bug of :data:`tenure.verify.planted.BUGS` planted in every pod (test-only launcher)
    plant_bug: str | None = None
    workdir: str | None = None
    #: the fraction of file writes sent with ``?durable=true`` (seeded per project)
    durable_fraction: float = 0.3
    #: the fraction of checkpoints sent with ``Tenure-If-Lineage`` (once the client has seen a lineage)
    lineage_fraction: float = 0.5


@dataclass
class Report:
    operations: dict[str, dict[str, int]] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    skipped_faults: dict[str, str] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    checkpoints: int = 0
    checkpoints_with_digest: int = 0
    restored: int = 0
    observations: int = 0
    seconds: float = 0.0
    tick: float = 0.0
    planted: str | None = None
    planted_bug: str | None = None
    #: the probes of faulted pods: operation kind → outcome (or refusal code) → count
    probes: dict[str, dict[str, int]] = field(default_factory=dict)
    #: durable writes: outcome (or refusal code) → count
    durable_writes: dict[str, int] = field(default_factory=dict)
    #: checkpoints sent with Tenure-If-Lineage: outcome (or refusal code, ``lineage-changed``) → count
    lineage_checkpoints: dict[str, int] = field(default_factory=dict)
    #: projects whose final state (their head at the end) was read back
    final_states: int = 0
    #: the saved-write probes around kills, pauses and cuts: operation kind → outcome (or refusal code) → count
    saved_probes: dict[str, dict[str, int]] = field(default_factory=dict)
    workdir: str = ""
    #: seconds spent starting the pods, running the workload, suspending everything and restoring checkpoints
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def cut_short(self) -> str | None:
        """Why the run ended before its workload did (a fault the kit could not carry out), or None."""
        for fault in self.faults:
            if fault.get("fault") == "error":
                return str(fault.get("detail", "a fault failed"))
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.violations and self.cut_short is None,
            "cut_short": self.cut_short,
            "seconds": round(self.seconds, 2),
            "operations": self.operations,
            "operations_total": sum(sum(v.values()) for v in self.operations.values()),
            "faults": self.faults,
            "skipped_faults": self.skipped_faults,
            "checkpoints": self.checkpoints,
            "checkpoints_with_digest": self.checkpoints_with_digest,
            "restored": self.restored,
            "observations": self.observations,
            "tick": self.tick,
            "planted": self.planted,
            "planted_bug": self.planted_bug,
            "probes": self.probes,
            "durable_writes": self.durable_writes,
            "lineage_checkpoints": self.lineage_checkpoints,
            "final_states": self.final_states,
            "saved_probes": self.saved_probes,
            "rules": RULES,
            "violations": [v.to_dict() for v in self.violations],
            "workdir": self.workdir,
            "phases": self.phases,
        }


def digest_files(files: dict[str, bytes]) -> str:
    """The content digest of a folder: its files' relative paths and bytes, in path order."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return h.hexdigest()


def read_folder(root: str) -> dict[str, bytes]:
    """Every file of a folder: relative path → bytes."""
    files: dict[str, bytes] = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            files[os.path.relpath(path, root)] = Path(path).read_bytes()
    return files


def digest_folder(root: str) -> str:
    return digest_files(read_folder(root))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------- processes


#: where distributions install libfaketime's thread-safe library
LIBFAKETIME_PATHS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/lib64/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)


def libfaketime() -> str | None:
    """The path of libfaketime's thread-safe library (``$TENURE_LIBFAKETIME`` first), or None."""
    for path in (os.environ.get("TENURE_LIBFAKETIME"), *LIBFAKETIME_PATHS):
        if path and os.path.isfile(path):
            return path
    return None


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` in ``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


class Proxy:
    """A TCP proxy 127.0.0.1:<port> → ``target`` that can be cut (new connections refused, open ones dropped)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = int(self.listener.getsockname()[1])
        self.cut_off = threading.Event()
        self.closing = threading.Event()
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, name="verify-proxy", daemon=True)
        self.thread.start()

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def cut(self) -> None:
        self.cut_off.set()
        with self.lock:
            for sock in self.open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.open.clear()

    def heal(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self.closing.set()
        self.cut()
        self.thread.join(5)
        self.listener.close()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.cut_off.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            with self.lock:
                self.open.discard(src)
                self.open.discard(dst)


@dataclass
class Pod:
    name: str
    data: str
    log: str
    proxy: Proxy | None
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    pod_id: str = ""
    #: the pod is being faulted: the workload does not pick it as its first hop
    faulted: bool = False

    @property
    def pause_trigger(self) -> str:
        """The file whose existence makes the pod stop itself inside its next renewal (``renewal-pause``)."""
        return self.data + ".pause"


class Pods:
    """N ``tenure serve`` processes, each restartable on its own data folder."""

    def __init__(self, config: ClusterConfig, workdir: str, objects: str) -> None:
        self.config, self.workdir, self.objects = config, workdir, objects
        self.lock = threading.Lock()
        self.by_url: dict[str, str] = {}
        target = _pg_target(config.db)
        self.pods = [
            Pod(
                f"pod{i}",
                os.path.join(workdir, f"pod{i}"),
                os.path.join(workdir, f"pod{i}.log"),
                Proxy(target) if target is not None else None,
            )
            for i in range(config.pods)
        ]

    def start(self, pod: Pod, *, skew: str | None = None) -> None:
        """Start ``pod``'s process; with ``skew`` (``+30s``), under libfaketime preloaded into the pod's own
        process (no wrapper process in between, so a kill, a pause or a SIGTERM reaches the pod itself)."""
        port = free_port()
        db = pod.proxy.url(self.config.db) if pod.proxy is not None else self.config.db
        c = self.config
        launcher = ["tenure.cli.main"] if c.plant_bug is None else ["tenure.verify.planted", c.plant_bug, "--"]
        args = [
            sys.executable,
            "-m",
            *launcher,
            "--data",
            pod.data,
            "--db",
            db,
            "--objects",
            self.objects,
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--beat",
            str(c.beat),
            "--lease-ttl",
            str(c.lease_ttl),
            "--liveness-ttl",
            str(c.liveness_ttl),
            "--pull-every",
            str(c.pull_every),
            "--log-format",
            "json",
        ]
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
        # the renewal-pause fault: the pod stops itself inside its next renewal transaction (tenure.faults)
        env.update(TENURE_PAUSE_AFTER_STATEMENT=RENEWAL_STATEMENT, TENURE_PAUSE_TRIGGER=pod.pause_trigger)
        if skew is not None:
            library = libfaketime()
            assert library is not None, "the skew fault runs only where libfaketime is installed"
            preload = " ".join(filter(None, [library, os.environ.get("LD_PRELOAD")]))
            env.update(LD_PRELOAD=preload, FAKETIME=skew, FAKETIME_DONT_FAKE_MONOTONIC="1")
        with open(pod.log, "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"

        def ready() -> str | None:
            if proc.poll() is not None:
                raise RuntimeError(f"{pod.name} exited {proc.returncode}; see {pod.log}")
            try:
                r = httpx.get(url + "/readyz", timeout=1.0)
            except httpx.HTTPError:
                return None
            return str(r.json()["pod_id"]) if r.status_code == 200 else None

        pod_id = wait_until(ready, 60, f"{pod.name} ready")
        with self.lock:
            pod.proc, pod.url, pod.pod_id = proc, url, pod_id
            self.by_url[url] = pod_id

    def urls(self) -> list[str]:
        with self.lock:
            return [p.url for p in self.pods if p.proc is not None and p.proc.poll() is None and not p.faulted]

    def pod_of(self, url: str) -> str | None:
        with self.lock:
            return next((pid for u, pid in self.by_url.items() if url.startswith(u)), None)

    def stop_all(self) -> None:
        for pod in self.pods:
            if pod.proc is not None and pod.proc.poll() is None:
                try:
                    os.kill(pod.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                pod.proc.kill()
                pod.proc.wait(10)
            if pod.proxy is not None:
                pod.proxy.close()


def _pg_target(url: str) -> tuple[str, int] | None:
    """The TCP address of a PostgreSQL URL, or None when it names none (a Unix socket): no partition fault then."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres") or not parts.hostname or parts.hostname.startswith("/"):
        return None
    return parts.hostname, parts.port or 5432


# ---------------------------------------------------------------------------------------------- recording


class Clock:
    """The store clock, read through the store; an estimate from the last reading when the store cannot answer."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.offset = 0.0
        self.now()

    def now(self) -> float:
        try:
            value = self.store.workspaces.now()
        except Exception:  # noqa: BLE001 - any failure: the store is unreachable right now
            return time.monotonic() + self.offset
        self.offset = value - time.monotonic()
        return value


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.operations: list[Operation] = []
        self.observations: list[Observation] = []
        self.pod_samples: list[PodSample] = []
        #: snapshot id → workspace id, of acknowledged checkpoints
        self.snapshots: dict[str, str] = {}
        #: snapshot id → project name, of the snapshots acknowledged durable writes named
        self.named: dict[str, str] = {}

    def add(self, **kwargs: Any) -> Operation:
        with self.lock:
            op = Operation(id=len(self.operations), **kwargs)
            self.operations.append(op)
            return op


@dataclass
class Answer:
    status: int | None
    body: Any
    pod: str | None
    code: str | None
    content: bytes = b""
    #: the project's lineage the answer named: its Tenure-Lineage header (a 412's: the problem's context)
    lineage: int | None = None


def _as_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def lineage_of(r: httpx.Response, body: Any) -> int | None:
    """The lineage an answer names: its ``Tenure-Lineage`` header, or a ``412 lineage-changed``'s current one."""
    found = _as_int(r.headers.get(LINEAGE))
    if found is None and r.status_code == 412 and isinstance(body, dict):
        context = body.get("context")
        found = _as_int(context.get("lineage")) if isinstance(context, dict) else None
    return found


class Client:
    """HTTP to the pods: 307 followed, 503 retried after Retry-After, a refused connection tried on another pod."""

    def __init__(self, pods: Pods, rng: random.Random, patience: float) -> None:
        self.pods, self.rng, self.patience = pods, rng, patience
        self.http = httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0), follow_redirects=False)

    def request(self, method: str, path: str, *, first: str | None = None, **kwargs: Any) -> Answer:
        """``method path`` on a random pod (``first``: that pod's URL first), redirects followed."""
        deadline = time.monotonic() + self.patience
        url: str | None = None if first is None else first + path
        last = Answer(None, None, None, "unreachable")
        while time.monotonic() < deadline:
            if url is None:
                urls = self.pods.urls()
                if not urls:
                    time.sleep(0.1)
                    continue
                url = self.rng.choice(urls) + path
            try:
                r = self.http.request(method, url, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                url = None  # never reached a pod: nothing happened
                continue
            except httpx.HTTPError:
                return Answer(None, None, self.pods.pod_of(url), "no-answer")  # sent; the outcome is unknown
            if r.status_code == 307 and "location" in r.headers:
                url = r.headers["location"]
                continue
            body = _json(r)
            code = body.get("code") if isinstance(body, dict) else None
            last = Answer(r.status_code, body, self.pods.pod_of(url), code, r.content, lineage_of(r, body))
            if r.status_code == 503:
                time.sleep(min(float(r.headers.get("retry-after", "1") or 1), 0.5))
                url = None
                continue
            return last
        return last

    def close(self) -> None:
        self.http.close()


def _json(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------- the workload


class Worker:
    """One project's client: operations one after another, and the project's folder content as far as it is known.

    The content is known from the kit's own acknowledged writes while the project's generation stays the one it
    was learned under (a move elsewhere restores the last checkpoint, so unacknowledged or uncheckpointed writes
    may be gone); when it is not known, the worker reads the folder back through the API.

    It also holds the project's lineage as a client would: the last one an answer named (``Tenure-Lineage``, or a
    ``412 lineage-changed``'s context). A seeded share of its writes asks to be durable and a share of its
    checkpoints is sent under that lineage (``Tenure-If-Lineage``); the choices come from a generator of their
    own, so the rest of a seed's workload is the same whatever the fractions."""

    def __init__(self, kit: Kit, name: str, rng: random.Random) -> None:
        self.kit, self.name, self.rng = kit, name, rng
        self.mix = random.Random(f"{kit.config.seed}:{name}:saved")
        self.path = f"/api/v1/projects/{TENANT}/{name}"
        self.project = f"{TENANT}/{name}"
        self.store = open_store(kit.config.db)
        self.clock = Clock(self.store)
        self.client = Client(kit.pods, rng, patience=2 * kit.config.lease_ttl + 5)
        self.files: dict[str, bytes] | None = {}
        self.known_at: int | None = None
        self.suspended = True  # INIT: nothing in the folder yet, whatever generation brings it
        self.counter = 0
        #: the lineage the last answer that named one named
        self.lineage: int | None = None
        #: held through each step, and by the kit's saved-write probes, which update the known content too
        self.lock = threading.Lock()
        #: cleared while the kit holds this client (:meth:`hold`): no step starts, so the kit gets the lock
        self.going = threading.Event()
        self.going.set()

    def generation(self) -> int | None:
        try:
            return ProjectStore(self.store).get(TENANT, self.name).generation
        except Exception:  # noqa: BLE001 - unreadable now: unknown
            return None

    def request(self, method: str, suffix: str, **kwargs: Any) -> Answer:
        answer = self.client.request(method, self.path + suffix, **kwargs)
        if answer.lineage is not None:
            self.lineage = answer.lineage
        return answer

    def op(
        self,
        kind: Kind,
        method: str,
        suffix: str,
        *,
        payload: dict[str, Any] | None = None,
        first: str | None = None,
        **kwargs: Any,
    ) -> tuple[Operation, Answer, int | None, int | None]:
        """One recorded request; ``payload``: what the request itself says (the answer's names are added),
        ``first``: the pod URL to send it to first."""
        before = self.generation()
        invoked = self.clock.now()
        answer = self.request(method, suffix, first=first, **kwargs)
        completed = self.clock.now()
        after = self.generation()
        if answer.status is None and answer.code == "no-answer":
            outcome, done = Outcome.UNKNOWN, None
        elif answer.status is not None and 200 <= answer.status < 300:
            outcome, done = Outcome.OK, completed
        else:
            outcome, done = Outcome.REFUSED, completed
        generation: int | None = None
        payload = dict(payload or {})
        body = answer.body if isinstance(answer.body, dict) else {}
        if answer.lineage is not None and kind in (Kind.WRITE, Kind.CHECKPOINT, Kind.BRING, Kind.SUSPEND):
            payload["lineage"] = answer.lineage
        if outcome is Outcome.OK and kind is Kind.BRING:
            generation = body.get("generation")
        if outcome is Outcome.OK and kind is Kind.CHECKPOINT:
            snapshot = body.get("snapshot") or {}
            payload["snapshot"] = snapshot.get("id")
            if not body.get("unchanged"):
                generation = snapshot.get("generation")
        if outcome is Outcome.OK and kind is Kind.WRITE and payload.get("durable"):
            payload["snapshot"] = body.get("snapshot")
        record = self.kit.recorder.add(
            kind=kind,
            project=self.project,
            pod=answer.pod,
            invoked=invoked,
            completed=done,
            outcome=outcome,
            generation=generation,
            code=None if outcome is Outcome.OK else (answer.code or str(answer.status)),
            payload=payload,
        )
        return record, answer, before, after

    def steady(self, before: int | None, after: int | None) -> bool:
        return self.files is not None and before is not None and before == after == self.known_at

    def resync(self) -> None:
        """Read the folder back through the API (it brings the project if nobody holds it).

        A SUSPENDED project is brought explicitly first: workspace requests do not undo a suspend (P-92).
        """
        before = self.generation()
        listing = self.request("GET", "/files")
        if listing.code == "project-suspended":
            self.op(Kind.BRING, "POST", "/bring")
            before = self.generation()
            listing = self.request("GET", "/files")
        if listing.status != 200 or not isinstance(listing.body, dict):
            return
        files: dict[str, bytes] = {}
        for entry in listing.body.get("entries", []):
            if entry.get("type") != "file":
                return
            r = self.request("GET", f"/files/{entry['name']}")
            if r.status != 200:
                return
            files[entry["name"]] = r.content
        after = self.generation()
        if before is not None and before == after:
            self.files, self.known_at, self.suspended = files, after, False

    def step(self) -> None:
        roll = self.rng.random()
        if self.suspended and self.files is not None:
            self.bring()
        elif roll < 0.5:
            self.write()
        elif roll < 0.78:
            self.checkpoint()
        elif roll < 0.86:
            self.op(Kind.READ_OWNER, "GET", "")
        elif roll < 0.94:
            self.suspend()
        else:
            self.bring()

    def bring(self) -> None:
        record, _, before, after = self.op(Kind.BRING, "POST", "/bring")
        if record.outcome is not Outcome.OK:
            self.files = None if record.outcome is Outcome.UNKNOWN else self.files
            return
        if self.suspended and self.files is not None and record.generation is not None and after == record.generation:
            self.known_at, self.suspended = after, False
        elif not self.steady(before, after):
            self.files = None

    def write(self, probe: tuple[str, bool, str] | None = None) -> Operation:
        """A file write; ``probe`` (path, durable, the pod's URL) is the kit's saved-write probe of a pod about to
        be faulted, sent to that pod first."""
        if self.files is None:
            self.resync()
        self.counter += 1
        extra: dict[str, Any] = {}
        url: str | None = None
        if probe is None:
            name = f"f{self.rng.randrange(5)}.txt"
            data = f"{self.name} #{self.counter} {self.rng.getrandbits(64):x}\n".encode() * self.rng.randint(1, 50)
            durable = self.mix.random() < self.kit.config.durable_fraction
        else:
            name, durable, url = probe
            data = f"{self.name} #{self.counter} {name} {os.urandom(8).hex()}\n".encode()
            extra = {"saved_probe": True}
        record, _, before, after = self.op(
            Kind.WRITE,
            "PUT",
            f"/files/{name}" + ("?durable=true" if durable else ""),
            payload={"path": name, "sha256": sha256(data), "durable": durable, **extra},
            first=url,
            content=data,
        )
        if durable:
            snapshot = record.payload.get("snapshot")
            if record.outcome is Outcome.OK and isinstance(snapshot, str):
                with self.kit.recorder.lock:
                    self.kit.recorder.named[snapshot] = self.name
        if record.outcome is Outcome.OK and self.steady(before, after):
            assert self.files is not None
            self.files[name] = data
        elif not (record.outcome is Outcome.REFUSED and record.code in REFUSED_BEFORE_WRITING) or not self.steady(
            before, after
        ):
            self.files = None  # it may have landed (write-unsaved: written, not saved): the content is not known
        return record

    def checkpoint(self, under: int | None = None) -> Operation:
        """A checkpoint, a seeded share of them under the lineage last answered; ``under``: the kit's probe after
        a fault, under that lineage (the one its saved-write probe's answer named)."""
        if self.files is None:
            self.resync()
        if under is None:
            conditional = self.lineage is not None and self.mix.random() < self.kit.config.lineage_fraction
            lineage, extra = self.lineage, {}
        else:
            conditional, lineage, extra = True, under, {"saved_probe": True}
        headers = {IF_LINEAGE: str(lineage)} if conditional else {}
        record, answer, before, after = self.op(
            Kind.CHECKPOINT,
            "POST",
            "/checkpoint",
            payload={"if_lineage": lineage, **extra} if conditional else {},
            headers=headers,
        )
        if record.outcome is not Outcome.OK:
            # a 412: the project started another lineage, so writes made since the last checkpoint may be gone
            if record.outcome is Outcome.UNKNOWN or record.code == "lineage-changed" or not self.steady(before, after):
                self.files = None
            return record
        snapshot = (answer.body or {}).get("snapshot") or {}
        if not isinstance(record.payload.get("snapshot"), str):
            return record
        with self.kit.recorder.lock:
            self.kit.recorder.snapshots[str(snapshot["id"])] = str(snapshot["workspace_id"])
        if self.steady(before, after):
            assert self.files is not None
            self.kit.digests[record.id] = digest_files(self.files)
        else:
            self.files = None
        return record

    def saved_probe(self, k: int, url: str) -> int | None:
        """Before pod ``url`` is killed, paused or cut: a durable write and a plain write of files of their own,
        sent to it first, between two of this client's steps (the caller holds it, :meth:`hold`; the known content
        follows them). The lineage the plain write was acknowledged under, or None."""
        self.write((f"probe-durable-{k}.txt", True, url))
        plain = self.write((f"probe-lineage-{k}.txt", False, url))
        lineage = plain.payload.get("lineage")
        return lineage if plain.outcome is Outcome.OK and isinstance(lineage, int) else None

    def lineage_probe(self, lineage: int) -> None:
        """After that fault: a checkpoint under the lineage the plain write was acknowledged under. A sound pod
        refuses it (412) when the project started another lineage, or its snapshot holds the write."""
        self.hold(None)
        try:
            self.checkpoint(under=lineage)
        finally:
            self.let_go()

    def hold(self, timeout: float | None) -> bool:
        """Hold this client between two steps: its step under way ends, no other starts until :meth:`let_go`.
        False (and nothing held) when the step did not end within ``timeout`` seconds."""
        self.going.clear()
        if self.lock.acquire(timeout=-1 if timeout is None else timeout):
            return True
        self.going.set()
        return False

    def let_go(self) -> None:
        self.lock.release()
        self.going.set()

    def suspend(self) -> None:
        record, _, before, after = self.op(Kind.SUSPEND, "POST", "/suspend")
        if record.outcome is Outcome.OK and self.steady(before, after):
            self.suspended, self.known_at = True, None
        elif record.outcome is not Outcome.REFUSED or not self.steady(before, after):
            self.files = None

    def run(self, until: float) -> None:
        while time.monotonic() < until and not self.kit.failed.is_set():
            self.going.wait()
            with self.lock:
                self.step()

    def close(self) -> None:
        self.client.close()
        self.store.close()


# ---------------------------------------------------------------------------------------------- the kit


class Kit:
    def __init__(self, config: ClusterConfig, say: Callable[[str], None] = lambda _: None) -> None:
        self.config, self.say = config, say
        self.rng = random.Random(config.seed)
        self.workdir = config.workdir or tempfile.mkdtemp(prefix="tenure-verify-")
        os.makedirs(self.workdir, exist_ok=True)
        self.objects = config.objects or f"file://{os.path.join(self.workdir, 'objects')}"
        self.pods = Pods(config, self.workdir, self.objects)
        self.recorder = Recorder()
        self.digests: dict[int, str] = {}
        self.report = Report(workdir=self.workdir, planted=config.plant, planted_bug=config.plant_bug)
        self.failed = threading.Event()
        self.stop_sampling = threading.Event()
        self.names = [f"p{i}" for i in range(config.projects)]
        self.workers: dict[str, Worker] = {}
        self.faults_begun = 0
        self.tick = config.pull_every + 2 * config.beat + 2 * config.sample_every + 1.0

    # ------------------------------------------------------------------ run

    def run(self) -> Report:
        started = time.monotonic()
        store = open_store(self.config.db)
        try:
            starters = [threading.Thread(target=self._start, args=(pod,), daemon=True) for pod in self.pods.pods]
            for t in starters:
                t.start()
            for t in starters:
                t.join()
            if self.failed.is_set():
                raise RuntimeError(f"a pod did not start; see the pod logs in {self.workdir}")
            self._phase("start", started)
            self.say(f"{len(self.pods.pods)} pods running; workdir {self.workdir}")
            self._create_projects()
            sampler = threading.Thread(target=self._sample, name="verify-sampler", daemon=True)
            sampler.start()
            workers = [Worker(self, name, random.Random(f"{self.config.seed}:{name}")) for name in self.names]
            self.workers = {w.name: w for w in workers}
            until = time.monotonic() + self.config.duration  # from the start of the workload, clients made
            threads = [threading.Thread(target=w.run, args=(until,), daemon=True) for w in workers]
            faults = threading.Thread(target=self._inject, args=(until,), name="verify-faults", daemon=True)
            for t in (*threads, faults):
                t.start()
            mark = time.monotonic()
            for t in (*threads, faults):
                t.join()
            for w in workers:
                w.close()
            self._phase("workload", mark)
            mark = time.monotonic()
            self._heal_all()
            self._suspend_all()
            self.stop_sampling.set()
            sampler.join()
            self._phase("suspend", mark)
            mark = time.monotonic()
            final = self._final_heads(store)
            restored, files = self._restore_all(store, final)
            self._phase("restore", mark)
        finally:
            self.pods.stop_all()
            store.close()
        history = History(
            operations=list(self.recorder.operations),
            observations=list(self.recorder.observations),
            pods=list(self.recorder.pod_samples),
            restored=restored,
            ttl=self.config.lease_ttl,
            tick=self.tick,
            files=files,
            final=final,
        )
        history = self._with_digests(history)
        if self.config.plant is not None:
            history = plant_violation(history, self.config.plant)
        self.report.violations = check(history)
        with open(os.path.join(self.workdir, "history.json"), "w", encoding="utf-8") as fh:
            json.dump(history_document(history), fh)
        self._count(history)
        self.report.seconds = time.monotonic() - started
        return self.report

    def _start(self, pod: Pod) -> None:
        try:
            self.pods.start(pod)
        except Exception:  # noqa: BLE001 - reported by run()
            self.failed.set()

    def _phase(self, name: str, since: float) -> None:
        self.report.phases[name] = round(time.monotonic() - since, 2)

    def _create_projects(self) -> None:
        client = Client(self.pods, self.rng, patience=10)
        clock_store = open_store(self.config.db)
        clock = Clock(clock_store)
        try:
            for name in [*self.names, "closing"]:
                invoked = clock.now()
                r = client.request(
                    "POST", "/api/v1/projects", json={"tenant": TENANT, "name": name, "lifecycle_type": "PERMANENT"}
                )
                if r.status != 201:
                    raise RuntimeError(f"cannot create project {TENANT}/{name}: {r.status} {r.body}")
            # one project lives and closes at the start: close is exercised, its checkpoints disposed by design
            steps: tuple[tuple[Kind, str, str, dict[str, Any]], ...] = (
                (Kind.BRING, "POST", "/bring", {}),
                (Kind.WRITE, "PUT", "/files/a.txt", {"content": b"closing"}),
                (Kind.CHECKPOINT, "POST", "/checkpoint", {}),
                (Kind.CLOSE, "POST", "/close", {}),
            )
            for kind, method, suffix, kw in steps:
                written = {"path": "a.txt", "sha256": sha256(b"closing"), "durable": False}
                invoked = clock.now()
                a = client.request(method, f"/api/v1/projects/{TENANT}/closing{suffix}", **kw)
                ok = a.status is not None and 200 <= a.status < 300
                self.recorder.add(
                    kind=kind,
                    project=f"{TENANT}/closing",
                    pod=a.pod,
                    invoked=invoked,
                    completed=clock.now() if a.status is not None else None,
                    outcome=Outcome.OK if ok else (Outcome.REFUSED if a.status is not None else Outcome.UNKNOWN),
                    code=None if ok else a.code,
                    payload={"snapshot": (a.body or {}).get("snapshot", {}).get("id")}
                    if ok and kind is Kind.CHECKPOINT
                    else written
                    if kind is Kind.WRITE
                    else {},
                )
        finally:
            client.close()
            clock_store.close()

    # ------------------------------------------------------------------ sampling

    def _sample(self) -> None:
        store = open_store(self.config.db)
        clock = Clock(store)
        ownership, projects, registry = Ownership(store), ProjectStore(store), PodRegistry(store)
        try:
            while not self.stop_sampling.is_set():
                try:
                    start = store.workspaces.now()
                    rows = []
                    for name in [*self.names, "closing"]:
                        # the owner between two reads of the project: a claim in between (it raises the
                        # generation) would pair one holder with another's generation, so the sample is dropped
                        p = projects.get(TENANT, name)
                        owner = ownership.owner(p.id, self.config.lease_ttl)
                        if projects.get(TENANT, name).generation != p.generation:
                            continue
                        wants = p.status.value in WANTS_OWNER_STATUSES and (
                            p.lifecycle_type.value == "PERMANENT" or p.owner_required
                        )
                        rows.append((f"{TENANT}/{name}", owner.pod_id, owner.live, p.generation, wants))
                    pods = registry.list_with_liveness(self.config.liveness_ttl)
                    end = store.workspaces.now()
                except Exception:  # noqa: BLE001 - the store is unreachable now: no sample
                    time.sleep(self.config.sample_every)
                    continue
                with self.recorder.lock:
                    for project, holder, live, generation, wants in rows:
                        self.recorder.observations.append(
                            Observation(end, project, holder, live, generation, wants, read_from=start)
                        )
                    for pod, live in pods:
                        room = pod.status == "RUNNING" and pod.capacity - pod.score >= 1
                        self.recorder.pod_samples.append(PodSample(end, pod.id, live, room))
                self.stop_sampling.wait(self.config.sample_every)
        finally:
            clock.store.close()

    # ------------------------------------------------------------------ faults

    def _available_faults(self) -> list[str]:
        wanted = [f for f in self.config.faults if f in FAULTS]
        available = []
        for fault in wanted:
            if fault == "skew" and libfaketime() is None:
                self.report.skipped_faults[fault] = "libfaketime is not installed (Debian: apt-get install faketime)"
            elif fault == "pg-restart" and not self.config.pg_restart_cmd:
                self.report.skipped_faults[fault] = "no --pg-restart-cmd given"
            elif fault == "partition" and any(p.proxy is None for p in self.pods.pods):
                self.report.skipped_faults[fault] = "the store URL names no TCP address to proxy"
            else:
                available.append(fault)
        return available

    def _inject(self, until: float) -> None:
        available = self._available_faults()
        ttl = self.config.lease_ttl
        self.fault_store = open_store(self.config.db)
        try:
            # a first quiet period, then one fault at a time, every fault kind before any repeats
            queue: list[str] = []
            if not self.failed.wait(min(ttl, self.config.duration / 4)):
                while available and time.monotonic() + 2 * ttl < until:
                    if not queue:
                        queue = self.rng.sample(available, len(available))
                    fault = queue.pop()
                    pod = self._target(fault)
                    began = time.monotonic()
                    frozen = self._freeze() if fault in SAVED_PROBE_FAULTS else []
                    if frozen and not self._held(pod):  # what it ran moved while the clients finished their steps
                        pod = self.rng.choice([p for p in self.pods.pods if self._held(p)] or [pod])
                    self.say(f"fault {fault} on {pod.name}")
                    detail = self._fault(fault, pod, frozen)
                    self.report.faults.append(
                        {"fault": fault, "pod": pod.name, "seconds": round(time.monotonic() - began, 2), **detail}
                    )
                    if self.failed.wait(self.rng.uniform(0.5, 1.5) * ttl):
                        break
        except Exception as exc:  # noqa: BLE001 - a fault the kit could not carry out ends the run
            self.report.faults.append({"fault": "error", "detail": f"{type(exc).__name__}: {exc}"})
            self.failed.set()
        finally:
            self.fault_store.close()

    def _held(self, pod: Pod) -> dict[str, int]:
        """The kit's projects RUNNING on ``pod`` now (name → generation); empty when the store cannot say."""
        try:
            held = Ownership(self.fault_store).find_running_by_home_pod_id(pod.pod_id)
        except Exception:  # noqa: BLE001 - the store is unreachable now: nothing known
            return {}
        return {p.name: p.generation for p in held if p.tenant == TENANT and p.name in self.names}

    def _target(self, fault: str) -> Pod:
        """A random pod; for a kill, a pause or a cut, one a project runs on (so its takeover matters), waiting up
        to twice the TTL for one while the workload has every project suspended."""
        pods = self.pods.pods
        if fault in ("kill", "stop", "renewal-pause", "partition"):
            deadline = time.monotonic() + 2 * self.config.lease_ttl
            while not (holding := [p for p in pods if self._held(p)]) and time.monotonic() < deadline:
                time.sleep(0.1)
            pods = holding or pods
        return self.rng.choice(pods)

    def _probe(self, pod: Pod, held: dict[str, int]) -> list[int]:
        """Straight to ``pod``, back from a pause or a cut past the TTL: a write and a checkpoint of each project
        it held before that another pod has since taken over (a newer generation sampled), no redirect followed.

        A sound pod redirects (307) or refuses them; one that does not check its generation acknowledges the
        checkpoint under the generation it held, older than the newest one issued — a ``stale-write``."""
        ttl = self.config.lease_ttl
        clock = Clock(self.fault_store)
        recorded: list[int] = []
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0), follow_redirects=False) as http:
            for name, generation in sorted(held.items()):
                project = f"{TENANT}/{name}"

                def taken_over(project: str = project, generation: int = generation) -> bool:
                    with self.recorder.lock:
                        return any(
                            o.project == project and o.generation > generation and o.live and o.holder != pod.pod_id
                            for o in self.recorder.observations[-50 * (len(self.names) + 1) :]
                        )

                try:
                    wait_until(taken_over, 2 * ttl, f"{project} taken over")
                except TimeoutError:
                    continue  # nobody took it over: nothing stale to probe
                path = f"{pod.url}/api/v1/projects/{project}"
                data = f"probe {generation}\n".encode()
                write = self._probe_one(
                    http,
                    clock,
                    pod,
                    project,
                    Kind.WRITE,
                    "PUT",
                    f"{path}/files/probe.txt",
                    {"content": data},
                    {"path": "probe.txt", "sha256": sha256(data), "durable": False},
                )
                recorded.append(write.id)
                if write.outcome is not Outcome.OK:
                    continue
                # the folder changed: its checkpoint is a new snapshot, unless refused; a refusal other than "not
                # here" (the new owner's own checkpoint or suspend is under way) is asked again a few times
                for _ in range(4):
                    done = self._probe_one(http, clock, pod, project, Kind.CHECKPOINT, "POST", f"{path}/checkpoint", {})
                    recorded.append(done.id)
                    if done.outcome is not Outcome.REFUSED or done.code in ("redirected", "not-running-here"):
                        break
                    time.sleep(ttl / 4)
        return recorded

    def _probe_one(
        self,
        http: httpx.Client,
        clock: Clock,
        pod: Pod,
        project: str,
        kind: Kind,
        method: str,
        url: str,
        kw: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> Operation:
        deadline = time.monotonic() + self.config.lease_ttl
        invoked = clock.now()
        while True:
            try:
                r: httpx.Response | None = http.request(method, url, **kw)
            except httpx.HTTPError:
                r = None
            if r is None or r.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # not served yet (the store is coming back): asked again, still only this pod
        completed = clock.now() if r is not None else None
        body = _json(r) if r is not None else None
        body = body if isinstance(body, dict) else {}
        ok = r is not None and 200 <= r.status_code < 300
        generation: int | None = None
        payload: dict[str, Any] = {"probe": True, **(extra or {})}
        if r is not None and not ok and r.status_code != 307:
            payload["message"] = str(body.get("detail") or r.status_code)
        if r is not None and (lineage := lineage_of(r, body)) is not None:
            payload["lineage"] = lineage
        if ok and kind is Kind.CHECKPOINT:
            snapshot = body.get("snapshot") or {}
            payload["snapshot"] = snapshot.get("id")
            if not body.get("unchanged"):
                generation = snapshot.get("generation")
            if isinstance(snapshot.get("id"), str):
                with self.recorder.lock:
                    self.recorder.snapshots[str(snapshot["id"])] = str(snapshot["workspace_id"])
        if r is None:
            outcome, code = Outcome.UNKNOWN, "no-answer"
        elif ok:
            outcome, code = Outcome.OK, None
        else:
            outcome = Outcome.REFUSED
            code = "redirected" if r.status_code == 307 else str(body.get("code") or r.status_code)
        record = self.recorder.add(
            kind=kind,
            project=project,
            pod=pod.pod_id,
            invoked=invoked,
            completed=completed,
            outcome=outcome,
            generation=generation,
            code=code,
            payload=payload,
        )
        by = self.report.probes.setdefault(kind.value, {})
        key = outcome.value if code is None else code
        by[key] = by.get(key, 0) + 1
        return record

    def _freeze(self) -> list[Worker]:
        """The clients, each held between two of its steps (its lock taken); one whose step does not end within
        a TTL in all (a request waiting out a silent pod) is left running."""
        deadline = time.monotonic() + self.config.lease_ttl
        return [w for _, w in sorted(self.workers.items()) if w.hold(max(deadline - time.monotonic(), 0.01))]

    def _fault(self, fault: str, pod: Pod, frozen: list[Worker]) -> dict[str, Any]:
        """``fault`` on ``pod``; a kill, a pause or a cut with the saved-write probes around it.

        ``frozen``: the clients held between two steps (:meth:`_freeze`). Those of the projects ``pod`` runs get
        a durable and a plain write (:meth:`Worker.saved_probe`) and stay held until the fault has struck, so no
        checkpoint of theirs comes between; the others go on at once. After the fault each probed project gets a
        checkpoint under the lineage its plain write was acknowledged under (:meth:`Worker.lineage_probe`,
        routed as any request: the project's owner now answers)."""
        locked = list(frozen)

        def struck() -> None:
            while locked:
                locked.pop().let_go()

        lineages: dict[str, int] = {}
        try:
            runs = self._held(pod) if frozen else {}
            held = [w for w in frozen if w.name in runs]
            for worker in [w for w in frozen if w.name not in runs]:
                locked.remove(worker)
                worker.let_go()
            if held:
                self.faults_begun += 1
            for worker in held:
                if (lineage := worker.saved_probe(self.faults_begun, pod.url)) is not None:
                    lineages[worker.name] = lineage
            detail = self._fault_only(fault, pod, struck)
        finally:
            struck()
        for name, lineage in sorted(lineages.items()):
            self.workers[name].lineage_probe(lineage)
        if fault not in SAVED_PROBE_FAULTS:
            return detail
        return {**detail, "saved_probes": len(held), "saved_probes_skipped": len(runs) - len(held)}

    def _fault_only(self, fault: str, pod: Pod, struck: Callable[[], None]) -> dict[str, Any]:
        ttl = self.config.lease_ttl
        proc = pod.proc
        assert proc is not None
        pod.faulted = True
        try:
            if fault == "kill":
                proc.kill()
                struck()
                proc.wait(10)
                self.pods.start(pod)
            elif fault == "stop":
                held = self._held(pod)
                os.kill(proc.pid, signal.SIGSTOP)
                struck()
                time.sleep(ttl * 1.5)  # paused past the lease TTL: the others take its projects over
                os.kill(proc.pid, signal.SIGCONT)
                return {"probes": len(self._probe(pod, held))}
            elif fault == "renewal-pause":
                held = self._held(pod)
                Path(pod.pause_trigger).touch()
                wait_until(lambda: _stopped(proc.pid), 10 * self.config.beat + 5, f"{pod.name} paused in its renewal")
                struck()
                time.sleep(ttl * 1.5)  # paused holding its pods row, past the TTL: the others take over regardless
                os.kill(proc.pid, signal.SIGCONT)
                return {"probes": len(self._probe(pod, held))}
            elif fault == "drain":
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(60)
                self.pods.start(pod)
                return {"drain_exit": code}
            elif fault == "partition":
                assert pod.proxy is not None
                held = self._held(pod)
                pod.proxy.cut()
                struck()
                time.sleep(ttl * 1.5)  # cut past the lease TTL
                pod.proxy.heal()
                return {"probes": len(self._probe(pod, held))}
            elif fault == "skew":
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
                skew = self.rng.choice(["+30s", "-30s"])
                self.pods.start(pod, skew=skew)
                return {"skew": skew}
            elif fault == "pg-restart":
                assert self.config.pg_restart_cmd is not None
                subprocess.run(shlex.split(self.config.pg_restart_cmd), check=True, timeout=120)
                return {"command": self.config.pg_restart_cmd}
            return {}
        finally:
            pod.faulted = False

    def _heal_all(self) -> None:
        for pod in self.pods.pods:
            if pod.proxy is not None:
                pod.proxy.heal()
            if pod.proc is not None and pod.proc.poll() is None:
                os.kill(pod.proc.pid, signal.SIGCONT)
            pod.faulted = False

    # ------------------------------------------------------------------ the end: suspend, restore

    def _suspend_all(self) -> None:
        client = Client(self.pods, self.rng, patience=4 * self.config.lease_ttl + 10)
        store = open_store(self.config.db)
        clock = Clock(store)
        try:
            for name in self.names:
                invoked = clock.now()
                a = client.request("POST", f"/api/v1/projects/{TENANT}/{name}/suspend")
                ok = a.status is not None and 200 <= a.status < 300
                self.recorder.add(
                    kind=Kind.SUSPEND,
                    project=f"{TENANT}/{name}",
                    pod=a.pod,
                    invoked=invoked,
                    completed=clock.now() if a.status is not None else None,
                    outcome=Outcome.OK if ok else (Outcome.REFUSED if a.status is not None else Outcome.UNKNOWN),
                    code=None if ok else a.code,
                )
        finally:
            client.close()
            store.close()

    def _final_heads(self, store: Store) -> dict[str, str | None]:
        """Per project, the snapshot holding its final state: its head once everything is suspended (None: the
        store could not say, or it has none)."""
        projects = ProjectStore(store)
        final: dict[str, str | None] = {}
        for name in self.names:
            try:
                workspace = store.workspaces.workspace(projects.get(TENANT, name).workspace_id)
            except Exception:  # noqa: BLE001 - unreadable: the final state is not known
                final[f"{TENANT}/{name}"] = None
                continue
            final[f"{TENANT}/{name}"] = workspace.head_snapshot_id
        return final

    def _restore_all(
        self, store: Store, final: dict[str, str | None]
    ) -> tuple[dict[str, str | None], dict[str, dict[str, str] | None]]:
        """Restore every snapshot the rules read: acknowledged checkpoints' (their digests: ``restored``), the
        ones acknowledged durable writes named and every project's final head (their files: ``files``)."""
        objects = open_object_store(self.objects)
        scratch = os.path.join(self.workdir, "restore")
        service = WorkspaceService(store, objects, os.path.join(self.workdir, "kit"))
        workspaces: dict[str, str | None] = dict(self.recorder.snapshots)
        for snapshot in [*self.recorder.named, *(s for s in final.values() if s is not None)]:
            if snapshot not in workspaces:
                try:
                    workspaces[snapshot] = store.snapshots.get(snapshot).workspace_id
                except Exception:  # noqa: BLE001 - no such snapshot (or unreadable): it does not restore
                    workspaces[snapshot] = None
        restored: dict[str, str | None] = {}
        files: dict[str, dict[str, str] | None] = {}
        for i, (snapshot, workspace) in enumerate(sorted(workspaces.items())):
            dest = os.path.join(scratch, str(i))
            try:
                if workspace is None:
                    raise LookupError(f"no snapshot {snapshot}")
                service.restore(workspace, dest, snapshot=snapshot)
                content = read_folder(dest)
                files[snapshot] = {path: sha256(data) for path, data in content.items()}
                digest: str | None = digest_files(content)
            except Exception:  # noqa: BLE001 - any failure: this snapshot does not restore
                files[snapshot], digest = None, None
            finally:
                shutil.rmtree(dest, ignore_errors=True)
            if snapshot in self.recorder.snapshots:
                restored[snapshot] = digest
        self.report.restored = sum(1 for v in restored.values() if v is not None)
        self.report.final_states = sum(1 for s in final.values() if s is not None and files.get(s) is not None)
        return restored, files

    def _with_digests(self, history: History) -> History:
        operations = [
            replace(op, payload={**op.payload, "digest": self.digests[op.id]}) if op.id in self.digests else op
            for op in history.operations
        ]
        return replace(history, operations=operations)

    def _count(self, history: History) -> None:
        counts: dict[str, dict[str, int]] = {}
        for op in history.operations:
            by = counts.setdefault(op.kind.value, {})
            by[op.outcome.value] = by.get(op.outcome.value, 0) + 1
        self.report.operations = counts
        self.report.observations = len(history.observations)
        acknowledged = [op for op in history.operations if op.kind is Kind.CHECKPOINT and op.outcome is Outcome.OK]
        self.report.checkpoints = len(acknowledged)
        self.report.checkpoints_with_digest = sum(1 for op in acknowledged if "digest" in op.payload)
        self.report.tick = self.tick
        for op in history.operations:
            key = op.outcome.value if op.code is None else op.code
            if op.payload.get("saved_probe"):
                probes = self.report.saved_probes.setdefault(op.kind.value, {})
                probes[key] = probes.get(key, 0) + 1
            if op.kind is Kind.WRITE and op.payload.get("durable") is True:
                by = self.report.durable_writes
            elif op.kind is Kind.CHECKPOINT and "if_lineage" in op.payload:
                by = self.report.lineage_checkpoints
            else:
                continue
            by[key] = by.get(key, 0) + 1


# ---------------------------------------------------------------------------------------------- planting


def plant_violation(history: History, rule: str) -> History:
    """``history`` with one violation of ``rule`` written into the record (the pods are never changed)."""
    ops = list(history.operations)
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(sorted(RULES))}")
    holding = [
        o for o in history.observations if o.live and o.holder is not None and not o.project.endswith("/closing")
    ]
    if rule == SINGLE_HOLDER:
        # a write acknowledged by another pod between two samples of one unbroken live tenure
        ordered = sorted(history.observations, key=lambda x: (x.project, x.time))
        held = set(holding)
        pairs = [
            (a, b)
            for a, b in zip(ordered, ordered[1:])
            if a in held and b in held and (a.project, a.holder, a.generation) == (b.project, b.holder, b.generation)
        ]
        a, b = pairs[len(pairs) // 2]
        op = Operation(len(ops), Kind.WRITE, a.project, "planted-pod", a.time, b.earliest, Outcome.OK)
        return replace(history, operations=[*ops, op])
    if rule == GENERATION_ORDER:
        # a sample whose generation went back
        o = max(holding, key=lambda x: (x.generation, x.time))
        back = Observation(o.time + 0.001, o.project, None, False, o.generation - 1, wants_owner=False)
        return replace(history, observations=[*history.observations, back])
    if rule == STALE_WRITE:
        o = max(holding, key=lambda x: (x.generation, x.time))
        op = Operation(
            len(ops), Kind.CHECKPOINT, o.project, None, o.time + 0.001, o.time + 0.002, Outcome.OK, o.generation - 1
        )  # by an unnamed pod: only the generation is stale, no second holder is claimed
        return replace(history, operations=[*ops, op])
    if rule == CHECKPOINT_RESTORABLE:
        restored = dict(history.restored)
        snapshot = next((s for s, d in sorted(restored.items()) if d is not None), "planted-snapshot")
        restored[snapshot] = "planted-damage"
        extra: list[Operation] = []
        if snapshot == "planted-snapshot":
            extra.append(
                Operation(
                    len(ops), Kind.CHECKPOINT, "planted/p", None, 0.0, 0.0, Outcome.OK, payload={"snapshot": snapshot}
                )
            )
        return replace(history, operations=[*ops, *extra], restored=restored)
    if rule in (DURABLE_WRITE_LOST, LINEAGE_CHECKPOINT_MISSES_WRITE):
        # a write of a project of its own, acknowledged (durable, or under lineage 1), and a snapshot without it:
        # the one the durable write named, or the one a checkpoint acknowledged under lineage 1 named
        at = max([0.0, *(o.completed or o.invoked for o in ops), *(o.time for o in history.observations)]) + 1.0
        snapshot = f"planted-{rule}"
        durable = rule == DURABLE_WRITE_LOST
        written = {"path": "planted.txt", "sha256": "planted-bytes", "durable": durable, "lineage": 1}
        project = f"planted/{rule}"
        planted = [
            Operation(
                len(ops),
                Kind.WRITE,
                project,
                None,
                at,
                at + 0.001,
                Outcome.OK,
                payload={**written, "snapshot": snapshot} if durable else written,
            )
        ]
        restored = dict(history.restored)
        if not durable:
            planted.append(
                Operation(
                    len(ops) + 1,
                    Kind.CHECKPOINT,
                    project,
                    None,
                    at + 0.002,
                    at + 0.003,
                    Outcome.OK,
                    payload={"snapshot": snapshot, "if_lineage": 1, "lineage": 1},
                )
            )
            restored[snapshot] = "planted"
        files = {**history.files, snapshot: {}}
        return replace(history, operations=[*ops, *planted], restored=restored, files=files)
    assert rule == OWNERLESS
    last = max(history.observations, key=lambda x: x.time)
    span = history.ttl + history.tick + 1.0
    steps = 20
    gap = [Observation(last.time + span * k / steps, "planted/ownerless", None, False, 1) for k in range(steps + 1)]
    room = [PodSample(g.time, "planted-pod", True, True) for g in gap]
    return replace(history, observations=[*history.observations, *gap], pods=[*history.pods, *room])


def history_document(history: History) -> dict[str, Any]:
    """The recorded history as one JSON-able document (written to ``<workdir>/history.json``)."""
    return {
        "ttl": history.ttl,
        "tick": history.tick,
        "operations": [op.to_dict() for op in history.operations],
        "observations": [
            [o.time, o.read_from, o.project, o.holder, o.live, o.generation, o.wants_owner]
            for o in history.observations
        ],
        "pods": [[p.time, p.pod, p.live, p.room] for p in history.pods],
        "restored": dict(history.restored),
        "files": {snapshot: None if files is None else dict(files) for snapshot, files in history.files.items()},
        "final": dict(history.final),
    }


def run_cluster(config: ClusterConfig, say: Callable[[str], None] = lambda _: None) -> Report:
    """Run the kit once (see the module's doc)."""
    if config.plant is not None and config.plant not in RULES:
        raise ValueError(f"unknown rule {config.plant!r}")
    if config.plant_bug is not None and config.plant_bug not in BUGS:
        raise ValueError(f"unknown planted bug {config.plant_bug!r}")
    return Kit(config, say).run()
