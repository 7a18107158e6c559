"""Channels and select: buffering, close, errors, clones, cancellation, interpreters."""

from __future__ import annotations

import asyncio
import math
import os
import random
import subprocess
import sys
import threading

import chanfuncs
import pytest

import aiosubinterp as asi

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = 30  # bound on every wait: nothing may hang


async def until(check, timeout: float = T) -> None:
    """Yield to the loop until check() holds (an event to wait for, not a time)."""

    async def spin():
        while not check():
            await asyncio.sleep(0)

    await asyncio.wait_for(spin(), timeout)


# -- buffering and back-pressure ---------------------------------------------------------


async def test_rendezvous_send_waits_for_a_receiver():
    send, recv = asi.open_channel()
    with pytest.raises(asi.WouldBlock):
        send.send_nowait(1)
    sender = asyncio.create_task(send.send("x"))
    await until(lambda: send.statistics().tasks_waiting_send == 1)
    assert not sender.done()
    assert send.statistics().current_buffer_used == 0
    assert recv.recv_nowait() == "x"
    await asyncio.wait_for(sender, T)
    receiver = asyncio.create_task(recv.recv())
    await until(lambda: recv.statistics().tasks_waiting_receive == 1)
    send.send_nowait("y")  # a waiting receiver makes a rendezvous send complete at once
    assert await asyncio.wait_for(receiver, T) == "y"


async def test_bounded_back_pressure():
    send, recv = asi.open_channel(2)
    send.send_nowait(1)
    send.send_nowait(2)
    with pytest.raises(asi.WouldBlock):
        send.send_nowait(3)
    blocked = asyncio.create_task(send.send(3))
    await until(lambda: send.statistics().tasks_waiting_send == 1)
    stats = send.statistics()
    assert (stats.current_buffer_used, stats.max_buffer_size) == (2, 2)
    assert recv.recv_nowait() == 1  # frees a slot: the blocked sender's item moves in
    await asyncio.wait_for(blocked, T)
    assert [recv.recv_nowait(), recv.recv_nowait()] == [2, 3]
    with pytest.raises(asi.WouldBlock):
        recv.recv_nowait()


async def test_unbounded_and_values():
    send, recv = asi.open_channel(math.inf)
    values = [None, 1, 2**100, 1.5, "é", b"\x00" * 10, (1, ("a",)), [1, {"a": 2}], {3}]
    for v in values:
        send.send_nowait(v)
    assert send.statistics().max_buffer_size == math.inf
    assert [recv.recv_nowait() for _ in values] == values


def test_open_channel_validates_maxsize():
    for bad in (-1, 1.5, True, "3", None):
        with pytest.raises(ValueError):
            asi.open_channel(bad)


# -- close, errors ------------------------------------------------------------------------


async def test_close_drains_then_ends():
    send, recv = asi.open_channel(10)
    for i in range(5):
        await send.send(i)
    await send.aclose()
    assert [x async for x in recv] == list(range(5))
    with pytest.raises(asi.EndOfChannel):
        await recv.recv()
    with pytest.raises(asi.EndOfChannel):
        recv.recv_nowait()


async def test_close_wakes_waiting_receivers():
    send, recv = asi.open_channel()
    waiters = [asyncio.create_task(recv.recv()) for _ in range(3)]
    await until(lambda: recv.statistics().tasks_waiting_receive == 3)
    send.close()
    for w in waiters:
        with pytest.raises(asi.EndOfChannel):
            await asyncio.wait_for(w, T)


