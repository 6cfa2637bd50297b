"""File-based intake: inbox admission, quarantine, immutable package
generations, checkpoint chains, idempotent ``advance`` and crash-safe commits.

::

    from tenure.intake import Workspace, InboxProcessor, CheckpointStore, State, LifecycleError

    workspace = Workspace("service-data")
    results = InboxProcessor(workspace).poll(max_jobs=100)
    store = CheckpointStore(workspace)
    try:
        package = store.advance("case-A", "stable-package", State.BUILDING_CASE,
                                step_id="revision-1:start-case-building",
                                details={"inputs_collected": []})
    except LifecycleError as error:
        print(error.code, str(error))

See ``docs/intake.md``.
"""

from .checkpoints import CheckpointStore
from .config import DEFAULT_PHASES, IntakeConfig, Limits
from .errors import CODES, LifecycleError
from .inbox import InboxProcessor
from .machine import State
from .package import Checkpoint, Package, read_package
from .results import PollResult, ResultKind
from .workspace import Workspace
from .writer import PackageWriter

__all__ = [
    "Workspace",
    "InboxProcessor",
    "CheckpointStore",
    "State",
    "LifecycleError",
    "PollResult",
    "ResultKind",
    "Package",
    "Checkpoint",
    "PackageWriter",
    "read_package",
    "IntakeConfig",
    "Limits",
    "DEFAULT_PHASES",
    "CODES",
]
