"""Datasets from Python: defined in Python, produced by Python workers, read by consumers."""

from __future__ import annotations

import collections
import json
import subprocess
import threading

import numpy
import pytest

import dataset_functions
import dispatch
from conftest import BUILD_DIR, DEADLINE, wait_until


def test_dynamic_sharding_reads_every_element_exactly_once(cluster):
    workers = [cluster.python_worker(imports=("dataset_functions",)) for _ in range(2)]
    dataset = dispatch.Dataset(dataset_functions.numbered, num_splits=20)
    elements = list(dispatch.read(cluster.address, dataset, processing_mode="dynamic"))
    counts = collections.Counter(elements)
    assert sorted(counts) == list(range(2000))
    assert set(counts.values()) == {1}
    assert len(workers) == 2


def test_register_dataset_is_idempotent_and_readable_by_id(cluster):
    cluster.python_worker()
    dataset = dispatch.Dataset(lambda split: [split] * 3, num_splits=4)
    first = dispatch.register_dataset(cluster.address, dataset)
    assert dispatch.register_dataset(cluster.address, dataset) == first
    assert sorted(dispatch.from_dataset_id("dynamic", cluster.address, first)) == \
        sorted([s for s in range(4) for _ in range(3)])


def test_off_mode_reads_the_whole_dataset_from_each_worker(cluster):
    for _ in range(2):
        cluster.python_worker()
    dataset = dispatch.Dataset(lambda split: [split * 10 + i for i in range(5)], num_splits=3)
    elements = list(dispatch.read(cluster.address, dataset, processing_mode="off"))
    assert collections.Counter(elements) == collections.Counter(
        [s * 10 + i for s in range(3) for i in range(5)] * 2)


def test_round_robin_consumers_split_the_rounds(cluster):
    cluster.python_worker()
    dataset = dispatch.Dataset(lambda split: range(split * 50, split * 50 + 50), num_splits=4)
    dataset_id = dispatch.register_dataset(cluster.address, dataset)
    consumers = [dispatch.read(cluster.address, dataset_id, processing_mode="off",
                               job_name="round-robin", num_consumers=2, consumer_index=i)
                 for i in range(2)]
    # Both consumers must be reading for rounds to advance: alternate between them.
    seen = [[], []]
    iterators = [iter(c) for c in consumers]
    active = {0, 1}
    while active:
        for i in sorted(active):
            try:
                seen[i].append(next(iterators[i]))
            except StopIteration:
                active.discard(i)
    for c in consumers:
        c.close()
    assert seen[0] and seen[1]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(200))


def test_numpy_elements_round_trip(cluster):
    cluster.python_worker(imports=("dataset_functions",))
    dataset = dispatch.Dataset(dataset_functions.arrays, num_splits=2)
    got = sorted(dispatch.read(cluster.address, dataset), key=lambda a: (a.shape, a.sum()))
    want = sorted((a for s in range(2) for a in dataset_functions.arrays(s)),
                  key=lambda a: (a.shape, a.sum()))
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        assert isinstance(g, numpy.ndarray) and g.dtype == w.dtype
        numpy.testing.assert_array_equal(g, w)


def test_bytes_elements_with_and_without_copy(cluster):
    cluster.python_worker(imports=("dataset_functions",))
    dataset = dispatch.Dataset(dataset_functions.lines_of, splits=["a", "b", "c"],
                               elements="bytes")
    copied = list(dispatch.read(cluster.address, dataset))
    assert all(type(e) is bytes for e in copied)
    assert sorted(copied) == sorted(f"{n}:{i}".encode() for n in "abc" for i in range(4))
    views = list(dispatch.read(cluster.address, dataset, copy=False))
    assert all(isinstance(v, memoryview) and v.readonly for v in views)
    assert sorted(bytes(v) for v in views) == sorted(copied)


def test_named_kind_registered_on_an_embedded_worker(cluster):
    worker = dispatch.Worker(cluster.address)
    worker.register_dataset("countdown", lambda split: range(split, -1, -1))
    worker.start()
    try:
        elements = list(dispatch.read(cluster.address, dispatch.Dataset("countdown",
                                                                        num_splits=3)))
        assert sorted(elements) == sorted([0] + [1, 0] + [2, 1, 0])
    finally:
        worker.stop()


def test_a_dataset_function_that_raises_ends_the_read_with_its_error(cluster):
    cluster.python_worker()

    def broken(split):
        yield 1
        raise RuntimeError("the source broke")

    with pytest.raises(dispatch.DispatchError, match="the source broke"):
        list(dispatch.read(cluster.address, dispatch.Dataset(broken), processing_mode="off"))