async def test_closed_and_broken_errors():
    send, recv = asi.open_channel(1)
    send.close()
    send.close()  # idempotent
    with pytest.raises(asi.ChannelClosedError):
        await send.send(1)
    with pytest.raises(asi.ChannelClosedError):
        send.send_nowait(1)
    with pytest.raises(asi.ChannelClosedError):
        send.clone()
    assert isinstance(asi.ChannelClosedError("x"), RuntimeError)

    send, recv = asi.open_channel(0)
    blocked = asyncio.create_task(send.send(1))
    await until(lambda: send.statistics().tasks_waiting_send == 1)
    recv.close()
    with pytest.raises(asi.BrokenChannelError):
        await asyncio.wait_for(blocked, T)
    with pytest.raises(asi.BrokenChannelError):
        send.send_nowait(2)
    with pytest.raises(asi.ChannelClosedError):
        await recv.recv()
    assert isinstance(asi.BrokenChannelError("x"), RuntimeError)


async def test_broken_drops_buffered_items():
    send, recv = asi.open_channel(5)
    send.send_nowait(1)
    recv.close()
    assert send.statistics().current_buffer_used == 0
    with pytest.raises(asi.BrokenChannelError):
        await send.send(2)


async def test_sync_calls_refuse_the_loop_thread():
    send, recv = asi.open_channel()
    with pytest.raises(RuntimeError, match="await"):
        send.send_sync(1)
    with pytest.raises(RuntimeError, match="await"):
        recv.recv_sync()
    with pytest.raises(RuntimeError, match="await"):
        asi.select_sync(recv)


def test_sync_calls_refuse_a_loop_in_another_thread():
    send, recv = asi.open_channel()
    out = []

    async def main():
        for call in (lambda: send.send_sync(1), recv.recv_sync):
            try:
                call()
            except RuntimeError as exc:
                out.append("await" in str(exc))

    t = threading.Thread(target=asyncio.run, args=(main(),))
    t.start()
    t.join(T)
    assert out == [True, True]


def test_async_calls_need_a_loop():
    _send, recv = asi.open_channel()
    coro = recv.recv()
    with pytest.raises(RuntimeError, match="recv_sync"):
        coro.send(None)
    coro.close()


def test_sync_api_between_threads():
    send, recv = asi.open_channel(3)
    got: list[int] = []

    def consumer():
        got.extend(recv)

    t = threading.Thread(target=consumer)
    t.start()
    for i in range(200):
        send.send_sync(i, timeout=T)
    send.close()
    t.join(T)
    assert not t.is_alive()
    assert got == list(range(200))
    with pytest.raises(asi.EndOfChannel):
        recv.recv_sync(timeout=1)
    s2, r2 = asi.open_channel()
    with pytest.raises(TimeoutError):
        r2.recv_sync(timeout=0.01)
    with pytest.raises(TimeoutError):
        s2.send_sync(1, timeout=0.01)
    assert s2.statistics().tasks_waiting_send == 0  # withdrawn: nothing sent
    with pytest.raises(asi.WouldBlock):
        r2.recv_nowait()


async def test_thread_feeds_the_loop():
    send, recv = asi.open_channel(8)

    def producer():
        with send:
            for i in range(1000):
                send.send_sync(i, timeout=T)

    t = threading.Thread(target=producer)
    t.start()
    try:
        got = [x async for x in recv]
    finally:
        t.join(T)
    assert got == list(range(1000))


# -- clones ---------------------------------------------------------------------------------


async def test_clone_counting():
    send, recv = asi.open_channel(10)
    s2 = send.clone()
    r2 = recv.clone()
    stats = send.statistics()
    assert (stats.open_send_channels, stats.open_receive_channels) == (2, 2)
    send.close()
    s2.send_nowait("still open")
    assert await recv.recv() == "still open"
    s2.close()
    with pytest.raises(asi.EndOfChannel):
        await r2.recv()

    send, recv = asi.open_channel(10)
    r2 = recv.clone()
    recv.close()
    send.send_nowait(1)  # one receiver left: not broken
    assert r2.recv_nowait() == 1
    r2.close()
    with pytest.raises(asi.BrokenChannelError):
        send.send_nowait(2)


async def test_dropping_an_end_closes_it():
    send, recv = asi.open_channel(1)
    del send
    with pytest.raises(asi.EndOfChannel):
        await asyncio.wait_for(recv.recv(), T)


