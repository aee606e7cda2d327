"""How Python closures, their arguments, results and errors travel as bytes.

Closure args (the bytes the dispatcher stores and a worker receives):
  ``b"DPY1" + uint32 len(fn) + fn + call`` where ``fn`` is the function pickled with
  cloudpickle (a module-level function is pickled by reference: its module and name;
  lambdas, closures and ``__main__`` functions by value) and ``call`` is
  ``pickle((args, kwargs))``, or ``pickle((args, kwargs, input_formats))`` for a closure
  with inputs (``schedule(..., inputs=[...])``): one ``"pickle"`` or ``"bytes"`` per
  input, saying how the worker turns that input's result bytes into the value it passes
  first to the function. Per-worker resources inside args are pickled as
  persistent ids naming their place in the closure's resource list.
Named functions (``Worker.register``) get ``call`` alone.
Results are ``pickle(result)``; errors are JSON (see ``encode_error``).
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import sys
import threading
import traceback
import weakref
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cloudpickle

from dispatch.errors import RemoteError

CALL_FUNCTION = "dispatch.python.call"          # runs a pickled callable
RESOURCE_FUNCTION = "dispatch.python.resource"  # builds a per-worker resource
_MAGIC = b"DPY1"
_ERROR_KEY = "dispatch.python_error"
_MAX_TRACEBACK_CHARS = 32 << 10  # the dispatcher keeps 64 KiB of an error text
PROTOCOL = pickle.HIGHEST_PROTOCOL


class PerWorkerResource:
    """A value each worker builds for itself (``Coordinator.create_per_worker_resource``).

    Pass it in a closure's args or kwargs (at any depth): the function receives that
    worker's own object in its place, as with TensorFlow's per-worker values.
    """

    __slots__ = ("resource_id",)

    def __init__(self, resource_id: int) -> None:
        self.resource_id = resource_id

    def __repr__(self) -> str:
        return f"PerWorkerResource({self.resource_id})"


# ---- coordinator side ---------------------------------------------------------------------

_function_bytes: "weakref.WeakKeyDictionary[Any, bytes]" = weakref.WeakKeyDictionary()


def _pickled_function(fn: Callable) -> bytes:
    try:
        cached = _function_bytes.get(fn)
    except TypeError:  # not weakly referenceable (a builtin): pickle it each time
        return cloudpickle.dumps(fn, protocol=PROTOCOL)
    if cached is None:
        cached = cloudpickle.dumps(fn, protocol=PROTOCOL)
        try:
            _function_bytes[fn] = cached
        except TypeError:
            pass
    return cached


class _CallPickler(cloudpickle.CloudPickler):
    """Pickles args with resources replaced by their place in the resource list."""

    def __init__(self, file: io.BytesIO, resources: List[int]) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self._resources = resources

    def persistent_id(self, obj: Any) -> Optional[Tuple[str, int]]:  # noqa: D401
        if type(obj) is PerWorkerResource:
            self._resources.append(obj.resource_id)
            return ("resource", len(self._resources) - 1)
        return None


INPUT_PICKLE, INPUT_BYTES = "pickle", "bytes"  # how an input's result reaches a function


def encode_call(args: Sequence[Any], kwargs: Optional[Dict[str, Any]],
                resources: List[int], input_formats: Sequence[str] = ()) -> bytes:
    """pickle((args, kwargs[, input_formats])); appends the ids of the resources found to
    ``resources``."""
    call: tuple = (tuple(args), dict(kwargs or {}))
    if input_formats:
        call += (tuple(input_formats),)
    buffer = io.BytesIO()
    _CallPickler(buffer, resources).dump(call)
    return buffer.getvalue()


def encode_function_call(fn: Callable, args: Sequence[Any], kwargs: Optional[Dict[str, Any]],
                         resources: List[int], input_formats: Sequence[str] = ()) -> bytes:
    function = _pickled_function(fn)
    return b"".join((_MAGIC, struct.pack("<I", len(function)), function,
                     encode_call(args, kwargs, resources, input_formats)))


def encode_resource(fn: Callable, args: Sequence[Any]) -> bytes:
    return encode_function_call(fn, args, None, [])


def decode_result(data: bytes) -> Any:
    return pickle.loads(data)


def _exception_class(module: str, qualname: str) -> Optional[type]:
    """The original exception class, when the coordinator has its module loaded."""
    owner: Any = sys.modules.get(module)
    if owner is None:
        return None
    for part in qualname.split("."):
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    if isinstance(owner, type) and issubclass(owner, Exception):
        return owner
    return None


_remote_classes: Dict[type, type] = {}
_remote_classes_lock = threading.Lock()


def _remote_class(original: type) -> type:
    """A class deriving from both ``original`` and RemoteError (cached)."""
    with _remote_classes_lock:
        cls = _remote_classes.get(original)
        if cls is None:
            cls = type(original.__name__, (original, RemoteError),
                       {"__module__": original.__module__, "__qualname__": original.__qualname__})
            _remote_classes[original] = cls
        return cls


def remote_error(closure_id: int, text: str) -> RemoteError:
    """The exception for a failed closure's error text."""
    start = text.find("{\"" + _ERROR_KEY + "\"")
    if start < 0:  # a C++ function's error, or one the dispatcher made (lost worker, ...)
        return RemoteError(f"closure {closure_id} failed: {text}", closure_id=closure_id)
    try:
        info = json.loads(text[start:])
        type_name = f"{info['module']}.{info['qualname']}"
        message = info["message"]
        remote_traceback = info["traceback"]
    except (ValueError, KeyError, TypeError):
        return RemoteError(f"closure {closure_id} failed: {text}", closure_id=closure_id)
    error: Optional[RemoteError] = None
    original = _exception_class(info["module"], info["qualname"])
    if original is not None:
        try:
            cls = _remote_class(original)
            error = cls.__new__(cls, message)
            error.args = (message,)
            RemoteError.__init__(error, message, closure_id=closure_id, type_name=type_name,
                                 remote_traceback=remote_traceback)
            str(error)  # a class whose __str__ needs its own attributes falls back below
        except Exception:  # noqa: BLE001 - any odd class: use the plain RemoteError
            error = None
    if error is None:
        error = RemoteError(f"{info['qualname']}: {message}", closure_id=closure_id,
                            type_name=type_name, remote_traceback=remote_traceback)
    error.add_note(f"Remote traceback of closure {closure_id}:\n{remote_traceback.rstrip()}")
    return error


