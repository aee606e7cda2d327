#!/usr/bin/env python3
"""Python closures and reads through dispatch, beside Dask in the same run (issue 15).

    python3 bench/python_closures.py [--build-dir build] [--closures 20000]
    build/bench/dispatch-bench python [same flags]

1. No-op Python closures through 2 Python worker processes (python3 -m dispatch.worker):
   throughput (schedule N, join, fetch all; best of --rounds) and sequential
   schedule-then-fetch latency (p50/p99). The same work on a Dask LocalCluster of 2
   worker processes with one thread each, when Debian's python3-distributed is
   installed (skipped with a message if not). Targets: >= 10x Dask's best throughput,
   <= 1/10 of its sequential p50.
2. Reading 1 MiB elements (dispatch-worker's synthetic kind, DYNAMIC) through the Python
   iterator (copy=False: memoryviews of the received buffers; and copy=True: bytes),
   beside `dispatchctl read` (the C++ reader) in the same run. Target: Python >= 80% of
   the C++ reader's throughput.
Prints a table; --json adds one JSON line of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def noop():
    return None


class Cluster:
    def __init__(self, build: Path, work: Path, synchronous: str = "full") -> None:
        self.build = build
        self.processes = []
        dispatcher = self.start([str(build / "reactor" / "dispatcher"), "--listen",
                                 "tcp:127.0.0.1:0", "--http", "off", "--work-dir",
                                 str(work / "journal"), "--synchronous", synchronous])
        line = self.wait_line(dispatcher, "listening on")
        self.address = line.split("listening on", 1)[1].split()[0].rstrip(",")

    def start(self, argv, env=None):
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True, env=env)
        self.processes.append(process)
        return process

    @staticmethod
    def wait_line(process, needle):
        for line in process.stdout:
            if needle in line:
                return line
        raise RuntimeError(f"{process.args[0]} exited before printing {needle!r}")

    def python_worker(self, slots):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(self.build / "python"), str(Path(__file__).resolve().parent)]))
        worker = self.start([sys.executable, "-m", "dispatch.worker", "--dispatcher",
                             self.address, "--slots", str(slots), "--import", "python_closures"],
                            env=env)
        self.wait_line(worker, "started")

    def cpp_worker(self):
        worker = self.start([str(self.build / "clients" / "dispatch-worker"), "--dispatcher",
                             self.address, "--address", "tcp:127.0.0.1:0", "--max-closures", "0"])
        self.wait_line(worker, "started")

    def close(self):
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# The stages of a traced round trip (common/closure_trace.h's stamps, the first and last
# taken here): name, from, to. -1 is the Python call of schedule(); 13 is fetch()'s return.
TRACE_SPANS = [
    ("python: schedule() to C++ Schedule()", -1, 0),
    ("client: Schedule() to loop send", 0, 1),
    ("hop: coordinator -> dispatcher", 1, 2),
    ("dispatcher: schedule to push", 2, 3),
    ("hop: dispatcher -> worker", 3, 4),
    ("worker: push to run start", 4, 5),
    ("worker: run (Python no-op)", 5, 6),
    ("worker: run end to report sent", 6, 7),
    ("hop: worker -> dispatcher", 7, 8),
    ("dispatcher: report to commit start", 8, 9),
    ("dispatcher: commit", 9, 10),
    ("dispatcher: commit end to reply", 10, 11),
    ("hop: dispatcher -> coordinator", 11, 12),
    ("client: loop to fetch() return", 12, 13),
]


def traced_round_trips(coordinator, fn, count):
    """Per-stage samples (ns) of `count` traced schedule-then-fetch round trips, through
    the package's private handle (what Coordinator.schedule calls) with the trace on."""
    from dispatch import _serialize
    spans = [[] for _ in TRACE_SPANS]
    totals = []
    for _ in range(count):
        begin = time.monotonic_ns()
        data = _serialize.encode_function_call(fn, (), None, [])
        handle = coordinator._handle.schedule(_serialize.CALL_FUNCTION, data, [], 0, 0, [], True)
        handle.fetch(None)
        woken = time.monotonic_ns()
        stamps = list(handle.trace())
        if len(stamps) != 13 or 0 in stamps:
            continue  # the dispatcher dropped it: count only whole traces
        stamps.append(woken)
        stamps_by = dict(enumerate(stamps))
        stamps_by[-1] = begin
        for i, (_, start, end) in enumerate(TRACE_SPANS):
            spans[i].append(stamps_by[end] - stamps_by[start])
        totals.append(woken - begin)
    return spans, totals