# -- select ---------------------------------------------------------------------------------


async def test_select_commits_exactly_one():
    a_send, a = asi.open_channel(5)
    b_send, b = asi.open_channel(5)
    a_send.send_nowait("a1")
    b_send.send_nowait("b1")
    idx, value = await asi.select(a, b)
    assert (idx, value) in ((0, "a1"), (1, "b1"))
    left = a if idx == 1 else b
    assert left.statistics().current_buffer_used == 1
    assert (a if idx == 0 else b).statistics().current_buffer_used == 0


async def test_select_waits_and_withdraws_the_rest():
    a_send, a = asi.open_channel(0)
    b_send, b = asi.open_channel(0)
    sel = asyncio.create_task(asi.select(a, b, timeout=T))
    await until(
        lambda: (
            a.statistics().tasks_waiting_receive == 1 and b.statistics().tasks_waiting_receive == 1
        )
    )
    b_send.send_nowait("b")
    assert a.statistics().tasks_waiting_receive == 0  # withdrawn from a at once
    with pytest.raises(asi.WouldBlock):
        a_send.send_nowait("a")  # nobody waits on a any more
    assert await asyncio.wait_for(sel, T) == (1, "b")


async def test_select_timeout_and_end():
    a_send, a = asi.open_channel(0)
    b_send, b = asi.open_channel(0)
    with pytest.raises(TimeoutError):
        await asi.select(a, b, timeout=0.01)
    with pytest.raises(TimeoutError):
        await asi.select(a, b, timeout=0)
    assert a.statistics().tasks_waiting_receive == 0
    b_send.close()
    with pytest.raises(asi.EndOfChannel) as info:
        await asi.select(a, b, timeout=T)
    assert info.value.index == 1
    with pytest.raises(TypeError):
        await asi.select(a_send)
    with pytest.raises(TypeError):
        await asi.select()


async def test_select_fairness_no_starvation():
    a_send, a = asi.open_channel(math.inf)
    b_send, b = asi.open_channel(math.inf)
    for i in range(100):
        a_send.send_nowait(i)
        b_send.send_nowait(i)
    seen = {0: 0, 1: 0}
    for _ in range(100):
        idx, _ = await asi.select(a, b)
        seen[idx] += 1
    assert seen[0] > 0 and seen[1] > 0


def test_select_sync_in_a_thread():
    _a_send, a = asi.open_channel(0)
    b_send, b = asi.open_channel(0)
    out = []
    t = threading.Thread(target=lambda: out.append(asi.select_sync(a, b, timeout=T)))
    t.start()
    b_send.send_sync("hello", timeout=T)
    t.join(T)
    assert out == [(1, "hello")]
    with pytest.raises(TimeoutError):
        asi.select_sync(a, b, timeout=0.01)


# -- cancellation -------------------------------------------------------------------------


async def test_cancelled_recv_puts_a_delivered_item_back():
    send, recv = asi.open_channel(0)
    receiver = asyncio.create_task(recv.recv())
    await until(lambda: recv.statistics().tasks_waiting_receive == 1)
    send.send_nowait("item")  # committed to the waiting receiver...
    receiver.cancel()  # ...which is cancelled before it could resume
    with pytest.raises(asyncio.CancelledError):
        await receiver
    assert recv.recv_nowait() == "item"  # back at the front: not lost


async def test_cancelled_select_puts_a_delivered_item_back():
    _a_send, a = asi.open_channel(0)
    b_send, b = asi.open_channel(0)
    sel = asyncio.create_task(asi.select(a, b))
    await until(lambda: b.statistics().tasks_waiting_receive == 1)
    b_send.send_nowait("item")
    sel.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sel
    assert b.recv_nowait() == "item"