# ---- worker side --------------------------------------------------------------------------

class _FunctionCache:
    """Unpickled functions by their pickled bytes (a lambda is unpickled once)."""

    def __init__(self, capacity: int = 256) -> None:
        self._entries: "OrderedDict[bytes, Callable]" = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, data: bytes) -> Callable:
        with self._lock:
            fn = self._entries.get(data)
            if fn is not None:
                self._entries.move_to_end(data)
                return fn
        fn = pickle.loads(data)
        with self._lock:
            self._entries[data] = fn
            if len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return fn


functions = _FunctionCache()


class _CallUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, resolve: Callable[[int], Any]) -> None:
        super().__init__(file)
        self._resolve = resolve

    def persistent_load(self, pid: Any) -> Any:
        kind, index = pid
        if kind != "resource":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self._resolve(index)


def decode_call(data: bytes, resolve: Callable[[int], Any],
                inputs: Sequence[bytes] = ()) -> Tuple[tuple, dict]:
    """The call's args, the inputs' values first (in order), and kwargs."""
    call = _CallUnpickler(io.BytesIO(data), resolve).load()
    args, kwargs = call[0], call[1]
    formats = call[2] if len(call) > 2 else ()
    if len(formats) != len(inputs):
        raise ValueError(f"the closure was scheduled with {len(formats)} inputs "
                         f"but received {len(inputs)}")
    values = tuple(decode_result(data) if form == INPUT_PICKLE else bytes(data)
                   for form, data in zip(formats, inputs))
    return values + tuple(args), kwargs


def decode_function_call(data: bytes, resolve: Callable[[int], Any],
                         inputs: Sequence[bytes] = ()) -> Tuple[Callable, tuple, dict]:
    if data[:4] != _MAGIC:
        raise ValueError("not a dispatch Python closure (its args do not start with DPY1)")
    (length,) = struct.unpack_from("<I", data, 4)
    function = functions.get(bytes(data[8:8 + length]))
    args, kwargs = decode_call(data[8 + length:], resolve, inputs)
    return function, args, kwargs


def encode_result(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return cloudpickle.dumps(value, protocol=PROTOCOL)


def encode_error(error: BaseException) -> bytes:
    """A function's exception as the JSON the coordinator turns back into one."""
    cls = type(error)
    text = "".join(traceback.format_exception(cls, error, error.__traceback__))
    if len(text) > _MAX_TRACEBACK_CHARS:
        text = "... (cut)\n" + text[-_MAX_TRACEBACK_CHARS:]
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the error
        message = f"<{cls.__qualname__} whose str() failed>"
    return json.dumps({_ERROR_KEY: 1, "module": cls.__module__, "qualname": cls.__qualname__,
                       "message": message[:_MAX_TRACEBACK_CHARS],
                       "traceback": text}).encode()
