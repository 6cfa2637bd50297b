"""The pod's Prometheus metrics (``GET /metrics``), one registry per node."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics"]


class Metrics:
    """Beats, renewal latency, drift, brings and suspends by result, checkpoints, engine failures, load."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.beats = Counter("tenure_beats", "Heartbeats done by this pod", registry=r)
        self.beat_failures = Counter("tenure_beat_failures", "Heartbeats that failed (store unreachable)", registry=r)
        self.takeover_holds = Counter(
            "tenure_takeover_holds", "Renewals after a gap that held this pod's takeovers (ADR 0050)", registry=r
        )
        self.renew_seconds = Histogram(
            "tenure_renew_seconds",
            "Seconds a beat's heartbeat and lease renewal took",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.drift = Counter("tenure_drift_events", "Drift found by the beat", ["direction"], registry=r)
        self.brings = Counter("tenure_brings", "Brings by result (ok or the error code)", ["result"], registry=r)
        self.suspends = Counter("tenure_suspends", "Suspends by result (ok or the error code)", ["result"], registry=r)
        self.checkpoint_seconds = Histogram("tenure_checkpoint_seconds", "Seconds a checkpoint took", registry=r)
        self.checkpoint_bytes = Counter("tenure_checkpoint_bytes", "Bytes uploaded by checkpoints", registry=r)
        self.autosave_seconds = Histogram(
            "tenure_autosave_seconds", "Seconds an autosave checkpoint took (tenure serve --autosave)", registry=r
        )
        self.oldest_unsaved = Gauge(
            "tenure_oldest_unsaved_seconds",
            "Age of the oldest change not yet in a checkpoint among the projects running here (0: none)",
            registry=r,
        )
        self.preserved = Gauge(
            "tenure_preserved_deltas",
            "Preserved deltas (lost work) recorded in the store, in their recovery window and not recovered",
            registry=r,
        )
        self.preserved_unrecorded = Gauge(
            "tenure_preserved_deltas_unrecorded",
            "Preserved deltas this host keeps that are not recorded in the store yet (retried every beat)",
            registry=r,
        )
        self.engine_failures = Counter(
            "tenure_engine_failures", "Engine start or stop failures", ["engine", "event"], registry=r
        )
        self.reconcile = Counter(
            "tenure_reconcile_verdicts", "Mounts given each verdict by restart reconciliation", ["verdict"], registry=r
        )
        self.running = Gauge("tenure_projects_running", "Projects running on this pod", registry=r)
        self.disk_full = Gauge(
            "tenure_data_folder_full", "1 while the data folder is full and the pod claims nothing new", registry=r
        )
        self.score = Gauge("tenure_pod_score", "Sum of the placement scores this pod holds", registry=r)
        self.master = Gauge("tenure_master", "1 while this pod holds the master role", registry=r)
        self.master_epoch = Gauge("tenure_master_epoch", "The epoch of the master role this pod took last", registry=r)
        self.ticks = Counter("tenure_distributor_ticks", "Distributor ticks run by this pod as master", registry=r)
        self.tick_failures = Counter("tenure_distributor_tick_failures", "Distributor ticks that failed", registry=r)
        self.tick_seconds = Histogram(
            "tenure_distributor_tick_seconds",
            "Seconds a distributor tick took",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
            registry=r,
        )
        self.placements = Counter("tenure_placements", "Placements made by this pod as master", registry=r)
        self.demand_projects = Gauge(
            "tenure_cluster_pending_projects", "Projects no pod has room for (pending placement)", registry=r
        )
        self.demand_score = Gauge(
            "tenure_cluster_pending_score", "Sum of the placement scores of the projects pending placement", registry=r
        )
        self.requests = Counter(
            "tenure_http_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