async def test_cancelled_send_that_moved_returns_then_cancels():
    send, recv = asi.open_channel(0)
    steps = []

    async def sender():
        await send.send("item")
        steps.append("sent")
        await asyncio.sleep(0)
        steps.append("not reached")

    task = asyncio.create_task(sender())
    await until(lambda: send.statistics().tasks_waiting_send == 1)
    assert recv.recv_nowait() == "item"  # the item moves...
    task.cancel()  # ...then the sender is cancelled
    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps == ["sent"]  # send() reported the move; the next await was cancelled


async def test_cancelled_waiting_send_sends_nothing():
    send, recv = asi.open_channel(0)
    task = asyncio.create_task(send.send("item"))
    await until(lambda: send.statistics().tasks_waiting_send == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert send.statistics().tasks_waiting_send == 0
    with pytest.raises(asi.WouldBlock):
        recv.recv_nowait()


async def test_timeout_around_send_and_recv():
    send, recv = asi.open_channel(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await send.send(1)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await recv.recv()
    st = send.statistics()
    assert (st.tasks_waiting_send, st.tasks_waiting_receive, st.current_buffer_used) == (0, 0, 0)


@pytest.mark.parametrize("maxsize", [0, 3])
async def test_cancellation_storm_every_item_exactly_once(maxsize):
    rng = random.Random(1234 + maxsize)
    n_items = 600
    send, recv = asi.open_channel(maxsize)
    todo = list(range(n_items))
    received: list[int] = []
    producers: set[asyncio.Task] = set()
    consumers: set[asyncio.Task] = set()

    async def producer():
        while todo:
            item = todo.pop()
            try:
                await send.send(item)
            except asyncio.CancelledError:
                # CancelledError from send() means the item did not move.
                todo.append(item)
                raise

    async def consumer():
        while True:
            received.append(await recv.recv())

    async def selecting_consumer():
        while True:
            _, value = await asi.select(recv, timeout=T)
            received.append(value)

    def refill():
        while len(producers) < 4:
            t = asyncio.create_task(producer())
            producers.add(t)
            t.add_done_callback(producers.discard)
        while len(consumers) < 4:
            t = asyncio.create_task(rng.choice((consumer, selecting_consumer))())
            consumers.add(t)
            t.add_done_callback(consumers.discard)

    async def storm():
        while len(received) < n_items:
            refill()
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            victims = list(producers | consumers)
            rng.shuffle(victims)
            for t in victims[: rng.randint(0, 3)]:
                t.cancel()

    try:
        await asyncio.wait_for(storm(), T)
    finally:
        for t in producers | consumers:
            t.cancel()
        await asyncio.gather(*producers, *consumers, return_exceptions=True)
    assert sorted(received) == list(range(n_items))
    assert not todo
    st = recv.statistics()
    assert (st.tasks_waiting_send, st.tasks_waiting_receive, st.current_buffer_used) == (0, 0, 0)


# -- interpreters -------------------------------------------------------------------------


async def test_interpreter_producer_loop_consumer():
    async with asi.InterpreterPool(2) as pool:
        send, recv = asi.open_channel(4)
        task = pool.submit(chanfuncs.produce, send, 500)  # the worker closes `send`
        got = [x async for x in recv]
        assert got == list(range(500))
        assert await asyncio.wait_for(task, T) == 500


async def test_loop_producer_interpreter_consumer():
    async with asi.InterpreterPool(1) as pool:
        send, recv = asi.open_channel(0)
        task = pool.submit(chanfuncs.consume, recv)
        for i in range(300):
            await send.send(i)
        await send.aclose()
        assert await asyncio.wait_for(task, T) == list(range(300))


async def test_interpreters_talk_through_a_channel_and_errors_there():
    async with asi.InterpreterPool(2) as pool:
        send, recv = asi.open_channel(2)
        back_send, back_recv = asi.open_channel(2)
        echo = pool.submit(chanfuncs.echo_items, recv, back_send)
        values = [1, "two", (3,), b"4" * 100_000, {"five": 5}]
        for v in values:
            await send.send(v)
            assert await back_recv.recv() == v
        send.close()
        assert await asyncio.wait_for(echo, T) == len(values)
        with pytest.raises(asi.EndOfChannel):
            await back_recv.recv()
        s, r = asi.open_channel(0)
        errors = pool.submit(chanfuncs.try_errors, s, r)  # it closes s there: closed here too
        assert await asyncio.wait_for(errors, T) == ["wouldblock", "timeout", "closed", "end"]


async def test_channel_of_channels():
    async with asi.InterpreterPool(1) as pool:
        ends_send, ends_recv = asi.open_channel(1)
        data_send, data_recv = asi.open_channel(1)
        task = pool.submit(chanfuncs.recv_end_and_use, ends_recv)
        await ends_send.send(data_send)  # a send end travels through a channel
        tag, interp = await asyncio.wait_for(data_recv.recv(), T)
        assert tag == "from" and interp != asi._core.current_interpreter_id()
        assert await asyncio.wait_for(task, T) == "SendChannel"
        with pytest.raises(asi.EndOfChannel):
            await data_recv.recv()  # the worker closed the last send end
        # Ends inside a pickled container cross too. (A receive end of the
        # channel itself would be refused: tests/test_crossing_edge_cases.py.)
        s, r = asi.open_channel(1)
        s2, r2 = asi.open_channel(1)
        s.send_nowait([r2, {"k": s}])
        lst = r.recv_nowait()
        assert lst[0]._channel_id == r2._channel_id
        assert isinstance(lst[0], asi.RecvChannel) and isinstance(lst[1]["k"], asi.SendChannel)
        assert s.statistics().open_send_channels == 1  # the same end, not a clone
        lst[1]["k"].close()
        assert s.closed and data_send.closed
        s2.close()


async def test_select_sync_in_an_interpreter():
    async with asi.InterpreterPool(1) as pool:
        a_send, a = asi.open_channel(0)
        b_send, b = asi.open_channel(0)
        task = pool.submit(chanfuncs.select_two, a, b, 3)
        for i in range(3):
            await a_send.send(("a", i))
            await b_send.send(("b", i))
        a_send.close()
        b_send.close()
        got = await asyncio.wait_for(task, T)
    expected = [("a", i) for i in range(3)] + [("b", i) for i in range(3)]
    assert sorted(v for _, v in got) == sorted(expected)
    assert all((idx == 0) == (v[0] == "a") for idx, v in got)


async def test_interpreter_producers_with_cancelled_consumers():
    async with asi.InterpreterPool(2) as pool:
        send, recv = asi.open_channel(1)
        tasks = [pool.submit(chanfuncs.produce, send.clone(), 300) for _ in range(2)]
        send.close()
        received: list[int] = []
        rng = random.Random(7)

        async def consume():
            while True:
                received.append(await recv.recv())

        done = False
        while not done:
            c = asyncio.create_task(consume())
            for _ in range(rng.randint(0, 20)):
                await asyncio.sleep(0)
            c.cancel()
            try:
                await asyncio.wait_for(c, T)
            except asyncio.CancelledError:
                pass
            except asi.EndOfChannel:
                done = True
        await asyncio.wait_for(asyncio.gather(*tasks), T)
    assert sorted(received) == sorted(list(range(300)) * 2)


async def test_cancelling_a_worker_blocked_in_recv_sync():
    async with asi.InterpreterPool(1, cancel_grace=T) as pool:
        send, recv = asi.open_channel(0)
        task = pool.submit(chanfuncs.recv_block, recv)
        await until(lambda: recv.statistics().tasks_waiting_receive == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: recv.statistics().tasks_waiting_receive == 0)
        # The worker was interrupted, not replaced, and still serves tasks.
        receiver = pool.submit(chanfuncs.recv_one, recv)
        await send.send("after")
        assert await asyncio.wait_for(receiver, T) == "after"
        assert pool.statistics()["replaced"] == 0


async def test_peer_interpreter_dies_receiver_side():
    pool = asi.InterpreterPool(1)
    send, recv = asi.open_channel(0)
    assert await pool.run(chanfuncs.keep, "recv", recv)
    del recv  # the only copy of the receive end left lives in the worker's module state
    blocked = asyncio.create_task(send.send("lost?"))
    await until(lambda: send.statistics().tasks_waiting_send == 1)
    await pool.aclose()  # destroys the interpreter: the last copy goes, the end counts as closed
    with pytest.raises(asi.BrokenChannelError):
        await asyncio.wait_for(blocked, T)


async def test_peer_interpreter_dies_sender_side():
    pool = asi.InterpreterPool(1)
    send, recv = asi.open_channel(4)
    assert await pool.run(chanfuncs.send_keep_forever, send, "first")
    del send  # the worker keeps the only copy
    assert await recv.recv() == "first"
    waiting = asyncio.create_task(recv.recv())
    await until(lambda: recv.statistics().tasks_waiting_receive == 1)
    await pool.aclose()
    with pytest.raises(asi.EndOfChannel):
        await asyncio.wait_for(waiting, T)


def test_loop_gone_while_receiving_loses_nothing():
    send, recv = asi.open_channel(0)

    async def abandon():
        task = asyncio.create_task(recv.recv())
        await until(lambda: recv.statistics().tasks_waiting_receive == 1)
        return task

    loop = asyncio.new_event_loop()
    try:
        task = loop.run_until_complete(abandon())
        loop.run_until_complete(loop.shutdown_asyncgens())  # closes the loop's hub
        # The receiver's loop is gone: a send must not hand it the item.
        with pytest.raises(asi.WouldBlock):
            send.send_nowait("kept")
        assert recv.statistics().tasks_waiting_receive == 0
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    finally:
        loop.close()


# -- examples -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("stream_channel.py", "received 1000 items, sum 499500"),
        ("select_fanin.py", "fan-in done"),
        ("fanin_clone.py", "sum of 3000 items: 4498500"),
    ],
)
def test_examples_run(name, expected):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", name)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout


