"""Zero-copy buffers, shared memory, fd passing and refusals."""

from __future__ import annotations

import array
import asyncio
import gc
import math
import mmap
import os
import socket

import buffuncs
import pytest
import workfuncs

import aiosubinterp as asi
from aiosubinterp import _core

BIG = _core.SHARE_THRESHOLD


async def settle_shares(expected_live: int = 0, timeout: float = 30.0) -> tuple:
    """Wait (bounded) until released shares came home; returns the last stats."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        gc.collect()
        stats = _core.share_stats()
        if stats[0] <= expected_live or loop.time() > deadline:
            return stats
        await asyncio.sleep(0.005)


def rss_kib(key: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key}")


def reset_peak_rss() -> bool:
    """Make VmHWM (peak RSS) restart from the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


async def test_small_buffers_are_copied_with_their_type():
    async with asi.InterpreterPool(1) as pool:
        small = b"\x01" * (BIG - 1)
        assert await pool.run(workfuncs.echo, small) == small
        assert type(await pool.run(workfuncs.echo, small)) is bytes
        arr = array.array("i", range(10))
        assert await pool.run(workfuncs.echo, arr) == arr
        assert type(await pool.run(workfuncs.echo, bytearray(b"ab"))) is bytearray


@pytest.mark.parametrize(
    "make",
    [
        lambda: b"\x03" * BIG,
        lambda: bytearray(b"\x03") * BIG,
        lambda: memoryview(b"\x03" * (BIG * 2))[BIG:],
        lambda: array.array("b", b"\x03" * BIG),
    ],
    ids=["bytes", "bytearray", "memoryview", "array"],
)
async def test_large_buffers_cross_zero_copy_read_only(make):
    data = make()
    address = _core.buffer_address(data)
    async with asi.InterpreterPool(1) as pool:
        kind, readonly, seen, size = await pool.run(buffuncs.describe, data)
        expected = ("memoryview", True, address, memoryview(data).nbytes)
        assert (kind, readonly, seen, size) == expected
        back = await pool.run(workfuncs.echo, data)
        assert type(back) is memoryview and back.readonly
        assert _core.buffer_address(back) == address  # the echo is the same memory too
        assert back == memoryview(data).cast("B")
        del back
    assert (await settle_shares())[0] == 0


async def test_mmap_is_shared_at_any_size():
    with mmap.mmap(-1, 4096) as m:
        m[:5] = b"hello"
        async with asi.InterpreterPool(1) as pool:
            kind, readonly, seen, size = await pool.run(buffuncs.describe, m)
            assert (kind, readonly, size) == ("memoryview", True, 4096)
            assert seen == _core.buffer_address(m)
        assert (await settle_shares())[0] == 0


async def test_share_writable_hands_over_memory():
    data = bytearray(16)
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(buffuncs.write, asi.share(data, writable=True), 3, 42) == 42
        assert data[3] == 42  # written through the same memory
        with pytest.raises(TypeError):
            await pool.run(buffuncs.write, asi.share(data), 3, 1)  # read-only by default
    assert (await settle_shares())[0] == 0


async def test_share_refuses_non_buffers_at_call_site():
    with pytest.raises(TypeError):
        asi.share([1, 2, 3])


async def test_writable_share_of_readonly_object_is_refused():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match="argument 0"):
            await pool.run(workfuncs.echo, asi.share(b"abc", writable=True))


async def test_64mib_echo_does_not_copy():
    payload = bytes(64 * 1024 * 1024)
    async with asi.InterpreterPool(1) as pool:
        await pool.run(workfuncs.echo, b"warm up" * BIG)
        before = rss_kib()
        peak = reset_peak_rss()
        back = await pool.run(workfuncs.echo, payload)
        grown = rss_kib("VmHWM" if peak else "VmRSS") - before
        assert _core.buffer_address(back) == _core.buffer_address(payload)
        assert grown < 16 * 1024, f"peak RSS grew {grown} KiB during a 64 MiB echo"
        del back
    assert (await settle_shares())[0] == 0


async def test_slice_kept_after_task_keeps_owner_memory_locked():
    data = bytearray(b"\x09") * BIG
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(buffuncs.keep_slice, data) == 1
        # The worker still holds a slice: the bytearray stays export-locked.
        with pytest.raises(BufferError):
            data.extend(b"x")
        assert await pool.run(buffuncs.drop_kept) == 0
        await settle_shares()
        data.extend(b"x")  # released under main's GIL: resizable again
        assert await pool.run(len, data) == BIG + 1
    assert (await settle_shares())[0] == 0


