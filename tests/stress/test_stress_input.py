"""Bad input gets its own clear error at the call site; generated values round-trip exactly."""

from __future__ import annotations

import asyncio
import math
import socket
import threading

import pytest
import stressfuncs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiosubinterp as asi

pytestmark = pytest.mark.slow


class PickleRaises:
    def __reduce__(self):
        raise RuntimeError("refuses to be pickled")


def _gen():
    yield 1


def _unshareable():
    x = 1

    def closure():
        return x

    # An open socket crosses (duplicated, see test_buffer.py); a closed one cannot.
    sock = socket.socket()
    sock.close()
    return [
        ("lambda", lambda: 1),
        ("closure", closure),
        ("generator", _gen()),
        ("lock", threading.Lock()),
        ("closed socket", sock),
    ], sock


async def test_unshareable_arguments_fail_at_the_call_site():
    payloads, sock = _unshareable()
    try:
        async with asi.InterpreterPool(1) as pool:
            send, recv = asi.open_channel(math.inf)
            for label, value in payloads:
                with pytest.raises(asi.NotShareableError):
                    pool.submit(stressfuncs.ident, value)
                with pytest.raises(asi.NotShareableError):
                    send.send_nowait(value)
                assert pool.statistics()["queued"] == 0, label
            for _label, value in payloads[:2]:  # callables that cannot cross
                with pytest.raises(asi.NotShareableError):
                    pool.submit(value)
            # Huge nesting: either it crosses intact or a clear error, never a crash.
            deep: list = []
            for _ in range(100_000):
                deep = [deep]
            try:
                pool.submit(stressfuncs.ident, deep).cancel()
            except (asi.NotShareableError, RecursionError) as exc:
                assert "recursion" in str(exc).lower() or "nest" in str(exc).lower() or str(exc)
            assert recv.statistics().current_buffer_used == 0
            assert await pool.run(stressfuncs.inc, 1) == 2
            send.close()
            recv.close()
    finally:
        sock.close()


async def test_wrong_types_and_values_everywhere():
    with pytest.raises(ValueError):
        asi.InterpreterPool(0)
    with pytest.raises(ValueError):
        asi.InterpreterPool(cancel_grace=-1)
    with pytest.raises(TypeError):
        asi.InterpreterPool(1, preload="json")
    with pytest.raises(ValueError):
        asi.open_channel(-1)
    with pytest.raises(ValueError):
        asi.open_channel(1.5)
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(TypeError):
            pool.submit(42)
        with pytest.raises(ValueError):
            [x async for x in pool.map(stressfuncs.inc, [1], window=0)]
        with pytest.raises(TypeError):
            [x async for x in pool.map(42, [1])]
        send, recv = asi.open_channel(1)
        with pytest.raises(TypeError):
            await asi.select()
        with pytest.raises(TypeError):
            await asi.select(send)
        with pytest.raises(ValueError):
            await asi.select(recv, timeout=float("nan"))
        with pytest.raises(RuntimeError, match="blocks"):
            recv.recv_sync(timeout=1)
        send.close()
        recv.close()
        # Closed objects.
        with pytest.raises(asi.ChannelClosedError):
            await send.send(1)
        with pytest.raises(asi.ChannelClosedError):
            await recv.recv()
        with pytest.raises(asi.ChannelClosedError):
            send.clone()
        with pytest.raises((asi.NotShareableError, ValueError)):
            pool.submit(stressfuncs.ident, send)
    with pytest.raises(asi.PoolClosedError):
        pool.submit(stressfuncs.inc, 1)
    with pytest.raises(asi.PoolClosedError):
        await pool.run(stressfuncs.inc, 1)
    with pytest.raises(asi.PoolClosedError):
        [x async for x in pool.map(stressfuncs.inc, [1])]


async def test_unshareable_channel_item_is_not_shareable_error():
    send, recv = asi.open_channel(math.inf)
    try:
        with pytest.raises(asi.NotShareableError):
            send.send_nowait(lambda: 1)
    finally:
        send.close()
        recv.close()


async def test_argument_whose_pickling_raises_is_not_shareable_error():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError):
            pool.submit(stressfuncs.ident, PickleRaises())


