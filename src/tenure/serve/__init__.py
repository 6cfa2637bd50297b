"""``tenure serve``: the pod daemon (:class:`~tenure.serve.node.Node`), its HTTP API and its metrics."""
