"""Free-threaded CPython (PEP 703, the "3.13t" build): the module keeps the GIL off, and
its shared state holds up when several threads of main use it at once.

The GIL checks run only on a free-threaded build (on a GIL build there is no
GIL to keep off) and in a fresh child process, so what this test process
imported earlier does not matter. The many-threads test runs everywhere: on
a GIL build the threads interleave, on a free-threaded one they run in
parallel, which is what the C audit in ext/_core.pyx ("Free threading")
is about.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time

import chanfuncs
import pytest
import workfuncs

import aiosubinterp as asi
from aiosubinterp import _core

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
T = 30  # bound on every wait: nothing may hang

needs_free_threading = pytest.mark.skipif(
    not FREE_THREADED,
    reason="a GIL build: there is no GIL to keep disabled (run on a free-threaded "
    "build, e.g. make venv PYTHON_VERSIONS=3.13t)",
)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # PYTHON_GIL=0 would hide the bug this tests (it forces the GIL off
    # whatever the modules declare); PYTHON_GIL=1 would force it on.
    env.pop("PYTHON_GIL", None)
    env["PYTHONPATH"] = os.pathsep.join([REPO, TESTS])
    return env


def _run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-X",
            "faulthandler",
            "-W",
            "error::RuntimeWarning",
            "-c",
            textwrap.dedent(code),
        ],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_free_threading
def test_import_keeps_the_gil_disabled():
    r = _run_child("""
        import sys
        assert not sys._is_gil_enabled(), "the GIL is on before the import"
        import aiosubinterp
        from aiosubinterp import _core
        assert not sys._is_gil_enabled(), "importing aiosubinterp turned the GIL on"
        print("ok")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert "GIL" not in r.stderr, r.stderr


@needs_free_threading
def test_a_pool_and_a_channel_keep_the_gil_disabled():
    r = _run_child("""
        import asyncio, sys
        import aiosubinterp as asi
        import chanfuncs, workfuncs

        async def main():
            async with asi.InterpreterPool(2) as pool:
                assert await pool.run(workfuncs.square, 7) == 49
                send, recv = asi.open_channel(4)
                task = pool.submit(chanfuncs.consume_sum, recv)
                for i in range(100):
                    await send.send(i)
                send.close()
                assert await task == sum(range(100))
                # the worker imported _core too: its interpreter's GIL stays off
                return await pool.run(workfuncs.gil_enabled)

        in_worker = asyncio.run(main())
        assert not sys._is_gil_enabled(), "running a pool turned the GIL on"
        print("worker GIL:", in_worker)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "worker GIL: False", r.stdout
    assert "GIL" not in r.stderr, r.stderr


@needs_free_threading
def test_the_extension_is_the_free_threaded_build():
    # A cp313t extension (its own ABI tag), loaded with the GIL still off.
    r = _run_child("""
        import sys
        from aiosubinterp import _core
        import importlib.machinery
        assert _core.__file__.endswith(
            tuple(importlib.machinery.EXTENSION_SUFFIXES)), _core.__file__
        assert "t-" in _core.__file__.rsplit("/", 1)[-1], _core.__file__  # a cp313t build
        assert not sys._is_gil_enabled()
        print("ok")
    """)
    assert r.returncode == 0, r.stderr


def test_many_threads_share_pools_channels_and_hubs():
    """Several threads of main, each with its own event loop (and hub), at once:

    - each loop runs tasks on its own pool and on one pool all threads share;
    - every thread sends into one shared channel that a worker sums;
    - meanwhile they read the registry (live_workers) and channel statistics,
      and hand channel ends across threads (clone, close).
    Bounded: a fixed amount of work, each wait bounded by T.
    """
    n_threads = 4
    per_thread = 150
    send, recv = asi.open_channel(16)
    errors: list[BaseException] = []
    sums: list[int] = []
    barrier = threading.Barrier(n_threads)

    async def one_thread(k: int, shared: asi.InterpreterPool) -> None:
        async with asi.InterpreterPool(1) as own:
            my_send = send.clone()
            barrier.wait(T)
            try:
                tasks = []
                for i in range(per_thread):
                    pool = own if i % 2 else shared
                    tasks.append(pool.submit(workfuncs.add, i, k))
                    await my_send.send(i)
                    if i % 25 == 0:
                        assert _core.live_workers()
                        send.statistics()
                results = await asyncio.wait_for(asyncio.gather(*tasks), T)
                assert results == [i + k for i in range(per_thread)]
            finally:
                my_send.close()

    async def consumer() -> None:
        async with asi.InterpreterPool(1) as pool:
            sums.append(await asyncio.wait_for(pool.run(chanfuncs.consume_sum, recv), T))

    shared_ready = threading.Event()
    shared_box: list[asi.InterpreterPool] = []
    done = threading.Event()

    async def owner() -> None:
        async with asi.InterpreterPool(2) as shared:
            shared_box.append(shared)
            shared_ready.set()
            await asyncio.get_running_loop().run_in_executor(None, done.wait, T)

    def guarded(fn, *args):
        try:
            asyncio.run(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    t0 = time.monotonic()
    threads = [
        threading.Thread(target=guarded, args=(owner,)),
        threading.Thread(target=guarded, args=(consumer,)),
    ]
    for t in threads:
        t.start()
    assert shared_ready.wait(T)
    workers = [
        threading.Thread(target=guarded, args=(one_thread, k, shared_box[0]))
        for k in range(n_threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join(T)
    send.close()  # the consumer ends once every clone is closed too
    done.set()
    for t in threads:
        t.join(T)
    assert not any(t.is_alive() for t in threads + workers)
    assert not errors, errors
    assert sums == [n_threads * sum(range(per_thread))]
    assert time.monotonic() - t0 < 60  # the bound the docstring promises, generously


def test_hub_close_from_two_threads_at_once():
    # Each close must release the hub once: a double release would close its
    # fd twice (another file's fd by then) or free it twice.
    for _ in range(200):
        hub = _core.Hub()
        start = threading.Barrier(3)

        def close(h=hub, b=start):
            b.wait(T)
            h.close()

        ts = [threading.Thread(target=close) for _ in range(2)]
        for t in ts:
            t.start()
        start.wait(T)
        hub.close()
        for t in ts:
            t.join(T)
        assert hub.closed


def test_native_list_encoding_sees_one_state_while_another_thread_appends():
    # A list that another thread grows while it is submitted: the worker gets
    # some prefix of it, well formed (never a count that disagrees with the
    # items, which would be a corrupt blob). On 3.13t, before the copy in
    # xdata.pxi, this raised IndexError in a few of 300 encodings.
    data = list(range(1000))
    stop = threading.Event()

    def grow():
        while not stop.is_set():
            data.append(len(data))
            if len(data) > 50_000:
                del data[1000:]

    async def main():
        async with asi.InterpreterPool(1) as pool:
            for _ in range(100):
                got = await pool.run(workfuncs.echo, data)
                assert got == list(range(len(got)))
                assert len(got) >= 1000

    t = threading.Thread(target=grow)
    t.start()
    try:
        asyncio.run(main())
    finally:
        stop.set()
        t.join(T)
