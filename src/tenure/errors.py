"""The one error tree of tenure.

Every error a user can see derives from :class:`TenureError` and carries

* ``code`` — a stable, machine-readable string (``"stale-generation"``);
  codes never change meaning once released and are listed in
  ``docs/errors.md``;
* ``retryable`` — whether the same call may succeed later without any change
  by the caller (a lost connection, a busy lock), as opposed to a request
  that is wrong as made;
* ``hint`` — one sentence telling the user what to do;
* ``context`` — the facts needed to act (the holder of a lease, the expected
  and actual state, the offending path).

Families (each is a base class; catch the family, not the leaf)::

    TenureError
    ├── ConfigurationError            bad settings or URLs                  exit 2
    ├── InvalidInputError             can never succeed as made             exit 2
    ├── NotFoundError                 a named record does not exist         exit 3
    ├── ConflictError                 the world is not as expected          exit 4
    │   ├── IllegalTransitionError    an edge the machine does not have
    │   ├── StaleGenerationError      a fenced writer tried to write
    │   ├── VersionConflictError      expected version / state differs
    │   └── IdempotencyConflictError  same key, different request
    ├── StoreError                    the control-plane store failed        exit 5
    ├── ObjectStoreError              the object store failed               exit 5
    ├── IntegrityError                content does not match its hash       exit 6
    └── IntakeError                   intake rejected a package             exit 7

Every class name ends in ``Error``. The intake's classes keep the root its
reference spec names (``LifecycleError``) and also derive from the family
that fits (``CaseNotFoundError`` is a ``NotFoundError``).

Each family's outcome — its exit code and its HTTP status — is written once,
in :data:`FAMILIES`: the CLI exits with :func:`exit_code`, the HTTP API
answers :func:`http_status`, and the CLI's ``--url`` mode turns a status back
into a family with :func:`family_for_status`. A leaf may answer an HTTP status
of its own (``http_status``: 401, 403, 413, 503 with ``Retry-After``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "FAMILIES",
    "Outcome",
    "exit_code",
    "http_status",
    "family_for_status",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "TenureError",
    "ConfigurationError",
    "InvalidInputError",
    "NotFoundError",
    "ConflictError",
    "IllegalTransitionError",
    "StaleGenerationError",
    "VersionConflictError",
    "IdempotencyConflictError",
    "StoreError",
    "ObjectStoreError",
    "IntegrityError",
    "IntakeError",
    "DiskFullError",
    "DrainIncompleteError",
]


class TenureError(Exception):
    """Root of every error tenure raises on purpose."""

    code: ClassVar[str] = "tenure-error"
    retryable: ClassVar[bool] = False
    #: the exit code of an error outside every family (a family's own is in :data:`FAMILIES`)
    exit_code: ClassVar[int] = 1
    #: a leaf's own HTTP status, where it differs from its family's (:func:`http_status`)
    http_status: ClassVar[int | None] = None
    default_hint: ClassVar[str] = ""

    def __init__(self, message: str, *, hint: str | None = None, code: str | None = None, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint
        if code is not None:
            self.code = code  # type: ignore[misc]
        self.context: dict[str, Any] = context

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON form used by ``--json`` output and the HTTP API."""
        return {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "retryable": self.retryable,
            "context": {k: _jsonable(v) for k, v in self.context.items()},
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class ConfigurationError(TenureError):
    code = "configuration"
    exit_code = 2
    default_hint = "check the command-line options and TENURE_* environment variables"


class InvalidInputError(TenureError):
    code = "invalid-input"
    exit_code = 2


class NotFoundError(TenureError):
    code = "not-found"
    exit_code = 3


class ConflictError(TenureError):
    code = "conflict"
    exit_code = 4


class IllegalTransitionError(ConflictError):
    """A move that the machine's edge table does not allow.

    ``context`` holds ``machine``, ``state`` and ``target``.
    """

    code = "illegal-transition"


class StaleGenerationError(ConflictError):
    """A writer whose generation is no longer current tried to write.

    Fencing: the store compared the generation inside the writing statement
    and changed nothing. ``context`` holds the writer's and, where known, the
    current generation.
    """

    code = "stale-generation"
    default_hint = "another writer holds a newer lease; re-acquire the lease and start again"


class VersionConflictError(ConflictError):
    code = "version-conflict"
    retryable = True
    default_hint = "the record changed concurrently; read it again and retry"


class IdempotencyConflictError(ConflictError):
    code = "idempotency-conflict"
    default_hint = "an idempotency key may only be reused for the identical request"


class StoreError(TenureError):
    code = "store-unavailable"
    retryable = True
    exit_code = 5
    default_hint = "check that the database is reachable and retry"


class ObjectStoreError(TenureError):
    code = "object-store-unavailable"
    retryable = True
    exit_code = 5
    default_hint = "check that the object store is reachable and writable and retry"


class IntegrityError(TenureError):
    code = "integrity"
    exit_code = 6
    default_hint = "run `tenure snapshot verify` and repair from a live workspace"


class IntakeError(TenureError):
    code = "intake"
    exit_code = 7


class DiskFullError(TenureError):
    """A pod's data folder has no room left (ENOSPC, EDQUOT, EFBIG): nothing was written; retry later or elsewhere.

    Every ``disk-full`` answers HTTP 507 (this one, the store's, the object folder's, a restore target's)."""

    code = "disk-full"
    retryable = True
    exit_code = 5
    http_status = 507
    default_hint = "free space in the data folder (or give it more); the pod takes no new projects meanwhile"


class DrainIncompleteError(ConflictError):
    """A drain ended with projects it could not hand over (each keeps its lease and folder until expiry)."""

    code = "drain-incomplete"
    default_hint = "the projects left behind move after their lease TTL; see the pod's log for why each failed"


@dataclass(frozen=True)
class Outcome:
    """What an error of one family ends in: the CLI's exit code and the HTTP API's status."""

    exit: int
    http: int


#: Each family's outcome (docs/errors.md, docs/operations.md "Exit codes"). An error belongs to the first family
#: in its class's method resolution order; the first family of a status is the one a client takes it for.
FAMILIES: dict[type[TenureError], Outcome] = {
    InvalidInputError: Outcome(exit=2, http=400),
    ConfigurationError: Outcome(exit=2, http=500),
    NotFoundError: Outcome(exit=3, http=404),
    ConflictError: Outcome(exit=4, http=409),
    StoreError: Outcome(exit=5, http=503),
    ObjectStoreError: Outcome(exit=5, http=503),
    IntegrityError: Outcome(exit=6, http=500),
    IntakeError: Outcome(exit=7, http=400),
}
#: statuses only leaves answer, and the family a client takes each for (401/403: a token, 413/422: the request)
_LEAF_STATUSES: dict[int, type[TenureError]] = {
    401: ConfigurationError,
    403: ConfigurationError,
    413: InvalidInputError,
    422: InvalidInputError,
    507: DiskFullError,
}
#: an unexpected error (a bug), and an interrupt
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def _family(exc: TenureError) -> Outcome | None:
    for cls in type(exc).__mro__:
        outcome = FAMILIES.get(cls)
        if outcome is not None:
            return outcome
    return None


def exit_code(exc: TenureError) -> int:
    """The exit code of ``exc``'s family (an error outside every family keeps its own ``exit_code``)."""
    outcome = _family(exc)
    return exc.exit_code if outcome is None else outcome.exit


def http_status(exc: TenureError) -> int:
    """The HTTP status of ``exc``: its own ``http_status`` if it has one, else its family's (500 outside)."""
    if exc.http_status is not None:
        return exc.http_status
    outcome = _family(exc)
    return 500 if outcome is None else outcome.http


def family_for_status(status: int) -> type[TenureError]:
    """The family a client takes an HTTP error status for (the inverse of :func:`http_status`).

    500 is answered by several families and by unexpected errors alike, so it stays :class:`TenureError`.
    """
    if status in _LEAF_STATUSES:
        return _LEAF_STATUSES[status]
    if status == 500:
        return TenureError
    for family, outcome in FAMILIES.items():
        if outcome.http == status:
            return family
    return TenureError
