"""Edge cases of what crosses: fds stay non-inheritable, the fd of a result nobody
wants is closed, a receive end sent into its own channel, deep nesting in loads(),
internal objects misused, a socket that cannot be rebuilt.

Crash-prone paths (a reproducer that segfaulted) run in a child process
that checks the exit code.
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
import sys

import crossingfuncs
import pytest
import workfuncs
from childproc import run_child

import aiosubinterp as asi
from aiosubinterp import _core
from aiosubinterp._engine import lifecycle as _lifecycle
from aiosubinterp._inside import marshal as _marshal


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- R4: fds that cross stay non-inheritable (PEP 446) -----------------------------


async def test_fds_received_by_a_worker_are_not_inheritable(pipe):
    r, _ = pipe
    a, b = socket.socketpair()
    with a, b:
        async with asi.InterpreterPool(1) as pool:
            inheritable, _ = await pool.run(crossingfuncs.fd_info, asi.FileDescriptor(r))
            assert inheritable is False
            inheritable, _ = await pool.run(crossingfuncs.sock_info, a)
            assert inheritable is False


async def test_an_fd_returned_by_a_worker_is_not_inheritable(pipe):
    _, w = pipe
    async with asi.InterpreterPool(1) as pool:
        got = await pool.run(crossingfuncs.give_fd, w)
    try:
        assert got != w
        assert os.get_inheritable(got) is False
    finally:
        os.close(got)


def test_fds_sent_through_a_channel_are_not_inheritable(pipe):
    _, w = pipe
    a, b = socket.socketpair()
    tx, rx = asi.open_channel(2)
    with a, b, tx, rx:
        tx.send_nowait(asi.FileDescriptor(w))
        tx.send_nowait(b)
        got = rx.recv_nowait()
        try:
            assert os.get_inheritable(got) is False
        finally:
            os.close(got)
        with rx.recv_nowait() as sock:
            assert sock.fileno() != b.fileno()
            assert os.get_inheritable(sock.fileno()) is False


# -- R5: the fd of a result nobody wants is closed -------------------------------


async def test_int_fd_of_a_task_cancelled_after_it_finished_is_closed(pipe):
    r, _ = pipe
    async with asi.InterpreterPool(1) as pool:
        await pool.run(workfuncs.interp_id)  # started: the task below runs at once
        before = open_fds()
        for _ in range(30):
            task = pool.submit(crossingfuncs.give_fd, r)
            # Block the loop's thread until the task's completion is posted
            # (the hub's fd becomes readable): the loop cannot drain it meanwhile.
            fd = task._hub.core.fileno()
            assert select.select([fd], [], [], 60)[0] == [fd]
            assert task.cancel()  # done in the worker, not yet delivered here
            # A later task's completion is drained after this one's.
            await pool.run(workfuncs.interp_id)
            assert task.cancelled()
        assert open_fds() == before


async def test_int_fd_of_a_wanted_result_still_arrives(pipe):
    r, _ = pipe
    async with asi.InterpreterPool(1) as pool:
        got = await pool.run(crossingfuncs.give_fd, r)
    os.close(got)


async def test_drain_discards_what_is_not_wanted():
    # The hub directly: an unwanted completion is reported with value None,
    # and what it carried (here a zero-copy share) is dropped, not decoded.
    big = bytes(_core.SHARE_THRESHOLD)
    async with asi.InterpreterPool(1) as pool:
        await pool.run(workfuncs.interp_id)
        hub = _core.Hub()
        try:
            tids = [_lifecycle.next_task_id() for _ in range(2)]
            for tid in tids:
                pool._queue.submit(
                    tid, _core.JOB_KIND_CALL, _marshal.call_payload(workfuncs.echo, (big,), {}), hub
                )
            got = []
            while len(got) < 2:
                select.select([hub.fileno()], [], [], 60)
                got += hub.drain(lambda tid: tid == tids[1])
            by_tid = {tid: (status, value) for tid, status, _, _, value in got}
            assert by_tid[tids[0]] == (_core.STATUS_OK, None)
            status, value = by_tid[tids[1]]
            assert status == _core.STATUS_OK and bytes(value) == big
            del value, by_tid, got
            # Every record is released: the worker let go of its views
            # before it ran this next call, and share_stats() releases what
            # came back to main.
            await pool.run(crossingfuncs.live_shares)
            assert _core.share_stats()[0] == 0
        finally:
            hub.close()


# -- R6: a receive end sent into its own channel ---------------------------------

OWN_CHANNEL = "receive end of the same channel"


async def test_receive_end_into_its_own_channel_is_refused():
    tx, rx = asi.open_channel(1)
    with tx, rx:
        clone = rx.clone()
        for item in (rx, ("x", rx), [1, {"k": clone}], crossingfuncs.Holder(rx)):
            with pytest.raises(asi.NotShareableError, match=OWN_CHANNEL):
                tx.send_nowait(item)
            with pytest.raises(asi.NotShareableError, match=OWN_CHANNEL):
                await asyncio.wait_for(tx.send(item), 30)
        clone.close()
        # Nothing was sent, and no copy of the ends is left in the channel.
        stats = tx.statistics()
        assert stats.current_buffer_used == 0
        assert stats.open_receive_channels == 1
        tx.send_nowait("x")
        assert rx.recv_nowait() == "x"
    # With every receive end closed, senders see the channel broken.
    tx2, rx2 = asi.open_channel(1)
    with tx2:
        with pytest.raises(asi.NotShareableError):
            tx2.send_nowait(rx2)
        rx2.close()
        with pytest.raises(asi.BrokenChannelError):
            tx2.send_nowait("x")


async def test_receive_end_into_its_own_unbuffered_channel_is_refused_at_once():
    tx, rx = asi.open_channel(0)  # a send would wait for a receiver
    with tx, rx:
        with pytest.raises(asi.NotShareableError, match=OWN_CHANNEL):
            await asyncio.wait_for(tx.send(rx), 30)
        assert tx.statistics().tasks_waiting_send == 0


async def test_receive_end_into_its_own_channel_is_refused_by_send_sync_in_a_worker():
    tx, rx = asi.open_channel(1)
    with tx, rx:
        async with asi.InterpreterPool(1) as pool:
            name, message = await pool.run(crossingfuncs.send_own_receiver_sync, tx, rx)
        assert name == "NotShareableError"
        assert OWN_CHANNEL in message
        assert tx.statistics().current_buffer_used == 0


def test_receive_end_of_another_channel_and_a_send_end_into_its_own_channel_are_fine():
    tx, rx = asi.open_channel(2)
    tx2, rx2 = asi.open_channel(1)
    with tx, rx, tx2, rx2:
        tx.send_nowait(rx2)
        tx.send_nowait(tx.clone())
        with rx.recv_nowait() as got_rx2:
            tx2.send_nowait("y")
            assert got_rx2.recv_nowait() == "y"
        with rx.recv_nowait() as got_tx:
            got_tx.send_nowait("z")
        assert rx.recv_nowait() == "z"
        # A send end left in its own channel goes with the channel's last receiver.
        tx.send_nowait(tx.clone())
        assert tx.statistics().open_send_channels == 2
        rx.close()
        assert tx.statistics().open_send_channels == 1


# -- R7: loads() of deep nesting ---------------------------------------------------


def test_loads_of_deep_nesting_raises_instead_of_overflowing_the_stack(tmp_path):
    proc = run_child(
        tmp_path,
        """
        import struct
        from aiosubinterp import _core

        deep = (b"t" + struct.pack("<q", 1)) * 200_000 + b"N"
        for data in (deep, deep.replace(b"t", b"l"), deep.replace(b"t", b"z")):
            try:
                _core.loads(data)
            except ValueError as exc:
                print("refused:", exc, flush=True)
        print("done", flush=True)
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert proc.stdout.count("refused:") == 3
    assert "nested too deeply" in proc.stdout
    assert proc.stdout.endswith("done\n")


