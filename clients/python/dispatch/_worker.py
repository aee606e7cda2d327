"""Python workers: run closures and produce dataset elements for the dispatcher."""

from __future__ import annotations

import atexit
import base64
import importlib
import itertools
import pickle
import signal
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from dispatch import _address, _dispatch, _serialize
from dispatch.errors import TransientError

__all__ = ["Worker", "current_closure"]

# Closure outcome kinds the extension module understands.
_RESULT, _USER_ERROR, _TRANSIENT_ERROR = 0, 1, 2

PYTHON_DATASET_KIND = "python"  # datasets defined by a pickled function (dispatch.Dataset)

_running: "weakref.WeakSet[Worker]" = weakref.WeakSet()

_closure = threading.local()  # .context: the ClosureContext of the closure this thread runs


def current_closure() -> Any:
    """The closure the calling function runs in, on a Python worker: ``.cancelled`` (the
    dispatcher cancelled it, or its timeout passed: its result will be ignored, so a long
    function may give up), ``.stopping`` (the worker is stopping), ``.worker_address`` and
    ``.sleep(seconds)``, which waits with the GIL released and returns False early when the
    closure is cancelled or the worker stops (True when the time passed). After the
    function returned, the object answers as for a closure that is over (cancelled and
    stopping True, ``sleep`` False at once). RuntimeError outside a running closure.
    """
    context = getattr(_closure, "context", None)
    if context is None:
        raise RuntimeError("dispatch.current_closure() is called by a function that a "
                           "Python worker runs as a closure")
    return context


@atexit.register
def _stop_running_workers() -> None:
    # Executor threads take the GIL: they must be gone before the interpreter is.
    for worker in list(_running):
        worker.stop()


class _Resources:
    """This process's per-worker resource objects, by the token its component carries."""

    def __init__(self) -> None:
        self._objects: Dict[bytes, Any] = {}
        self._lock = threading.Lock()
        self._next = itertools.count(1)

    def add(self, value: Any) -> bytes:
        token = b"dispatch.python.resource:%d" % next(self._next)
        with self._lock:
            self._objects[token] = value
        return token

    def get(self, component: bytes) -> Any:
        with self._lock:
            # A component built by a C++ function reaches Python as its bytes.
            return self._objects.get(component, component)


