"""The cluster: the master role, placement and the master's store access (ADR 0023).

* :mod:`~tenure.cluster.store` — the master lease row and placements;
* :mod:`~tenure.cluster.placement` — the score model and the choice of a pod;
* :mod:`~tenure.cluster.master` — election and the distributor tick.

The cluster never imports the pod runtime: the master talks to its pod through the narrow
:class:`~tenure.cluster.master.PodHandle` protocol, and to other pods over HTTP.
"""
