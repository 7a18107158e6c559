"""Dask distributed: the interpreter executor inside Dask workers, DaskPool in front of a cluster.

Every cluster is a real ``distributed.LocalCluster`` on loopback (TCP on
127.0.0.1, its HTTP server on an ephemeral port), started and closed by its test. Most use an
in-process worker (``processes=False``: the same worker code, fast to
start, and its interpreters are visible to the leak check); the tests
with "process" or "worker_command" in their name use real worker processes
(``n_workers=1, threads_per_worker=2``, or the ``dask worker`` command),
started with multiprocessing's spawn, Dask's default, which is safe next to
live interpreters (fork is not).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.resource_tracker
import os
import subprocess
import sys
import threading
import time

import pytest

distributed = pytest.importorskip(
    "distributed",
    reason="the Dask integration needs dask[distributed] (the test extra installs it)",
)

import dask  # noqa: E402
import daskfuncs  # noqa: E402
from dask import _task_spec as spec  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from distributed.worker import _run_task_simple  # noqa: E402

import aiosubinterp as asi  # noqa: E402
from aiosubinterp import _core  # noqa: E402
from aiosubinterp._dask import executor as _dask_executor  # noqa: E402
from aiosubinterp._dask import translate as _translate  # noqa: E402
from aiosubinterp._inside import daskwork as _daskwork  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 60
CLUSTER = {
    "n_workers": 1,
    "threads_per_worker": 2,
    "host": "127.0.0.1",
    "protocol": "tcp",
    # The scheduler serves HTTP (health, metrics) even without a dashboard, on
    # port 8787 unless told: an ephemeral port, so a process holding 8787
    # (another cluster, another test run) cannot turn its warning into an error.
    "dashboard_address": ":0",
}


@pytest.fixture(scope="module", autouse=True)
def _warm_up_distributed():
    # distributed keeps a few process-wide threads once used (its offload
    # executor, the thread that runs Future callbacks): start them before the
    # leak check's first snapshot.
    with LocalCluster(processes=False, **CLUSTER) as cluster, Client(cluster) as client:
        client.submit(daskfuncs.add, 1, 2).add_done_callback(lambda f: None)
        assert client.submit(daskfuncs.add, 1, 2, pure=False).result(timeout=TIMEOUT) == 3
    distributed.utils._offload_executor.submit(int).result(timeout=TIMEOUT)
    # Worker processes make multiprocessing start its resource tracker (a pipe to it).
    multiprocessing.resource_tracker.ensure_running()
    # These tests run interpreters in the process of in-process Dask servers: no
    # server may sample frames meanwhile (the plugin and DaskPool also see to it).
    _dask_executor.stop_frame_sampling()
    yield


@contextlib.contextmanager
def sync_cluster(**kwargs):
    """A LocalCluster with its own event-loop thread, and a synchronous client."""
    options = {**CLUSTER, "processes": False, **kwargs}
    with LocalCluster(**options) as cluster, Client(cluster, timeout=TIMEOUT) as client:
        yield client


@contextlib.asynccontextmanager
async def async_cluster(**kwargs):
    """A LocalCluster on the test's own loop, and an asynchronous client."""
    options = {**CLUSTER, "processes": False, **kwargs}
    async with asyncio.timeout(TIMEOUT):
        cluster = await LocalCluster(asynchronous=True, **options)
    try:
        async with Client(cluster, asynchronous=True, timeout=TIMEOUT) as client:
            yield client
    finally:
        async with asyncio.timeout(TIMEOUT):
            await cluster.close()


async def wait_released(client, prefix):
    """Until the client holds no future whose key starts with prefix (cancelled, released)."""
    async with asyncio.timeout(TIMEOUT):
        while any(str(key).startswith(prefix) for key in client.futures):
            await asyncio.sleep(0.01)


def wait_no_interpreters():
    deadline = time.monotonic() + TIMEOUT
    while _core.live_workers():
        assert time.monotonic() < deadline, f"interpreters still alive: {_core.live_workers()}"
        time.sleep(0.01)


# -- translating dask's tasks into calls (no cluster) ----------------------------------------


