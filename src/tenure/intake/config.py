"""Intake configuration: the hard input limits and the phase list.

Every limit has a safe default (SPEC §9, requirement I-120) and its own error
code, listed next to it. The phase list is the configurable linear sequence
between BUILDING_CASE and OUTPUT_READY (I-116).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Limits", "IntakeConfig", "DEFAULT_PHASES", "MiB", "GiB"]

MiB = 1024 * 1024
GiB = 1024 * MiB

#: The default analysis phases between BUILDING_CASE and OUTPUT_READY.
DEFAULT_PHASES: tuple[str, ...] = ("INTERPRETING", "HYPOTHESIZING", "DIAGNOSING", "REPORTING")


@dataclass(frozen=True)
class Limits:
    """Hard limits applied to every input archive and managed package."""

    #: raw archive size; code ``archive-too-large``
    archive_bytes: int = 256 * MiB
    #: sum of declared uncompressed sizes; code ``uncompressed-too-large``
    uncompressed_bytes: int = 1 * GiB
    #: number of entries in the central directory; code ``too-many-entries``
    max_entries: int = 10_000
    #: uncompressed / compressed, checked for entries above ``ratio_min_bytes``;
    #: code ``compression-ratio``
    max_ratio: float = 200.0
    ratio_min_bytes: int = 1 * MiB
    #: manifest.json and every checkpoint JSON; codes ``manifest-too-large``,
    #: ``checkpoint-too-large``
    manifest_bytes: int = 1 * MiB
    #: path components of an entry name; code ``path-too-deep``
    max_path_depth: int = 32
    #: UTF-8 bytes of an entry name; code ``path-too-long``
    max_path_bytes: int = 1024

    def __post_init__(self) -> None:
        for name in (
            "archive_bytes",
            "uncompressed_bytes",
            "max_entries",
            "manifest_bytes",
            "max_path_depth",
            "max_path_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"limits.{name} must be positive")
        if self.max_ratio < 1:
            raise ValueError("limits.max_ratio must be at least 1")


@dataclass(frozen=True)
class IntakeConfig:
    """Everything a :class:`~tenure.intake.Workspace` can be configured with."""

    limits: Limits = field(default_factory=Limits)
    #: the linear analysis phases between BUILDING_CASE and OUTPUT_READY
    phases: tuple[str, ...] = DEFAULT_PHASES
    #: deflate level used for new generations (1 = fast, 9 = small)
    compresslevel: int = 6
