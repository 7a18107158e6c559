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
                with pytest.raises(Exception):  # noqa: B017 - see the xfail test below
                    send.send_nowait(value)
                assert pool.statistics()["queued"] == 0, label
            for label, value in payloads[:2]:  # callables that cannot cross
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
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary() | st.complex_numbers(allow_nan=False),
    lambda children: st.lists(children) | st.tuples(children, children)
    | st.dictionaries(st.text() | st.integers(), children) | st.frozensets(st.integers())
    | st.sets(st.text()),
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
