"""Run one scenario of :mod:`tests.integration.durability.child` under a recorder and check what it did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from tests.integration.durability.rules import Ack, Model, Scope, Window, check_rules, crash_violations, device_of
from tests.integration.durability.trace import Event, load_events, parse_strace, strace_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CRASH_MODELS = ("lazy", "eager-names")


@dataclass
class Run:
    """One recorded run: its events, what it promised, and what the checks found."""

    workdir: str
    events: list[Event]
    scopes: list[Scope]
    acks: list[Ack]
    windows: list[Window]
    facts: dict[str, Any]
    violations: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    model: Model | None = None

    @property
    def counts(self) -> dict[str, int]:
        return self.model.counts if self.model is not None else {}


def run_scenario(scenario: str, recorder: str, tmp: str, mutant: str | None = None, timeout: float = 120.0) -> Run:
    """Run ``scenario`` in a child process recorded by ``recorder`` (``strace`` or ``inprocess``); check it."""
    tmp = os.path.realpath(tmp)
    workdir = os.path.join(tmp, "work")
    os.mkdir(workdir)
    events_out, spec_out = os.path.join(tmp, "events.json"), os.path.join(tmp, "spec.json")
    config = {
        "scenario": scenario,
        "mutant": mutant,
        "workdir": workdir,
        "recorder": recorder,
        "events_out": events_out,
        "spec_out": spec_out,
    }
    config_path = os.path.join(tmp, "config.json")
    with open(config_path, "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    argv = [sys.executable, "-m", "tests.integration.durability.child", config_path]
    log = os.path.join(tmp, "strace.log")
    if recorder == "strace":
        argv = strace_command(log, argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    done = subprocess.run(argv, cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{scenario} ({recorder}, mutant {mutant}) failed:\n{done.stdout}\n{done.stderr}")
    if recorder == "strace":
        with open(log, encoding="utf-8", errors="surrogateescape") as fh:
            events = parse_strace(fh.read())
    else:
        with open(events_out, encoding="utf-8") as fh:
            events = load_events(json.load(fh))
    with open(spec_out, encoding="utf-8") as fh:
        spec = json.load(fh)
    run = Run(
        workdir,
        events,
        [Scope(s["root"], s["base"], tuple(s["exclude"])) for s in spec["scopes"]],
        [Ack(a["label"], tuple(a["sync_of"]), tuple(a["removal_of"]), tuple(a["scopes"])) for a in spec["acks"]],
        [Window(w["begin"], w["ack"], tuple(w["finals"])) for w in spec["windows"]],
        spec["facts"],
    )
    device = device_of(workdir)

    def same_fs(path: str | None) -> bool:
        return path is None or device_of(path) == device

    run.violations, run.model = check_rules(events, workdir, run.scopes, run.acks, same_fs)
    for model in CRASH_MODELS:
        run.crashes += crash_violations(events, workdir, run.windows, model, same_fs)
    return run
