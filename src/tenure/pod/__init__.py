"""The pod runtime behind ``tenure serve``: one pod per process.

* :mod:`~tenure.pod.runtime` — :class:`PodRuntime`: start-up, beat, drift, pulls, brings, drain;
* :mod:`~tenure.pod.ops` — :class:`ProjectOps`: what a caller may do to a project on this pod (the one face
  the HTTP API and the CLI call);
* :mod:`~tenure.pod.reconcile` — restart reconciliation of this host's mounts;
* :mod:`~tenure.pod.gate`, :mod:`~tenure.pod.journals`, :mod:`~tenure.pod.metrics`, :mod:`~tenure.pod.tokens`,
  :mod:`~tenure.pod.daemon` — the write gate, change journals, Prometheus metrics, API tokens, the process.
"""
