"""The completion hub as the one road back to callers: LoopHub.post and ProcessPool's results.

The interpreter backends' completions through the hub are tested with the
pools (test_pool.py, test_backends.py); the executor's ThreadHub with the
executor (test_executor.py).
"""

from __future__ import annotations

import asyncio
import gc
import os
import select
import sys
import threading
import weakref

import procfuncs
import pytest
import workfuncs

import aiosubinterp as asi
from aiosubinterp import _core
from aiosubinterp._engine import hub as _hub

try:
    import uvloop
except ImportError:  # pragma: no cover - the test extra installs it
    uvloop = None

FD = asi.FileDescriptor
LOOP_FACTORIES = [asyncio.new_event_loop] + ([uvloop.new_event_loop] if uvloop else [])


class Recorder:
    """Stands for a Task: records what the hub delivers to it, on which thread."""

    def __init__(self, log: list[tuple[object, ...]], name: object) -> None:
        self.log = log
        self.name = name

    def _deliver(self, status: int, value: object) -> None:
        self.log.append((self.name, status, value, threading.get_ident()))


def _post_from_a_thread(hub: _hub.LoopHub, posts: list[tuple[Recorder, int, object]]) -> None:
    thread = threading.Thread(target=lambda: [hub.post(*p) for p in posts])
    thread.start()
    thread.join()  # the loop's thread is blocked meanwhile: nothing is drained


def _wakeups(hub: _hub.LoopHub) -> int:
    """How many writes the hub's fd holds (and clears them, as drain() would)."""
    data = os.read(hub.core.fileno(), 4096)
    if hub.core.mechanism == "eventfd":
        return int.from_bytes(data, sys.byteorder)
    return len(data)


async def test_a_burst_of_posted_results_costs_one_wakeup_and_keeps_its_order():
    hub = _hub.hub_for(asyncio.get_running_loop())
    log: list[tuple[object, ...]] = []
    posts = [(Recorder(log, i), _core.STATUS_OK, i * 10) for i in range(1000)]
    _post_from_a_thread(hub, posts)
    assert _wakeups(hub) == 1
    assert log == []  # only drain() delivers, on the loop's thread
    hub.drain()
    assert [(name, value) for name, _, value, _ in log] == [(i, i * 10) for i in range(1000)]
    assert {ident for *_, ident in log} == {threading.get_ident()}
    # The list is empty again: the next post wakes the loop again, and the
    # loop's own reader delivers it.
    done = asyncio.Event()
    log.clear()
    _post_from_a_thread(hub, [(Recorder(log, "late"), _core.STATUS_OK, done.set)])
    while not log:
        await asyncio.sleep(0)
    assert log[0][:3] == ("late", _core.STATUS_OK, done.set)


class Refuses(Recorder):
    def _deliver(self, status: int, value: object) -> None:
        raise RuntimeError("a delivery that fails")


async def test_a_failing_delivery_leaves_the_results_after_it_for_the_next_drain():
    hub = _hub.hub_for(asyncio.get_running_loop())
    log: list[tuple[object, ...]] = []
    posts = [(Recorder(log, 0), _core.STATUS_OK, 0), (Refuses(log, 1), _core.STATUS_OK, 1)]
    posts += [(Recorder(log, i), _core.STATUS_OK, i) for i in range(2, 5)]
    _post_from_a_thread(hub, posts)
    with pytest.raises(RuntimeError, match="a delivery that fails"):
        hub.drain()  # the loop would hand this to its exception handler
    assert [entry[0] for entry in log] == [0]
    assert _wakeups(hub) == 1  # the rest went back, and the fd says so
    hub.drain()
    assert [entry[0] for entry in log] == [0, 2, 3, 4]


async def test_a_hub_shut_down_delivers_what_was_posted_and_later_posts_still_arrive():
    loop = asyncio.get_running_loop()
    hub = _hub.hub_for(loop)
    log: list[tuple[object, ...]] = []
    _post_from_a_thread(hub, [(Recorder(log, "before"), _core.STATUS_OK, 1)])
    await hub.shutdown()  # as the loop's async-generator shutdown does
    assert [entry[:3] for entry in log] == [("before", _core.STATUS_OK, 1)]
    assert hub.core.closed
    # Shut down while the loop runs on: a late result still reaches the loop.
    _post_from_a_thread(hub, [(Recorder(log, "after"), _core.STATUS_OK, 2)])
    while len(log) < 2:
        await asyncio.sleep(0)
    assert log[1][:3] == ("after", _core.STATUS_OK, 2)
    assert log[1][3] == threading.get_ident()
    assert _hub.hub_for(loop) is not hub  # the loop's next user gets a new hub


