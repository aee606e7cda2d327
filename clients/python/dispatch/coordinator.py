"""Closures: schedule Python functions on the cluster's workers (TensorFlow's
``ClusterCoordinator``).

    with dispatch.Coordinator("tcp:127.0.0.1:5050") as coordinator:
        values = [coordinator.schedule(step, args=(i,)) for i in range(100)]
        coordinator.join()
        print(sum(v.fetch() for v in values))

Semantics are the C++ coordinator's: closures run at least once (a closure whose
worker dies runs again elsewhere); the first closure that fails becomes the
coordinator's error, raised once by the next ``schedule``/``join``/``done``, and the
closures still queued behind it are cancelled.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from dispatch import _address, _dispatch, _serialize
from dispatch._serialize import PerWorkerResource
from dispatch.errors import RemoteError

__all__ = ["Coordinator", "RemoteValue", "PerWorkerResource", "RemoteError"]

_NOT_FETCHED = object()


class RemoteValue:
    """The handle of one scheduled closure (returned by ``Coordinator.schedule``).

    ``fetch()`` waits for the outcome and returns the function's result, raises its
    error (a :class:`RemoteError` keeping the original type), or raises
    :class:`dispatch.CancelledError`. Fetching again returns the same value.
    """

    __slots__ = ("_handle", "_raw", "_value", "_error")

    def __init__(self, handle: Any, raw: bool) -> None:
        self._handle = handle
        self._raw = raw
        self._value: Any = _NOT_FETCHED
        self._error: Optional[BaseException] = None

    @property
    def closure_id(self) -> int:
        """The dispatcher's id for the closure; 0 until it acknowledged the schedule."""
        return self._handle.closure_id

    @property
    def status(self) -> str:
        """``"pending"``, ``"ready"``, ``"failed"`` or ``"cancelled"``. Never blocks."""
        return self._handle.status

    def done(self) -> bool:
        """Whether the outcome is in (ready, failed or cancelled). Never blocks."""
        return self._handle.done()

    def fetch(self, timeout: Optional[float] = None) -> Any:
        """The result, waiting up to ``timeout`` seconds (None: as long as it takes).

        Raises TimeoutError when the timeout passes first (the closure stays pending),
        the closure's error, or CancelledError. Ctrl-C interrupts the wait.
        """
        if self._value is not _NOT_FETCHED:
            return self._value
        if self._error is not None:
            raise self._error
        try:
            data = self._handle.fetch(timeout)
        except BaseException as error:  # noqa: BLE001 - kept and raised again on every fetch
            if not isinstance(error, (KeyboardInterrupt, SystemExit)):
                self._error = error
            raise
        if data is None:
            raise TimeoutError(f"closure {self.closure_id} has no outcome after {timeout} s")
        self._value = data if self._raw else _serialize.decode_result(data)
        return self._value

    def cancel(self) -> None:
        """Cancels the closure: a queued one never runs; a running one's result is ignored.

        FailedPreconditionError when it had already finished or failed.
        """
        self._handle.cancel()

    def __repr__(self) -> str:
        return f"<RemoteValue closure {self.closure_id} {self.status}>"


