"""The HTTP layer of a pod: routes, auth, problem documents and the dashboard.

Thin by rule: a handler parses its request, makes one call on :class:`~tenure.pod.ops.ProjectOps` (or the
pod runtime's probes) and answers JSON. It never imports the store or the object stores
(``pyproject.toml``'s import-linter contracts).
"""
