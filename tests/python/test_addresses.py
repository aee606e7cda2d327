"""Address lists (an HA group's members): every entry point takes "A,B,..." and reaches the
dispatcher that serves, past entries that do not answer."""

from __future__ import annotations

import sys

import pytest

import closure_functions
import dispatch
from conftest import DEADLINE
from dispatch import _address


def test_a_list_is_normalized_entry_by_entry():
    assert _address.normalize("127.0.0.1:1, tcp:127.0.0.1:2,unix:/s") == \
        "tcp:127.0.0.1:1,tcp:127.0.0.1:2,unix:/s"
    assert _address.normalize("127.0.0.1:1") == "tcp:127.0.0.1:1"
    assert _address.is_loopback("tcp:127.0.0.1:1,unix:/s")
    assert not _address.is_loopback("tcp:127.0.0.1:1,tcp:192.0.2.1:5050")


def test_every_client_reaches_the_dispatcher_past_a_dead_address(cluster, tmp_path):
    # Nothing listens on this socket path: each client fails there and goes on.
    listed = f"unix:{tmp_path / 'nobody.sock'},{cluster.address}"
    worker = cluster._start([sys.executable, "-m", "dispatch.worker", "--dispatcher", listed,
                             "--slots", "1", "--address", "tcp:127.0.0.1:0",
                             "--import", "closure_functions"])
    worker.wait_for_line("started")
    with dispatch.Coordinator(listed) as coordinator:
        assert coordinator.schedule(closure_functions.square, args=(7,)).fetch(timeout=DEADLINE) == 49
    dataset = dispatch.Dataset(lambda split: [split], num_splits=4)
    dataset_id = dispatch.register_dataset(listed, dataset)
    assert sorted(dispatch.read(listed, dataset_id, processing_mode="dynamic")) == [0, 1, 2, 3]


def test_an_empty_entry_is_a_clear_error(cluster):
    with pytest.raises(dispatch.InvalidArgumentError, match="entry 2 is empty"):
        dispatch.Coordinator(f"{cluster.address},,{cluster.address}")