def _graph_nodes():
    ref_a, ref_b = spec.TaskRef("a"), spec.TaskRef("b")
    inner1 = spec.Task("x", daskfuncs.add, ref_a, 10)
    inner2 = spec.Task("y", daskfuncs.add, spec.TaskRef("x"), ref_b, c=1)
    return [
        spec.Task("k", daskfuncs.add, ref_a, 2, c=ref_b),
        spec.Task("k", daskfuncs.total, spec.List(ref_a, ref_b, 3)),
        spec.Task("k", daskfuncs.pairs, spec.Dict({"p": ref_a, "q": spec.Tuple(ref_b, 1)})),
        spec.Task("k", daskfuncs.add, spec.Task(None, daskfuncs.add, ref_a, ref_b), 100),
        spec.Task("k", daskfuncs.total, spec.Set(ref_a, ref_b)),
        spec.Task("k", daskfuncs.add, spec.DataNode(None, 5), spec.Alias("a")),
        spec.GraphNode.fuse(inner1, inner2),
    ]


@pytest.mark.parametrize("index", range(len(_graph_nodes())))
def test_a_task_becomes_a_call_with_the_same_value(index):
    node = _graph_nodes()[index]
    data = {"a": 1, "b": 20}
    want = node(data)
    fn, args, kwargs = _translate.task_call(node, data)
    assert fn(*args, **kwargs) == want
    # Anything nested is an expression of plain tuples, evaluated without dask.
    expr = _translate.to_expression(node, data)
    assert _daskwork.evaluate(expr) == want
    with asi.InterpreterPoolExecutor(1) as ex:
        assert ex.submit(fn, *args, **kwargs).result(timeout=TIMEOUT) == want


def test_a_plain_task_crosses_as_its_own_function():
    task = spec.Task("k", daskfuncs.add, spec.TaskRef("a"), 2, c=3)
    fn, args, kwargs = _translate.task_call(task, {"a": 1})
    assert (fn, args, kwargs) == (daskfuncs.add, (1, 2), {"c": 3})
    nested = spec.Task("k", daskfuncs.add, spec.Task(None, daskfuncs.add, 1, 2), 3)
    assert _translate.task_call(nested, {})[0] is _daskwork.evaluate


def test_unknown_task_kinds_get_a_clear_error():
    class Custom(spec.GraphNode):
        def __init__(self):
            self.key = "c"
            self._dependencies = frozenset()

    with pytest.raises(TypeError, match=r"cannot run a dask .*Custom task in an interpreter"):
        _translate.task_call(spec.Task("k", daskfuncs.add, Custom(), 1), {})


# -- the executor, called as a Dask worker calls it (no cluster) -------------------------------


@pytest.fixture
def executor():
    ex = asi.DaskInterpreterExecutor(2)
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


def run_task(ex, task, data=None):
    msg = ex.submit(_run_task_simple, task, data or {}, 0.0).result(timeout=TIMEOUT)
    assert msg["start"] <= msg["stop"]
    assert isinstance(msg["thread"], int)
    return msg


def test_executor_returns_the_message_the_worker_expects(executor):
    msg = run_task(executor, spec.Task("k", daskfuncs.add, spec.TaskRef("a"), 2, c=3), {"a": 1})
    assert (msg["op"], msg["status"], msg["result"], msg["type"]) == ("task-finished", "OK", 6, int)
    assert msg["nbytes"] > 0
    pid, interp = run_task(executor, spec.Task("k", daskfuncs.where))["result"]
    assert pid == os.getpid() and interp != _core.main_interpreter_id()


def test_executor_reports_task_errors_with_the_remote_traceback(executor):
    msg = run_task(executor, spec.Task("k", daskfuncs.fail, "boom"))
    assert msg["op"] == "task-erred"
    exc = msg["actual_exception"]
    assert type(exc) is daskfuncs.Oops and str(exc) == "boom"
    assert isinstance(exc.__cause__, asi.ExecutionFailed)
    assert "in fail" in exc.__cause__.remote_traceback
    assert "Oops('boom')" in msg["exception_text"]


