"""Whether the pod's data folder has room (ADR 0051): a full folder makes the pod refuse new claims.

A pod whose data folder is full cannot restore a project it claims, write a
file or record a checkpoint's index: every such attempt answers ``disk-full``
(HTTP 507). Claiming more projects there only strands them, so while the
folder is full the pod is not ready (``/readyz`` 503), its beat records why
in its ``pods`` row (``refusing``), the master places nothing there, a drain
wakes another pod instead, and the pod's own bring of a project it does not
hold is refused before the claim.

Full is decided twice over, each beat:

* by the file system's own numbers (``statvfs``): fewer free bytes than the
  floor (``ServeConfig.min_free_space``), or no free inodes;
* by the writes themselves: any ``disk-full`` a write met (a quota or a
  file-size limit that ``statvfs`` does not show) makes the folder full until
  a probe write of :data:`PROBE_BYTES` into it, flushed, succeeds.
"""

from __future__ import annotations

import os
import threading

from tenure.fsio import FULL_ERRNOS, fsync_file, tmp_name, write_all

__all__ = ["DataSpace", "PROBE_BYTES"]

#: what a probe writes (and removes) to learn that a folder a write found full has room again
PROBE_BYTES = 1 << 20

_MIB = 1 << 20


class DataSpace:
    """The room left in one folder, as each beat finds it (thread-safe)."""

    def __init__(self, folder: str, min_free: int) -> None:
        self.folder = folder
        self.min_free = min_free
        self._lock = threading.Lock()
        self._write_failed: str | None = None
        self._full: str | None = None

    @property
    def full(self) -> str | None:
        """Why the folder counts as full (``disk-full: …``), or None while it has room."""
        return self._full

    def write_failed(self, reason: str) -> None:
        """A write into the folder met ``disk-full``: full at once, until a probe write succeeds."""
        with self._lock:
            self._write_failed = self._full = f"disk-full: {reason}"

    def check(self) -> str | None:
        """Look again (each beat): the file system's numbers, then a probe if a write found it full."""
        reason = self._by_numbers()
        with self._lock:
            failed = self._write_failed
        if reason is None and failed is not None:
            if self._probe():
                with self._lock:
                    if self._write_failed == failed:
                        self._write_failed = None
                failed = None
            reason = failed
        with self._lock:
            self._full = reason
        return reason

    def _by_numbers(self) -> str | None:
        try:
            st = os.statvfs(self.folder)
        except OSError:
            return None  # a folder that cannot be asked is not called full; its writes will say
        free = st.f_bavail * st.f_frsize
        if free < self.min_free:
            return (
                f"disk-full: {free / _MIB:.1f} MiB free on the data folder {self.folder}, below the"
                f" {self.min_free / _MIB:.0f} MiB floor"
            )
        if st.f_files and st.f_favail == 0:
            return f"disk-full: no free inodes on the data folder {self.folder}"
        return None

    def _probe(self) -> bool:
        """Write :data:`PROBE_BYTES` into the folder, flushed, then remove it: True when it fitted."""
        path = os.path.join(self.folder, tmp_name(".space-probe"))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            write_all(fd, bytes(PROBE_BYTES))
            fsync_file(fd)
            return True
        except OSError as exc:
            if exc.errno in FULL_ERRNOS:
                return False
            raise
        finally:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
