"""ProcessPool (crashes, signals, what crosses) and InterpreterPool(fallback="process").

What both backends share is tested in test_backends.py.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import warnings

# Loading numpy's C library starts OpenBLAS's threads in this process, even when
# an interpreter's import of numpy is then refused: start them before any test
# counts threads.
import numpy  # noqa: F401
import procfuncs
import pytest
import workfuncs
from aiohelpers import read_byte
from childproc import run_child

import aiosubinterp as asi

ROOT = pathlib.Path(__file__).resolve().parent.parent
FD = asi.FileDescriptor


@pytest.mark.parametrize(
    "fn, arg, said",
    [
        (procfuncs.exit_now, 3, "exit code 3"),
        (procfuncs.kill_self, int(signal.SIGKILL), "signal SIGKILL"),
    ],
)
async def test_a_dying_worker_fails_only_its_task(fn, arg, said):
    async with asi.ProcessPool(1) as pool:
        before = await pool.run(procfuncs.pid)
        with pytest.raises(asi.WorkerCrashedError, match=said) as info:
            await pool.run(fn, arg)
        assert isinstance(info.value, asi.BrokenPoolError)
        assert repr(fn.__name__) in str(info.value)
        # A new worker took its place; the pool keeps serving.
        after = await asyncio.wait_for(pool.run(procfuncs.pid), 30)
        assert after != before
        assert pool.statistics()["replaced"] == 1
        assert pool.pids() == [after]


async def test_a_stray_sigint_does_not_interrupt_a_task(pipe):
    # Ctrl-C reaches every process of the terminal's group: only a cancel counts.
    r, w = pipe
    async with asi.ProcessPool(1) as pool:
        task = pool.submit(procfuncs.read_close, FD(r))
        while pool.statistics()["busy"] == 0:
            await asyncio.sleep(0.005)
        os.kill(pool.pids()[0], signal.SIGINT)
        await asyncio.sleep(0.1)
        assert not task.done()
        os.write(w, b"!")
        assert await asyncio.wait_for(task, 30) == b"!"


async def test_coroutines_run_in_workers_on_every_version():
    async with asi.ProcessPool(1) as pool:
        assert await pool.run(procfuncs.async_add, 2, 3) == 5


async def test_cancelling_a_coroutine_cancels_it_in_the_worker(pipe):
    r, w = pipe
    async with asi.ProcessPool(1) as pool:
        first = await pool.run(procfuncs.pid)
        task = pool.submit(procfuncs.async_wait_forever, FD(w))
        assert await read_byte(r) == b"s"
        task.cancel()
        assert await read_byte(r) == b"c"  # its except CancelledError ran
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.wait_for(pool.run(procfuncs.pid), 30) == first


async def test_large_arguments_and_results():
    big = bytes(range(256)) * (3 << 12)  # 3 MiB: written by a helper thread
    async with asi.ProcessPool(1) as pool:
        assert await pool.run(procfuncs.nbytes, big) == (len(big), big[:4], big[-4:])
        assert await pool.run(procfuncs.nbytes, memoryview(big)) == (len(big), big[:4], big[-4:])
        assert await pool.run(procfuncs.make_bytes, 5 << 20) == b"\x01" * (5 << 20)


async def test_what_cannot_cross_to_a_process_is_refused_at_the_call_site():
    async with asi.ProcessPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match=r"worker process.*SharedBuffer"):
            pool.submit(workfuncs.echo, asi.SharedBuffer(8))
        with pytest.raises(asi.NotShareableError, match="worker process"):
            pool.submit(workfuncs.echo, asi.share(bytearray(8)))
        send, recv = asi.open_channel(1)
        send.close()
        with pytest.raises(asi.NotShareableError, match="closed channel end"):
            pool.submit(workfuncs.echo, send)
        recv.close()
        # An end of a channel opened inside a worker process cannot leave it.
        with pytest.raises(asi.NotShareableError, match="opened here"):
            await pool.run(procfuncs.open_local_channel)
        assert pool.statistics()["submitted"] == 1


async def test_sockets_are_handed_over():
    a, b = socket.socketpair()
    with a, b:
        async with asi.ProcessPool(1) as pool:
            task = pool.submit(procfuncs.socket_echo, b)
            a.sendall(b"hi")
            assert await asyncio.wait_for(task, 30) == "socket"
            a.settimeout(30)
            assert a.recv(10) == b"HI"


async def test_channel_clone_close_and_statistics_in_a_worker():
    send, recv = asi.open_channel(4)
    async with asi.ProcessPool(1) as pool:
        # The worker's proxy stands for the same end: no extra receiver.
        assert await pool.run(procfuncs.channel_stats, recv) == (1, 1, False)
        # It closes `send` (ours too) after cloning it; the clone sends and closes.
        assert await pool.run(procfuncs.clone_and_send, send, "v") == (True, True)
        assert send.closed
        assert await recv.recv() == "v"
        with pytest.raises(asi.EndOfChannel):
            await asyncio.wait_for(recv.recv(), 30)


async def test_async_with_and_async_for_over_a_proxy_in_a_worker_coroutine():
    send, recv = asi.open_channel(4)
    for item in "ab":
        send.send_nowait(item)
    send.close()
    async with asi.ProcessPool(1) as pool:
        assert await pool.run(procfuncs.drain_async, recv) == (["a", "b"], True)
    assert recv.closed  # the proxy's `async with` closed the end: ours too


async def test_a_dead_worker_releases_its_channel_ends():
    send, recv = asi.open_channel(1)
    async with asi.ProcessPool(1) as pool:
        assert await pool.run(procfuncs.keep_end, send)
        del send  # the worker process holds the only copy
        assert recv.statistics().open_send_channels == 1
        with pytest.raises(asi.WorkerCrashedError):
            await pool.run(procfuncs.exit_now, 0)
        with pytest.raises(asi.EndOfChannel):
            await asyncio.wait_for(recv.recv(), 30)


def test_bad_fallback_value():
    with pytest.raises(ValueError, match=r"fallback must be None .*, 'process' .*, got 'thread'"):
        asi.InterpreterPool(1, fallback="thread")
    with pytest.raises(ValueError, match="fallback must be"):
        asi.InterpreterPool(1, fallback=True)


async def test_without_fallback_a_refusing_module_is_an_error():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.ModuleRefusedError, match="numpy"):
            await pool.run(procfuncs.numpy_total, 10)


async def test_fallback_runs_refused_modules_on_processes():
    async with asi.InterpreterPool(1, fallback="process") as pool:
        with pytest.warns(asi.FallbackWarning, match="numpy.*module 'procfuncs'"):
            assert await pool.run(procfuncs.numpy_total, 100) == 4950
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once: no second warning
            results = await asyncio.gather(*(pool.run(procfuncs.numpy_total, n) for n in range(5)))
            assert results == [0, 0, 1, 3, 6]
            # The decision is per module: procfuncs goes straight to processes now,
            # workfuncs still runs in interpreters.
            assert await pool.run(procfuncs.pid) != os.getpid()
            assert await pool.run(workfuncs.interp_id) != asi.get_main().id
            task = pool.submit(procfuncs.numpy_total, 3)
            assert isinstance(task, asi.Task) and await task == 3


async def test_fallback_task_can_be_cancelled():
    async with asi.InterpreterPool(1, fallback="process") as pool:
        with pytest.warns(asi.FallbackWarning):
            await pool.run(procfuncs.numpy_total, 1)
        task = pool.submit(procfuncs.read_ignoring_interrupts, 0, 0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await pool.run(procfuncs.numpy_total, 4) == 6


async def test_cancelling_a_routed_task_interrupts_it_in_its_interpreter(pipe):
    # fallback="process": a call of a module no extension refused runs in an
    # interpreter behind the Task the caller holds; cancelling that Task
    # interrupts the call where it runs.
    r, w = pipe
    async with asi.InterpreterPool(1, fallback="process") as pool:
        task = pool.submit(workfuncs.signal_then_spin, w)
        assert await read_byte(r) == b"s"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await read_byte(r) == b"k"  # its KeyboardInterrupt, in the interpreter
        assert await pool.run(workfuncs.square, 7) == 49
        assert pool.statistics()["replaced"] == 0


def test_numpy_fallback_example_runs():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "numpy_fallback.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "means: [4.0, 5.167, 6.0]",
        "warning: FallbackWarning",
        "checksums: [45, 4950, 499500]",
        "pure: 45",
    ]


def _request_state():
    """A worker process's _State on one end of a socketpair; the test plays the pool."""
    from aiosubinterp._process import worker as procworker

    ours, pools = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pools.settimeout(10)  # a frame that never comes fails the test instead of hanging it
    ctl_r, ctl_w = os.pipe()
    os.set_blocking(ctl_r, False)
    state = procworker._State(ours, ctl_r)
    state.current = 7
    return state, pools, ctl_w, (ours, pools, ctl_r, ctl_w)