def test_executor_sends_lambdas_and_closures_by_value(executor):
    offset = 5
    msg = run_task(executor, spec.Task("k", lambda x: x * 2 + offset, spec.TaskRef("a")), {"a": 20})
    assert msg["result"] == 45
    nested = spec.Task("k", daskfuncs.add, spec.Task(None, lambda: offset), 1)
    assert run_task(executor, nested)["result"] == 6


def test_executor_fails_a_task_whose_values_cannot_cross(executor):
    msg = run_task(executor, spec.Task("k", daskfuncs.add, threading.Lock(), 1))
    assert msg["op"] == "task-erred"
    assert isinstance(msg["actual_exception"], asi.NotShareableError)
    assert "argument 0" in str(msg["actual_exception"])


def test_executor_refuses_distributed_internals_and_runs_plain_calls(executor):
    with pytest.raises(RuntimeError, match="wrapper of this version of distributed"):
        executor.submit(distributed.worker.get_worker)
    assert executor.submit(daskfuncs.add, 1, 2, c=3).result(timeout=TIMEOUT) == 6
    assert list(executor.map(daskfuncs.add, [1, 2], [10, 20])) == [11, 22]


def test_executor_shut_down_fails_the_task_not_the_worker():
    ex = asi.DaskInterpreterExecutor(1)
    ex.shutdown()
    msg = run_task(ex, spec.Task("k", daskfuncs.add, 1, 2))
    assert msg["op"] == "task-erred"
    assert "after shutdown" in str(msg["actual_exception"])


# -- inside Dask: a worker runs its tasks in interpreters ------------------------------------


def test_plugin_runs_annotated_tasks_in_the_workers_interpreters(pipe):
    main = _core.main_interpreter_id()
    with sync_cluster() as client:
        client.register_plugin(asi.DaskInterpreterPlugin())
        assert client.submit(daskfuncs.where, pure=False).result(timeout=TIMEOUT)[1] == main
        with dask.annotate(executor="interpreters"):
            pid, interp = client.submit(daskfuncs.where, pure=False).result(timeout=TIMEOUT)
            assert pid == os.getpid() and interp != main
            # Two tasks that can only finish together: two interpreters at once.
            r2, w2 = os.pipe()
            try:
                r1, w1 = pipe
                a = client.submit(daskfuncs.rendezvous, w1, r2, pure=False)
                b = client.submit(daskfuncs.rendezvous, w2, r1, pure=False)
                (ra, ia), (rb, ib) = client.gather([a, b])
            finally:
                os.close(r2)
                os.close(w2)
            assert ra == rb == b"x" and ia != ib and main not in (ia, ib)
            # Dependencies, containers of futures, keyword arguments.
            x = client.submit(daskfuncs.add, 1, 2)
            y = client.submit(daskfuncs.add, x, 10, c=x)
            assert client.submit(daskfuncs.total, [x, y, 100]).result(timeout=TIMEOUT) == 119
            assert client.submit(daskfuncs.pairs, {"x": x, "y": y}).result(timeout=TIMEOUT) == [
                ("x", 3),
                ("y", 16),
            ]
            # A delayed graph (optimised and fused by dask) and lambdas.
            chain = dask.delayed(daskfuncs.add)(1, 2)
            for i in range(3):
                chain = dask.delayed(daskfuncs.add)(chain, i)
            assert client.compute(chain).result(timeout=TIMEOUT) == 6
            assert client.submit(lambda v: v * 3, y).result(timeout=TIMEOUT) == 48
            # The task's own exception, with the interpreter's traceback as its cause.
            with pytest.raises(daskfuncs.Oops, match=r"^boom$") as info:
                client.submit(daskfuncs.fail, "boom").result(timeout=TIMEOUT)
            assert isinstance(info.value.__cause__, asi.ExecutionFailed)
            assert "in fail" in info.value.__cause__.remote_traceback
        assert _core.live_workers()
        client.unregister_worker_plugin("aiosubinterp-interpreters")
        wait_no_interpreters()
        with (
            dask.annotate(executor="interpreters"),
            pytest.raises(ValueError, match="Invalid executor 'interpreters'"),
        ):
            client.submit(daskfuncs.where, pure=False).result(timeout=TIMEOUT)


