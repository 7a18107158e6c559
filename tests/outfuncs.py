"""Worker functions for tests/test_worker_output.py (they print inside interpreters)."""

from __future__ import annotations

import contextlib
import io
import logging
import sys


def say(word: str, times: int = 1) -> None:
    for i in range(times):
        print(word, i)


def to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def streams_forwarded() -> tuple[bool, bool]:
    """Whether this worker's stdout and stderr are not its own streams."""
    return sys.stdout is not sys.__stdout__, sys.stderr is not sys.__stderr__


def print_log_print() -> None:
    print("first")
    logging.getLogger("outtest").warning("second")
    print("third")


def partial(text: str, flush: bool) -> None:
    print(text, end="", flush=flush)


def own_redirect(text: str) -> str:
    """A task that captures its own output keeps it."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print(text)
    return buf.getvalue()


def write_bytes() -> None:
    sys.stdout.write(b"raw")  # type: ignore[arg-type]
