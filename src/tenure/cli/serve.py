"""``tenure serve``: run a pod (the daemon) on this host."""

from __future__ import annotations

import click

from tenure.cli.context import services
from tenure.cli.durations import Duration
from tenure.defaults import BEAT_S, LEASE_TTL_S, LIVENESS_TTL_S, TICK_S
from tenure.errors import InvalidInputError
from tenure.pod.durable import DEFAULT_AUTOSAVE_S

__all__ = ["serve"]


def _labels(value: str | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in filter(None, (value or "").split(",")):
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(
                f"label {part!r} is not KEY=VALUE", code="bad-labels", hint="e.g. --labels zone=eu,gpu=yes"
            )
        labels[key.strip()] = val.strip()
    return labels


@click.command("serve")
@click.option("--listen", default="127.0.0.1:8470", show_default=True, help="HOST:PORT of the HTTP API.")
@click.option("--labels", default="", help="This pod's labels, KEY=VALUE,... (placement selectors match them).")
@click.option("--capacity", type=float, default=100.0, show_default=True, help="Score this pod can hold.")
@click.option("--no-self-pull", is_flag=True, help="Do not claim unowned projects at start-up.")
@click.option("--pull-every", type=float, default=None, help="Also pull unowned projects every SECONDS.")
@click.option("--engine", "engines", multiple=True, help="An engine: a registered name or module:factory.")
@click.option("--beat", "beat_interval", type=float, default=BEAT_S, show_default=True, help="Heartbeat every SECONDS.")
@click.option("--lease-ttl", type=float, default=LEASE_TTL_S, show_default=True, help="Project lease TTL in seconds.")
@click.option(
    "--liveness-ttl", type=float, default=LIVENESS_TTL_S, show_default=True, help="Pod liveness TTL in seconds."
)
@click.option(
    "--public-url", default=None, help="URL other pods and clients reach this pod at (default from --listen)."
)
@click.option("--tick", type=float, default=TICK_S, show_default=True, help="Distributor tick in SECONDS (as master).")
@click.option("--max-moves", type=int, default=100, show_default=True, help="At most this many placements per tick.")
@click.option("--master-ttl", type=float, default=None, help="Master lease TTL in SECONDS (default: the lease TTL).")
@click.option("--no-master", is_flag=True, help="Never take the master role (never place projects).")
@click.option(
    "--recovery-window",
    type=Duration(),
    default="7d",
    show_default=True,
    help="How long preserved deltas (tenure mounts) are kept on this host before they are deleted.",
)
@click.option(
    "--history-days",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="DAYS",
    help="Keep ownership timeline events this many days (the newest 100 of each project are always kept).",
)
@click.option(
    "--no-change-journal",
    is_flag=True,
    help="Checkpoints walk each running project's whole folder instead of listing what its change journal names.",
)
@click.option(
    "--journal-walk-every",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    metavar="N",
    help="Every N-th checkpoint of a project walks its whole folder all the same.",
)
@click.option(
    "--autosave",
    type=click.FloatRange(min=0),
    default=DEFAULT_AUTOSAVE_S,
    show_default=True,
    metavar="SECONDS",
    help="Checkpoint each running project whose folder changed at most this often (0: off); a project's own"
    " policy (tenure project set-autosave) wins.",
)
@click.option(
    "--session-ttl",
    type=click.FloatRange(min=0, min_open=True),
    default=3600.0,
    show_default=True,
    metavar="SECONDS",
    help="An unbound session not created, bound or unbound for this long expires, with the demand it made.",
)
@click.option(
    "--min-free-space",
    "min_free_mib",
    type=click.FloatRange(min=0),
    default=64.0,
    show_default=True,
    metavar="MIB",
    help="With less free space than this on the data folder the pod is not ready and claims nothing new.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="A connection whose request headers are not complete this long after it opened is closed.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=8),
    default=1000,
    show_default=True,
    help="Open API connections at most (kept below the descriptor limit); over it the oldest waiting one goes.",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Log lines.")
@click.pass_context
def serve(
    ctx: click.Context,
    listen: str,
    labels: str,
    capacity: float,
    no_self_pull: bool,
    pull_every: float | None,
    engines: tuple[str, ...],
    beat_interval: float,
    lease_ttl: float,
    liveness_ttl: float,
    public_url: str | None,
    tick: float,
    max_moves: int,
    master_ttl: float | None,
    no_master: bool,
    recovery_window: float,
    history_days: float,
    no_change_journal: bool,
    journal_walk_every: int,
    autosave: float,
    session_ttl: float,
    min_free_mib: float,
    header_timeout: float,
    max_connections: int,
    log_format: str,
) -> None:
    """Run a pod: heartbeat and leases, boot pull, engines, drain on SIGTERM, and the HTTP API.

    With no options it runs on the embedded default (SQLite and a local
    object folder under ./.tenure) and prints where its API is.
    """
    from tenure.pod.daemon import bind_listen, configure_logging, is_loopback, run, split_listen
    from tenure.pod.runtime import PodRuntime, ServeConfig

    host, port = split_listen(listen)
    refuse_wildcard_without_public_url(listen, host, port, public_url)
    svc = services(ctx)
    config = ServeConfig(
        data_dir=svc.config.data_dir,
        history_days=history_days,
        listen=listen,
        labels=_labels(labels),
        capacity=capacity,
        self_pull=not no_self_pull,
        pull_every=pull_every,
        beat_interval=beat_interval,
        lease_ttl=lease_ttl,
        liveness_ttl=liveness_ttl,
        public_url=public_url,
        recovery_window=recovery_window,
        tick=tick,
        max_moves=max_moves,
        master_ttl=master_ttl,
        master=not no_master,
        change_journal=not no_change_journal,
        journal_walk_every=journal_walk_every,
        autosave=autosave,
        session_ttl=session_ttl,
        min_free_space=int(min_free_mib * (1 << 20)),
        header_timeout=header_timeout,
        max_connections=max_connections,
    )
    open_without_tokens(svc.store, host, is_loopback(host))
    # the listen address first: a taken port is refused before this pod registers, reconciles or claims a thing
    sock = bind_listen(host, port)
    try:
        if port == 0:  # the port the system chose is the one others reach this pod at
            port = int(sock.getsockname()[1])
            config.listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        configure_logging(log_format)
        loaded = load(engines)
        node = PodRuntime(config, svc.store, svc.objects, engines=loaded)
        node.start(running=False)  # RUNNING once the API serves (tenure.pod.daemon.run)
    except BaseException:
        sock.close()
        raise
    from tenure.api.app import create_app

    app = create_app(node)

    def announce(url: str) -> None:
        click.echo(f"tenure serve: pod {node.pod.pod_id} on {node.pod.node_name}; API at {url}", err=True)
        click.echo(f"  data {config.data_dir}   store {svc.config.db_url}   (Ctrl-C drains and stops)", err=True)

    ctx.exit(run(node, app, host, port, announce=announce, sock=sock))


def load(specs: tuple[str, ...]) -> list:  # type: ignore[type-arg]
    if not specs:
        return []
    from tenure.engines import load_engines

    return list(load_engines(list(specs)))


def refuse_wildcard_without_public_url(listen: str, host: str, port: int, public_url: str | None) -> None:
    """A wildcard listen (``0.0.0.0``, ``[::]``) names no address to reach the pod at: ``--public-url`` must."""
    import ipaddress

    from tenure.errors import ConfigurationError

    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard and not public_url:
        raise ConfigurationError(
            f"--listen {listen} listens on every address of this host and names none that other pods and"
            " clients can reach: without --public-url, redirects and placements would point at"
            f" http://{listen}",
            code="public-url-required",
            listen=listen,
            hint=f"pass --public-url http://HOST:{port} with a name or address of this host that others reach",
        )


def open_without_tokens(store: object, host: str, loopback: bool) -> None:
    """Refuse a non-loopback listen while no API token exists (the API would be open to the network)."""
    if loopback:
        return
    from tenure.errors import ConfigurationError
    from tenure.pod.tokens import TokenStore

    if not TokenStore(store).any_exist():  # type: ignore[arg-type]
        raise ConfigurationError(
            f"refusing to listen on {host} while no API token exists: the API would be open to the network",
            code="open-listen",
            hint="create a token first (`tenure token create --admin`), or listen on 127.0.0.1",
        )