async def test_worker_owned_result_outlives_the_worker():
    async with asi.InterpreterPool(1) as pool:
        view = await pool.run(buffuncs.make_bytes, BIG * 4, 11)
        part = view[100:200]
        del view
    # The interpreter that owned the memory is destroyed; the slice still reads it.
    assert part.tobytes() == bytes([11]) * 100
    orphans = _core.share_stats()[1]
    del part
    # Its last reference is gone: the record is freed, the dead owner's object leaked.
    assert await settle_shares() == (0, orphans + 1, 0)


async def test_views_kept_in_worker_after_main_dropped_everything():
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(buffuncs.keep, b"\x02" * BIG) == 1
        gc.collect()
        assert await pool.run(buffuncs.keep_slice, bytearray(BIG)) == 2
    # The worker (holding the views) was destroyed first: its releases came home.
    assert (await settle_shares())[0] == 0


async def test_thousands_of_transfers_do_not_leak():
    data = b"\x01" * BIG
    async with asi.InterpreterPool(2) as pool:
        for _ in range(10):
            results = await asyncio.gather(*(pool.run(workfuncs.echo, data) for _ in range(200)))
            assert all(len(r) == BIG for r in results)
            del results
        worker_made = [await pool.run(buffuncs.make_bytes, BIG) for _ in range(200)]
        del worker_made
        assert (await settle_shares())[0] == 0


async def test_withdrawn_job_releases_its_share():
    data = b"\x01" * BIG
    async with asi.InterpreterPool(1) as pool:
        blocker = pool.submit(workfuncs.spin, 2_000_000)
        task = pool.submit(workfuncs.echo, data)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await blocker
    assert (await settle_shares())[0] == 0


async def test_shared_buffer_and_lock_across_interpreters():
    buf = asi.SharedBuffer(64)
    lock = asi.SharedLock()
    async with asi.InterpreterPool(2) as pool:
        echoed = await pool.run(workfuncs.echo, buf)
        assert type(echoed) is asi.SharedBuffer and echoed.address == buf.address
        await asyncio.gather(
            *(pool.run(buffuncs.add_under_lock, buf, lock, 2000) for _ in range(4))
        )
        assert int.from_bytes(buf[0:8], "little") == 8000
        assert await pool.run(buffuncs.write, buf, 20, 99) == 99
        assert buf[20] == 99
    del echoed
    assert _core.share_stats()[2] == 2  # buf and lock, now held only here
    del buf, lock
    assert _core.share_stats()[2] == 0


def test_shared_lock_semantics():
    lock = asi.SharedLock()
    assert lock.acquire()
    assert lock.locked()
    assert not lock.acquire(blocking=False)
    assert not lock.acquire(timeout=0.01)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    with lock:
        assert lock.locked()


async def test_fd_passing():
    r, w = os.pipe()
    try:
        async with asi.InterpreterPool(1) as pool:
            assert await pool.run(buffuncs.write_fd, asi.FileDescriptor(w), b"ping") == 4
        os.close(w)
        assert os.read(r, 10) == b"ping"
    finally:
        os.close(r)


async def test_socket_passing():
    a, b = socket.socketpair()
    with a, b:
        async with asi.InterpreterPool(1) as pool:
            assert await pool.run(buffuncs.sock_send, b, b"hello") == 5
        b.close()  # ours; the worker had a duplicate and closed it
        assert a.recv(10) == b"hello"
        assert a.recv(10) == b""


async def test_withdrawn_fd_is_closed():
    # The autouse no_leaks fixture fails the test if the duplicate stays open.
    r, w = os.pipe()
    os.close(r)
    async with asi.InterpreterPool(1) as pool:
        blocker = pool.submit(workfuncs.spin, 2_000_000)
        task = pool.submit(workfuncs.echo, asi.FileDescriptor(w))
        task.cancel()
        try:
            fd = await task
            os.close(fd)
        except asyncio.CancelledError:
            pass
        await blocker
    os.close(w)


async def test_refusals_name_the_part():
    a, b = socket.socketpair()
    b.close()
    with a:
        async with asi.InterpreterPool(1) as pool:
            with pytest.raises(asi.NotShareableError, match="argument 1"):
                await pool.run(workfuncs.echo, 1, b)
            with pytest.raises(asi.NotShareableError, match="keyword argument 'x'"):
                await pool.run(workfuncs.echo, x=asi.FileDescriptor(10**6))
    with pytest.raises(ValueError):
        asi.FileDescriptor(-1)


async def test_pickle5_out_of_band_buffers_are_shared():
    blob = buffuncs.Blob(bytearray(b"\x04") * BIG)
    async with asi.InterpreterPool(1) as pool:
        kind, address = await pool.run(buffuncs.blob_address, blob)
        assert kind == "memoryview" and address == _core.buffer_address(blob.data)
    assert (await settle_shares())[0] == 0