def _close_all(things):
    for thing in things:
        if isinstance(thing, int):
            os.close(thing)
        else:
            thing.close()


def test_an_interruption_between_a_channel_request_and_its_wait_aborts_the_request():
    # A cancel (SIGINT) that lands after the REQUEST frame went out, before
    # the worker waits for the reply, used to raise KeyboardInterrupt there:
    # no ABORT was sent, so the pool's side of the request (a recv on the
    # parent's copy of the end) waited forever and kept the end open.
    from aiosubinterp._process import wire

    state, pools, ctl_w, things = _request_state()
    reader = wire.Reader(pools)
    try:
        os.write(ctl_w, (7).to_bytes(8, "little"))  # the pool asks to cancel task 7
        sent = {}

        def send_then_interrupted(kind, ident, body=b"", fds=None):
            wire.send_frame(state.sock, kind, ident, body, fds or ())
            sent["rid"] = ident
            state.on_sigint(signal.SIGINT, None)  # the signal, right after the frame

        state.send = send_then_interrupted
        # The pool's answer to the abort (the reply to the withdrawn request).
        body, _ = wire.encode((asi._core.CHAN_INTERRUPTED, None), lambda end: None)
        wire.send_frame(pools, wire.REPLY, 1, body)
        with pytest.raises(KeyboardInterrupt):
            state.request("recv", 5, None)
        kind, ident, _, _ = reader.read()
        assert (kind, ident) == (wire.REQUEST, sent["rid"])
        kind, ident, _, _ = reader.read()
        assert (kind, ident) == (wire.ABORT, sent["rid"]), "the request was not aborted"
        assert not state.in_request and not state.deferred
    finally:
        _close_all(things)


