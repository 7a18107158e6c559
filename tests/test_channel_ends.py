"""Channel ends crossing to workers: one end, many holders (and what each holder may do).

The rule: an end passed to a worker (as an argument, a result, or through a
channel) is the same end; close() there closes it for every holder; clone()
is the one way to an independently closable end; an end whose every copy is
dropped without close() counts as closed. Plus the memory-safety review of
2026-12-03 (findings #2, #4, #5, #9, #10): every test here failed (or hung,
bounded by a timeout) before the fix.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import math
import os
import pickle
import socket
import subprocess
import sys
import textwrap

import chanfuncs
import pytest

import aiosubinterp as asi
from aiosubinterp import _core

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = 30  # bound on every wait: a regression fails instead of hanging


def pool_of(kind: str, size: int = 1):
    return asi.InterpreterPool(size) if kind == "interpreters" else asi.ProcessPool(size)


@pytest.fixture(params=["interpreters", "processes"])
def kind(request) -> str:
    return request.param


async def collect(recv) -> list:
    async def run():
        return [x async for x in recv]

    return await asyncio.wait_for(run(), T)


def assert_ended(recv) -> None:
    """The channel has ended: every copy of every send end is closed or gone."""
    gc.collect()
    with pytest.raises(asi.EndOfChannel):
        recv.recv_nowait()


def assert_open(recv) -> None:
    with pytest.raises(asi.WouldBlock):
        recv.recv_nowait()


# -- 1. the producer closes: the natural code ends (sharp edges, section 1) -------------------


async def test_producer_closes_the_end_it_was_passed(kind):
    send, recv = asi.open_channel(64)
    async with pool_of(kind) as pool:
        task = pool.submit(chanfuncs.produce_plain, send, 200)
        assert await collect(recv) == list(range(200))  # hung here before: main's send was open
        assert await task == 200
        assert send.closed  # the same end: closed for us too


async def test_sync_loop_in_a_worker_ends_when_another_worker_closes(kind):
    send, recv = asi.open_channel(8)
    async with pool_of(kind, 2) as pool:
        consumer = pool.submit(chanfuncs.consume_sum, recv)
        producer = pool.submit(chanfuncs.produce_plain, send, 100)
        assert await asyncio.wait_for(consumer, T) == sum(range(100))
        assert await producer == 100


async def test_an_end_received_through_a_channel_is_the_same_end(kind):
    ends_send, ends_recv = asi.open_channel(1)
    send, recv = asi.open_channel(1)
    async with pool_of(kind) as pool:
        task = pool.submit(chanfuncs.recv_end_and_use, ends_recv)
        await ends_send.send(send)  # kept open here; the worker closes it there
        tag, _ = await asyncio.wait_for(recv.recv(), T)
        assert tag == "from"
        with pytest.raises(asi.EndOfChannel):
            await asyncio.wait_for(recv.recv(), T)
        assert (await task).endswith("SendChannel")
        assert send.closed


async def test_an_end_returned_as_a_result_is_the_same_end(kind):
    send, recv = asi.open_channel(4)
    async with pool_of(kind) as pool:
        back = await pool.run(chanfuncs.identity, send)
        assert isinstance(back, asi.SendChannel) and not back.closed
        back.send_nowait(1)
        back.close()
        assert send.closed
        assert await collect(recv) == [1]
        # Closing in the worker: the caller's end is closed at once.
        s2, r2 = asi.open_channel(1)
        assert await pool.run(chanfuncs.close_it, r2) is True
        assert r2.closed
        with pytest.raises(asi.BrokenChannelError):
            s2.send_nowait("nobody")


async def test_ends_opened_in_an_interpreter_come_back_open():
    async with asi.InterpreterPool(1) as pool:
        send, recv = await pool.run(chanfuncs.open_and_return)
        # The worker's copies died with its task; ours are the last ones: open.
        assert not send.closed and not recv.closed
        assert recv.recv_nowait() == "hello from a worker"
        send.close()
        assert_ended(recv)


async def test_a_worker_dropping_its_copy_does_not_close_ours(kind):
    send, recv = asi.open_channel(4)
    async with pool_of(kind) as pool:
        assert await pool.run(chanfuncs.drop_it, send) is False
        assert not send.closed
        assert recv.statistics().open_send_channels == 1
        send.send_nowait("still open")
        assert recv.recv_nowait() == "still open"
        del send  # the last copy gone: counts as closed
        assert_ended(recv)


async def test_clone_fan_in(kind):
    send, recv = asi.open_channel(4)
    async with pool_of(kind, 2) as pool:
        producers = [pool.submit(chanfuncs.produce_plain, send.clone(), 50) for _ in range(3)]
        send.close()  # ours only: each producer holds its own clone
        assert sorted(await collect(recv)) == sorted(list(range(50)) * 3)
        assert await asyncio.gather(*producers) == [50, 50, 50]


async def test_clone_fan_out_with_sync_loops():
    send, recv = asi.open_channel(4)
    async with asi.InterpreterPool(2) as pool:
        consumers = [pool.submit(chanfuncs.consume_sum, recv.clone()) for _ in range(2)]
        recv.close()  # ours only
        for i in range(100):
            await send.send(i)
        await send.aclose()
        assert sum(await asyncio.gather(*consumers)) == sum(range(100))


async def test_relay_between_workers_ends_cleanly(kind):
    a_send, a_recv = asi.open_channel(4)
    b_send, b_recv = asi.open_channel(1)
    async with pool_of(kind, 2) as pool:
        relay = pool.submit(chanfuncs.relay_sum, a_recv, b_send)
        producer = pool.submit(chanfuncs.produce_plain, a_send, 30)
        assert await collect(b_recv) == [sum(range(30))]
        assert await relay == sum(range(30)) and await producer == 30


# -- review #4: ends not made by open_channel() ---------------------------------------------


def test_ends_cannot_be_built_directly():
    with pytest.raises(TypeError, match="open_channel"):
        asi.SendChannel()
    with pytest.raises(TypeError, match="open_channel"):
        asi.RecvChannel()


def test_bare_ends_are_refused_everywhere_in_a_child_process():
    """Once a segfault (rc 139): a bare end as a task argument, in select, in a send."""
    code = textwrap.dedent("""
        import asyncio, pickle
        import aiosubinterp as asi

        bare_s = asi.SendChannel.__new__(asi.SendChannel)
        bare_r = asi.RecvChannel.__new__(asi.RecvChannel)
        out = []

        def attempt(name, fn):
            try:
                fn()
            except TypeError as exc:
                out.append(name + ": " + str(exc))

        attempt("recv_nowait", bare_r.recv_nowait)
        attempt("select_sync", lambda: asi.select_sync(bare_r, timeout=0))
        s, r = asi.open_channel(4)
        attempt("send", lambda: s.send_nowait(bare_s))
        attempt("send nested", lambda: s.send_nowait([bare_s, object]))
        attempt("dumps", lambda: asi._core.dumps(bare_s))
        assert bare_s.closed and repr(bare_s)

        async def main():
            async with asi.InterpreterPool(1) as pool:
                try:
                    await pool.run(len, bare_s)
                except TypeError as exc:
                    out.append("pool.run: " + str(exc))
            async with asi.ProcessPool(1) as pool:
                try:
                    await pool.run(len, bare_s)
                except TypeError as exc:
                    out.append("process pool.run: " + str(exc))

        asyncio.run(main())
        print("\\n".join(out))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "recv_nowait",
        "select_sync",
        "send",
        "send nested",
        "dumps",
        "pool.run",
        "process pool.run",
    ]
    assert all("was not made by aiosubinterp.open_channel()" in line for line in lines), lines


