"""The two whole-process freezes of the 2026-12-04 review of ext/, and the lock order.

- R1: cancelling a running task while a channel item carrying a worker's
  share is discarded deadlocked the process (the interrupter held a queue
  mutex and wanted the channel mutex; the discard held the channel mutex,
  then the share mutex, and wanted the same queue mutex).
- R2: math.inf (or any timeout past what a clock can represent) as a
  timeout made a waiter spin for ever holding a process-wide mutex.
- The one lock order (ext/includes/lockorder.h) is checked by debug builds
  (AIOSUBINTERP_DEBUG=1): an out-of-order acquisition aborts, naming both.

Every case that froze runs in a child process with a timeout: a regression
freezes the child (pytest's own timeout could not interrupt it), not the suite.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading

import pytest
from childproc import run_child

import aiosubinterp as asi
from aiosubinterp import _core

LOOPS = pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])


def run_main(loop_kind: str) -> str:
    """The child's last lines: run main() on the chosen loop."""
    return f"""
        if "{loop_kind}" == "uvloop":
            import uvloop
            uvloop.run(main())
        else:
            asyncio.run(main())
        print("exited", flush=True)
    """


# -- R1: the lock-order deadlock ----------------------------------------------------


@LOOPS
def test_cancels_while_a_worker_discards_shared_items_never_deadlock(tmp_path, loop_kind):
    # The review's reproducer: it froze the whole process after 20-200
    # cancels. One worker sends refused 64 KiB items for ever (each discarded
    # under the channel mutex); the loop cancels tasks running on the other.
    proc = run_child(
        tmp_path,
        """
        import asyncio
        import aiosubinterp as asi
        import lockfuncs

        async def main():
            async with asi.InterpreterPool(2) as pool:
                tx, rx = asi.open_channel()
                rx.close()
                producer = pool.submit(lockfuncs.send_refused_forever, tx)
                for i in range(400):
                    t = pool.submit(lockfuncs.spin)
                    await asyncio.sleep(0.002)  # let it start (or not: both are fine)
                    t.cancel()
                    await asyncio.gather(t, return_exceptions=True)
                print("cancelled", i + 1, flush=True)
                producer.cancel()
                await asyncio.gather(producer, return_exceptions=True)
    """
        + run_main(loop_kind),
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "cancelled 400\n" in proc.stdout
    assert proc.stdout.endswith("exited\n")


@LOOPS
def test_consumer_gives_up_cancels_producers_and_closes_its_end(tmp_path, loop_kind):
    # The review's realistic variant: producers send_sync 64 KiB chunks; the
    # consumer reads a few, cancels the producers, then closes its end (which
    # drops the buffered chunks under the channel mutex while the producers'
    # interruptions are delivered).
    proc = run_child(
        tmp_path,
        """
        import asyncio
        import aiosubinterp as asi
        import lockfuncs

        async def main():
            async with asi.InterpreterPool(2) as pool:
                for round_ in range(40):
                    tx, rx = asi.open_channel(64)
                    producers = [pool.submit(lockfuncs.produce_chunks, tx.clone())
                                 for _ in range(2)]
                    tx.close()
                    for _ in range(8):
                        assert len(await rx.recv()) == lockfuncs.BIG
                    for p in producers:
                        p.cancel()
                    rx.close()
                    await asyncio.gather(*producers, return_exceptions=True)
                print("rounds", round_ + 1, flush=True)
                assert await pool.run(sum, [1, 2]) == 3
    """
        + run_main(loop_kind),
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "rounds 40\n" in proc.stdout
    assert proc.stdout.endswith("exited\n")


# -- R2: one rule for every public timeout --------------------------------------------

NO_LIMIT = ("math.inf", "1e300", "2**80")


@LOOPS
@pytest.mark.timeout(300)
def test_every_public_timeout_takes_inf_as_no_limit(tmp_path, loop_kind):
    # Each waiter is shown to be waiting (through the channel's statistics,
    # or the thread's state), then released by the event it waits for. Before
    # the fix the first one froze the process: the waiter spun holding the
    # channel mutex, and statistics() (like any channel operation) never
    # returned.
    proc = run_child(
        tmp_path,
        """
        import asyncio, concurrent.futures, math, os, threading, time
        import aiosubinterp as asi
        import lockfuncs

        LIMITS = [math.inf, 1e300, 2**80]

        def wait_until(pred, what):
            deadline = time.monotonic() + 60  # a backstop only
            while not pred():
                if time.monotonic() > deadline:
                    print("backstop:", what, flush=True)
                    return
                time.sleep(0.001)

        def sleeping(th):
            # Linux: the thread sleeps in the kernel (a futex), not spinning.
            with open(f"/proc/self/task/{th.native_id}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "S"

        def threaded(fn):
            out = []
            th = threading.Thread(target=lambda: out.append(fn()))
            th.start()
            return th, out

        def sync_waiters(limit):
            tx, rx = asi.open_channel()
            th, out = threaded(lambda: rx.recv_sync(timeout=limit))
            wait_until(lambda: rx.statistics().tasks_waiting_receive == 1, "recv_sync")
            tx.send_nowait("a")
            th.join()
            assert out == ["a"], out
            print("ok recv_sync", flush=True)

            th, out = threaded(lambda: tx.send_sync("b", timeout=limit))
            wait_until(lambda: tx.statistics().tasks_waiting_send == 1, "send_sync")
            assert rx.recv_nowait() == "b"
            th.join()
            print("ok send_sync", flush=True)

            th, out = threaded(lambda: asi.select_sync(rx, timeout=limit))
            wait_until(lambda: rx.statistics().tasks_waiting_receive == 1, "select_sync")
            tx.send_nowait("c")
            th.join()
            assert out == [(0, "c")], out
            print("ok select_sync", flush=True)

            lock = asi.SharedLock()
            lock.acquire()
            th, out = threaded(lambda: lock.acquire(timeout=limit))
            wait_until(lambda: sleeping(th), "SharedLock.acquire")
            lock.release()
            th.join()
            assert out == [True], out
            lock.release()
            print("ok SharedLock.acquire", flush=True)

            with asi.InterpreterPoolExecutor(1) as ex:
                r, w = os.pipe()
                fut = ex.submit(lockfuncs.read_then_return, r)
                threading.Timer(0.05, os.write, (w, b"x")).start()  # any moment will do
                assert fut.result(timeout=limit) == "read"
                assert fut.exception(timeout=limit) is None
                assert list(ex.map(abs, [-1, -2], timeout=limit)) == [1, 2]
                os.close(r); os.close(w)
            print("ok executor result/exception/map", flush=True)

        async def async_waiters(limit):
            tx, rx = asi.open_channel()
            sel = asyncio.ensure_future(asi.select(rx, timeout=limit))
            while rx.statistics().tasks_waiting_receive != 1:
                await asyncio.sleep(0.001)
            tx.send_nowait("d")
            assert await sel == (0, "d")
            print("ok select", flush=True)

            for make in (asi.InterpreterPool, asi.ProcessPool):
                r, w = os.pipe()
                async with make(1, cancel_grace=limit) as pool:
                    task = pool.submit(lockfuncs.read_then_return, r)
                    while pool.statistics()["running"] != 1:
                        await asyncio.sleep(0.001)
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    os.write(w, b"x")  # the task returns to bytecode: interrupted there
                    assert await pool.run(abs, -5) == 5
                    wtx, wrx = asi.open_channel()
                    inside = pool.submit(lockfuncs.recv_no_limit, wrx, limit)
                    await wtx.send("e")
                    assert await inside == "e"
                os.close(r); os.close(w)
                print("ok cancel_grace and recv_sync in a worker:", make.__name__, flush=True)

        async def main():
            for limit in LIMITS:
                print("limit", limit, flush=True)
                await asyncio.to_thread(sync_waiters, limit)
                await async_waiters(limit)
    """
        + run_main(loop_kind),
        timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, (proc.returncode, out, proc.stderr[-3000:])
    assert "backstop" not in out, out
    names = [
        "recv_sync",
        "send_sync",
        "select_sync",
        "SharedLock.acquire",
        "executor result/exception/map",
        "select",
        "cancel_grace and recv_sync in a worker: InterpreterPool",
        "cancel_grace and recv_sync in a worker: ProcessPool",
    ]
    for name in names:
        assert out.count(f"ok {name}\n") == 3, (name, out)
    assert out.endswith("exited\n")


BAD_TIMEOUTS = [float("nan"), -1, -0.5, "1", True, [1.0]]


def _timeout_callers():
    """(what, parameter, call(value)) for every public timeout (select() below)."""
    tx, rx = asi.open_channel()
    ex = asi.InterpreterPoolExecutor(1)
    fut = ex.submit(abs, -1)
    fut.result()
    return [
        ("send_sync", "timeout", lambda v: tx.send_sync(1, timeout=v)),
        ("recv_sync", "timeout", lambda v: rx.recv_sync(timeout=v)),
        ("select_sync", "timeout", lambda v: asi.select_sync(rx, timeout=v)),
        ("InterpreterPool", "cancel_grace", lambda v: asi.InterpreterPool(1, cancel_grace=v)),
        ("ProcessPool", "cancel_grace", lambda v: asi.ProcessPool(1, cancel_grace=v)),
        ("Future.result", "timeout", lambda v: fut.result(timeout=v)),
        ("Future.exception", "timeout", lambda v: fut.exception(timeout=v)),
        ("Executor.map", "timeout", lambda v: ex.map(abs, [1], timeout=v)),
    ], (tx, rx, ex)


@pytest.mark.parametrize("bad", BAD_TIMEOUTS, ids=repr)
def test_every_public_timeout_refuses_nan_negative_and_non_numbers(bad):
    callers, (tx, rx, ex) = _timeout_callers()
    try:
        for what, param, call in callers:
            if (
                isinstance(bad, (int, float))
                and not isinstance(bad, bool)
                and bad < 0
                and (what.startswith(("Future", "Executor")))
            ):
                # concurrent.futures' interface: a negative timeout means "do
                # not wait", as the standard library's executors take it.
                continue
            with pytest.raises(ValueError, match=param) as info:
                call(bad)
            assert repr(bad) in str(info.value) and "no limit" in str(info.value), what
    finally:
        tx.close()
        rx.close()
        ex.shutdown()


@pytest.mark.parametrize("bad", [float("nan"), -0.5, -2])
def test_shared_lock_refuses_nan_and_negative_timeouts(bad):
    lock = asi.SharedLock()
    with pytest.raises(ValueError, match="no limit"):
        lock.acquire(timeout=bad)
    assert not lock.locked()


async def test_select_refuses_a_bad_timeout():
    tx, rx = asi.open_channel()
    for bad in (float("nan"), -1, "1"):
        with pytest.raises(ValueError, match="timeout"):
            await asi.select(rx, timeout=bad)
    tx.close()
    rx.close()


def test_executor_negative_timeout_means_do_not_wait():
    with asi.InterpreterPoolExecutor(1) as ex:
        r, w = os.pipe()
        try:
            fut = ex.submit(os.read, r, 1)
            with pytest.raises(TimeoutError):
                fut.result(timeout=-1)
            os.write(w, b"z")
            assert fut.result() == b"z"
        finally:
            os.close(r)
            os.close(w)


# -- the lock order, checked by debug builds --------------------------------------------


def test_debug_build_aborts_on_a_lock_taken_out_of_order(tmp_path):
    # _lock_order_selftest takes a queue mutex, then the channel mutex: the
    # order R1 broke. A debug build aborts naming both; a release build has
    # no check (the wrappers are the plain pthread calls) and returns False.
    proc = run_child(
        tmp_path,
        """
        from aiosubinterp import _core
        print("checked:", _core.LOCK_ORDER_CHECKED, flush=True)
        print("returned:", _core._lock_order_selftest(), flush=True)
    """,
        timeout=60,
    )
    if _core.LOCK_ORDER_CHECKED:
        assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stdout, proc.stderr)
        assert "checked: True\n" in proc.stdout
        assert "returned" not in proc.stdout
        assert (
            "lock order violated: taking asi_chan_mu (every channel) (rank 10) while "
            "holding q.mu (a test queue) (rank 30)"
        ) in proc.stderr
    else:
        assert proc.returncode == 0, (proc.returncode, proc.stderr)
        assert proc.stdout == "checked: False\nreturned: False\n"


def test_debug_build_aborts_on_a_gil_taken_holding_a_mutex(tmp_path):
    proc = run_child(
        tmp_path,
        """
        from aiosubinterp import _core
        print("returned:", _core._lock_order_selftest(gil=True), flush=True)
    """,
        timeout=60,
    )
    if _core.LOCK_ORDER_CHECKED:
        assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stdout, proc.stderr)
        assert (
            "lock order violated: waiting for a GIL (PyEval_RestoreThread) (rank 0) while "
            "holding q.mu (a test queue) (rank 30)"
        ) in proc.stderr
    else:
        assert proc.returncode == 0, (proc.returncode, proc.stderr)
        assert proc.stdout == "returned: False\n"


def test_debug_build_counts_lock_acquisitions_contention_and_hold_time(tmp_path):
    # Per rank, for the whole process: a pool's tasks take the job-queue and
    # hub mutexes, a channel's items the channel mutex; the selftest makes one
    # acquisition wait for certain. A release build keeps no counters and says so.
    proc = run_child(
        tmp_path,
        """
        import asyncio, json
        import aiosubinterp as asi
        from aiosubinterp import _core
        import chanfuncs, workfuncs

        N = 200

        async def main():
            async with asi.InterpreterPool(2) as pool:
                await pool.run(workfuncs.square, 1)
                _core._lock_stats_reset()
                zero = _core._lock_stats()
                assert all(v["acquired"] == v["contended"] == v["wait_ns"] == v["hold_ns"] == 0
                           for v in zero.values()), zero
                assert await asyncio.gather(*(pool.submit(workfuncs.square, i)
                                              for i in range(N))) == [i * i for i in range(N)]
                tasks = _core._lock_stats()
                send, recv = asi.open_channel(16)
                job = pool.submit(chanfuncs.produce, send, N)
                got = [x async for x in recv]
                await job
                assert got == list(range(N)), got
            items = _core._lock_stats()
            _core._lock_stats_selftest()
            print(json.dumps({"tasks": tasks, "items": items, "after": _core._lock_stats()}))

        asyncio.run(main())
    """,
        timeout=120,
    )
    if not _core.LOCK_ORDER_CHECKED:
        assert proc.returncode == 1 and "AssertionError" not in proc.stderr, proc.stderr
        assert "lock-wait counters exist only in a debug build" in proc.stderr
        with pytest.raises(RuntimeError, match="AIOSUBINTERP_DEBUG=1"):
            _core._lock_stats()
        with pytest.raises(RuntimeError, match="only in a debug build"):
            _core._lock_stats_reset()
        with pytest.raises(RuntimeError, match="only in a debug build"):
            _core._lock_stats_selftest()
        return
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    got = json.loads(proc.stdout.splitlines()[-1])
    n = 200
    tasks, items, after = got["tasks"], got["items"], got["after"]
    assert set(tasks) == {
        "chan",
        "orphan",
        "share",
        "queue",
        "registry",
        "hub",
        "interrupt",
        "shared_lock",
    }
    for stats in (tasks, items, after):
        for name, v in stats.items():
            assert 0 <= v["contended"] <= v["acquired"], (name, v)
            assert (v["wait_ns"] > 0) == (v["contended"] > 0), (name, v)
            assert (v["hold_ns"] > 0) <= (v["acquired"] > 0), (name, v)
    # every task: queued and taken under its queue's mutex, completed through a hub
    assert tasks["queue"]["acquired"] >= 2 * n and tasks["queue"]["hold_ns"] > 0
    assert tasks["hub"]["acquired"] >= n and tasks["hub"]["hold_ns"] > 0
    # every item: sent and received under the channel mutex
    assert items["chan"]["acquired"] - tasks["chan"]["acquired"] >= 2 * n
    assert items["chan"]["hold_ns"] > tasks["chan"]["hold_ns"]
    # counters only grow; the selftest adds 2 acquisitions, 1 contended
    for name in tasks:
        for key in ("acquired", "contended", "wait_ns", "hold_ns"):
            assert tasks[name][key] <= items[name][key] <= after[name][key], (name, key)
    before, lock = items["shared_lock"], after["shared_lock"]
    assert lock["acquired"] - before["acquired"] == 2
    assert lock["contended"] - before["contended"] == 1
    assert lock["wait_ns"] > before["wait_ns"] and lock["hold_ns"] > before["hold_ns"]


def test_the_timeout_rule_clamps_to_threadings_maximum():
    # The rule's constant is the one threading uses: a wait of that length is
    # accepted by threading, asyncio and uvloop timers, and the C core.
    from aiosubinterp import _timeouts

    assert _timeouts.TIMEOUT_MAX == threading.TIMEOUT_MAX
    assert _timeouts.seconds(math.inf, "x") == threading.TIMEOUT_MAX
    assert _timeouts.optional_seconds(2**200) is None
    assert _timeouts.optional_seconds(0) == 0.0


# -- the previous review's remainder: one blob copied to every failed job -----------------


def test_fail_queued_refuses_an_error_that_would_cross_by_reference():
    # Each queued job gets a copy of one encoding: a share (64 KiB of bytes),
    # an fd or a channel end in it would be released once per copy.
    queue = _core.Queue(0.0)
    before = _core.share_stats()
    tx, rx = asi.open_channel()
    for info in (b"x" * 65536, ("error", rx)):
        with pytest.raises(TypeError, match="crosses by copy only"):
            queue.fail_queued(info)
    assert _core.share_stats() == before
    assert rx.statistics().open_receive_channels == 1  # the refused copy was dropped, not the end
    assert queue.fail_queued(("RuntimeError", "closed")) == 0  # nothing queued: nothing failed
    tx.close()
    rx.close()
