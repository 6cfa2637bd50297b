"""A child process that builds or restores once, for the crash-point tests.

python -m tests.snapshots.crash_worker build OBJECTS FOLDER INDEX
python -m tests.snapshots.crash_worker restore OBJECTS ROOT DEST INDEX
"""

from __future__ import annotations

import sys

from tenure.objects.local import LocalObjectStore
from tenure.snapshots import build_tree, restore_tree


def main(argv: list[str]) -> None:
    action, objects = argv[0], LocalObjectStore(argv[1])
    if action == "build":
        print(build_tree(argv[2], objects, index_path=argv[3]).root)
    else:
        print(restore_tree(argv[2], objects, argv[3], index_path=argv[4]).files)


if __name__ == "__main__":
    main(sys.argv[1:])
