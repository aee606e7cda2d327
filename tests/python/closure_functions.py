"""Module-level functions the tests' workers import (closures of them travel by reference)."""

import os
import threading
import time
from pathlib import Path


def square(x):
    return x * x


def whoami():
    return os.getpid()


def fail_with(kind, message):
    raise {"value": ValueError, "key": KeyError, "custom": CustomError}[kind](message)


class CustomError(Exception):
    pass


_per_thread = threading.local()


def count_on_this_thread():
    """(this worker thread's id, how many closures it has run so far), kept in a
    threading.local as a function caching a per-thread connection would."""
    _per_thread.count = getattr(_per_thread, "count", 0) + 1
    return threading.get_ident(), _per_thread.count


def hold_until_released(directory):
    """Marks its start with a file named by its pid, then runs until `release` exists."""
    directory = Path(directory)
    (directory / f"started-{os.getpid()}").touch()
    while not (directory / "release").exists():
        time.sleep(0.01)  # a closure that stands for real work, not a test's wait
    return os.getpid()


def add_to(counter, amount):
    """Adds to this worker's counter (a per-worker resource): (this worker's pid, total)."""
    counter["total"] += amount
    return os.getpid(), counter["total"]


def wait_until_cancelled(directory):
    """Marks its start, then sleeps until its closure is cancelled; records what it saw."""
    import dispatch
    closure = dispatch.current_closure()
    directory = Path(directory)
    (directory / "started").touch()
    slept = closure.sleep(600)  # returns False early when the closure is cancelled
    (directory / f"saw-slept-{slept}-cancelled-{closure.cancelled}").touch()
    return slept
