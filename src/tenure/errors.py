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

The CLI maps families to exit codes in one place (``tenure.cli.output``).
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
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
]


class TenureError(Exception):
    """Root of every error tenure raises on purpose."""

    code: ClassVar[str] = "tenure-error"
    retryable: ClassVar[bool] = False
    exit_code: ClassVar[int] = 1
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
