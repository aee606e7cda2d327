"""``python3 -m dispatch.worker``: a Python worker process.

    python3 -m dispatch.worker --dispatcher tcp:127.0.0.1:5050 --slots 2 --import mymodule

It runs closures of any pickled callable and Python datasets' elements until Ctrl-C or
SIGTERM (exit 0). Modules given with ``--import`` are imported first: closures of their
functions then need no pickling by value, and a module may register named functions
and dataset kinds with ``dispatch.worker.current()``. The first stdout line is
"dispatch python worker ADDRESS started".
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from dispatch import _worker
from dispatch._worker import Worker, current, import_modules

__all__ = ["main", "current", "Worker"]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m dispatch.worker",
                                     description="A Python worker for a dispatch dispatcher.")
    parser.add_argument("--dispatcher", required=True,
                        help="tcp:HOST:PORT or unix:PATH, or a comma-separated list of them "
                             "(an HA group: the leader is found)")
    parser.add_argument("--address", default="tcp:127.0.0.1:0",
                        help="this worker's address and identity (port 0: a free port)")
    parser.add_argument("--slots", type=int, default=1, help="closures run at once")
    parser.add_argument("--token", default=None, help="the dispatcher's --token")
    parser.add_argument("--tags", default="", help="comma-separated worker tags")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="a module to import first (repeatable)")
    options = parser.parse_args(argv)
    if options.slots < 1:
        parser.error("--slots must be at least 1")
    worker = _worker.set_current(Worker(options.dispatcher, address=options.address, slots=options.slots,
                      token=options.token, tags=[t for t in options.tags.split(",") if t]))
    sys.path.insert(0, "")
    import_modules(options.imports)
    address = worker.start()
    print(f"dispatch python worker {address} started", flush=True)
    worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
