"""Intake configuration: the hard input limits and the phase list.

Every limit has a safe default (SPEC §9, requirement I-120) and its own error
code, listed next to it. The phase list is the configurable linear sequence
between BUILDING_CASE and OUTPUT_READY (I-116).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["Limits", "IntakeConfig", "DEFAULT_PHASES", "MiB", "GiB", "MANIFEST_RESERVE", "MAX_GENERATION"]

MiB = 1024 * 1024
GiB = 1024 * MiB
#: how much a stored manifest may exceed ``manifest_bytes`` (the intake's own fields and pointers)
MANIFEST_RESERVE = 64 * 1024
#: the highest generation number (generation files are named ``gNNNNNNNN.zip``)
MAX_GENERATION = 99_999_999
#: local + central header bytes of one entry, without name and extra field (with a data descriptor)
_HEADERS = 30 + 46 + 24 + 2 * 1024

#: The default analysis phases between BUILDING_CASE and OUTPUT_READY.
DEFAULT_PHASES: tuple[str, ...] = ("INTERPRETING", "HYPOTHESIZING", "DIAGNOSING", "REPORTING")


@dataclass(frozen=True)
class Limits:
    """Hard limits applied to every input archive and managed package."""

    #: raw archive size; code ``archive-too-large``
    archive_bytes: int = 256 * MiB
    #: sum of declared uncompressed sizes; code ``uncompressed-too-large``
    uncompressed_bytes: int = 1 * GiB
    #: the producer's entries: its files and folder entries, not manifest.json, the checkpoints nor a
    #: stored generation's record; code ``too-many-entries``
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
    #: checkpoint artifacts (``history/checkpoints/``) of one package; they do not count toward
    #: ``max_entries``; code ``too-many-checkpoints``
    max_checkpoints: int = 10_000

    def stored(self) -> Limits:
        """The limits a stored generation is read under: these, plus room for the intake's bookkeeping.

        ``max_entries`` and ``uncompressed_bytes`` count the producer's entries
        only (not ``manifest.json``, the checkpoints nor the generation record),
        so they hold for a stored generation as given. What the intake adds is bounded apart: a
        manifest may grow by :data:`MANIFEST_RESERVE` (the lifecycle fields
        and artifact pointers an advance adds; an advance that would pass it
        is refused), and each checkpoint the intake writes is at most
        ``manifest_bytes``. The archive may grow by one such record per
        checkpoint. So a package admitted at a limit is stored within these.
        """
        record = self.manifest_bytes + MANIFEST_RESERVE + 2 * (_HEADERS + self.max_path_bytes)
        return replace(
            self,
            archive_bytes=self.archive_bytes + (self.max_checkpoints + 1) * record,
            manifest_bytes=self.manifest_bytes + MANIFEST_RESERVE,
        )

    def __post_init__(self) -> None:
        for name in (
            "archive_bytes",
            "uncompressed_bytes",
            "max_entries",
            "manifest_bytes",
            "max_path_depth",
            "max_path_bytes",
            "max_checkpoints",
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
    #: group commit of admission (ADR 0109): at most this many inputs share one set of syncs
    batch_packages: int = 64
    #: ... and at most this many bytes (cached inputs plus new generations) wait for them
    batch_bytes: int = 64 * MiB
    #: a sync barrier of this many files and folders or more is one ``syncfs`` of the file
    #: system instead of one ``fsync`` each; 0 = always one fsync per path
    syncfs_from: int = 8
    #: stored generation format v2 (ADR 0110): at most this many generations in a row hold one checkpoint
    #: each and link to the one before; the next one carries their checkpoints and links past them (a
    #: span), so they are no longer referenced. Bounds the files a cold read walks and the folder's size
    #: once collected, and the work of the advance that closes a span.
    chain_span: int = 32

    def __post_init__(self) -> None:
        if self.batch_packages < 1 or self.batch_bytes < 1:
            raise ValueError("batch_packages and batch_bytes must be positive")
        if self.chain_span < 1:
            raise ValueError("chain_span must be positive")
        if self.syncfs_from < 0:
            raise ValueError("syncfs_from must be 0 (never) or positive")