class Worker:
    """A worker process's link to the dispatcher, embeddable in any Python program.

        worker = dispatch.Worker("tcp:127.0.0.1:5050", slots=2)
        worker.register("train_step", train_step)
        worker.serve()   # until Ctrl-C, SIGTERM or stop()

    Every Python worker runs closures of any pickled callable (``schedule(fn)``), the
    functions registered here by name, and elements of Python datasets
    (``dispatch.Dataset``) and of the dataset kinds registered here.
    ``slots``: closures run at once, each on an executor thread of its own (they take
    the GIL only while Python runs). ``address``: this worker's identity and where
    consumers read its elements; port 0 picks a free one.
    """

    def __init__(self, dispatcher: str, *, address: str = "tcp:127.0.0.1:0", slots: int = 1,
                 token: Optional[str] = None, tags: Sequence[str] = (),
                 heartbeat_interval: float = 1.0) -> None:
        self.dispatcher = _address.checked(dispatcher, token, "dispatch.Worker")
        self._functions: Dict[str, Callable] = {}
        self._kinds: Dict[str, Callable] = {}
        self._resources = _Resources()
        self._stopped = threading.Event()
        self._handle = _dispatch.Worker(self.dispatcher, _address.normalize(address), token or "",
                                        int(slots), list(tags), max(1, int(heartbeat_interval * 1000)),
                                        self._run_closure, self._open_split)
        self._handle.register_function(_serialize.CALL_FUNCTION)
        self._handle.register_function(_serialize.RESOURCE_FUNCTION)
        self._handle.register_dataset_kind(PYTHON_DATASET_KIND)
        self.address: Optional[str] = None

    def register(self, name: str, fn: Callable) -> None:
        """Runs ``fn(*args, **kwargs)`` for closures scheduled as ``schedule(name, ...)``.

        The name goes into the worker's heartbeats: the dispatcher sends such closures
        only to workers that registered it. Before ``start()``/``serve()``.
        """
        if not callable(fn):
            raise TypeError(f"register() needs a callable, got {fn!r}")
        self._handle.register_function(name)
        self._functions[name] = fn

    def register_dataset(self, kind: str, fn: Callable[[Any], Iterable]) -> None:
        """Produces the elements of datasets of ``kind`` (``Dataset(kind, ...)``):
        ``fn(split)`` returns an iterable of one split's elements. Before ``start()``.

        The kind goes into the worker's heartbeats: the dispatcher gives tasks of such
        datasets only to workers that registered it."""
        if not callable(fn):
            raise TypeError(f"register_dataset() needs a callable, got {fn!r}")
        self._handle.register_dataset_kind(kind)
        self._kinds[kind] = fn

    def start(self, timeout: float = 30.0) -> str:
        """Connects in the background; returns this worker's address (the bound one)."""
        self.address = self._handle.start(timeout)
        _running.add(self)
        return self.address

    def status(self) -> Dict[str, Any]:
        """Counters of the worker's link: registered, worker_id, closures_run, ..."""
        return self._handle.status()

    def serve(self) -> None:
        """Starts (if needed) and serves until ``stop()``, Ctrl-C or SIGTERM, then stops.

        Signal handlers are installed only when called from the main thread.
        """
        if self.address is None:
            self.start()
        restore = None
        if threading.current_thread() is threading.main_thread():
            restore = signal.signal(signal.SIGTERM, lambda *_: self._stopped.set())
        try:
            while not self._stopped.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            if restore is not None:
                signal.signal(signal.SIGTERM, restore)
            self.stop()

    def stop(self) -> None:
        """Stops: waits for running closures, then disconnects. Idempotent."""
        self._stopped.set()
        self._handle.stop()
        _running.discard(self)

    def __enter__(self) -> "Worker":
        if self.address is None:
            self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # ---- called by the extension module (executor and agent threads, GIL held) ----

    def _run_closure(self, name: str, data: bytes, components: List[bytes],
                     inputs: List[bytes], context: Any) -> tuple:
        outer = getattr(_closure, "context", None)
        _closure.context = context
        try:
            return self._run_call(name, data, components, inputs)
        finally:
            _closure.context = outer

    def _run_call(self, name: str, data: bytes, components: List[bytes],
                  inputs: List[bytes]) -> tuple:
        try:
            resolve = lambda index: self._resources.get(components[index])  # noqa: E731
            if name == _serialize.CALL_FUNCTION:
                fn, args, kwargs = _serialize.decode_function_call(data, resolve, inputs)
            elif name == _serialize.RESOURCE_FUNCTION:
                fn, args, kwargs = _serialize.decode_function_call(data, resolve)
                return (_RESULT, self._resources.add(fn(*args, **kwargs)))
            else:
                fn = self._functions[name]
                args, kwargs = _serialize.decode_call(data, resolve, inputs)
            return (_RESULT, _serialize.encode_result(fn(*args, **kwargs)))
        except TransientError as error:
            return (_TRANSIENT_ERROR, _serialize.encode_error(error))
        except BaseException as error:  # noqa: BLE001 - every failure goes to the coordinator
            return (_USER_ERROR, _serialize.encode_error(error))

    def _open_split(self, kind: str, args: Dict[str, str], index: int,
                    payload: Optional[str]) -> Any:
        split: Any = index if payload is None else payload
        if kind == PYTHON_DATASET_KIND:
            fn = _serialize.functions.get(base64.urlsafe_b64decode(args["fn"]))
        else:
            fn = self._kinds[kind]
        elements = iter(fn(split))
        if args.get("format", "pickle") == "pickle":
            return (pickle.dumps(e, protocol=_serialize.PROTOCOL) for e in elements)
        return elements


_current: Optional[Worker] = None


def set_current(worker: Worker) -> Worker:
    global _current
    _current = worker
    return worker


def current() -> Worker:
    """The worker of ``python3 -m dispatch.worker`` (for the modules it imports)."""
    if _current is None:
        raise RuntimeError("no dispatch worker runs in this process "
                           "(start one with python3 -m dispatch.worker)")
    return _current


def import_modules(modules: Iterable[str]) -> None:
    """Imports modules whose functions closures refer to, or that register things."""
    for name in modules:
        importlib.import_module(name)