# -- review #2: items nobody will decode drop what they carry ---------------------------------


def test_refused_send_nowait_drops_the_end_it_carried():
    tx, _rx = asi.open_channel()  # rendezvous: no receiver waiting
    rtx, rrx = asi.open_channel(1)
    with pytest.raises(asi.WouldBlock):
        tx.send_nowait(rtx)
    del rtx  # our copy was the last one: the refused item must not keep a copy
    assert_ended(rrx)


def test_send_on_a_broken_or_closed_channel_drops_the_end_it_carried():
    tx, rx = asi.open_channel(4)
    rx.close()
    rtx, rrx = asi.open_channel(1)
    with pytest.raises(asi.BrokenChannelError):
        tx.send_nowait(("reply", rtx))
    tx.close()
    with pytest.raises(asi.ChannelClosedError):
        tx.send_nowait(("reply", rtx))
    del rtx
    assert_ended(rrx)


def test_timed_out_send_sync_drops_the_end_it_carried():
    tx, _rx = asi.open_channel()
    rtx, rrx = asi.open_channel(1)
    with pytest.raises(TimeoutError):
        tx.send_sync(rtx, timeout=0.01)
    del rtx
    assert_ended(rrx)


async def test_cancelled_send_drops_the_end_it_carried():
    tx, _rx = asi.open_channel()
    rtx, rrx = asi.open_channel(1)
    sending = asyncio.create_task(tx.send(rtx))
    while tx.statistics().tasks_waiting_send == 0:
        await asyncio.sleep(0)
    sending.cancel()
    await asyncio.wait([sending])  # not `await sending`: its traceback would keep rtx alive
    assert sending.cancelled()
    del sending, rtx
    assert_ended(rrx)