def test_dumps_of_a_channel_end_does_not_keep_it_open():
    from aiosubinterp import _core

    send, recv = asi.open_channel(math.inf)
    blob = _core.dumps((send, 1))
    del send
    # The copy the encoding took was dropped with the blob: the channel ended.
    with pytest.raises(asi.EndOfChannel):
        recv.recv_nowait()
    with pytest.raises(ValueError, match="channel ends"):
        _core.loads(blob)
    recv.close()


def test_an_undelivered_item_closes_the_ends_it_carries():
    outer_send, outer_recv = asi.open_channel(math.inf)
    inner_send, inner_recv = asi.open_channel(math.inf)
    outer_send.send_nowait(("reply_to", inner_send))
    del inner_send
    with pytest.raises(asi.WouldBlock):
        inner_recv.recv_nowait()  # the copy inside the queued item is still open
    outer_recv.close()  # nobody can receive the item now: it is dropped, with its end
    with pytest.raises(asi.EndOfChannel):
        inner_recv.recv_nowait()
    outer_send.close()
    inner_recv.close()


def test_nested_undelivered_items_close_every_end_they_carry():
    a_send, a_recv = asi.open_channel(math.inf)
    b_send, b_recv = asi.open_channel(math.inf)
    c_send, c_recv = asi.open_channel(math.inf)
    b_send.send_nowait(c_send)  # b holds an end of c
    a_send.send_nowait((b_send, b_recv))  # a holds both ends of b
    del b_send, b_recv, c_send
    a_recv.close()  # drops a's item -> b's ends -> b's item -> c's send end
    with pytest.raises(asi.EndOfChannel):
        c_recv.recv_nowait()
    a_send.close()
    c_recv.close()
