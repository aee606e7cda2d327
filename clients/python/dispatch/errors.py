"""Errors raised by the dispatch package.

Every error the dispatcher or the C++ client reports is a :class:`DispatchError`
whose class names its status code (the codes of ``schema/dispatcher.capnp``'s
``ErrorCode``, docs/users/errors.md). A closure whose function failed is a
:class:`RemoteError` instead (see :mod:`dispatch.coordinator`).
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Type

__all__ = [
    "DispatchError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "FailedPreconditionError", "ResourceExhaustedError", "UnavailableError", "DataLossError",
    "InternalError", "UnauthenticatedError", "CancelledError", "DeadlineExceededError",
    "RemoteError", "TransientError", "InsecureConnectionWarning",
]


class DispatchError(Exception):
    """An error with a dispatch status code (``code``, e.g. ``"NotFound"``)."""

    code = "Unknown"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgumentError(DispatchError, ValueError):
    """A request was malformed or out of range: fix it; retrying will not help."""
    code = "InvalidArgument"


class NotFoundError(DispatchError, LookupError):
    """An id the dispatcher does not know (never created, or already released)."""
    code = "NotFound"


class AlreadyExistsError(DispatchError):
    """Something with that name exists already."""
    code = "AlreadyExists"


class FailedPreconditionError(DispatchError):
    """The request conflicts with the current state (e.g. a named job reused with another mode)."""
    code = "FailedPrecondition"


class ResourceExhaustedError(DispatchError):
    """A limit was reached (message size, queue, memory): back off or send less."""
    code = "ResourceExhausted"


class UnavailableError(DispatchError):
    """The dispatcher or a worker cannot be reached now; retrying later may succeed."""
    code = "Unavailable"


class DataLossError(DispatchError):
    """Stored data is damaged."""
    code = "DataLoss"


class InternalError(DispatchError):
    """A bug: please report it with the message."""
    code = "Internal"


class UnauthenticatedError(DispatchError, PermissionError):
    """The dispatcher refused the token."""
    code = "Unauthenticated"


class CancelledError(DispatchError):
    """The closure (or reader) was cancelled: by a first error, cancel(), or close()."""
    code = "Cancelled"


class DeadlineExceededError(DispatchError, TimeoutError):
    """A closure's timeout passed before it finished."""
    code = "DeadlineExceeded"


class TransientError(Exception):
    """Raise it from a closure function for a failure another attempt may not see.

    The dispatcher retries the closure (up to its transient-retry limit) instead of
    making it the coordinator's first error.
    """


class InsecureConnectionWarning(UserWarning):
    """A dispatcher address off this machine, used without a token."""


class RemoteError(Exception):
    """A closure's function raised (or its C++ function failed).

    Raised from ``RemoteValue.fetch()`` and ``Coordinator.join()``/``done()``. For a
    Python function the exception is also an instance of the original exception class
    when the coordinator can import it (``except ValueError`` works); ``type_name`` is
    the original class's qualified name either way, ``remote_traceback`` the
    traceback text on the worker, and ``closure_id`` the dispatcher's id.
    """

    def __init__(self, message: str, *, closure_id: int = 0, type_name: Optional[str] = None,
                 remote_traceback: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.closure_id = closure_id
        self.type_name = type_name
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        return self.message


_BY_CODE: Dict[str, Type[DispatchError]] = {
    cls.code: cls
    for cls in (InvalidArgumentError, NotFoundError, AlreadyExistsError, FailedPreconditionError,
                ResourceExhaustedError, UnavailableError, DataLossError, InternalError,
                UnauthenticatedError, CancelledError, DeadlineExceededError)
}

_CLOSURE_FAILED = re.compile(r"closure (\d+) failed: (.*)\Z", re.DOTALL)


def error_for_status(code: str, message: str) -> BaseException:
    """The exception for a C++ Status (the extension module raises what this returns)."""
    if code == "FailedPrecondition":
        failed = _CLOSURE_FAILED.match(message)
        if failed is not None:
            from dispatch import _serialize  # a cycle at import time otherwise
            return _serialize.remote_error(int(failed.group(1)), failed.group(2))
    cls = _BY_CODE.get(code)
    if cls is None:
        error = DispatchError(message)
        error.code = code
        return error
    return cls(message)
