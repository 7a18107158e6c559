"""Regression tests for the C review of 2026-12-04
(/work/shared/reviews/memory-safety-2026-12-04.md): findings R4-R8, U3.

Crash-prone paths (a reproducer that segfaulted) run in a child process
that checks the exit code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import reviewcore2funcs

import aiosubinterp as asi

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


def run_child(tmp_path, source: str, timeout: float = 90) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS]))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(tmp_path), env=env)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- R4: fds that cross stay non-inheritable (PEP 446) -----------------------------

async def test_fds_received_by_a_worker_are_not_inheritable(pipe):
    r, _ = pipe
    a, b = socket.socketpair()
    with a, b:
        async with asi.InterpreterPool(1) as pool:
            inheritable, _ = await pool.run(reviewcore2funcs.fd_info, asi.FileDescriptor(r))
            assert inheritable is False
            inheritable, _ = await pool.run(reviewcore2funcs.sock_info, a)
            assert inheritable is False


async def test_an_fd_returned_by_a_worker_is_not_inheritable(pipe):
    _, w = pipe
    async with asi.InterpreterPool(1) as pool:
        got = await pool.run(reviewcore2funcs.give_fd, w)
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
