"""Closures from Python: Coordinator, RemoteValue and Python workers, on a real cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import closure_functions
import dispatch
from conftest import DEADLINE, child_env, wait_until


def test_module_function_travels_by_reference(cluster):
    worker = cluster.python_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        values = [coordinator.schedule(closure_functions.square, args=(i,)) for i in range(20)]
        coordinator.join()
        assert [v.fetch() for v in values] == [i * i for i in range(20)]
        assert all(v.status == "ready" and v.done() for v in values)
        assert coordinator.schedule(closure_functions.whoami).fetch() == worker.popen.pid


def test_a_worker_thread_keeps_its_thread_locals_from_closure_to_closure(cluster):
    # One slot: one executor thread runs them all, one after the other.
    cluster.python_worker(slots=1)
    with dispatch.Coordinator(cluster.address) as coordinator:
        seen = [coordinator.schedule(closure_functions.count_on_this_thread).fetch()
                for _ in range(5)]
    threads = {ident for ident, _ in seen}
    assert len(threads) == 1, seen
    assert [count for _, count in seen] == [1, 2, 3, 4, 5]


def test_lambda_and_closure_travel_by_value(cluster):
    cluster.python_worker()
    offset = 1000
    with dispatch.Coordinator(cluster.address) as coordinator:
        assert coordinator.schedule(lambda a, b=0: a + b + offset, args=(1,),
                                    kwargs={"b": 2}).fetch() == 1003
        nested = {"list": [1, 2, 3], "text": "é"}
        assert coordinator.schedule(lambda x: x, args=(nested,)).fetch() == nested


def test_main_function_travels_by_value(cluster, tmp_path):
    cluster.python_worker()
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(f"""
        import dispatch

        def cube(x):
            return x ** 3

        with dispatch.Coordinator({cluster.address!r}) as coordinator:
            print(sum(coordinator.schedule(cube, args=(i,)).fetch() for i in range(5)))
    """))
    out = subprocess.run([sys.executable, str(script)], env=child_env(), capture_output=True,
                         text=True, timeout=DEADLINE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sum(i ** 3 for i in range(5)))


def test_exception_keeps_type_message_and_remote_traceback(cluster):
    cluster.python_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        value = coordinator.schedule(closure_functions.fail_with, args=("custom", "it broke"))
        with pytest.raises(closure_functions.CustomError) as raised:
            value.fetch()
        error = raised.value
        assert isinstance(error, dispatch.RemoteError)
        assert str(error) == "it broke"
        assert error.type_name == "closure_functions.CustomError"
        assert "in fail_with" in error.remote_traceback
        assert error.closure_id == value.closure_id
        assert value.status == "failed"
        # The same error again on a second fetch, and once as the coordinator's first error.
        with pytest.raises(closure_functions.CustomError):
            value.fetch()
        with pytest.raises(closure_functions.CustomError):
            coordinator.join()
        coordinator.join()  # raised once, then cleared

        builtin = coordinator.schedule(closure_functions.fail_with, args=("value", "bad"))
        with pytest.raises(ValueError, match="^bad$"):
            builtin.fetch()
        with pytest.raises(ValueError):
            coordinator.done()


def test_first_error_cancels_the_queue(cluster, tmp_path):
    cluster.python_worker(slots=1)
    with dispatch.Coordinator(cluster.address) as coordinator:
        holder = coordinator.schedule(closure_functions.hold_until_released, args=(str(tmp_path),))
        wait_until(lambda: list(tmp_path.glob("started-*")), what="the holding closure started")
        failing = coordinator.schedule(closure_functions.fail_with, args=("value", "first"),
                                       priority=1)
        queued = [coordinator.schedule(closure_functions.square, args=(i,)) for i in range(5)]
        (tmp_path / "release").touch()
        with pytest.raises(ValueError, match="first"):
            coordinator.join()
        assert holder.fetch() > 0
        with pytest.raises(ValueError):
            failing.fetch()
        for value in queued:
            with pytest.raises(dispatch.CancelledError):
                value.fetch()
            assert value.status == "cancelled"


def test_done_and_fetch_timeout(cluster, tmp_path):
    cluster.python_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        held = coordinator.schedule(closure_functions.hold_until_released, args=(str(tmp_path),))
        wait_until(lambda: list(tmp_path.glob("started-*")), what="the closure started")
        assert coordinator.done() is False
        with pytest.raises(TimeoutError):
            held.fetch(timeout=0.05)
        assert held.status == "pending"
        (tmp_path / "release").touch()
        coordinator.join()
        assert coordinator.done() is True
        assert held.fetch(timeout=DEADLINE) > 0


def test_per_worker_resources_are_each_workers_own(cluster):
    workers = [cluster.python_worker(), cluster.python_worker()]
    with dispatch.Coordinator(cluster.address) as coordinator:
        counter = coordinator.create_per_worker_resource(lambda start: {"total": start}, 0)
        values = [coordinator.schedule(closure_functions.add_to, args=(counter, 1))
                  for _ in range(40)]
        coordinator.join()
        totals = {}
        for pid, total in (v.fetch() for v in values):
            totals.setdefault(pid, []).append(total)
        assert set(totals) <= {w.popen.pid for w in workers}
        # One object per worker, kept between closures: each worker counted exactly the
        # closures it ran (rebuilt per closure, every total would be 1).
        for pid, seen in totals.items():
            assert sorted(seen) == list(range(1, len(seen) + 1)), (pid, seen)


def test_worker_killed_mid_closure_runs_it_again_elsewhere(cluster, tmp_path):
    first = cluster.python_worker()
    second = cluster.python_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        value = coordinator.schedule(closure_functions.hold_until_released, args=(str(tmp_path),))
        started = wait_until(lambda: list(tmp_path.glob("started-*")), what="a worker started it")
        victim_pid = int(started[0].name.split("-")[1])
        victim = first if first.popen.pid == victim_pid else second
        survivor = second if victim is first else first
        os.kill(victim_pid, signal.SIGKILL)
        victim.popen.wait(timeout=DEADLINE)
        (tmp_path / "release").touch()
        assert value.fetch(timeout=DEADLINE) == survivor.popen.pid


def test_cpp_and_python_workers_each_run_their_own_functions(cluster):
    python = cluster.python_worker()
    cpp = cluster.cpp_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        python_values = [coordinator.schedule(closure_functions.whoami) for _ in range(20)]
        cpp_values = [coordinator.schedule_raw("sleep", b"1") for _ in range(20)]
        echo = coordinator.schedule_raw("echo", b"\x00bytes\xff")
        coordinator.join()
        assert {v.fetch() for v in python_values} == {python.popen.pid}
        assert {v.fetch() for v in cpp_values} == {cpp.address.encode()}
        assert echo.fetch() == b"\x00bytes\xff"


def test_named_function_registered_on_a_worker(cluster, tmp_path):
    # The worker runs in tmp_path (the cluster's work dir), which --import searches.
    (tmp_path / "named_functions.py").write_text(textwrap.dedent("""
        import dispatch.worker

        dispatch.worker.current().register("triple", lambda x: 3 * x)
    """))
    cluster.python_worker(imports=("named_functions",))
    with dispatch.Coordinator(cluster.address) as coordinator:
        assert coordinator.schedule("triple", args=(14,)).fetch() == 42


def test_embedded_worker_serves_until_stopped(cluster):
    worker = dispatch.Worker(cluster.address, slots=2)
    worker.register("negate", lambda x: -x)
    address = worker.start()
    assert address.startswith("tcp:127.0.0.1:")
    try:
        with dispatch.Coordinator(cluster.address) as coordinator:
            assert coordinator.schedule("negate", args=(5,)).fetch() == -5
            assert coordinator.schedule(closure_functions.square, args=(3,)).fetch() == 9
        assert worker.status()["closures_run"] >= 2
    finally:
        worker.stop()
    worker.stop()  # idempotent


def test_sigterm_and_ctrl_c_stop_a_worker_cleanly(cluster):
    workers = [cluster.python_worker(), cluster.python_worker()]
    with dispatch.Coordinator(cluster.address) as coordinator:
        assert coordinator.schedule(closure_functions.square, args=(2,)).fetch() == 4
    assert workers[0].stop() == 0  # SIGTERM
    workers[1].popen.send_signal(signal.SIGINT)
    assert workers[1].popen.wait(timeout=DEADLINE) == 0


def test_bad_input_is_a_clear_error(cluster):
    with dispatch.Coordinator(cluster.address) as coordinator:
        with pytest.raises(TypeError):
            coordinator.schedule(42)
        with pytest.raises(dispatch.InvalidArgumentError):
            coordinator.schedule_raw("")
    with pytest.raises(dispatch.UnavailableError):
        dispatch.Coordinator("tcp:127.0.0.1:1", connect_timeout=0.2)


def test_non_loopback_without_token_warns():
    with pytest.warns(dispatch.InsecureConnectionWarning):
        with pytest.raises(dispatch.DispatchError):
            dispatch.Coordinator("tcp:192.0.2.1:5050", connect_timeout=0.1)


def test_a_closure_that_waits_does_not_hold_up_the_others(cluster, tmp_path):
    # Two slots: while one closure waits (its Python code sleeps, the GIL released),
    # the other slot's closures run. They finish before it is released.
    cluster.python_worker(slots=2)
    with dispatch.Coordinator(cluster.address) as coordinator:
        held = coordinator.schedule(closure_functions.hold_until_released, args=(str(tmp_path),))
        wait_until(lambda: list(tmp_path.glob("started-*")), what="the waiting closure started")
        assert [coordinator.schedule(closure_functions.square, args=(i,)).fetch(timeout=DEADLINE)
                for i in range(3)] == [0, 1, 4]
        assert held.status == "pending"
        (tmp_path / "release").touch()
        assert held.fetch(timeout=DEADLINE) > 0


def test_inputs_run_after_and_receive_their_results(cluster):
    # ScheduleOptions.inputs: a closure gets its inputs' results first, in order.
    cluster.python_worker()
    cluster.cpp_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        nine = coordinator.schedule(closure_functions.square, args=(3,))
        four = coordinator.schedule(lambda: 4)
        total = coordinator.schedule(lambda a, b, c, scale=1: (a + b + c) * scale,
                                     args=(100,), kwargs={"scale": 2}, inputs=[nine, four])
        chained = coordinator.schedule(lambda t: t + 1, inputs=[total])
        echoed = coordinator.schedule_raw("echo", b"raw")
        # A C++ input reaches Python as bytes; a C++ function gets result bytes.
        as_bytes = coordinator.schedule(lambda b: b + b"!", inputs=[echoed])
        concat = coordinator.schedule_raw("concat", b"-tail", inputs=[echoed])
        assert chained.fetch(timeout=DEADLINE) == 227
        assert total.fetch(timeout=DEADLINE) == 226  # fetching an input afterwards is fine
        assert as_bytes.fetch(timeout=DEADLINE) == b"raw!"
        assert concat.fetch(timeout=DEADLINE) == b"raw-tail"


def test_inputs_that_fail_or_were_fetched_are_clear_errors(cluster):
    cluster.python_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        with pytest.raises(TypeError):
            coordinator.schedule(closure_functions.square, inputs=[42])
        fetched = coordinator.schedule(closure_functions.square, args=(2,))
        assert fetched.fetch(timeout=DEADLINE) == 4
        with pytest.raises(dispatch.FailedPreconditionError):
            coordinator.schedule(closure_functions.square, inputs=[fetched])


def test_a_running_function_sees_its_closure_cancelled(cluster, tmp_path):
    # ClosureCall::cancelled() and SleepFor(): dispatch.current_closure().
    cluster.python_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        value = coordinator.schedule(closure_functions.wait_until_cancelled,
                                     args=(str(tmp_path),))
        wait_until(lambda: (tmp_path / "started").exists(), what="the closure started")
        assert not list(tmp_path.glob("saw-*"))
        value.cancel()
        wait_until(lambda: list(tmp_path.glob("saw-*")), what="the function saw the cancel")
        assert (tmp_path / "saw-slept-False-cancelled-True").exists()
        with pytest.raises(dispatch.CancelledError):
            value.fetch(timeout=DEADLINE)


def test_current_closure_only_inside_a_closure(cluster):
    with pytest.raises(RuntimeError):
        dispatch.current_closure()
    cluster.python_worker()
    with dispatch.Coordinator(cluster.address) as coordinator:
        value = coordinator.schedule(lambda: (dispatch.current_closure().cancelled,
                                              dispatch.current_closure().stopping,
                                              dispatch.current_closure().worker_address))
        cancelled, stopping, address = value.fetch(timeout=DEADLINE)
        assert (cancelled, stopping) == (False, False)
        assert address.startswith("tcp:127.0.0.1:")