def test_what_the_encoder_makes_still_decodes():
    value = None
    for i in range(200):  # the encoder pickles what is nested deeper than its native bound
        value = (i, value, [value], {"k": value}) if i % 50 == 0 else (i, value)
    assert _core.loads(_core.dumps(value)) == value
    assert _core.roundtrip(value) == value


# -- R8: internal objects misused ---------------------------------------------------


def test_channel_op_cannot_be_made_directly(tmp_path):
    proc = run_child(
        tmp_path,
        """
        from aiosubinterp import _core

        try:
            _core.ChannelOp()
        except TypeError as exc:
            print("refused:", exc, flush=True)
        op = _core.ChannelOp.__new__(_core.ChannelOp)
        for use in (lambda: op.token, lambda: op.status, op.cancel, op.take, op.unget):
            try:
                use()
            except TypeError as exc:
                print("refused:", exc, flush=True)
        del op
        print("done", flush=True)
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert proc.stdout.count("refused:") == 6
    assert "cannot be created directly" in proc.stdout
    assert proc.stdout.endswith("done\n")


def test_worker_entry_points_refuse_a_handle_that_is_not_their_worker(tmp_path):
    proc = run_child(
        tmp_path,
        """
        import asyncio
        import aiosubinterp as asi
        import crossingfuncs
        from aiosubinterp import _core

        calls = [
            lambda h: _core._worker_concurrency(h),
            lambda h: _core._worker_session_begin(h, 1),
            lambda h: _core._worker_take(h),
            lambda h: _core._worker_call_guarded(h, 1, print, (), None),
            lambda h: _core._worker_cancels(h),
            lambda h: _core._worker_complete(h, 1, None, None, False, None),
            lambda h: _core._worker_session_end(h, None),
            lambda h: _core._worker_set_wake(h, -1),
            lambda h: _core._worker_cancel_requested(h),
            lambda h: _core._worker_main(h),
        ]

        def try_all(handles):
            for h in handles:
                for call in calls:
                    try:
                        call(h)
                    except RuntimeError as exc:
                        print("refused:", exc, flush=True)

        try_all([0, 8, 12345678])

        async def main():
            # A live worker's handle, used from another thread: refused too.
            async with asi.InterpreterPool(1) as pool:
                await pool.run(print, end="")
                handle = await pool.run(crossingfuncs.runner_handle)
                print("own:", await pool.run(crossingfuncs.own_concurrency), flush=True)
                try_all([handle])

        asyncio.run(main())
        print("done", flush=True)
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert proc.stdout.count("refused:") == 40, proc.stdout
    assert "not this thread's aiosubinterp worker" in proc.stdout
    assert "own: 1\n" in proc.stdout
    assert proc.stdout.endswith("done\n")


def test_end_released_while_its_own_send_encodes(tmp_path):
    proc = run_child(
        tmp_path,
        """
        import asyncio, threading
        import aiosubinterp as asi

        def evil_for(end):
            class Evil:
                def __reduce__(self):
                    end._release()
                    return int, ()
            return Evil()

        tx, rx = asi.open_channel(0)
        try:
            tx.send_nowait(evil_for(tx))
        except asi.ChannelClosedError as exc:
            print("nowait refused:", exc, flush=True)

        tx, rx = asi.open_channel(0)
        try:
            tx.send_sync(evil_for(tx), timeout=30)
        except asi.ChannelClosedError as exc:
            print("sync refused:", exc, flush=True)

        async def main():
            tx, rx = asi.open_channel(0)
            try:
                await asyncio.wait_for(tx.send(evil_for(tx)), 30)
            except asi.ChannelClosedError as exc:
                print("async refused:", exc, flush=True)

        asyncio.run(main())
        print("done", flush=True)
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    for how in ("nowait", "sync", "async"):
        assert f"{how} refused:" in proc.stdout
    assert proc.stdout.endswith("done\n")


def test_end_released_while_its_own_receive_releases_shares(tmp_path):
    # recv_generic releases what other interpreters gave back (share_drain)
    # before it looks at the ends; a buffer's release runs Python code, which
    # may release the very end being read. Run on a thread that is not main's
    # main thread: main's pending call, which would release it earlier,
    # runs only on the main thread.
    proc = run_child(
        tmp_path,
        """
        import threading
        import aiosubinterp as asi
        from aiosubinterp import _core

        class Exporter:
            end = None

            def __init__(self):
                self.data = bytearray(b"0123456789")

            def __buffer__(self, flags):
                return memoryview(self.data)

            def __release_buffer__(self, view):
                view.release()
                if Exporter.end is not None:
                    Exporter.end._release()

        def body():
            tx, rx = asi.open_channel(1)
            view = _core.roundtrip(asi.share(Exporter()))
            Exporter.end = rx
            del view  # main's record goes to its pending list
            try:
                rx.recv_nowait()
            except (asi.ChannelClosedError, TypeError) as exc:
                print("refused:", type(exc).__name__, exc, flush=True)
            Exporter.end = None

        t = threading.Thread(target=body)
        t.start()
        t.join()
        print("done", flush=True)
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "refused: ChannelClosedError" in proc.stdout
    assert proc.stdout.endswith("done\n")


# -- U2: a channel op's hub reference is taken before its item is encoded -----------


def test_hub_closed_while_a_send_encodes_its_item(tmp_path):
    # Not reachable through the public API (a loop's hub is closed on its
    # loop's thread, never inside a send); the internal API shows the order.
    proc = run_child(
        tmp_path,
        """
        import aiosubinterp as asi
        from aiosubinterp import _core

        for _ in range(20):
            hub = _core.Hub()

            class Evil:
                def __reduce__(self):
                    hub.close()
                    return int, ()

            tx, rx = asi.open_channel(0)  # no receiver: the send waits on the hub
            op = tx._send_begin(Evil(), hub)
            try:
                rx.recv_nowait()
            except asi.WouldBlock:
                pass  # the op's loop is gone: it is withdrawn, never given the item
            else:
                print("delivered to a closed hub", flush=True)
            del op
            tx.close()
            rx.close()
        print("done", flush=True)
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert proc.stdout == "done\n"


# -- U3: a socket that cannot be rebuilt does not leak its fd ------------------------


def test_socket_whose_decoding_fails_closes_its_fd(monkeypatch):
    a, b = socket.socketpair()
    tx, rx = asi.open_channel(1)
    with a, b, tx, rx:
        before = open_fds()
        tx.send_nowait(a)  # the item holds a duplicate of a's fd
        assert open_fds() == before + 1
        # `import socket` fails in the receiver (as it could in a worker).
        monkeypatch.delitem(sys.modules, "socket")
        monkeypatch.setattr(sys, "meta_path", [_RefuseSocket(), *sys.meta_path])
        with pytest.raises(ImportError, match="no socket here"):
            rx.recv_nowait()
        monkeypatch.undo()
        assert open_fds() == before


class _RefuseSocket:
    """A meta path finder that fails the import of socket."""

    def find_spec(self, name, path=None, target=None):
        if name == "socket":
            raise ImportError("no socket here")
        return None