async def test_infinite_complex_round_trips():
    async with asi.InterpreterPool(1) as pool:
        assert repr(await pool.run(stressfuncs.ident, complex(0, math.inf))) == "infj"


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.complex_numbers(allow_nan=False),
    lambda children: (
        st.lists(children)
        | st.tuples(children, children)
        | st.dictionaries(st.text() | st.integers(), children)
        | st.frozensets(st.integers())
        | st.sets(st.text())
    ),
    max_leaves=30,
)


def test_generated_values_round_trip_through_a_worker_and_a_channel():
    state: dict = {}

    async def setup():
        state["pool"] = asi.InterpreterPool(1)
        await state["pool"].start()
        state["send"], state["recv"] = asi.open_channel(math.inf)

    async def check(value):
        out = await asyncio.wait_for(state["pool"].run(stressfuncs.ident, value), 60)
        assert out == value and type(out) is type(value)
        state["send"].send_nowait(value)
        back = await state["recv"].recv()
        assert back == value and type(back) is type(value)

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(values)
    def roundtrip(value):
        runner.run(check(value))

    with asyncio.Runner() as runner:
        runner.run(setup())
        try:
            roundtrip()
        finally:
            runner.run(state["pool"].aclose())
            state["send"].close()
            state["recv"].close()


# -- the rest of the public API with wrong types and values -----------------------


async def test_pool_arguments_of_the_wrong_type_or_value():
    for size in ("2", 1.0, True, -3):
        with pytest.raises(ValueError, match="size must be a positive int"):
            asi.InterpreterPool(size)
    for grace in (float("nan"), "1", True, -0.5):
        # NaN used to be accepted: a cancelled task stuck in C then blocked
        # the pool (and the loop) forever instead of being replaced.
        with pytest.raises(ValueError, match="cancel_grace"):
            asi.InterpreterPool(1, cancel_grace=grace)
    with pytest.raises(TypeError, match="module names"):
        asi.InterpreterPool(1, preload=[1])
    with pytest.raises(TypeError, match="iterable of module names"):
        asi.InterpreterPool(1, preload=None)
    with pytest.raises(TypeError, match=r"preload=\('json',\)"):
        asi.Interpreter(preload="json")
    with pytest.raises(asi.NotShareableError, match="lambda"):
        asi.InterpreterPool(1, initializer=lambda: None)
    with pytest.raises(asi.NotShareableError, match=r"argument 0 of ident\(\) \(lock\)"):
        asi.InterpreterPool(1, initializer=stressfuncs.ident, initargs=(threading.Lock(),))
    with pytest.raises(TypeError, match="max_workers"):
        asi.InterpreterPoolExecutor("2")
    with pytest.raises(ValueError, match="max_workers"):
        asi.InterpreterPoolExecutor(-1)
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(TypeError, match="expected a callable"):
            await pool.run(None)
        with pytest.raises(TypeError, match="not iterable"):
            await pool.map(stressfuncs.inc, 5).__anext__()
        assert await pool.run(stressfuncs.inc, 1) == 2


def test_channel_and_select_arguments_of_the_wrong_type_or_value():
    for maxsize in ("3", None, -1, 2.5):
        with pytest.raises(ValueError, match="maxsize"):
            asi.open_channel(maxsize)
    for cls in (asi.SendChannel, asi.RecvChannel):
        with pytest.raises(TypeError, match="cannot be created directly"):
            cls()
    for end in (asi.SendChannel.__new__(asi.SendChannel), asi.RecvChannel.__new__(asi.RecvChannel)):
        # made by hand all the same: unusable, not a crash
        for use in (end.close, end.clone, end.statistics, getattr(end, "recv_nowait", end.close)):
            with pytest.raises(TypeError, match=r"not made by aiosubinterp\.open_channel"):
                use()
    send, recv = asi.open_channel(1)
    for timeout in (-1, "1", float("nan")):
        with pytest.raises(ValueError, match="timeout"):
            send.send_sync(1, timeout=timeout)
        with pytest.raises(ValueError, match="timeout"):
            recv.recv_sync(timeout=timeout)
        with pytest.raises(ValueError, match="timeout"):
            asi.select_sync(recv, timeout=timeout)
    with pytest.raises(TypeError, match="at least one receive end"):
        asi.select_sync()
    with pytest.raises(TypeError, match="receive ends"):
        asi.select_sync(42)
    with pytest.raises(TypeError, match="receive ends"):
        asi.select_sync(send)
    assert recv.statistics().current_buffer_used == 0
    send.close()
    recv.close()
    with pytest.raises(asi.ChannelClosedError):
        asi.select_sync(recv, timeout=0)
    with pytest.raises(asi.ChannelClosedError):
        send.send_sync(1, timeout=0)