def dispatch_closures(address, n, rounds, sequential, breakdown=False):
    import dispatch
    from python_closures import noop as module_noop
    with dispatch.Coordinator(address) as coordinator:
        for _ in range(200):  # warm up: connections, function caches
            coordinator.schedule(module_noop).fetch()
        rates = []
        for _ in range(rounds):
            start = time.perf_counter()
            values = [coordinator.schedule(module_noop) for _ in range(n)]
            coordinator.join()
            for v in values:
                v.fetch()
            rates.append(n / (time.perf_counter() - start))
        latencies = []
        for _ in range(sequential):
            start = time.perf_counter()
            coordinator.schedule(module_noop).fetch()
            latencies.append(time.perf_counter() - start)
        traced = traced_round_trips(coordinator, module_noop, sequential) if breakdown else None
    return max(rates), rates, latencies, traced


def dask_closures(n, rounds, sequential):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        return None
    import logging
    logging.getLogger("distributed").setLevel(logging.ERROR)
    from python_closures import noop as module_noop
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        for _ in range(50):
            client.submit(module_noop, pure=False).result()
        rates = []
        for _ in range(rounds):
            start = time.perf_counter()
            futures = [client.submit(module_noop, pure=False) for _ in range(n)]
            client.gather(futures)
            rates.append(n / (time.perf_counter() - start))
            del futures
        latencies = []
        for _ in range(sequential):
            start = time.perf_counter()
            client.submit(module_noop, pure=False).result()
            latencies.append(time.perf_counter() - start)
    return max(rates), rates, latencies


