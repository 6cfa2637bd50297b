"""The last restart reconciliation of a data folder's pod, kept in ``<data>/reconcile.json`` (S-68, S-83).

The pod that holds the data folder writes its run's counts per verdict
there when reconciliation ends, so ``tenure pods show POD`` can show them
without asking the pod: the file names the pod it belongs to, and
``<data>/pod.lock`` names the pod that holds (or last held) the folder.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from tenure.fsio import atomic_write

__all__ = ["REPORT_FILE", "LOCK_FILE", "write_report", "read_report", "data_folder_pod"]

#: the report's file name under the data folder
REPORT_FILE = "reconcile.json"
#: the data-folder lock; its first token is the id of the pod that holds (or last held) the folder
LOCK_FILE = "pod.lock"


def write_report(data_dir: str, pod_id: str, counts: Mapping[str, int], *, expired_deltas: int = 0) -> None:
    """Replace the report with this run's counts per verdict."""
    document = {
        "pod_id": pod_id,
        "at": time.time(),
        "counts": {str(k): int(v) for k, v in sorted(counts.items())},
        "expired_deltas": int(expired_deltas),
    }
    atomic_write(os.path.join(data_dir, REPORT_FILE), json.dumps(document, sort_keys=True).encode("utf-8"))


def read_report(data_dir: str) -> dict[str, Any] | None:
    """The last report ``{pod_id, at, counts, expired_deltas}``, or None when there is none (or it is unreadable)."""
    try:
        with open(os.path.join(data_dir, REPORT_FILE), encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("counts"), dict):
        return None
    return document


def data_folder_pod(data_dir: str) -> str | None:
    """The id of the pod that holds (or last held) the data folder: the first token of ``pod.lock``."""
    try:
        with open(os.path.join(data_dir, LOCK_FILE), encoding="utf-8", errors="replace") as f:
            first = f.read(4096).split()
    except OSError:
        return None
    return first[0] if first else None