async def test_put_back_with_every_receiver_gone_drops_the_end_it_carried():
    tx, rx = asi.open_channel()
    rtx, rrx = asi.open_channel(1)
    receiving = asyncio.create_task(rx.recv())
    while rx.statistics().tasks_waiting_receive == 0:
        await asyncio.sleep(0)
    tx.send_nowait(rtx)  # handed to the waiting receiver's op
    rx.close()  # nobody could take it back now
    receiving.cancel()  # the op puts it back: dropped instead
    await asyncio.wait([receiving])
    assert receiving.cancelled()
    del receiving, rtx
    assert_ended(rrx)


def test_refused_sends_close_their_fds_and_release_their_shares():
    tx, _rx = asi.open_channel()
    live = _core.share_stats()[0]
    before = set(os.listdir("/proc/self/fd"))
    a, b = socket.socketpair()
    with a, b:
        for _ in range(5):
            with pytest.raises(asi.WouldBlock):
                tx.send_nowait((b, asi.FileDescriptor(a.fileno())))
            with pytest.raises(TimeoutError):
                tx.send_sync(b, timeout=0.001)
    assert set(os.listdir("/proc/self/fd")) == before  # no duplicate left open
    big = b"\x01" * (_core.SHARE_THRESHOLD * 2)
    with pytest.raises(asi.WouldBlock):
        tx.send_nowait(big)
    with pytest.raises(asi.WouldBlock):
        tx.send_nowait(bytearray(big))
    assert _core.share_stats()[0] == live


# -- review #5: pickling an end ------------------------------------------------------------


def test_plain_pickling_of_an_end_is_refused():
    send, recv = asi.open_channel(1)
    for end in (send, recv):
        with pytest.raises(TypeError, match=r"cannot pickle .* channel end crosses only"):
            pickle.dumps(end)
        with pytest.raises(TypeError, match="cannot pickle"):
            pickle.dumps({"inside": [end]})
        with pytest.raises(TypeError):
            copy.copy(end)
    # Nothing was counted by the refused attempts: dropping ours ends the channel.
    assert send.statistics().open_send_channels == 1
    del send
    assert_ended(recv)


def test_an_old_style_handle_pickle_is_refused():
    with pytest.raises(TypeError, match="cannot be unpickled"):
        _core._adopt_end(12345678, 1)


async def test_ends_inside_pickled_objects_cross_as_the_same_end(kind):
    send, recv = asi.open_channel(4)
    box = chanfuncs.Boxed(send=send, again=send)
    # Through a channel, inside one interpreter.
    s, r = asi.open_channel(1)
    s.send_nowait(box)
    got = r.recv_nowait()
    assert got.ends["send"] is got.ends["again"]
    assert recv.statistics().open_send_channels == 1
    got.ends["send"].close()
    assert send.closed
    # To a worker, inside an object argument.
    send, recv = asi.open_channel(4)
    async with pool_of(kind) as pool:
        assert await pool.run(chanfuncs.close_boxed, chanfuncs.Boxed(x=send)) is True
        assert send.closed
        send, recv = asi.open_channel(4)
        task = pool.submit(chanfuncs.produce_boxed, chanfuncs.Boxed(x=send), 3)
        assert await collect(recv) == [0, 1, 2]
        await task


def test_ends_inside_a_dropped_pickled_item_are_dropped():
    outer_send, outer_recv = asi.open_channel(math.inf)
    inner_send, inner_recv = asi.open_channel(math.inf)
    outer_send.send_nowait(chanfuncs.Boxed(reply_to=inner_send))
    del inner_send
    assert_open(inner_recv)  # the copy inside the queued item
    outer_recv.close()  # the item is dropped, and its end with it
    assert_ended(inner_recv)


def test_a_failed_encode_keeps_no_copy_of_the_ends_before_the_failure():
    tx, _rx = asi.open_channel(4)
    rtx, rrx = asi.open_channel(1)
    with pytest.raises(asi.NotShareableError):
        tx.send_nowait([rtx, lambda: 0])
    with pytest.raises(asi.NotShareableError):
        tx.send_nowait((rtx, chanfuncs.Boxed(f=lambda: 0)))
    assert _core.dumps([rtx, chanfuncs.Boxed(f=rtx)])  # dumps keeps no copy either
    del rtx
    assert_ended(rrx)


