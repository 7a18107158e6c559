"""Worker-side functions for tests/test_leftover_threads.py: tasks that start
threads in their interpreter and return while those threads still run.

Importable in a worker: no asyncio at module level.
"""

from __future__ import annotations

import os
import threading
import time


def leave_thread(name: str = "left-behind") -> int:
    """Start a threading.Thread that sleeps an hour; return at once."""
    threading.Thread(target=time.sleep, args=(3600,), name=name).start()
    return threading.get_ident()


def leave_raw() -> int:
    """Start a _thread thread (no threading.Thread object) that sleeps an hour;
    return once it runs (CPython counts it in _thread._count() only from then:
    on a loaded free-threaded build it had not started when the pool closed)."""
    import _thread

    running = _thread.allocate_lock()
    running.acquire()

    def body() -> None:
        running.release()
        time.sleep(3600)

    ident = _thread.start_new_thread(body, ())
    running.acquire()
    return ident


def leave_raw_with_object() -> None:
    """Start a _thread thread that asks threading for its object (a dummy
    thread, which cannot be joined), then sleeps an hour; return once it has."""
    import _thread

    asked = _thread.allocate_lock()
    asked.acquire()

    def body() -> None:
        threading.current_thread()
        asked.release()
        time.sleep(3600)

    _thread.start_new_thread(body, ())
    asked.acquire()


def leave_thread_until(rfd: int, name: str = "waits-for-a-byte") -> None:
    """Start a threading.Thread that ends once a byte arrives on rfd."""
    threading.Thread(target=os.read, args=(rfd, 1), name=name).start()


def short_thread(done_fd: int) -> None:
    """Start a threading.Thread that writes b"t" to done_fd and ends; return at once.

    The pool closes after the byte arrived: the thread's Python code is over,
    though its thread state may not be gone yet.
    """
    threading.Thread(target=os.write, args=(done_fd, b"t"), name="short").start()


def short_raw(done_fd: int) -> None:
    """As short_thread, with a _thread thread."""
    import _thread

    _thread.start_new_thread(os.write, (done_fd, b"t"))


def interp_id() -> int:
    from aiosubinterp import _core

    return _core.current_interpreter_id()


def stubborn_with_thread(rfd: int, wfd: int) -> None:
    """Start a thread that sleeps an hour, write b"s" to wfd, then block in
    os.read(rfd) (no bytecode runs, so an interruption waits) until two bytes
    came: a cancel gives up on its worker and replaces it."""
    threading.Thread(target=time.sleep, args=(3600,), name="from-stubborn-task").start()
    try:
        os.write(wfd, b"s")
        os.read(rfd, 1)
    except KeyboardInterrupt:
        # It landed before the read, or fired once the read returned: one more
        # read (main writes two bytes), so the cancel never ends the task.
        os.read(rfd, 1)