def test_an_interruption_while_waiting_for_a_reply_still_aborts_it():
    from aiosubinterp._process import wire

    state, pools, ctl_w, things = _request_state()
    reader = wire.Reader(pools)
    try:
        os.write(ctl_w, (7).to_bytes(8, "little"))
        old = signal.signal(signal.SIGALRM, lambda *_: state.on_sigint(signal.SIGINT, None))
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)  # lands in the select() of the wait
            body, _ = wire.encode((asi._core.CHAN_INTERRUPTED, None), lambda end: None)
            reply = threading.Timer(0.6, wire.send_frame, (pools, wire.REPLY, 1, body))
            reply.start()
            with pytest.raises(KeyboardInterrupt):
                state.request("recv", 5, None)
            reply.join()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert reader.read()[0] == wire.REQUEST
        assert reader.read()[:2] == (wire.ABORT, 1)
    finally:
        _close_all(things)


async def test_a_kept_end_dropped_on_another_thread_closes_while_the_loop_sleeps():
    # ProcessPool keeps a copy of each end it sends to a worker, made on the
    # loop's thread, and drops it on its reader thread once the worker is done
    # with it. On a free-threaded build an object whose last reference another
    # thread drops is collected by the thread that made it, at its next Python
    # code: the loop, asleep in epoll waiting for this very end, never woke.
    send, recv = asi.open_channel(4)
    async with asi.ProcessPool(1) as pool:
        keys: list[int] = []
        pool._share_end(send, keys)
        del send  # the kept copy is the last one
        dropper = threading.Timer(0.2, pool._close_key, args=(keys[0],))
        dropper.start()
        with pytest.raises(asi.EndOfChannel):
            await asyncio.wait_for(recv.recv(), 3)
        dropper.join()


async def test_a_worker_reads_the_statistics_of_an_end_closed_elsewhere():
    # As with a local end: closing the end (here, for every holder) leaves
    # its statistics readable.
    send, recv = asi.open_channel(4)
    async with asi.ProcessPool(1) as pool:
        assert await pool.run(procfuncs.keep_end, recv)
        recv.close()
        local = recv.statistics()
        assert (local.open_send_channels, local.open_receive_channels) == (1, 0)
        assert await pool.run(procfuncs.kept_stats) == (1, 0)
        assert await pool.run(procfuncs.close_kept)
    send.close()


def test_a_main_script_a_worker_process_cannot_import_gives_a_clear_error(tmp_path):
    # Worker processes find a script's functions as interpreter workers do
    # (one resolver): the error names the script's failure and the fix.
    proc = run_child(
        tmp_path,
        """
        import asyncio

        import aiosubinterp as asi

        if __name__ != "__main__":
            raise RuntimeError("this script runs only as the program")

        def triple(x):
            return 3 * x

        async def main():
            async with asi.ProcessPool(1) as pool:
                try:
                    await pool.run(triple, 1)
                except ImportError as exc:
                    print("ImportError:", exc)

        asyncio.run(main())
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert "sent to a worker process, which had to import that script" in proc.stdout
    assert "RuntimeError: this script runs only as the program" in proc.stdout
    assert proc.stdout.count("guard the script's top-level code") == 1, proc.stdout