def test_native_list_and_dict_round_trip():
    values = [
        [1, "a", None, 2.5, (True, b"x")],
        {"a": 1, "b": 2.5, 3: (4, "5")},
        [1, "a", None, 2.5, [True, b"x"]],
        {"a": 1, "b": {"c": [1, 2]}, 3: (4, 5)},
        [],
        {},
        {1: [], "k": {}},
    ]
    for v in values:
        assert _core.roundtrip(v) == v
        assert type(_core.roundtrip(v)) is type(v)
    shared = [1]
    v = [shared, shared]
    back = _core.roundtrip(v)  # not natively copyable (shared reference): pickled
    assert back[0] is back[1]


async def test_large_channel_items_are_zero_copy():
    send, recv = asi.open_channel()
    data = b"\x06" * BIG
    async with asi.InterpreterPool(1) as pool:
        task = pool.submit(buffuncs.sum_channel, recv)
        for _ in range(20):
            await send.send(data)
        send.close()
        assert await task == 20 * BIG
    recv.close()
    assert (await settle_shares())[0] == 0


async def test_items_nobody_can_receive_release_their_shares():
    send, recv = asi.open_channel(maxsize=math.inf)
    for _ in range(5):
        await send.send(b"\x08" * BIG)
    r, w = os.pipe()
    os.close(r)
    await send.send(asi.FileDescriptor(w))
    os.close(w)
    assert _core.share_stats()[0] == 5
    recv.close()  # the last receiver: the queued items are dropped
    send.close()
    assert (await settle_shares())[0] == 0  # and the fd duplicate is closed (no_leaks fixture)


def test_dumps_output_never_loads_dropped_references():
    data = _core.dumps(b"\x01" * BIG)  # the share it took is dropped at once
    assert _core.share_stats()[0] == 0
    with pytest.raises(ValueError, match="dumps"):
        _core.loads(data)
    assert _core.loads(_core.dumps(b"small")) == b"small"


async def test_refusal_names_the_nested_part():
    a, b = socket.socketpair()
    b.close()
    with a:
        async with asi.InterpreterPool(1) as pool:
            with pytest.raises(
                asi.NotShareableError,
                match=r"argument 0 of echo\(\) \(dict\), at \['k'\]\[1\] "
                r"\(socket\)",
            ):
                await pool.run(workfuncs.echo, {"k": [1, b]})


async def test_server_hands_a_connection_to_a_worker():
    async with asi.InterpreterPool(1) as pool:
        handed = asyncio.Event()

        async def on_connect(reader, writer):
            # What a uvloop/asyncio server does: give the connection to a worker.
            await pool.run(buffuncs.sock_send, writer.get_extra_info("socket"), b"from a worker")
            writer.close()
            await writer.wait_closed()
            handed.set()

        # Sockets made here: a host name would make uvloop start libuv's
        # resolver threads, which outlive the test.
        listener = socket.create_server(("127.0.0.1", 0))
        server = await asyncio.start_server(on_connect, sock=listener)
        async with server:
            client = socket.create_connection(listener.getsockname())
            reader, writer = await asyncio.open_connection(sock=client)
            assert await reader.read() == b"from a worker"
            await handed.wait()
            writer.close()
            await writer.wait_closed()


async def test_non_contiguous_view_is_refused_with_reason():
    view = memoryview(bytearray(BIG * 2))[::2]
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match=r"argument 0 .*contiguous"):
            await pool.run(workfuncs.echo, view)


async def test_channel_items_are_the_senders_memory():
    send, recv = asi.open_channel(maxsize=math.inf)
    items = [bytes([i]) * BIG for i in range(3)]
    async with asi.InterpreterPool(1) as pool:
        task = pool.submit(buffuncs.addresses_from, recv)
        for item in items:
            await send.send(item)
        send.close()
        assert await task == [_core.buffer_address(item) for item in items]
    recv.close()
    assert (await settle_shares())[0] == 0


async def test_worker_to_worker_buffers_through_a_channel():
    send, recv = asi.open_channel(maxsize=2)
    async with asi.InterpreterPool(2) as pool:
        consumer = pool.submit(buffuncs.consume, recv)
        producer = pool.submit(buffuncs.produce, send, 300, BIG)  # it closes `send`
        assert await producer == 300
        assert await consumer == (300, 300 * BIG, True)
        # The producer (owner) released everything while idle.
        assert (await settle_shares())[0] == 0


async def test_failed_encodings_drop_the_shares_they_took():
    data = b"\x01" * BIG
    send, recv = asi.open_channel(maxsize=math.inf)
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match="argument 1"):
            await pool.run(workfuncs.echo, data, lambda: 0)
        with pytest.raises(asi.NotShareableError):
            await pool.run(buffuncs.unsendable_with_view, data)  # the result cannot go back
        with pytest.raises(asi.NotShareableError):
            await send.send((data, lambda: 0))
    send.close()
    recv.close()
    assert (await settle_shares())[0] == 0
