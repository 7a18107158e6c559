"""Worker functions for tests/test_worker_logging.py (they log inside interpreters)."""

from __future__ import annotations

import logging

log = logging.getLogger("logtest.app")


def log_warning(x: object) -> None:
    log.warning("working on %s", x, extra={"request": "r-17", "weight": 2.5, "blob": object()})


def log_levels() -> None:
    log.debug("debug, disabled in main")
    log.info("info, enabled in main")


def log_exception() -> None:
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        log.exception("it failed")


def log_own_handler() -> list[str]:
    """Log through a handler this worker configures on its own logger."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    own = logging.getLogger("logtest.own")
    handler = Keep()
    own.addHandler(handler)
    try:
        own.warning("kept in the worker")
    finally:
        own.removeHandler(handler)
    return seen


def configure_root() -> None:
    """An initializer that configures the worker's logging itself."""
    logging.basicConfig(level=logging.WARNING, format="WORKER %(message)s")


def root_handler_names() -> list[str]:
    return [type(h).__name__ for h in logging.getLogger().handlers]


def log_many(n: int, tag: str) -> None:
    for i in range(n):
        log.warning("%s %d", tag, i)


def log_then_flood(gate: object, n: int) -> None:
    """Log one record, wait until main's handler holds it (gate), then log n more."""
    log.warning("first")
    gate.recv_sync()  # type: ignore[attr-defined]
    for i in range(n):
        log.warning("flood %d", i)


def log_many_then_signal(n: int, tag: str, sock: object) -> None:
    """Log n records, then send one byte on sock (a socket passed to the worker process)."""
    log_many(n, tag)
    sock.send(b"!")  # type: ignore[attr-defined]


def log_from_threads(threads: int, n: int) -> None:
    """n records from each of several threads of this worker at once."""
    import threading

    def work(t: int) -> None:
        for i in range(n):
            log.warning("thread %d record %d", t, i)

    started = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()


def log_forever(tag: str) -> None:
    """Log until interrupted (a cancelled task)."""
    i = 0
    while True:
        log.warning("%s %d", tag, i)
        i += 1