def test_shared_memory_and_fd_wrappers_with_wrong_types_and_values():
    with pytest.raises(ValueError, match=">= 0"):
        asi.SharedBuffer(-1)
    for size in ("3", 1.5):
        with pytest.raises(TypeError):
            asi.SharedBuffer(size)
    with pytest.raises(MemoryError, match="cannot allocate"):
        asi.SharedBuffer(2**62)
    lock = asi.SharedLock()
    with pytest.raises(ValueError, match="non-negative"):
        lock.acquire(timeout=-5)
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(False, 1)
    with pytest.raises(RuntimeError, match="release unlocked"):
        lock.release()
    for value in (42, None, "text"):
        with pytest.raises(TypeError, match="bytes-like"):
            asi.share(value)
    with pytest.raises(ValueError, match="invalid file descriptor"):
        asi.FileDescriptor(-1)
    with pytest.raises(TypeError):
        asi.FileDescriptor("3")


async def test_more_unshareable_payloads_fail_at_the_call_site(tmp_path):
    import select

    async with asi.InterpreterPool(1) as pool:
        running = pool.submit(stressfuncs.inc, 1)
        with open(tmp_path / "f", "w") as f, select.epoll() as ep:
            payloads = [
                ("open file", f),
                ("epoll", ep),
                ("threading.Event", threading.Event()),
                ("asyncio future", asyncio.get_running_loop().create_future()),
                ("task", running),
                ("pool", pool),
                ("module", math),
                ("frame", __import__("sys")._getframe()),
                ("bad fd", asi.FileDescriptor(10**6)),
            ]
            for label, value in payloads:
                with pytest.raises(asi.NotShareableError, match="argument 0"):
                    pool.submit(stressfuncs.ident, value)
                send, recv = asi.open_channel(math.inf)
                with pytest.raises(asi.NotShareableError, match="through a channel"):
                    send.send_nowait(value)
                assert recv.statistics().current_buffer_used == 0, label
                send.close()
                recv.close()
        with pytest.raises(asi.NotShareableError, match="contiguous"):
            pool.submit(stressfuncs.ident, memoryview(b"abcdef")[::2])
        with pytest.raises(asi.NotShareableError, match="argument 0"):
            pool.submit(stressfuncs.ident, asyncio.get_running_loop())
        assert await running == 2
        assert pool.statistics()["queued"] == 0
        assert pool.statistics()["submitted"] == 1
        assert await pool.run(stressfuncs.inc, 2) == 3


class PicklingErrorOnReduce:
    def __reduce__(self):
        import pickle

        raise pickle.PicklingError("no pickling this")


async def test_pickling_error_through_a_channel_is_not_shareable_error():
    send, recv = asi.open_channel(math.inf)
    try:
        with pytest.raises(asi.NotShareableError):
            send.send_nowait(PicklingErrorOnReduce())
    finally:
        send.close()
        recv.close()


async def test_pickling_error_in_a_task_argument_is_not_shareable_error():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match="no pickling this"):
            pool.submit(stressfuncs.ident, PicklingErrorOnReduce())


async def test_non_contiguous_buffer_through_a_channel_is_not_shareable_error():
    send, recv = asi.open_channel(math.inf)
    try:
        with pytest.raises(asi.NotShareableError):
            send.send_nowait(memoryview(b"abcdef")[::2])
    finally:
        send.close()
        recv.close()


async def test_ssl_socket_is_refused_instead_of_crossing_without_tls():
    import ssl

    raw = socket.socket()
    tls = ssl.create_default_context().wrap_socket(
        raw, server_hostname="example.com", do_handshake_on_connect=False
    )
    try:
        async with asi.InterpreterPool(1) as pool:
            with pytest.raises(asi.NotShareableError, match="ssl"):
                got = await pool.run(stressfuncs.ident, tls)
                got.close()
    finally:
        tls.close()