def test_plugin_as_the_default_executor_and_back():
    main = _core.main_interpreter_id()
    with sync_cluster() as client:
        client.register_plugin(asi.DaskInterpreterPlugin("mine", size=1, default=True))
        ids = client.gather(client.map(daskfuncs.where, range(4), pure=False))
        assert {interp for _, interp in ids} - {main} and main not in {i for _, i in ids}
        assert len({interp for _, interp in ids}) == 1  # size=1
        with dask.annotate(executor="mine"):
            assert client.submit(daskfuncs.where, pure=False).result(timeout=TIMEOUT)[1] != main
        client.unregister_worker_plugin("aiosubinterp-mine")
        wait_no_interpreters()
        assert client.submit(daskfuncs.where, pure=False).result(timeout=TIMEOUT)[1] == main


def test_plugin_bad_arguments():
    with pytest.raises(ValueError, match="name must be a non-empty str"):
        asi.DaskInterpreterPlugin("")
    with pytest.raises(ValueError, match="other than 'offload' and 'actor'"):
        asi.DaskInterpreterPlugin("offload")
    with pytest.raises(ValueError, match="size must be None or a positive int"):
        asi.DaskInterpreterPlugin(size=0)
    with pytest.raises(TypeError, match="write preload=\\('json',\\)"):
        asi.DaskInterpreterPlugin(preload="json")


def test_plugin_with_a_failing_initializer_fails_the_tasks_clearly():
    with sync_cluster() as client:
        client.register_plugin(
            asi.DaskInterpreterPlugin(initializer=daskfuncs.fail, initargs=("no start",))
        )
        with (
            dask.annotate(executor="interpreters"),
            pytest.raises(asi.BrokenInterpreterPool, match="could not start"),
        ):
            client.submit(daskfuncs.add, 1, 2).result(timeout=TIMEOUT)
        # The worker itself keeps serving on its threads.
        assert client.submit(daskfuncs.add, 1, 2, pure=False).result(timeout=TIMEOUT) == 3


def frame_sampling(dask_worker):
    """(profile callback present, profiler sees frames, call stacks) in a worker's process."""
    import distributed.profile

    return (
        "profile" in dask_worker.periodic_callbacks,
        bool(distributed.profile.sys._current_frames()),
        dask_worker.handlers["call_stack"](),
    )


def test_processes_worker_with_the_preload_module(tmp_path):
    """A real worker process, set up by --preload aiosubinterp.dask_preload."""
    main = _core.main_interpreter_id()
    with sync_cluster(processes=True, preload=["aiosubinterp.dask_preload"]) as client:
        with dask.annotate(executor="interpreters"):
            a = client.submit(daskfuncs.meet, str(tmp_path / "a"), str(tmp_path / "b"), pure=False)
            b = client.submit(daskfuncs.meet, str(tmp_path / "b"), str(tmp_path / "a"), pure=False)
            (met_a, (pid_a, ia)), (met_b, (pid_b, ib)) = client.gather([a, b])
            assert met_a and met_b, "the two tasks did not run at the same time"
            assert pid_a == pid_b != os.getpid()
            assert ia != ib and main not in (ia, ib)
            # The client's script functions travel by value: a lambda here.
            assert client.submit(lambda: daskfuncs.spin(10)).result(timeout=TIMEOUT) == 285
            # Dask's frame sampling is off in that process: left on, it kills the
            # worker once it samples while interpreters run (see stop_frame_sampling).
            assert list(client.run(frame_sampling).values()) == [(False, False, {})]
            assert not any(client.call_stack().values())
            before = set(client.scheduler_info()["workers"])
            n = 400_000
            assert (
                client.gather(client.map(daskfuncs.spin, [n] * 30, pure=False))
                == [daskfuncs.spin(n)] * 30
            )
            assert set(client.scheduler_info()["workers"]) == before
        assert client.submit(daskfuncs.where, pure=False).result(timeout=TIMEOUT)[1] == main


