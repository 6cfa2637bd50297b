"""``tenure verify`` — check a deployment's guarantees with real pods, injected faults and a history checker.

``cluster`` starts pods on the given PostgreSQL, drives a seeded workload over their HTTP API while
injecting faults, records every operation and the store's view of ownership, restores every acknowledged
checkpoint and checks the history (``tenure.verify``; docs/operations.md, "Verifying a cluster"). It exits
1 when the checker finds a violation, and 4 (``verify-cut-short``) when a fault could not be carried out and
ended the run early.
"""

from __future__ import annotations

from typing import Any

import click

from tenure.cli.output import console, emit, json_option, printable, table

__all__ = ["verify"]

_RULE_NAMES = (
    "single-holder",
    "generation-order",
    "stale-write",
    "checkpoint-restorable",
    "ownerless",
    "durable-write-lost",
    "lineage-checkpoint-misses-write",
)
_FAULT_NAMES = ("kill", "stop", "renewal-pause", "drain", "partition", "skew", "pg-restart")
_BUG_NAMES = ("skip-generation-check", "durable-ack-early", "lineage-ignored")


@click.group()
def verify() -> None:
    """Verify a deployment: real pods, injected faults, a checked history."""


@verify.command("cluster")
@click.option("--db", "db_option", metavar="URL", help="PostgreSQL URL the pods share (default: the global --db).")
@click.option(
    "--objects", "objects_option", metavar="URL", help="Object store URL (default: a folder in the run's workdir)."
)
@click.option("--pods", "pod_count", type=click.IntRange(2, 16), default=3, show_default=True, help="Pods to run.")
@click.option("--projects", type=click.IntRange(1, 64), default=4, show_default=True, help="Projects to drive.")
@click.option("--duration", type=click.FloatRange(5, None), default=60.0, show_default=True, help="Workload seconds.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload and the fault schedule.")
@click.option(
    "--fault",
    "faults",
    type=click.Choice(_FAULT_NAMES),
    multiple=True,
    help="A fault to inject (repeatable; default every one).",
)
@click.option("--lease-ttl", type=float, default=2.0, show_default=True, help="The pods' project lease TTL.")
@click.option("--beat", type=float, default=0.2, show_default=True, help="The pods' beat.")
@click.option(
    "--pg-restart-cmd", metavar="CMD", help="A command that restarts PostgreSQL (the pg-restart fault runs it)."
)
@click.option(
    "--plant-violation",
    "plant",
    type=click.Choice(_RULE_NAMES),
    help="Corrupt the recorded history with one violation of RULE before checking (exercises the checker).",
)
@click.option(
    "--plant-bug",
    "plant_bug",
    type=click.Choice(_BUG_NAMES),
    help="Start every pod with BUG planted (test-only launcher tenure.verify.planted; shows the kit catching it).",
)
@click.option(
    "--durable-fraction",
    type=click.FloatRange(0, 1),
    default=0.3,
    show_default=True,
    help="Fraction of the workload's file writes sent with ?durable=true.",
)
@click.option(
    "--lineage-fraction",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Fraction of the workload's checkpoints sent with Tenure-If-Lineage (the lineage last answered).",
)
@click.option("--workdir", metavar="DIR", help="Where pods' data folders and logs go (default: a new temp folder).")
@json_option
@click.pass_context
def cluster(
    ctx: click.Context,
    db_option: str | None,
    objects_option: str | None,
    pod_count: int,
    projects: int,
    duration: float,
    seed: int,
    faults: tuple[str, ...],
    lease_ttl: float,
    beat: float,
    pg_restart_cmd: str | None,
    plant: str | None,
    plant_bug: str | None,
    durable_fraction: float,
    lineage_fraction: float,
    workdir: str | None,
) -> None:
    """Run pods on PostgreSQL under a seeded workload and faults; check the history (exit 1 on a violation, 4 when
    a fault could not be carried out and cut the run short)."""
    from tenure.errors import ConfigurationError, ConflictError
    from tenure.verify.cluster import FAULTS, ClusterConfig, run_cluster

    root = ctx.find_root().obj or {}
    db = db_option or root.get("db")
    if not db or not str(db).startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(
            "tenure verify cluster runs pods on a shared PostgreSQL",
            code="verify-needs-postgres",
            hint="pass --db postgresql://…",
        )
    config = ClusterConfig(
        db=str(db),
        objects=objects_option or root.get("objects"),
        pods=pod_count,
        projects=projects,
        duration=duration,
        seed=seed,
        faults=faults or FAULTS,
        lease_ttl=lease_ttl,
        beat=beat,
        liveness_ttl=max(beat * 3, lease_ttl / 2),
        pg_restart_cmd=pg_restart_cmd,
        plant=plant,
        plant_bug=plant_bug,
        workdir=workdir,
        durable_fraction=durable_fraction,
        lineage_fraction=lineage_fraction,
    )
    quiet = bool(root.get("json"))
    report = run_cluster(config, say=(lambda _: None) if quiet else (lambda line: console.print(printable(line))))
    document = report.to_dict()
    emit(ctx, document, lambda: _human(document))
    if report.violations:
        ctx.exit(1)
    if report.cut_short is not None:
        raise ConflictError(
            f"the run was cut short, so its history proves less than asked: {report.cut_short}",
            code="verify-cut-short",
            hint=f"see the pod logs in {report.workdir}; fix what the fault needed and run again",
        )


def _human(doc: dict[str, Any]) -> None:
    table(
        "operations",
        ["kind", "ok", "refused", "unknown"],
        [[k, v.get("ok", 0), v.get("refused", 0), v.get("unknown", 0)] for k, v in sorted(doc["operations"].items())],
    )
    table(
        "faults",
        ["fault", "pod", "seconds", "detail"],
        [
            [f["fault"], f.get("pod", "-"), f.get("seconds", "-"), f.get("detail", f.get("skew", ""))]
            for f in doc["faults"]
        ]
        + [[name, "-", "-", f"skipped: {why}"] for name, why in sorted(doc["skipped_faults"].items())],
    )
    console.print(
        f"{doc['checkpoints']} checkpoints acknowledged ({doc['checkpoints_with_digest']} with a known content), "
        f"{doc['restored']} restored; {doc['observations']} ownership samples; {doc['seconds']} s; "
        f"workdir {printable(doc['workdir'])}"
    )
    if doc["probes"]:
        console.print(
            "probes of paused or cut pods: "
            + "; ".join(
                f"{k} " + ", ".join(f"{c} {n}" for c, n in sorted(v.items())) for k, v in sorted(doc["probes"].items())
            )
        )
    saved = [
        f"{label} " + ", ".join(f"{n} {c}" for c, n in sorted(doc[key].items()))
        for key, label in (("durable_writes", "durable writes"), ("lineage_checkpoints", "lineage checkpoints"))
        if doc[key]
    ]
    if saved:
        console.print("; ".join(saved) + f"; {doc['final_states']} final states read back")
    if doc["planted_bug"]:
        console.print(f"planted bug: {doc['planted_bug']} (every pod ran with it)")
    if doc["planted"]:
        console.print(f"planted violation: {doc['planted']} (the recorded history was corrupted before checking)")
    if doc["cut_short"]:
        console.print(printable(f"cut short: {doc['cut_short']}"))
    if not doc["violations"]:
        console.print("no violations")
        return
    table(
        f"{len(doc['violations'])} violations",
        ["rule", "project", "detail", "operations"],
        [[v["rule"], v["project"], v["detail"], ",".join(map(str, v["records"]))] for v in doc["violations"]],
    )