@pytest.mark.parametrize("new_loop", LOOP_FACTORIES, ids=lambda f: f.__module__)
def test_a_post_to_the_hub_of_a_closed_loop_is_dropped_quietly(new_loop):
    loop = new_loop()

    async def get_hub() -> _hub.LoopHub:
        return _hub.hub_for(asyncio.get_running_loop())

    hub = loop.run_until_complete(get_hub())
    loop.close()  # without shutdown_asyncgens(): the hub stays open until the loop goes
    log: list[tuple[object, ...]] = []
    _post_from_a_thread(hub, [(Recorder(log, "late"), _core.STATUS_OK, 1)])
    assert log == []
    assert select.select([hub.core.fileno()], [], [], 0)[0] == []  # nothing woken
    assert hub._posted == []  # nothing held for a drain that never comes
    # The hub keeps its loop alive (its shutdown guard holds the loop's
    # async-generator finalizer); both go together, and the finalizer closes
    # the hub's fd (the fixture checks fds).
    hub_ref = weakref.ref(hub)
    del hub, loop
    gc.collect()
    assert hub_ref() is None


def test_waking_a_closed_core_hub_is_refused_not_raised():
    core = _core.Hub(use_pipe=_hub.wakeup_mechanism() == "pipe")
    try:
        assert core.wake() is True
        assert core.wake() is True
        assert select.select([core.fileno()], [], [], 0)[0] == [core.fileno()]
        assert core.drain() == []  # a wakeup without completions: nothing, fd cleared
        assert select.select([core.fileno()], [], [], 0)[0] == []
    finally:
        core.close()
    assert core.wake() is False


# -- ProcessPool: its results come back through the loop's hub ----------------------


async def test_a_burst_of_process_results_is_delivered_in_order():
    n = 400
    async with asi.ProcessPool(1) as pool:
        order: list[int] = []
        tasks = [pool.submit(workfuncs.echo, i) for i in range(n)]
        for task in tasks:
            task.add_done_callback(lambda t: order.append(t.result()))
        assert await asyncio.gather(*tasks) == list(range(n))
        # One worker runs them in turn; its reader thread posts them in turn.
        assert order == list(range(n))
    async with asi.ProcessPool(2) as pool:
        assert await asyncio.gather(*(pool.run(workfuncs.echo, i) for i in range(n))) == list(
            range(n)
        )


async def test_a_process_task_cancelled_after_its_result_was_posted_stays_cancelled():
    hub = _hub.hub_for(asyncio.get_running_loop())
    async with asi.ProcessPool(1) as pool:
        assert await pool.run(workfuncs.echo, 0) == 0  # the worker is up; the hub drained
        task = pool.submit(workfuncs.echo, 1)
        # Block the loop's thread until the reader thread posted the result.
        assert select.select([hub.core.fileno()], [], [], 60)[0]
        assert task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # the result that arrives now is ignored
        assert await pool.run(workfuncs.echo, 2) == 2
        assert pool.statistics()["replaced"] == 0


async def test_process_tasks_cancelled_at_every_stage_settle(pipe):
    r, w = pipe
    async with asi.ProcessPool(2) as pool:
        blocker = pool.submit(procfuncs.read_close, FD(r))  # one worker busy until w is written
        tasks = [pool.submit(workfuncs.echo, i) for i in range(200)]
        for i, task in enumerate(tasks):
            if i % 3 == 0:
                task.cancel()  # queued (withdrawn) or just sent: cancelled either way
            if i % 20 == 0:
                await asyncio.sleep(0)  # let some results come back in between
        late = [t for i, t in enumerate(tasks) if i % 3 == 1]
        await asyncio.sleep(0)
        for task in late:
            task.cancel()  # done already (no effect), posted, running or queued
        os.write(w, b"!")
        assert await asyncio.wait_for(blocker, 60) == b"!"
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        for i, (task, outcome) in enumerate(zip(tasks, outcomes, strict=True)):
            if task.cancelled():
                assert i % 3 != 2, f"task {i} was never cancelled"
            else:
                assert outcome == i
        assert all(tasks[i].cancelled() for i in range(0, 200, 3))
        # The pool serves on, and nothing is left in flight.
        assert await pool.run(workfuncs.echo, "after") == "after"
        stats = pool.statistics()
        assert (stats["running"], stats["queued"]) == (0, 0)


@pytest.mark.parametrize("new_loop", LOOP_FACTORIES, ids=lambda f: f.__module__)
def test_a_process_result_arriving_after_its_loop_closed_is_dropped_quietly(pipe, new_loop):
    r, w = pipe
    problems: list[object] = []
    hooks = sys.unraisablehook, threading.excepthook
    sys.unraisablehook = problems.append
    threading.excepthook = problems.append
    pool = asi.ProcessPool(1)
    try:
        loop = new_loop()

        async def start() -> None:
            task = pool.submit(procfuncs.read_close, FD(r))
            while pool.statistics()["busy"] == 0:
                await asyncio.sleep(0.005)
            del task

        loop.run_until_complete(start())
        loop.close()  # the task's result is still to come
        os.write(w, b"!")
        asyncio.run(pool.aclose())  # waits for the running call: its result was handled
        assert pool.statistics()["completed"] == 1
        del loop
        gc.collect()
    finally:
        sys.unraisablehook, threading.excepthook = hooks
        pool.close()
    assert problems == []