def reads(cluster, build, mib, splits, rounds):
    """Best of `rounds` alternating runs of each reader. Both clocks start once the job is
    open (as dispatchctl's does) and stop at the last element."""
    import dispatch
    from dispatch import _dispatch
    definition = f"synthetic count={mib} size={1 << 20} splits={splits}"
    dataset_id = _dispatch.register_dataset(cluster.address, "", definition.encode(), splits, [],
                                            b"", 30.0)
    best = {"cpp_MBps": 0.0, "python_MBps": 0.0, "python_copy_MBps": 0.0}
    for _ in range(rounds):
        cpp = subprocess.run([str(build / "clients" / "dispatchctl"), "--dispatcher",
                              cluster.address, "read", "synthetic", f"size={1 << 20}",
                              f"count={mib}", f"splits={splits}"], capture_output=True, text=True)
        if cpp.returncode != 0:
            raise RuntimeError(f"dispatchctl read failed: {cpp.stdout}{cpp.stderr}")
        line = [l for l in cpp.stdout.splitlines() if l.startswith("read ")][-1]
        best["cpp_MBps"] = max(best["cpp_MBps"], float(line.rsplit(",", 1)[1].split()[0]))
        for copy in (False, True):
            elements = dispatch.read(cluster.address, dataset_id, copy=copy, progress=False)
            start = time.perf_counter()
            total = 0
            for element in elements:
                total += len(element)
            rate = total / (time.perf_counter() - start) / 1e6
            key = "python_copy_MBps" if copy else "python_MBps"
            best[key] = max(best[key], rate)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=str(REPO / "build"))
    parser.add_argument("--closures", type=int, default=20000)
    parser.add_argument("--dask-closures", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequential", type=int, default=500)
    parser.add_argument("--slots", type=int, default=4, help="slots per Python worker")
    parser.add_argument("--read-mib", type=int, default=1024)
    parser.add_argument("--synchronous", default="full", choices=("full", "normal"),
                        help="the dispatcher's --synchronous for the closures (full: fsync "
                             "every group commit, as Dask's scheduler keeps nothing on disk)")
    parser.add_argument("--skip-dask", action="store_true")
    parser.add_argument("--breakdown", action="store_true",
                        help="after the sequential round trips, as many traced ones, and "
                             "their per-stage p50 and p90")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    build = Path(options.build_dir).resolve()
    sys.path.insert(0, str(build / "python"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

    with tempfile.TemporaryDirectory(prefix="python-bench-") as work:
        cluster = Cluster(build, Path(work), options.synchronous)
        try:
            for _ in range(2):
                cluster.python_worker(options.slots)
            rate, rates, latencies, traced = dispatch_closures(
                cluster.address, options.closures, options.rounds, options.sequential,
                options.breakdown)
        finally:
            cluster.close()
        # Reads on a cluster of their own: the same two dispatch-workers for both readers.
        read = None
        if options.read_mib > 0:
            cluster = Cluster(build, Path(work) / "reads")
            try:
                cluster.cpp_worker()
                cluster.cpp_worker()
                read = reads(cluster, build, options.read_mib, 16, options.rounds)
            finally:
                cluster.close()
    dask = None if options.skip_dask else dask_closures(options.dask_closures, options.rounds,
                                                        min(options.sequential, 300))
    p50 = percentile(latencies, 0.5) * 1e6
    p99 = percentile(latencies, 0.99) * 1e6
    print(f"python closures: {options.closures} no-op closures x {options.rounds} rounds, "
          f"2 Python workers x {options.slots} slots; {options.sequential} sequential; "
          f"--synchronous={options.synchronous}")
    print(f"{'':28} {'dispatch':>12} {'dask':>12} {'ratio':>8} {'target':>8}")
    figures = {"throughput": rate, "throughput_rounds": rates, "sequential_p50_us": p50,
               "sequential_p99_us": p99}
    if dask is None:
        print("  (dask: python3-distributed is not installed or --skip-dask: skipped)")
        print(f"  {'throughput (closures/s)':26} {rate:12.0f}")
        print(f"  {'sequential p50 (us)':26} {p50:12.0f}")
    else:
        d_rate, d_rates, d_lat = dask
        d_p50 = percentile(d_lat, 0.5) * 1e6
        figures.update(dask_throughput=d_rate, dask_sequential_p50_us=d_p50)
        print(f"  {'throughput (closures/s)':26} {rate:12.0f} {d_rate:12.0f} "
              f"{rate / d_rate:7.1f}x {'>= 10x':>8}")
        print(f"  {'sequential p50 (us)':26} {p50:12.0f} {d_p50:12.0f} "
              f"{d_p50 / p50:7.1f}x {'>= 10x':>8}")
    print(f"  {'sequential p99 (us)':26} {p99:12.0f}")
    if traced is not None:
        spans, totals = traced
        print(f"sequential round trip, per stage ({len(totals)} traced), us:")
        print(f"  {'stage':38} {'p50':>8} {'p90':>8}")
        for (name, _, _), samples in zip(TRACE_SPANS, spans):
            if samples:
                print(f"  {name:38} {percentile(samples, 0.5) / 1e3:8.1f} "
                      f"{percentile(samples, 0.9) / 1e3:8.1f}")
        if totals:
            print(f"  {'whole round trip':38} {percentile(totals, 0.5) / 1e3:8.1f} "
                  f"{percentile(totals, 0.9) / 1e3:8.1f}")
    if read is None:
        print("read: skipped (--read-mib 0)")
    else:
        print(f"read {options.read_mib} x 1 MiB elements (DYNAMIC, 2 dispatch-workers), "
              f"best of {options.rounds}:")
        print(f"  C++ reader (dispatchctl read)  {read['cpp_MBps']:8.0f} MB/s")
        print(f"  Python iterator, copy=False    {read['python_MBps']:8.0f} MB/s  "
              f"{read['python_MBps'] / read['cpp_MBps']:.0%} of C++ (target >= 80%)")
        print(f"  Python iterator, copy=True     {read['python_copy_MBps']:8.0f} MB/s  "
              f"{read['python_copy_MBps'] / read['cpp_MBps']:.0%} of C++")
        figures.update(read)
    if options.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