class Coordinator:
    """A client that schedules closures on the dispatcher's workers.

    ``address``: the dispatcher ("tcp:HOST:PORT", "unix:PATH" or "HOST:PORT").
    ``token``: presented at the dispatcher's gateway (its ``--token``).
    ``coordinator_id``: the id the closures live under at the dispatcher; a new
    Coordinator with the same id sees them (after a restart of this program). None:
    a random one.
    """

    def __init__(self, address: str, token: Optional[str] = None,
                 coordinator_id: Optional[int] = None, *, connect_timeout: float = 10.0) -> None:
        self.address = _address.checked(address, token, "dispatch.Coordinator")
        self._handle = _dispatch.Coordinator(self.address, token or "", coordinator_id or 0,
                                             int(connect_timeout * 1000))

    @property
    def coordinator_id(self) -> int:
        """The id this coordinator's closures live under at the dispatcher."""
        return self._handle.id

    def schedule(self, fn: Union[Callable, str], args: Sequence[Any] = (),
                 kwargs: Optional[Dict[str, Any]] = None,
                 resources: Iterable[PerWorkerResource] = (), *, priority: int = 0,
                 timeout: Optional[float] = None,
                 inputs: Sequence[RemoteValue] = ()) -> RemoteValue:
        """Queues ``fn(*args, **kwargs)`` on some worker; returns its RemoteValue at once.

        ``fn`` is a callable (a module-level function travels by reference: workers
        import its module; lambdas, closures and ``__main__`` functions travel by value
        with cloudpickle) or the name of a function registered on Python workers with
        ``Worker.register``. Args, kwargs and the result are pickled. Per-worker
        resources anywhere in args/kwargs become the running worker's own object.
        ``resources`` lists more per-worker resources for the closure (they reach a
        function only through args). Higher ``priority`` runs first; past ``timeout``
        seconds the closure fails with DeadlineExceededError.

        ``inputs``: RemoteValues of this coordinator the closure depends on. It runs
        only once they all finished, as ``fn(*input_results, *args, **kwargs)`` (each
        result as ``fetch()`` would return it: unpickled, or bytes for ``schedule_raw``
        closures); when one fails or is cancelled, this closure fails naming it. An
        input must not have been fetched before (FailedPreconditionError); fetching it
        afterwards is fine.

        Raises the coordinator's first error instead, once. Waits only when too many
        closures are still unacknowledged (back-pressure).
        """
        resource_ids = [r.resource_id for r in resources]
        handles, formats = self._inputs(inputs)
        if callable(fn):
            function = _serialize.CALL_FUNCTION
            data = _serialize.encode_function_call(fn, args, kwargs, resource_ids, formats)
        elif isinstance(fn, str):
            function = fn
            data = _serialize.encode_call(args, kwargs, resource_ids, formats)
        else:
            raise TypeError(f"schedule() needs a callable or a function name, got {fn!r}")
        return self._schedule(function, data, resource_ids, priority, timeout, handles, raw=False)

    def schedule_raw(self, function: str, data: bytes = b"",
                     resources: Iterable[PerWorkerResource] = (), *, priority: int = 0,
                     timeout: Optional[float] = None,
                     inputs: Sequence[RemoteValue] = ()) -> RemoteValue:
        """Queues a function registered on C++ workers (``dispatch-worker``'s built-ins,
        or any embedding's ``RegisterFunction``): ``data`` are its argument bytes, and
        ``fetch()`` returns its result bytes. ``resources`` reach it as their components;
        ``inputs`` (RemoteValues of this coordinator, as for ``schedule``) as their
        result bytes (``ClosureCall::inputs()``: pickled for ``schedule`` closures).
        """
        handles, _ = self._inputs(inputs)
        return self._schedule(function, bytes(data), [r.resource_id for r in resources],
                              priority, timeout, handles, raw=True)

    @staticmethod
    def _inputs(inputs: Sequence[RemoteValue]) -> Tuple[List[Any], List[str]]:
        if isinstance(inputs, RemoteValue):
            inputs = [inputs]
        handles, formats = [], []
        for value in inputs:
            if not isinstance(value, RemoteValue):
                raise TypeError(f"inputs must be RemoteValues of schedule(), got {value!r}")
            handles.append(value._handle)
            formats.append(_serialize.INPUT_BYTES if value._raw else _serialize.INPUT_PICKLE)
        return handles, formats

    def _schedule(self, function: str, data: bytes, resource_ids: list, priority: int,
                  timeout: Optional[float], inputs: List[Any], raw: bool) -> RemoteValue:
        timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
        handle = self._handle.schedule(function, data, resource_ids, priority, timeout_ms, inputs)
        return RemoteValue(handle, raw)

    def create_per_worker_resource(self, fn: Callable, *args: Any) -> PerWorkerResource:
        """A value each worker builds for itself with ``fn(*args)``, the first time a
        closure that uses it runs there (TensorFlow's ``create_per_worker_dataset`` and
        per-worker variables work this way). Pass the result in a closure's args."""
        if not callable(fn):
            raise TypeError(f"create_per_worker_resource() needs a callable, got {fn!r}")
        resource_id = self._handle.create_per_worker_resource(
            _serialize.RESOURCE_FUNCTION, _serialize.encode_resource(fn, args))
        return PerWorkerResource(resource_id)

    def join(self) -> None:
        """Waits until no closure of this coordinator is queued or running.

        Raises the first error (once) when a closure failed. Ctrl-C interrupts it.
        """
        self._handle.join()

    def done(self) -> bool:
        """Whether no closure is queued or running now (raises the first error, once)."""
        return self._handle.done()

    def close(self) -> None:
        """Sends the releases still pending and disconnects. Idempotent."""
        self._handle.close()

    def __enter__(self) -> "Coordinator":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
