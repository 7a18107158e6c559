"""The same tests on both backends: InterpreterPool and ProcessPool keep one contract.

Each test here runs against a pool of interpreters and a pool of processes
(and, like every async test, on asyncio and on uvloop). Worker functions
come from workfuncs (test_pool / test_cancel) and procfuncs. Descriptors a
task needs cross as asi.FileDescriptor, which both backends hand over.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import sys
import threading

import chanfuncs
import procfuncs
import pytest
import workfuncs
from aiohelpers import collect_until, read_byte

import aiosubinterp as asi

FD = asi.FileDescriptor


VALUES = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**200,
    -(3**150),
    1.5,
    float("inf"),
    3 + 4j,
    "",
    "héllo wörld ✓",
    "lone \udc80 surrogate",
    b"",
    b"\x00\xff" * 1000,
    (),
    (1, ("a", (b"b", None))),
    frozenset({1, "x", (2, 3)}),
    [1, 2, [3]],
    {"a": 1, "b": [2.5]},
    {1, 2},
    bytearray(b"xyz"),
    workfuncs.Point(1, 2),
    tuple(range(1000)),
]


class Backend:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def pool(self, size: int = 1, *, max_tasks: int | None = None, **kwargs):
        if self.kind == "interpreters":
            return asi.InterpreterPool(size, max_tasks_per_interpreter=max_tasks, **kwargs)
        return asi.ProcessPool(size, max_tasks_per_worker=max_tasks, **kwargs)

    def __repr__(self) -> str:
        return self.kind


@pytest.fixture(params=["interpreters", "processes"])
def backend(request) -> Backend:
    return Backend(request.param)


# -- results, values, errors ------------------------------------------------------------


async def test_run_returns_result(backend):
    async with backend.pool(2) as pool:
        assert await pool.run(workfuncs.square, 12) == 144
        assert await pool.run(workfuncs.add, 1, 2, c=3) == 6
        assert await pool.run(math.sqrt, 16.0) == 4.0
        assert await pool.run(len, "abcd") == 4
        assert await pool.run(workfuncs.Point(3, 4).norm2) == 25
        assert await pool.run(functools.partial(workfuncs.add, 10), 5) == 15


async def test_values_round_trip(backend):
    async with backend.pool(1) as pool:
        for value in VALUES:
            back = await pool.run(workfuncs.echo, value)
            assert back == value and type(back) is type(value), value


async def test_tasks_run_in_workers_not_here(backend):
    async with backend.pool(2) as pool:
        who = set(await asyncio.gather(*(pool.run(procfuncs.whoami) for _ in range(8))))
    here = procfuncs.whoami()
    assert here not in who
    if backend.kind == "processes":
        assert all(pid != os.getpid() for pid, _ in who)
    else:
        assert all(pid == os.getpid() for pid, _ in who)


async def test_two_tasks_run_at_the_same_time(backend):
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        async with backend.pool(2) as pool:
            a = pool.run(procfuncs.write_then_read, FD(w1), FD(r2))
            b = pool.run(procfuncs.write_then_read, FD(w2), FD(r1))
            assert await asyncio.wait_for(asyncio.gather(a, b), 30) == [b"x", b"x"]
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)


async def test_remote_exception_keeps_type_and_traceback(backend):
    async with backend.pool(1) as pool:
        with pytest.raises(workfuncs.CustomError, match="boom") as info:
            await pool.run(workfuncs.raise_custom, "boom")
        cause = info.value.__cause__
        assert isinstance(cause, asi.ExecutionFailed)
        assert "raise_custom" in cause.remote_traceback
        assert cause.type_name == "workfuncs.CustomError"
        assert "Remote traceback" in str(cause)
        with pytest.raises(asi.ExecutionFailed, match="NeedsTwoArgs") as info:
            await pool.run(workfuncs.raise_needs_two)
        assert "raise_needs_two" in info.value.remote_traceback


@pytest.mark.parametrize("fn, args", [(workfuncs.raise_exit, (3,)), (workfuncs.raise_keyboard, ())])
async def test_control_flow_exceptions_do_not_escape(backend, fn, args):
    async with backend.pool(1) as pool:
        with pytest.raises(asi.ExecutionFailed, match="raised"):
            await pool.run(fn, *args)
        assert await pool.run(workfuncs.square, 3) == 9


async def test_bad_calls_are_refused_at_the_call_site(backend):
    def inner(x):
        return x

    async with backend.pool(1) as pool:
        with pytest.raises(asi.NotShareableError, match="lambda"):
            pool.submit(lambda x: x, 1)
        with pytest.raises(asi.NotShareableError, match="top level of a module"):
            pool.submit(inner, 1)
        with pytest.raises(asi.NotShareableError, match=r"argument 1 of echo\(\) \(lock\)"):
            pool.submit(workfuncs.echo, 1, threading.Lock())
        with pytest.raises(asi.NotShareableError, match="keyword argument 'key'"):
            pool.submit(workfuncs.echo, 1, key=threading.Lock())
        with pytest.raises(TypeError, match="expected a callable"):
            pool.submit(42)
        assert pool.statistics()["submitted"] == 0
        with pytest.raises(asi.NotShareableError, match="returned a generator"):
            await pool.run(workfuncs.make_generator)


def test_bad_constructor_arguments(backend):
    with pytest.raises(ValueError, match="size must be a positive int"):
        backend.pool(0)
    with pytest.raises(ValueError, match="size must be a positive int"):
        backend.pool(True)
    with pytest.raises(TypeError, match=r"preload=\('json',\)"):
        backend.pool(1, preload="json")
    with pytest.raises(TypeError, match="initializer must be callable"):
        backend.pool(1, initializer=3)
    with pytest.raises(TypeError, match="initargs must be a tuple"):
        backend.pool(1, initializer=workfuncs.set_state, initargs=["a", 1])
    with pytest.raises(ValueError, match="max_tasks_per_"):
        backend.pool(1, max_tasks=0)
    with pytest.raises(ValueError, match="cancel_grace"):
        backend.pool(1, cancel_grace=-1)
    with pytest.raises(asi.NotShareableError, match="lambda"):
        backend.pool(1, initializer=lambda: None)


def test_submit_without_running_loop(backend):
    pool = backend.pool(1)
    with pytest.raises(RuntimeError, match="needs a running event loop"):
        pool.submit(workfuncs.square, 2)
    pool.close()


# -- lifecycle ------------------------------------------------------------------------------


async def test_closed_pool_refuses_work(backend):
    pool = backend.pool(1)
    assert await pool.run(workfuncs.square, 2) == 4
    await pool.aclose()
    assert pool.closed
    with pytest.raises(asi.PoolClosedError, match="closed"):
        pool.submit(workfuncs.square, 2)
    with pytest.raises(asi.PoolClosedError):
        await pool.start()
    pool.close()  # idempotent
    await pool.aclose()


async def test_close_finishes_submitted_tasks(backend):
    pool = backend.pool(1)
    tasks = [pool.submit(workfuncs.square, i) for i in range(50)]
    await pool.aclose()
    assert [t.result() for t in tasks] == [i * i for i in range(50)]
    assert pool.statistics()["state"] == "closed"


async def test_never_started_pool_closes(backend):
    pool = backend.pool(2)
    await pool.aclose()
    assert pool.statistics()["state"] == "closed"


async def test_preload_and_initializer(backend):
    async with backend.pool(
        2,
        preload=("json", "fractions"),
        initializer=workfuncs.set_state,
        initargs=("greeting", "hi"),
    ) as pool:
        results = await asyncio.gather(
            *(pool.run(workfuncs.get_state, "greeting") for _ in range(8))
        )
        assert results == ["hi"] * 8
        assert await pool.run(workfuncs.imported, "fractions") is True


async def test_failing_initializer_breaks_the_pool(backend):
    pool = backend.pool(2, initializer=workfuncs.fail_init)
    task = pool.submit(workfuncs.square, 3)
    with pytest.raises(asi.BrokenPoolError, match="initializer says no") as info:
        await task
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(asi.BrokenPoolError):
        await pool.start()
    with pytest.raises(asi.BrokenPoolError):
        pool.submit(workfuncs.square, 3)
    await pool.aclose()


async def test_start_returns_with_one_worker_and_wait_ready_waits_for_all(backend):
    pool = backend.pool(2)
    assert pool.statistics()["starting"] == 0 and pool.statistics()["state"] == "new"
    async with pool:
        stats = pool.statistics()  # the other worker may still be starting
        assert stats["state"] == "running" and stats["starting"] in (0, 1)
        await asyncio.wait_for(pool.wait_ready(), 60)
        assert pool.statistics()["starting"] == 0
        assert await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(4))) == [
            0,
            1,
            4,
            9,
        ]
    with pytest.raises(asi.PoolClosedError):
        await pool.wait_ready()


async def test_preload_of_missing_module_breaks_the_pool(backend):
    pool = backend.pool(1, preload=("no_such_module_xyz",))
    with pytest.raises(asi.BrokenPoolError, match="no_such_module_xyz"):
        await pool.start()
    await pool.aclose()


async def test_max_tasks_replaces_workers(backend):
    async with backend.pool(1, max_tasks=2) as pool:
        ids = [await pool.run(procfuncs.whoami) for _ in range(6)]
        results = await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(20)))
    assert len(set(ids)) == 3
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[4] == ids[5]
    assert results == [i * i for i in range(20)]


async def test_sys_path_added_at_run_time_is_seen(backend, tmp_path):
    (tmp_path / "late_module_xyz.py").write_text("def value():\n    return 'late'\n")
    async with backend.pool(2) as pool:
        await pool.run(workfuncs.square, 1)
        sys.path.insert(0, str(tmp_path))
        try:
            import late_module_xyz

            results = await asyncio.gather(*(pool.run(late_module_xyz.value) for _ in range(6)))
            assert results == ["late"] * 6
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("late_module_xyz", None)


def test_unclosed_pool_warns(backend):
    async def main():
        pool = backend.pool(1)
        assert await pool.run(workfuncs.square, 2) == 4
        return pool

    pool = asyncio.run(main())
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del pool
        collect_until(lambda: any(issubclass(w.category, ResourceWarning) for w in seen))
    (warned,) = [w for w in seen if issubclass(w.category, ResourceWarning)]
    assert "unclosed" in str(warned.message)


def test_pool_shared_by_two_loops_in_two_threads(backend):
    pool = backend.pool(2)
    results: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def thread_main(label, offset):
        async def go():
            return await asyncio.gather(
                *(pool.run(workfuncs.square, offset + i) for i in range(100))
            )

        try:
            results[label] = asyncio.run(go())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [
        threading.Thread(target=thread_main, args=(n, k)) for n, k in (("a", 0), ("b", 1000))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert results["a"] == [i * i for i in range(100)]
    assert results["b"] == [(1000 + i) ** 2 for i in range(100)]

    async def close():
        await pool.aclose()

    asyncio.run(close())


# -- map, Task ------------------------------------------------------------------------------


async def test_map_ordered_and_unordered(backend):
    async with backend.pool(2) as pool:
        got = [r async for r in pool.map(workfuncs.square, range(300), window=16)]
        assert got == [i * i for i in range(300)]
        unordered = [r async for r in pool.map(workfuncs.square, range(100), ordered=False)]
        assert sorted(unordered) == [i * i for i in range(100)]


async def test_map_accepts_async_iterables_and_stops_on_error(backend):
    async def numbers():
        for i in range(10):
            yield i

    async with backend.pool(2) as pool:
        got = [r async for r in pool.map(workfuncs.square, numbers())]
        assert got == [i * i for i in range(10)]
        got = []
        with pytest.raises(workfuncs.CustomError):
            async for r in pool.map(workfuncs.raise_custom, ["a", "b"]):
                got.append(r)
        assert got == []
        with pytest.raises(ValueError, match="window"):
            async for _ in pool.map(workfuncs.square, [1], window=0):
                pass


async def test_task_api(backend):
    async with backend.pool(1) as pool:
        task = pool.submit(workfuncs.square, 5)
        seen = []
        task.add_done_callback(lambda t: seen.append(t.result()))
        assert isinstance(task, asi.Task) and isinstance(task, asyncio.Future)
        assert task.name == "square" and task.id > 0
        assert not task.done()
        assert await task == 25
        await asyncio.sleep(0)
        assert task.done() and not task.cancelled() and task.exception() is None
        assert seen == [25]
        assert "square" in repr(task)
        other = pool.submit(workfuncs.square, 6)
        assert other.id != task.id
        other.set_name("six")
        assert other.get_name() == "six"
        assert await other == 36
        stats = pool.statistics()
        assert stats["submitted"] == 2 and stats["completed"] == 2 and stats["queued"] == 0


# -- cancellation and timeouts --------------------------------------------------------------


async def _until_busy(pool, n=1):
    while pool.statistics()["busy"] < n:
        await asyncio.sleep(0.005)


async def test_cancel_queued_task_withdraws_it(backend, pipe):
    r, w = pipe
    async with backend.pool(1) as pool:
        blocker = pool.submit(procfuncs.read_close, FD(r))
        try:
            await _until_busy(pool)
            queued = pool.submit(procfuncs.write_close, FD(w), b"queued ran")
            assert pool.statistics()["queued"] == 1
            assert queued.cancel()
            assert queued.cancelled()
            assert pool.statistics()["queued"] == 0
        finally:
            os.write(w, b"!")
        assert await blocker == b"!"
        # The withdrawn task never wrote into the pipe.
        assert await pool.run(procfuncs.write_close, FD(w), b"?") == 1
        assert os.read(r, 100) == b"?"
        with pytest.raises(asyncio.CancelledError):
            await queued


async def test_cancel_running_task_interrupts_it(backend):
    async with backend.pool(1) as pool:
        first = await pool.run(procfuncs.whoami)
        task = pool.submit(workfuncs.spin_forever)
        await _until_busy(pool)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The same worker is free again: interrupted, not replaced.
        assert await asyncio.wait_for(pool.run(procfuncs.whoami), 30) == first
        assert pool.statistics()["replaced"] == 0


async def test_timeout_on_running_task(backend):
    async with backend.pool(1) as pool:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await pool.run(workfuncs.spin_forever)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run(workfuncs.spin_forever), 0.2)
        assert await asyncio.wait_for(pool.run(workfuncs.square, 7), 30) == 49


async def test_task_ignoring_cancellation_gets_its_worker_replaced(backend, pipe):
    r, w = pipe
    sr, sw = os.pipe()
    async with backend.pool(1, cancel_grace=0.2) as pool:
        try:
            stuck = await pool.run(procfuncs.whoami)
            task = pool.submit(procfuncs.read_ignoring_interrupts, FD(r), FD(sw))
            assert await read_byte(sr) == b"s"  # it runs (and ignores interruptions)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # A fresh worker took the slot while the old one still ignores us.
            assert await asyncio.wait_for(pool.run(procfuncs.whoami), 30) != stuck
            assert pool.statistics()["replaced"] == 1
        finally:
            # Lets an abandoned interpreter finish so close() can destroy it (the
            # interruption lands after its read returns: it swallows it and reads again).
            os.write(w, b"xxxx")
            os.close(sr)
            os.close(sw)


async def test_outer_task_cancellation_reaches_the_worker(backend):
    async with backend.pool(1) as pool:
        outer = asyncio.ensure_future(pool.run(workfuncs.spin_forever))
        await _until_busy(pool)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert await asyncio.wait_for(pool.run(workfuncs.square, 3), 30) == 9


async def test_cancel_many_queued_and_running(backend):
    async with backend.pool(2) as pool:
        tasks = [pool.submit(workfuncs.spin, 100_000) for _ in range(40)]
        await asyncio.sleep(0.01)
        for t in tasks[::2]:
            t.cancel()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        for t, outcome in zip(tasks, done, strict=True):
            if t.cancelled():
                assert isinstance(outcome, asyncio.CancelledError)
            else:
                assert outcome == workfuncs.spin(100_000)
        assert await pool.run(workfuncs.square, 4) == 16
        assert pool.statistics()["queued"] == 0


async def test_cancel_after_done_is_a_no_op(backend):
    async with backend.pool(1) as pool:
        task = pool.submit(workfuncs.square, 2)
        assert await task == 4
        assert not task.cancel()
        assert task.result() == 4


# -- channel ends passed to tasks -------------------------------------------------------------


async def test_worker_streams_to_the_loop(backend):
    send, recv = asi.open_channel(4)
    async with backend.pool(1) as pool:
        producer = pool.submit(chanfuncs.produce, send, 50)  # it closes `send`: the same end
        assert [x async for x in recv] == list(range(50))
        assert await producer == 50


async def test_loop_streams_to_the_worker_and_back(backend):
    to_w, from_loop = asi.open_channel(2)
    to_loop, from_w = asi.open_channel(2)
    async with backend.pool(1) as pool:
        echo = pool.submit(chanfuncs.echo_items, from_loop, to_loop)
        items = [i if i % 3 else ("t", i, {"k": [i]}) for i in range(40)]

        async def feed():
            for item in items:
                await to_w.send(item)
            to_w.close()

        feeder = asyncio.ensure_future(feed())
        assert [x async for x in from_w] == items
        await feeder
        assert await echo == 40


async def test_channel_errors_inside_the_worker(backend):
    send, recv = asi.open_channel(0)
    async with backend.pool(1) as pool:
        errors = pool.submit(chanfuncs.try_errors, send, recv)  # it closes `send` there
        assert await asyncio.wait_for(errors, 30) == ["wouldblock", "timeout", "closed", "end"]
    recv.close()


async def test_the_end_protocol_inside_the_worker(backend):
    # An interpreter's end and a worker process's proxy share one base: the
    # same repr, clone, `with`, close and iteration.
    send, recv = asi.open_channel(4)
    async with backend.pool(1) as pool:
        assert await pool.run(procfuncs.end_protocol, send, recv) == [
            True,
            True,
            "clone refused",
            ["a", "b"],
        ]
    assert send.closed
    recv.close()


async def test_an_end_the_task_drops_is_closed_with_its_last_copy(backend):
    send, recv = asi.open_channel(8)
    async with backend.pool(1) as pool:
        assert await pool.run(procfuncs.send_then_return, send, [1, 2, 3]) == 3
        # The worker's copy died with its task; ours keeps the end open.
        assert not send.closed and recv.statistics().open_send_channels == 1
        del send  # the last copy: the end counts as closed, the channel ends after the items
        assert [x async for x in recv] == [1, 2, 3]


async def test_an_end_kept_by_the_worker_stays_open(backend):
    send, recv = asi.open_channel(8)
    async with backend.pool(1) as pool:
        assert await pool.run(procfuncs.keep_end, send)
        del send  # the worker's copy keeps the end open
        assert recv.statistics().open_send_channels == 1
        with pytest.raises(asi.WouldBlock):
            recv.recv_nowait()
        assert await pool.run(procfuncs.close_kept)
        with pytest.raises(asi.EndOfChannel):
            await asyncio.wait_for(recv.recv(), 30)


async def test_the_end_a_task_drops_is_closed_every_time(backend):
    # A race: ProcessPool keeps a copy of each end it sends to a worker and
    # drops it on its reader thread once the task ends, possibly after the
    # loop has gone back to sleep in epoll. On a free-threaded build such an
    # object is collected by the thread that made it (the loop's), at its
    # next Python code: the end stayed open and the loop slept on (a hang
    # under load, often at the first try). The copy is now released at once.
    async with backend.pool(1) as pool:
        for _ in range(100):
            send, recv = asi.open_channel(4)
            assert await pool.run(procfuncs.send_then_return, send, [1]) == 1
            del send
            assert await asyncio.wait_for(recv.recv(), 5) == 1
            with pytest.raises(asi.EndOfChannel):
                await asyncio.wait_for(recv.recv(), 5)


async def test_ends_through_a_channel_and_back(backend):
    ends_in, ends_out = asi.open_channel(1)
    send, recv = asi.open_channel(1)
    async with backend.pool(1) as pool:
        task = pool.submit(chanfuncs.recv_end_and_use, ends_out)
        await ends_in.send(send)  # the worker closes it there: the same end
        tag, _ = await asyncio.wait_for(recv.recv(), 30)
        assert tag == "from"
        with pytest.raises(asi.EndOfChannel):
            await asyncio.wait_for(recv.recv(), 30)
        assert (await task).endswith("SendChannel")
        assert send.closed
        back = await pool.run(procfuncs.send_end_back, ends_in)
        assert type(back) is asi.SendChannel and not back.closed
        back.close()  # the same end came back: ours is closed too
        assert ends_in.closed


async def test_cancelled_blocked_recv_leaves_the_channel_unchanged(backend):
    send, recv = asi.open_channel(0)
    async with backend.pool(1) as pool:
        task = pool.submit(chanfuncs.recv_block, recv)
        del recv  # the worker holds the only copy
        while send.statistics().tasks_waiting_receive == 0:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        while send.statistics().open_receive_channels:
            await asyncio.sleep(0.005)
        with pytest.raises(asi.BrokenChannelError):
            await send.send("nobody")
        assert pool.statistics()["replaced"] == 0
    send.close()


async def test_async_with_a_pool_that_cannot_start_releases_it(backend):
    # __aenter__ fails: the caller never gets the pool to close, so the pool
    # closes itself; dropping it later must not warn about an unclosed pool.
    import gc
    import warnings

    pool = backend.pool(2, initializer=workfuncs.fail_init)
    with pytest.raises(asi.BrokenPoolError, match="initializer says no"):
        async with pool:
            raise AssertionError("the body must not run")
    assert "closed" in repr(pool)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del pool
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