def test_bad_arguments_are_clear_errors(cluster):
    with pytest.raises(ValueError):
        dispatch.Dataset(lambda s: [], num_splits=0)
    with pytest.raises(ValueError):
        dispatch.Dataset(lambda s: [], splits=["two\nlines"])
    with pytest.raises(TypeError):
        dispatch.read(cluster.address, "not a dataset")
    dataset_id = dispatch.register_dataset(cluster.address, dispatch.Dataset(lambda s: [s]))
    with pytest.raises(dispatch.InvalidArgumentError):
        dispatch.read(cluster.address, dataset_id, processing_mode="sideways")
    with pytest.raises(dispatch.NotFoundError):
        dispatch.read(cluster.address, dataset_id + 1000)


def test_static_sharding_by_file_reads_each_split_once(tmp_path):
    from conftest import Cluster, free_tcp_address
    addresses = [free_tcp_address(), free_tcp_address()]
    cluster = Cluster(tmp_path, ("--worker-addresses", ",".join(addresses)))
    try:
        for address in addresses:
            cluster.python_worker(address=address)
        dataset = dispatch.Dataset(lambda split: [split * 10 + i for i in range(10)], num_splits=6)
        elements = list(dispatch.read(cluster.address, dataset, processing_mode="file"))
        assert sorted(elements) == [s * 10 + i for s in range(6) for i in range(10)]
    finally:
        cluster.close()


def test_progress_bar_only_on_a_terminal(cluster, monkeypatch):
    tqdm = pytest.importorskip("tqdm")
    import io
    cluster.python_worker()
    dataset = dispatch.Dataset(lambda split: range(5), num_splits=2)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert sorted(dispatch.read(cluster.address, dataset)) == sorted(list(range(5)) * 2)
    assert "10 elements" in terminal.getvalue()

    pipe = io.StringIO()
    monkeypatch.setattr("sys.stderr", pipe)
    assert len(list(dispatch.read(cluster.address, dataset))) == 10
    assert pipe.getvalue() == ""
    assert tqdm is not None


def dispatchctl_json(address, *args):
    """`dispatchctl --dispatcher=ADDRESS ARGS... --json` as a Python object."""
    done = subprocess.run([str(BUILD_DIR / "clients" / "dispatchctl"), f"--dispatcher={address}",
                           *args, "--json"], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_python_dataset_goes_only_to_python_workers_in_a_mixed_cluster(cluster):
    cpp = cluster.cpp_worker()
    python = cluster.python_worker(imports=("dataset_functions",))

    def both_listed():
        # A worker prints "started" before its first heartbeat registers it.
        listed = {w["address"]: w for w in dispatchctl_json(cluster.address, "workers")["workers"]}
        return listed if cpp.address in listed and python.address in listed else None

    workers = wait_until(both_listed, what="both workers registered")
    assert workers[cpp.address]["datasetKinds"] == ["lines", "range", "synthetic"]
    assert "python" in workers[python.address]["datasetKinds"]
    dataset = dispatch.Dataset(dataset_functions.numbered, num_splits=20)
    dataset_id = dispatch.register_dataset(cluster.address, dataset)
    assert [d["kind"] for d in dispatchctl_json(cluster.address, "datasets")["datasets"]
            if int(d["datasetId"]) == dataset_id] == ["python"]
    elements = list(dispatch.read(cluster.address, dataset_id, processing_mode="dynamic"))
    counts = collections.Counter(elements)
    assert sorted(counts) == list(range(2000))
    assert set(counts.values()) == {1}
    # The job's one task is the Python worker's: the C++ worker, which cannot
    # produce the kind, was given none.
    tasks = dispatchctl_json(cluster.address, "tasks")["tasks"]
    assert [t["workerAddress"] for t in tasks if int(t["datasetId"]) == dataset_id] == \
        [python.address]


def test_python_dataset_waits_for_a_python_worker(cluster):
    cluster.cpp_worker()
    dataset = dispatch.Dataset(dataset_functions.numbered, num_splits=5)
    dataset_id = dispatch.register_dataset(cluster.address, dataset)
    read = {}

    def reader():
        try:
            read["elements"] = list(dispatch.read(cluster.address, dataset_id,
                                                  processing_mode="dynamic"))
        except Exception as error:  # reported by the assertions below
            read["error"] = error

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    # No live worker can produce it: the job waits (counted), the read gets no error.
    wait_until(lambda: int(dispatchctl_json(cluster.address, "stats")["server"]
                           .get("jobsWithoutWorker", 0)) == 1,
               what="the job counted as without a worker")
    assert "error" not in read and "elements" not in read
    cluster.python_worker(imports=("dataset_functions",))
    thread.join(timeout=DEADLINE)
    assert not thread.is_alive(), "the read did not end once a Python worker joined"
    assert "error" not in read, read.get("error")
    assert sorted(read["elements"]) == list(range(500))
    assert int(dispatchctl_json(cluster.address, "stats")["server"]
               .get("jobsWithoutWorker", 0)) == 0
