"""A child process that builds or restores once, for the crash-point tests.

python -m tests.acceptance.snapshots.crash_worker build OBJECTS FOLDER INDEX
python -m tests.acceptance.snapshots.crash_worker restore OBJECTS ROOT DEST INDEX

OBJECTS is a folder or an object store URL (``file://…``, ``s3://…``); an encrypted store is unlocked with the
key ``TENURE_KEY_FILE`` / ``TENURE_PASSPHRASE`` give, as the CLI does.
"""

from __future__ import annotations

import sys

from tenure.objects import ObjectStore, open_object_store
from tenure.objects.crypto import KeySource
from tenure.snapshots import build_tree, restore_tree


def open_objects(where: str) -> ObjectStore:
    url = where if "://" in where else f"file://{where}"
    return open_object_store(url, KeySource.resolve())


def main(argv: list[str]) -> None:
    action, objects = argv[0], open_objects(argv[1])
    if action == "build":
        print(build_tree(argv[2], objects, index_path=argv[3]).root)
    else:
        print(restore_tree(argv[2], objects, argv[3], index_path=argv[4]).files)


if __name__ == "__main__":
    main(sys.argv[1:])
