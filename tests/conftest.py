"""Test set-up: every async test runs on asyncio and on uvloop; nothing may leak."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time

import pytest

from aiosubinterp import _core

try:
    import uvloop
except ImportError:  # pragma: no cover - the test command installs it
    uvloop = None


def pytest_asyncio_loop_factories(config, item):
    factories = {"asyncio": asyncio.new_event_loop}
    if uvloop is not None:
        factories["uvloop"] = uvloop.new_event_loop
    return factories


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settled(check, timeout: float = 30.0) -> bool:
    # Cleanup happens on helper threads that finish just after the awaiter
    # resumes: give them a bounded moment to exit (a backstop: generous for a
    # loaded machine, and only a failing test waits it out).
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(autouse=True, scope="session")
def _warm_up_loops():
    # uvloop opens a process-wide pipe the first time a loop runs, and
    # libuv starts its process-wide pool of 4 threads the first time it
    # resolves an address (uvloop resolves every address it connects to,
    # even a numeric one, as the HTTP clients of the examples' tests do):
    # both before the first snapshot, so neither counts as a leak.
    if uvloop is not None:

        async def resolve() -> None:
            await asyncio.get_running_loop().getaddrinfo("127.0.0.1", 0)

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(resolve())


# A run started in the background by a non-interactive shell (`make test &`)
# inherits SIGINT ignored, and so would every child process the tests start:
# the tests that stop a child with SIGINT (Ctrl-C) would then wait for a child
# that never sees it. With a handler here, children start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def no_leaks(_warm_up_loops):
    """No interpreter, worker thread or fd outlives the test."""
    fds = _fds()
    threads = _threads()
    yield

    checks = [  # (what is clean, what the failure says)
        (lambda: not _core.live_workers(), lambda: f"worker interpreters: {_core.live_workers()}"),
        (lambda: _threads() <= threads, lambda: f"threads: {_threads()} > {threads}"),
        (lambda: not (_fds() - fds), lambda: f"fds: {_fds() - fds}"),
        (
            lambda: _core.list_interpreter_ids() == [_core.main_interpreter_id()],
            lambda: f"interpreters: {_core.list_interpreter_ids()}",
        ),
    ]
    # A full collection costs ~0.15 s once the suite's modules are loaded (a
    # third of the suite's time when it ran twice per test): only when
    # something looks left over, to free what only garbage still holds.
    if all(clean() for clean, _ in checks):
        return
    gc.collect()
    for clean, what in checks[:-1]:
        assert _settled(clean), f"outlived the test: {what()}"
    clean, what = checks[-1]  # interpreters go with their workers: no waiting
    assert clean(), f"outlived the test: {what()}"


@pytest.fixture
def pipe():
    """A pipe (read fd, write fd), closed after the test (tests may close either end first)."""
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


# The test sets (AIOSUBINTERP_TEST_SET). "full", the default, is the whole
# suite. "core" is what `make test` runs on the Pythons after the first two
# (scripts/test-matrix.sh): the suite without the files below, whose subject
# does not change with the CPython version or build (the documentation site,
# the benchmarks' tooling and history, the demo, the command line, the source
# rules, the ELF reader, the example web applications, Dask and serve, which
# run on both full-set Pythons), and with each async test on asyncio only
# (uvloop's variants run on the full-set Pythons).
ONCE_FILES = frozenset(
    {
        "test_bench.py",
        "test_bench_history.py",
        "test_cli.py",
        "test_dask.py",
        "test_demo.py",
        "test_demo_live.py",
        "test_docs.py",
        "test_elf.py",
        "test_examples_aiohttp.py",
        "test_examples_starlette.py",
        "test_serve.py",
        "test_sourcecode.py",
        "test_stub.py",
    }
)
TEST_SETS = ("full", "core")


def _test_set(config) -> str:
    name = os.environ.get("AIOSUBINTERP_TEST_SET", "full") or "full"
    if name not in TEST_SETS:
        raise pytest.UsageError(
            f"AIOSUBINTERP_TEST_SET={name!r}: not a test set; use one of {', '.join(TEST_SETS)}"
        )
    return name


def _on_uvloop(item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "uvloop" in callspec.id.split("-")


def pytest_report_header(config):
    name = _test_set(config)
    if name == "core":
        return "test set: core (AIOSUBINTERP_TEST_SET): asyncio only, without " + ", ".join(
            sorted(ONCE_FILES)
        )
    return "test set: full"


def pytest_collection_modifyitems(config, items):
    if _test_set(config) != "core":
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.path.name in ONCE_FILES or _on_uvloop(item) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
