"""Histories to check: a clean one built from a sequential model of who held each project when."""

from __future__ import annotations

from dataclasses import dataclass

from tenure.verify.history import History, Kind, Observation, Operation, Outcome, PodSample

TTL = 2.0
TICK = 0.5
STEP = 0.25  # sampling period of the model's observations


@dataclass(frozen=True)
class Tenure:
    pod: str
    generation: int
    start: float
    end: float


def history_of(
    tenures: dict[str, list[Tenure]],
    *,
    ops_per_tenure: int = 3,
    horizon: float | None = None,
    pods: tuple[str, ...] = ("a", "b", "c"),
) -> History:
    """A clean history from a sequential model: per project, holders one after the other with increasing
    generations; samples every STEP; writes and checkpoints inside each tenure; every checkpoint restorable."""
    operations: list[Operation] = []
    observations: list[Observation] = []
    restored: dict[str, str | None] = {}
    end = max(t.end for seq in tenures.values() for t in seq)
    horizon = end if horizon is None else horizon
    for project, seq in tenures.items():
        previous: Tenure | None = None
        for t in seq:
            if previous is not None:  # the gap: the former holder's row, no longer live
                time = previous.end + STEP
                while time < t.start:
                    observations.append(Observation(time, project, previous.pod, False, previous.generation))
                    time += STEP
            time = t.start
            while time <= t.end:
                observations.append(Observation(time, project, t.pod, True, t.generation))
                time += STEP
            length = (t.end - t.start) / (ops_per_tenure + 1)
            for k in range(ops_per_tenure):
                invoked = t.start + length * (k + 0.5)
                ident = len(operations)
                if k % 2:
                    snapshot = f"{project}-s{ident}"
                    restored[snapshot] = f"d{ident}"
                    payload = {"snapshot": snapshot, "digest": f"d{ident}"}
                    operations.append(
                        Operation(
                            ident,
                            Kind.CHECKPOINT,
                            project,
                            t.pod,
                            invoked,
                            invoked + length / 2,
                            Outcome.OK,
                            t.generation,
                            payload=payload,
                        )
                    )
                else:
                    operations.append(
                        Operation(ident, Kind.WRITE, project, t.pod, invoked, invoked + length / 2, Outcome.OK)
                    )
            previous = t
    time = 0.0
    samples = []
    while time <= horizon:
        samples += [PodSample(time, pod, True, True) for pod in pods]
        time += STEP
    return History(operations, observations, samples, restored, ttl=TTL, tick=TICK)


def two_holders() -> dict[str, list[Tenure]]:
    return {"acme/p": [Tenure("a", 1, 0.0, 10.0), Tenure("b", 2, 11.0, 20.0)]}
