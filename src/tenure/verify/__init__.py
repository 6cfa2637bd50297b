"""A verification kit users run against their own deployment: real pods, injected faults, a history checker.

``history`` is the pure checker; ``cluster`` starts pods, drives a workload, injects faults and records the
history it checks (``tenure verify cluster``)."""
