"""Pod runtimes in this process (``tenure serve`` without its own server): start one, stop them all."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from tenure.errors import TenureError
from tenure.objects.local import LocalObjectStore
from tenure.pod.runtime import PodRuntime, ServeConfig
from tenure.store import Store


def stop_all(nodes: Iterable[PodRuntime]) -> None:
    """Stop every pod; one the test stopped already, or one that never started, is fine."""
    for node in nodes:
        try:
            node.stop()
        except TenureError:
            pass


def pod_maker(
    store: Store, tmp_path: Path, made: list[PodRuntime], *, ttl: float, start: bool = False
) -> Callable[..., PodRuntime]:
    """Makes pods on one store, each with its own data folder ``tmp_path/NAME`` and a shared object folder
    (``objects`` unless told), no self pull, a lease TTL of ``ttl`` (the liveness TTL half of it); started
    when ``start``. Every pod made is appended to ``made`` (for :func:`stop_all`)."""

    def build(name: str, *, objects: str = "objects", **options: object) -> PodRuntime:
        settings: dict[str, object] = {"self_pull": False, "lease_ttl": ttl, "liveness_ttl": ttl / 2}
        settings.update(options)
        config = ServeConfig(data_dir=str(tmp_path / name), **settings)  # type: ignore[arg-type]
        pod = PodRuntime(config, store, LocalObjectStore(str(tmp_path / objects)))
        made.append(pod)
        if start:
            pod.start()
        return pod

    return build


def running_node(store: Store, tmp_path: Path, **options: object) -> Iterator[PodRuntime]:
    """A fixture's body: one started pod (data folder ``a``, a local object folder, no self pull, a 60 s
    lease unless ``options`` say otherwise), stopped at the end."""
    settings: dict[str, object] = {"self_pull": False, "lease_ttl": 60.0}
    settings.update(options)
    config = ServeConfig(data_dir=str(tmp_path / "a"), **settings)  # type: ignore[arg-type]
    started = PodRuntime(config, store, LocalObjectStore(str(tmp_path / "objects")))
    started.start()
    yield started
    stop_all([started])
