"""Fixtures for the Python package's tests: a real dispatcher and real worker processes
on loopback, with ports chosen by the OS and a fresh work dir per test.

DISPATCH_BUILD_DIR names the build directory (ctest sets it); the package is imported
from its python/ subdirectory.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

import pytest

BUILD_DIR = Path(os.environ.get("DISPATCH_BUILD_DIR",
                                Path(__file__).resolve().parents[2] / "build"))
TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BUILD_DIR / "python"))

DEADLINE = 60.0  # seconds any one wait may take before the test fails


def wait_until(condition: Callable[[], object], timeout: float = DEADLINE,
               what: str = "the condition") -> object:
    """Polls ``condition`` until it is truthy; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not hold within {timeout} s")
        time.sleep(pause)  # polling a condition, with a deadline (not a wait for time)
        pause = min(pause * 2, 0.05)


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(BUILD_DIR / "python"), str(TESTS_DIR)])
    return env


class Process:
    """A child process whose stdout lines are read on a thread."""

    def __init__(self, argv: List[str], cwd: Optional[Path] = None) -> None:
        self.argv = argv
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, cwd=cwd, env=child_env(),
                                      start_new_session=True)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.output: List[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for_line(self, needle: str, timeout: float = DEADLINE) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"{self.argv[0]} printed no line with {needle!r} within {timeout} s;"
                            f" output:\n{''.join(self.output)}")
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.popen.poll() is not None:
                    pytest.fail(f"{self.argv} exited ({self.popen.returncode}) before "
                                f"printing {needle!r}; output:\n{''.join(self.output)}")
                continue
            if needle in line:
                return line

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=DEADLINE)

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


class Cluster:
    """A dispatcher and the workers a test starts; everything stops at the end."""

    def __init__(self, work_dir: Path, extra_args: tuple = ()) -> None:
        self.work_dir = work_dir
        self.processes: List[Process] = []
        self.dispatcher = self._start([str(BUILD_DIR / "reactor" / "dispatcher"), "--listen",
                                       "tcp:127.0.0.1:0", "--http", "tcp:127.0.0.1:0",
                                       "--work-dir", str(work_dir / "journal"),
                                       *extra_args])
        line = self.dispatcher.wait_for_line("listening on")
        self.address = line.split("listening on", 1)[1].split()[0].rstrip(",")

    def _start(self, argv: List[str]) -> Process:
        process = Process(argv, cwd=self.work_dir)
        self.processes.append(process)
        return process

    def python_worker(self, slots: int = 1, imports: tuple = ("closure_functions",),
                      address: str = "tcp:127.0.0.1:0") -> Process:
        argv = [sys.executable, "-m", "dispatch.worker", "--dispatcher", self.address,
                "--slots", str(slots), "--address", address]
        for module in imports:
            argv += ["--import", module]
        worker = self._start(argv)
        worker.address = worker.wait_for_line("started").split()[3]
        return worker

    def cpp_worker(self, max_closures: int = 1) -> Process:
        worker = self._start([str(BUILD_DIR / "clients" / "dispatch-worker"), "--dispatcher",
                              self.address, "--address", "tcp:127.0.0.1:0",
                              "--max-closures", str(max_closures)])
        worker.address = worker.wait_for_line("started").split()[1]
        return worker

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()


def free_tcp_address() -> str:
    """A loopback address on a port the OS picked (for a worker that needs a fixed one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp:127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()
