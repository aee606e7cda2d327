"""The examples in clients/python/examples run as written against a dispatcher."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEADLINE, child_env

EXAMPLES = Path(__file__).resolve().parents[2] / "clients" / "python" / "examples"


def run_example(name: str, address: str) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name), address], env=child_env(),
                         capture_output=True, text=True, timeout=DEADLINE)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_data_service_quickstart(cluster):
    out = run_example("data_service_quickstart.py", cluster.address)
    assert f"read 1000 elements" in out
    assert f"sum {sum(i * i for i in range(1000))}" in out


def test_training_loop(cluster):
    out = run_example("training_loop.py", cluster.address)
    assert out.count("epoch ") == 5
    assert "fitted w=3.0" in out or "fitted w=2.9" in out


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_is_tested(name):
    assert name in {"data_service_quickstart.py", "training_loop.py"}, \
        f"{name} has no test in {__file__}"