def test_dask_worker_command_with_the_preload_and_its_options():
    """docs/tutorials/dask.md: `dask worker ... --preload aiosubinterp.dask_preload`."""
    dask_cli = os.path.join(os.path.dirname(sys.executable), "dask")
    main = _core.main_interpreter_id()
    with (
        LocalCluster(
            n_workers=0, processes=False, host="127.0.0.1", protocol="tcp", dashboard_address=":0"
        ) as cluster,
        Client(cluster, timeout=TIMEOUT) as client,
    ):
        env = {
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join([ROOT, os.path.dirname(__file__)]),
        }
        worker = subprocess.Popen(
            [
                dask_cli,
                "worker",
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
                "--preload",
                "aiosubinterp.dask_preload",
                "--interpreters",
                "2",
                "--interpreters-name",
                "interp",
                "--interpreters-default",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            client.wait_for_workers(1, timeout=TIMEOUT)
            # Default executor: no annotation needed. 2 interpreters although --nthreads 1.
            where = client.gather(client.map(daskfuncs.where, range(4), pure=False))
            assert all(pid == worker.pid and interp != main for pid, interp in where)
            with dask.annotate(executor="interp"):
                assert client.submit(daskfuncs.add, 1, 2).result(timeout=TIMEOUT) == 3
            info = client.run(
                lambda dask_worker: (
                    type(dask_worker.executors["interp"]).__name__,
                    dask_worker.executors["interp"]._max_workers,
                    dask_worker.executors["default"] is dask_worker.executors["interp"],
                )
            )
            assert list(info.values()) == [("DaskInterpreterExecutor", 2, True)]
        finally:
            worker.terminate()  # SIGTERM: the worker closes gracefully, tearing the preload down
            _, err = worker.communicate(timeout=TIMEOUT)
        assert worker.returncode == 0, err[-3000:]


def test_preload_options_are_validated():
    from aiosubinterp import dask_preload

    ctx = dask_preload.dask_setup.make_context(
        "dask_setup", ["--interpreters", "3", "--interpreters-name", "x", "--interpreters-default"]
    )
    assert ctx.params == {"size": 3, "name": "x", "default": True}
    with pytest.raises(Exception, match="0 is not in the range x>=1"):
        dask_preload.dask_setup.make_context("dask_setup", ["--interpreters", "0"])


# -- in front of Dask: DaskPool --------------------------------------------------------------


async def test_pool_run_submit_map():
    async with async_cluster() as client, asi.DaskPool(client) as pool:
        assert await pool.run(daskfuncs.add, 1, 2, c=3) == 6
        # Keywords that are also Client.submit's own reach the function.
        assert await pool.run(daskfuncs.kwargs_of, key=1, pure=2, priority=3) == [
            ("key", 1),
            ("priority", 3),
            ("pure", 2),
        ]
        task = pool.submit(daskfuncs.add, 40, 2)
        assert isinstance(task, asi.Task) and isinstance(task, asyncio.Future)
        assert task.name == "add" and task.id > 0
        assert await task == 42 and task.done() and task.result() == 42
        # Calls are never merged: the same call twice is two tasks.
        twice = [pool.run(daskfuncs.add, 1), pool.run(daskfuncs.add, 1)]
        assert await asyncio.gather(*twice) == [1, 1]
        assert [r async for r in pool.map(daskfuncs.spin, range(20))] == [
            daskfuncs.spin(i) for i in range(20)
        ]
        got = [r async for r in pool.map(daskfuncs.spin, range(20), ordered=False, window=3)]
        assert sorted(got) == sorted(daskfuncs.spin(i) for i in range(20))

        async def items():
            for i in range(5):
                yield i

        assert [r async for r in pool.map(daskfuncs.add, items())] == list(range(5))
        stats = pool.statistics()
        assert stats["submitted"] >= 50 and stats["inflight"] == 0, stats
        # Leaving a map early cancels the calls still in flight.
        async with contextlib.aclosing(pool.map(daskfuncs.spin, [10**5] * 30, window=8)) as it:
            async for _ in it:
                break
        await wait_released(client, "spin-")
    assert pool.closed


async def application(pool):
    """Code written against InterpreterPool's API: what it sees, outcomes and error types."""
    seen = [
        await pool.run(daskfuncs.add, 1, 2, c=3),
        await pool.submit(daskfuncs.total, [1, 2, 3]),
        [r async for r in pool.map(daskfuncs.spin, range(6))],
        sorted([r async for r in pool.map(daskfuncs.spin, range(6), ordered=False)]),
    ]
    for fn, args in [
        (daskfuncs.fail, ("x",)),
        (daskfuncs.add, ("a", 1)),
        (daskfuncs.total, ([1, None],)),
    ]:
        try:
            await pool.run(fn, *args)
        except Exception as exc:  # noqa: BLE001
            seen.append((type(exc), str(exc), type(exc.__cause__)))
    return seen


async def test_swapping_interpreter_pool_for_dask_pool():
    async with asi.InterpreterPool(2) as pool:
        local = await application(pool)
    async with async_cluster() as client, asi.DaskPool(client) as pool:
        remote = await application(pool)
    assert remote == local
    assert local[-1][0] is TypeError and local[-3][0] is daskfuncs.Oops
    assert local[-1][2] is asi.ExecutionFailed


async def test_pool_errors_come_back_as_interpreter_pool_raises_them():
    async with async_cluster() as client, asi.DaskPool(client) as pool:
        with pytest.raises(daskfuncs.Oops, match=r"^bad$") as info:
            await pool.run(daskfuncs.fail, "bad")
        assert isinstance(info.value.__cause__, asi.ExecutionFailed)
        assert "in fail" in info.value.__cause__.remote_traceback
        with pytest.raises(TypeError, match="expected a callable to run, got int"):
            pool.submit(42)
        with pytest.raises(asi.NotShareableError, match="cannot send the call add"):
            pool.submit(daskfuncs.add, threading.Lock())
        with pytest.raises(ValueError, match="window must be a positive int"):
            async for _ in pool.map(daskfuncs.add, [1], window=0):
                pass
        # The first failure of a map is raised; the rest are cancelled.
        with pytest.raises(daskfuncs.Oops, match="x"):
            async for _ in pool.map(daskfuncs.fail, ["x", "y", "z"]):
                pass
    with pytest.raises(asi.PoolClosedError, match="this DaskPool is closed"):
        pool.submit(daskfuncs.add, 1)


async def test_pool_cancel_and_timeout(pipe):
    r, w = pipe
    async with async_cluster() as client, asi.DaskPool(client) as pool:
        blocked = pool.submit(daskfuncs.read_fd, r)
        queued = pool.submit(daskfuncs.read_fd, r)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run(daskfuncs.read_fd, r), 0.2)
        assert queued.cancel() and queued.cancelled()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert blocked.cancel()
        # The Dask tasks are cancelled (released) on the cluster too.
        await wait_released(client, "read_fd-")
        assert not queued.cancel()  # already done
        os.write(w, b"123")  # lets the running reads end, so the worker can close
        assert await pool.run(daskfuncs.add, 5) == 5


async def test_pool_with_a_synchronous_client(pipe):
    r, w = pipe
    with sync_cluster() as client:
        async with asi.DaskPool(client) as pool:
            assert await pool.run(daskfuncs.add, 1, 2) == 3
            assert [r async for r in pool.map(daskfuncs.add, range(10), ordered=False)] != []
            with pytest.raises(daskfuncs.Oops):
                await pool.run(daskfuncs.fail, "sync")
            task = pool.submit(daskfuncs.read_fd, r)
            await asyncio.sleep(0)
            assert task.cancel()
            await wait_released(client, "read_fd-")
            os.write(w, b"1")  # lets the read end if it started, so the worker can close


async def test_pool_aclose_waits_for_submitted_calls():
    async with async_cluster() as client:
        pool = asi.DaskPool(client)
        tasks = [pool.submit(daskfuncs.spin, 20_000) for _ in range(5)]
        await pool.aclose()
        assert all(t.done() and t.result() == daskfuncs.spin(20_000) for t in tasks)
        await pool.aclose()  # idempotent
        with pytest.raises(asi.PoolClosedError):
            async with pool:
                pass


async def test_pool_bad_clients():
    with pytest.raises(TypeError, match=r"DaskPool needs a distributed\.Client, got str"):
        asi.DaskPool("tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match="executor must be None or an executor name"):
        asi.DaskPool(object.__new__(Client), executor=3)
    async with async_cluster() as client:
        pool = asi.DaskPool(client, executor="nope")
        with pytest.raises(ValueError, match="Invalid executor 'nope'"):
            await pool.run(daskfuncs.add, 1)
    # The client is closed now.
    with pytest.raises(ValueError, match="DaskPool got a closed client"):
        asi.DaskPool(client)
    with pytest.raises(asi.PoolClosedError, match="Dask client of this DaskPool is closed"):
        pool.submit(daskfuncs.add, 1)


async def test_pool_with_a_client_that_has_not_connected():
    async with async_cluster() as client:
        pending = Client(client.scheduler.address, asynchronous=True, timeout=TIMEOUT)
        try:
            pool = asi.DaskPool(pending)
            with pytest.raises(RuntimeError, match=r"has not connected .*`await` an asynchronous"):
                pool.submit(daskfuncs.add, 1)
            await pending
            assert await pool.run(daskfuncs.add, 1) == 1
        finally:
            await pending.close()


def test_pool_with_a_client_of_a_stopped_loop():
    with sync_cluster() as sync_client:
        address = sync_client.scheduler.address
        other = asyncio.new_event_loop()
        try:

            async def connect():
                return await Client(address, asynchronous=True, timeout=TIMEOUT)

            client = other.run_until_complete(connect())

            async def use():
                with pytest.raises(
                    RuntimeError, match="belongs to another event loop, which is not running"
                ):
                    asi.DaskPool(client).submit(daskfuncs.add, 1)

            asyncio.run(use())
            other.run_until_complete(client.close())
        finally:
            other.close()


def test_pool_needs_a_running_loop():
    with sync_cluster() as client:
        pool = asi.DaskPool(client)
        with pytest.raises(RuntimeError, match="needs a running event loop"):
            pool.submit(daskfuncs.add, 1)


async def test_pool_on_interpreter_workers_in_a_worker_process():
    """Both integrations at once: DaskPool's calls run in a worker process's interpreters."""
    main = _core.main_interpreter_id()
    async with async_cluster(processes=True) as client:
        await client.register_plugin(asi.DaskInterpreterPlugin())
        async with asi.DaskPool(client, executor="interpreters") as pool:
            where = [w async for w in pool.map(daskfuncs.where, range(4))]
            assert all(pid != os.getpid() and interp != main for pid, interp in where)
            assert await pool.run(daskfuncs.add, 1, 2, c=3) == 6
            with pytest.raises(daskfuncs.Oops, match="in a process") as info:
                await pool.run(daskfuncs.fail, "in a process")
            assert "in fail" in info.value.__cause__.remote_traceback
            assert await pool.run(lambda: 7) == 7


# -- packaging ---------------------------------------------------------------------------------


def test_dask_stays_optional_and_worker_code_stays_light():
    code = (
        "import sys, aiosubinterp, aiosubinterp._inside.daskwork\n"
        "def loaded():\n"
        "    names = ('asyncio', 'uvloop', 'dask', 'distributed', 'tornado', 'cloudpickle')\n"
        "    print(sorted(m for m in names if m in sys.modules))\n"
        "loaded(); aiosubinterp.InterpreterPool; loaded()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stderr
    # What interpreters import for Dask tasks imports nothing heavy; InterpreterPool
    # needs asyncio, and nothing of Dask.
    assert proc.stdout.split("\n")[:2] == ["[]", "['asyncio']"]


def test_missing_distributed_gives_a_clear_error():
    code = (
        "import sys; sys.modules['distributed'] = None; import aiosubinterp\n"
        "try:\n    aiosubinterp.DaskPool\n"
        "except ImportError as exc:\n    print(exc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stderr
    assert "needs dask and distributed" in proc.stdout
    assert "pip install 'dask[distributed]'" in proc.stdout


# -- the example ------------------------------------------------------------------------------


def test_example_runs():
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "dask_cluster.py")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "InterpreterPool:" in out and "DaskPool:" in out
    assert "same results: True" in out