# -- review #9: a decode that fails half way --------------------------------------------------


async def test_a_task_whose_arguments_fail_to_decode_drops_the_rest(kind):
    send, recv = asi.open_channel(4)
    async with pool_of(kind) as pool:
        with pytest.raises(ValueError, match="Exploding"):
            await pool.run(chanfuncs.identity, (chanfuncs.Exploding(), send))
    del send  # the worker never adopted its copy: it must not stay counted
    assert_ended(recv)


def test_an_item_that_fails_to_decode_drops_the_rest():
    tx, rx = asi.open_channel(4)
    rtx, rrx = asi.open_channel(1)
    fd_before = set(os.listdir("/proc/self/fd"))
    a, b = socket.socketpair()
    with a, b:
        tx.send_nowait((chanfuncs.Exploding(), rtx, b))
    with pytest.raises(ValueError, match="Exploding"):
        rx.recv_nowait()
    assert set(os.listdir("/proc/self/fd")) == fd_before
    del rtx
    assert_ended(rrx)
    # A failing pickle with ends of its own ('E' then the pickle): they are dropped too.
    rtx, rrx = asi.open_channel(1)
    tx.send_nowait(chanfuncs.Boxed(end=rtx, bad=chanfuncs.Exploding()))
    with pytest.raises(ValueError, match="Exploding"):
        rx.recv_nowait()
    del rtx
    assert_ended(rrx)


# -- review #10: worker-owned shares released while the task runs -----------------------------


async def test_a_long_task_streaming_big_chunks_does_not_pin_them():
    send, recv = asi.open_channel(0)
    done_send, done_recv = asi.open_channel(1)
    ack_send, ack_recv = asi.open_channel(1)
    n, size = 24, _core.SHARE_THRESHOLD * 2
    async with asi.InterpreterPool(1) as pool:
        task = pool.submit(chanfuncs.stream_big_chunks, send, done_send, ack_recv, n, size)
        del send  # the worker holds the only copy now (and closes it)

        async def drain() -> int:
            count = 0
            async for chunk in recv:
                assert len(chunk) == size
                count += 1
                del chunk
            return count

        assert await asyncio.wait_for(drain(), T) == n
        assert await asyncio.wait_for(done_recv.recv(), T) == "sent"
        # The task still runs: the chunks we dropped must not all be pinned by it.
        assert _core.share_stats()[0] <= 3
        await ack_send.send("go")
        assert await asyncio.wait_for(task, T) <= 3


# -- a close by another holder wakes the holders blocked in the same end -------------------------


async def test_closing_an_end_wakes_a_worker_blocked_in_it():
    send, recv = asi.open_channel(0)
    other = recv.clone()  # the channel keeps a receiver: only the closed end's waiters wake
    async with asi.InterpreterPool(1) as pool:
        task = pool.submit(chanfuncs.recv_until_closed, recv)
        while send.statistics().tasks_waiting_receive == 0:
            await asyncio.sleep(0.001)
        recv.close()
        assert await asyncio.wait_for(task, T) == "closed"
    assert other.statistics().open_receive_channels == 1


async def test_closing_an_end_wakes_an_awaiting_sender_of_the_same_end():
    send, recv = asi.open_channel(0)
    sending = asyncio.create_task(send.send("x"))
    while send.statistics().tasks_waiting_send == 0:
        await asyncio.sleep(0)
    keep = send.clone()  # a sender is left: only the closed end's waiters wake
    send.close()
    with pytest.raises(asi.ChannelClosedError):
        await asyncio.wait_for(sending, T)
    assert keep.statistics().tasks_waiting_send == 0
    keep.close()
    assert_ended(recv)


def test_statistics_is_a_frozen_dataclass():
    # Code turns it into JSON with dataclasses.asdict (the web examples do).
    import dataclasses

    send, recv = asi.open_channel(2)
    send.send_nowait(1)
    stats = recv.statistics()
    assert dataclasses.asdict(stats) == {
        "current_buffer_used": 1,
        "max_buffer_size": 2,
        "open_send_channels": 1,
        "open_receive_channels": 1,
        "tasks_waiting_send": 0,
        "tasks_waiting_receive": 0,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.current_buffer_used = 5  # type: ignore[misc]
    send.close()
    recv.close()
