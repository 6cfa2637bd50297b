"""Building a new (NEW, generation 0) package for the inbox.

``pack_directory`` turns a folder holding ``manifest.json`` (at least
``case_id`` and ``package_id``) and the package's files into a validated
package zip; ``write_package`` does the same from bytes in memory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .canonical import MANIFEST, strict_json_loads
from .config import IntakeConfig
from .errors import PackageRejectedError
from .fsio import TMP_PREFIX
from .package import Package, read_package
from .writer import PackageWriter

__all__ = ["new_manifest", "write_package", "pack_directory"]


def new_manifest(
    case_id: str,
    package_id: str,
    *,
    protected_files: Iterable[str] = (),
    artifacts: Mapping[str, str] | None = None,
    history: Mapping[str, int] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A manifest for a fresh package: NEW, generation 0, revision 0."""
    manifest: dict[str, Any] = {
        "format": "tenure-package",
        "format_version": 1,
        "case_id": case_id,
        "package_id": package_id,
        "generation": 0,
        "analysis_revision": 0,
        "state": "NEW",
        "routing": "inbox",
        "retry_count": 0,
        "blocked": None,
        "history": {"revisions": 0, **dict(history or {})},
        "artifacts": {"lifecycle_checkpoint": None, **dict(artifacts or {})},
        "protected_files": list(protected_files),
    }
    if metadata is not None:
        manifest["metadata"] = dict(metadata)
    return manifest


def write_package(
    out: Path, manifest: Mapping[str, Any], files: Mapping[str, bytes], config: IntakeConfig | None = None
) -> Package:
    """Write and validate a package at ``out`` (atomically); return it."""
    out = Path(out).absolute()
    written = PackageWriter(config).write(out.parent, manifest, additions=dict(files))
    os.replace(written.path, out)
    return read_package(out, config)


def pack_directory(source: Path, out: Path, config: IntakeConfig | None = None) -> Package:
    """Pack ``source`` (with its ``manifest.json``) into a NEW package at ``out``."""
    source = Path(source)
    try:
        given = strict_json_loads((source / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise PackageRejectedError(f"{source} has no manifest.json", code="missing-manifest") from None
    except ValueError as error:
        raise PackageRejectedError(f"{source / MANIFEST} is not valid JSON: {error}", code="invalid-manifest") from None
    if not isinstance(given, dict) or not {"case_id", "package_id"} <= set(given):
        raise PackageRejectedError("manifest.json needs at least case_id and package_id", code="invalid-manifest")
    manifest = new_manifest(str(given["case_id"]), str(given["package_id"]))
    manifest.update(given)
    files = dict(_files(source))
    return write_package(out, manifest, files, config)


def _files(source: Path) -> Iterable[tuple[str, bytes]]:
    for folder, dirs, names in os.walk(source):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            relative = path.relative_to(source).as_posix()
            if relative == MANIFEST or name.startswith(TMP_PREFIX):
                continue
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise PackageRejectedError(f"{relative} is not a regular file", code="special-entry", entry=relative)
            yield relative, path.read_bytes()
