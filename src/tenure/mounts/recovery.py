"""Where a preserved delta may be recovered to: one check for the CLI's copy and the API's restore."""

from __future__ import annotations

import os

from tenure.errors import InvalidInputError

__all__ = ["check_recovery_target"]


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_recovery_target(data_dir: str, dest: str) -> str:
    """``dest`` if a preserved delta may be recovered into it: outside the data folder (symbolic links
    resolved on both sides, and as written), and new or an empty folder that is not a symbolic link.

    Inside the preserved delta a copy would go into itself; anywhere else in the data folder it would leave a
    folder no record names, which the recovery window never removes (``destination-in-data-folder``).
    Anything else already there is ``destination-not-empty``. Nothing is written either way.
    """
    real_data, real_dest = os.path.realpath(data_dir), os.path.realpath(dest)
    if _within(real_dest, real_data) or _within(os.path.abspath(dest), os.path.abspath(data_dir)):
        raise InvalidInputError(
            f"{dest} is inside the data folder {data_dir}: a preserved delta is recovered out of it",
            code="destination-in-data-folder",
            path=dest,
            data_dir=data_dir,
            hint="recover into a folder outside the data folder",
        )
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.path.islink(dest) or os.listdir(dest)):
        raise InvalidInputError(f"{dest} exists and is not an empty folder", code="destination-not-empty", path=dest)
    return dest
