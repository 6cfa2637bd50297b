"""The timing defaults of pods and the CLI, chosen for fast failover (ADR 0050).

SPEC §8 named a 60 s lease TTL, a 5 s beat, a 15 s pod liveness TTL and a
60 s distributor tick. Measured, those defaults brought a killed pod's
projects back after about a minute; these bring every project in demand
back within about ``LEASE_TTL_S`` + 2 beats + its bring time, while a pod
still rides out a stall of ``LEASE_TTL_S - BEAT_S`` seconds (a pause, a
slow store) without losing anything. The CLI judges leases by the same TTL:
set ``TENURE_LEASE_TTL`` (or ``--lease-ttl``) alike everywhere when a
cluster runs other values.
"""

from __future__ import annotations

__all__ = ["BEAT_S", "LEASE_TTL_S", "LIVENESS_TTL_S", "TICK_S"]

#: a project lease lives this long past its pod's last renewal (``--lease-ttl``)
LEASE_TTL_S = 10.0
#: a pod renews (heartbeat, every pod-bound lease) this often (``--beat``): five renewals per TTL
BEAT_S = 2.0
#: a pod silent this long is not placed on (``--liveness-ttl``): three beats
LIVENESS_TTL_S = 6.0
#: the master's regular tick (``--tick``); it also ticks when a lease runs out and when a drain wakes it
TICK_S = 10.0
