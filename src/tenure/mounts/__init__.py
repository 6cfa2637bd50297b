"""Mounts: workspace folders materialized on this host, their host-local records and restart reconciliation."""
