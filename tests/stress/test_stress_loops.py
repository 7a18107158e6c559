"""Objects used from another event loop than their own: what is supported, what is a mistake.

Supported (a pool and channel ends are thread-safe, each task belongs to the
loop that submitted it): one pool shared by loops in several threads, a pool
started on one loop and closed from another, one channel end awaited from two
loops at once. A mistake, with asyncio's own error at the await: awaiting a
Task on another loop than the one it was submitted from. A loop closed
without shutting down its async generators (loop.close() outside
asyncio.run) releases its wakeup fd and its default pool when collected.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import threading
import weakref

import pytest
import stressfuncs
import workfuncs
from stresshelp import thread_count, threads_back_to

import aiosubinterp as asi
from aiosubinterp import _core
from aiosubinterp._engine import hub as _hub

pytestmark = pytest.mark.slow


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _in_thread(fn, *args):
    """Run fn(*args) on a new thread; return its result or raise its exception."""
    out: dict = {}

    def body():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            out["error"] = exc

    t = threading.Thread(target=body)
    t.start()
    t.join(60)
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_loop_closed_without_asyncgen_shutdown_releases_its_hub_and_default_pool():
    threads = thread_count()  # OS threads, as threads_back_to() counts them
    fds = _fds()
    loop = asyncio.new_event_loop()

    async def use():
        assert await asi.run(workfuncs.square, 7) == 49
        hub = _hub.hub_for(asyncio.get_running_loop())
        stuck = hub.default_pool.submit(workfuncs.spin_forever)  # left running
        while hub.default_pool.statistics()["busy"] == 0:
            await asyncio.sleep(0.01)
        return hub.core.fileno(), weakref.ref(hub.default_pool), stuck

    hub_fd, pool_ref, stuck = loop.run_until_complete(use())
    assert str(hub_fd) in _fds() - fds
    loop.close()  # no shutdown_asyncgens(): the hub's guard never runs
    loop_ref = weakref.ref(loop)
    del loop, stuck
    gc.collect()
    assert loop_ref() is None, gc.get_referrers(loop_ref())
    # The default pool's running task was interrupted and the pool closed.
    assert threads_back_to(threads, timeout=30)
    gc.collect()
    assert pool_ref() is None
    assert not _core.live_workers()
    assert str(hub_fd) not in _fds() - fds


def test_hub_of_a_running_loop_stays_while_the_loop_runs():
    async def main():
        loop = asyncio.get_running_loop()
        first = _hub.hub_for(loop)
        gc.collect()
        assert _hub.hub_for(loop) is first  # held by the loop, not only by the map
        async with asi.InterpreterPool(1) as pool:
            assert await pool.run(workfuncs.square, 3) == 9
        assert _hub.hub_for(loop) is first
        return first.core.fileno()

    fd = asyncio.run(main())
    assert str(fd) not in _fds()  # asyncio.run shut the hub down


async def test_awaiting_a_task_on_another_loop_is_asyncios_clear_error():
    async with asi.InterpreterPool(1) as pool:
        task = pool.submit(workfuncs.square, 6)

        async def await_elsewhere():
            await task

        with pytest.raises(RuntimeError, match="attached to a different loop"):
            _in_thread(asyncio.run, await_elsewhere())
        # Its own loop still gets the result. (asyncio leaves any future that
        # failed a foreign-loop await marked as awaited: awaiting it again
        # while pending raises "await wasn't used with future"; wait() works.)
        await asyncio.wait([task], timeout=60)
        assert task.result() == 36

        async def submit_elsewhere():
            return pool.submit(workfuncs.spin_forever)

        # A task still in flight when its loop shuts down is cancelled with it:
        # nobody could receive its result.
        other = _in_thread(asyncio.run, submit_elsewhere())
        assert other.cancelled()
        assert await pool.run(workfuncs.square, 4) == 16


async def test_pool_started_on_one_loop_runs_and_closes_on_another():
    pool = asi.InterpreterPool(2)
    await pool.start()
    assert await pool.run(workfuncs.square, 2) == 4

    async def elsewhere():
        results = await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(20)))
        await pool.aclose()
        return results

    assert _in_thread(asyncio.run, elsewhere()) == [i * i for i in range(20)]
    assert pool.closed
    with pytest.raises(asi.PoolClosedError):
        pool.submit(workfuncs.square, 1)
    await pool.aclose()  # idempotent, from the first loop too


def test_default_pools_are_per_loop():
    async def default_pool():
        assert await asi.run(workfuncs.square, 4) == 16
        return _hub.hub_for(asyncio.get_running_loop()).default_pool

    first = asyncio.run(default_pool())
    second = asyncio.run(default_pool())
    assert first is not second
    assert first.closed and second.closed  # each closed with its loop


async def test_one_receive_end_awaited_from_two_loops_at_once():
    send, recv = asi.open_channel(8)
    n = 2000

    def consume():
        async def body():
            got = []
            async for item in recv:
                got.append(item)
            return got

        return asyncio.run(body())

    results: list = []
    threads = [threading.Thread(target=lambda: results.append(consume())) for _ in range(2)]
    for t in threads:
        t.start()
    async with asi.InterpreterPool(1) as pool:
        await pool.run(stressfuncs.produce_range, send.clone(), 0, n)
    send.close()
    for t in threads:
        await asyncio.get_running_loop().run_in_executor(None, t.join, 60)
    assert len(results) == 2
    assert sorted(results[0] + results[1]) == list(range(n))  # each item exactly once
    for got in results:
        assert got == sorted(got)  # one FIFO: each consumer sees its items in order
    recv.close()


async def test_one_send_end_awaited_from_two_loops_at_once():
    send, recv = asi.open_channel(0)  # rendezvous: every send waits for the receiver
    n = 1000

    def produce(offset):
        async def body():
            for i in range(n):
                await send.send(offset + i)

        asyncio.run(body())

    threads = [threading.Thread(target=produce, args=(k * n,)) for k in range(2)]
    for t in threads:
        t.start()
    got = [await recv.recv() for _ in range(2 * n)]
    for t in threads:
        await asyncio.get_running_loop().run_in_executor(None, t.join, 60)
    assert sorted(got) == list(range(2 * n))
    for k in range(2):
        mine = [x for x in got if k * n <= x < (k + 1) * n]
        assert mine == sorted(mine)
    assert recv.statistics().current_buffer_used == 0
    send.close()
    recv.close()


async def test_channel_end_used_after_its_first_loop_closed():
    send, recv = asi.open_channel(math.inf)

    async def first():
        await send.send("from a loop that is gone")

    _in_thread(asyncio.run, first())
    assert await recv.recv() == "from a loop that is gone"
    await send.send(2)
    assert await recv.recv() == 2
    send.close()
    recv.close()


def test_exit_with_a_loop_never_closed_and_its_default_pool(tmp_path):
    from stresshelp import run_script

    proc = run_script(
        tmp_path,
        """
        import asyncio
        import aiosubinterp as asi, workfuncs

        loop = asyncio.new_event_loop()  # never closed: its hub and pools live until exit
        keep = []

        async def main():
            keep.append(asi.InterpreterPool(1))
            await keep[0].start()
            return await asi.run(workfuncs.square, 3)

        print(loop.run_until_complete(main()), flush=True)
    """,
        env={"PYTHONWARNINGS": "ignore::ResourceWarning"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "9\n"
    assert "Traceback" not in proc.stderr, proc.stderr
