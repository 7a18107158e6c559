"""CPython's own concurrent.futures tests, run against aiosubinterp.InterpreterPoolExecutor.

The running interpreter's ``test.test_concurrent_futures`` package (Debian:
``libpython3.X-testsuite``) builds its test cases from mixins that take the
executor type from a class attribute. This module builds the same cases with
our executor and lets pytest collect them: one pytest test per CPython test.

- every Python: the executor contract (``executor.ExecutorTest``), ``wait``,
  ``as_completed``, ``shutdown`` and initializer tests (the ThreadPool-style
  mixins);
- 3.14+: also ``test_interpreter_pool``'s tests of the standard library's own
  ``InterpreterPoolExecutor`` (they include ``ExecutorTest``) and its asyncio
  tests.

Tests that start a child Python (``assert_python_ok``) import the executor
there by its name from ``concurrent.futures``: for ours, the child's script
first puts ours under that name.

The few deliberate differences are listed in DIFFERENCES with the reason
(docs/how-to/executor.md lists them too); those tests are reported as
xfail, and as a failure if they start passing.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import sys
import unittest
from unittest import mock

import pytest

import aiosubinterp as asi

_PACKAGE = "test.test_concurrent_futures"
_DEBIAN = f"libpython{sys.version_info[0]}.{sys.version_info[1]}-testsuite"

try:
    _found = importlib.util.find_spec(_PACKAGE) is not None
except ImportError:  # no "test" package at all
    _found = False
if not _found:
    pytest.skip(
        f"CPython's test package ({_PACKAGE}) is not installed for {sys.executable}: "
        f"on Debian or Ubuntu install {_DEBIAN} (the chroot of scripts/pythons.sh has it)",
        allow_module_level=True,
    )

# Present but broken is a failure, not a skip.
cf_util = importlib.import_module(f"{_PACKAGE}.util")
cf_executor = importlib.import_module(f"{_PACKAGE}.executor")
cf_wait = importlib.import_module(f"{_PACKAGE}.test_wait")
cf_as_completed = importlib.import_module(f"{_PACKAGE}.test_as_completed")
cf_shutdown = importlib.import_module(f"{_PACKAGE}.test_shutdown")
cf_init = importlib.import_module(f"{_PACKAGE}.test_init")
try:
    cf_interp = importlib.import_module(f"{_PACKAGE}.test_interpreter_pool")
except ImportError:  # before 3.14: the standard library has no InterpreterPoolExecutor
    cf_interp = None


from test.support import script_helper  # noqa: E402 - present with the package above

# The child Python of assert_python_ok: our executor under the stdlib's name.
# Only in the script run as __main__: a worker that imports the script (to
# find a function defined there) must not import the asyncio side of us.
_SWAP = (
    "if __name__ == '__main__': import concurrent.futures, aiosubinterp; "
    "concurrent.futures.InterpreterPoolExecutor = aiosubinterp.InterpreterPoolExecutor\n"
)


def _with_ours(assert_python_ok):
    @functools.wraps(assert_python_ok)
    def run(*args, **env_vars):
        args = list(args)
        if "-c" in args:
            i = args.index("-c") + 1
            args[i] = _SWAP + args[i]
        elif args and str(args[0]).endswith(".py"):
            with open(args[0], encoding="utf-8") as f:
                text = f.read()
            with open(args[0], "w", encoding="utf-8") as f:
                f.write(_SWAP + text)
        return assert_python_ok(*args, **env_vars)

    return run


class OursMixin(cf_util.ExecutorMixin):
    """ExecutorMixin with our executor (InterpreterPoolMixin / ThreadPoolMixin with it swapped)."""

    executor_type = asi.InterpreterPoolExecutor

    def setUp(self):
        patcher = mock.patch.object(
            cf_shutdown, "assert_python_ok", _with_ours(cf_shutdown.assert_python_ok)
        )
        patcher.start()
        self.addCleanup(patcher.stop)
        patcher = mock.patch.object(
            script_helper, "assert_python_ok", _with_ours(script_helper.assert_python_ok)
        )
        patcher.start()
        self.addCleanup(patcher.stop)
        super().setUp()

    def create_event(self):
        # As the standard library's InterpreterPoolMixin: a threading.Event
        # cannot cross to an interpreter.
        self.skipTest("InterpreterPoolExecutor doesn't support events")


# -- the ThreadPool-style mixins, every Python -------------------------------------------

if cf_interp is None:

    class TestExecutor(OursMixin, cf_executor.ExecutorTest, cf_util.BaseTestCase):
        pass


class TestWait(OursMixin, cf_wait.WaitTests, cf_util.BaseTestCase):
    pass


class TestAsCompleted(OursMixin, cf_as_completed.AsCompletedTests, cf_util.BaseTestCase):
    pass


class TestShutdown(OursMixin, cf_shutdown.ExecutorShutdownTest, cf_util.BaseTestCase):
    pass


class TestInitializer(OursMixin, cf_init.InitializerMixin, cf_util.BaseTestCase):
    pass


class TestFailingInitializer(OursMixin, cf_init.FailingInitializerMixin, cf_util.BaseTestCase):
    pass


# -- the standard library's InterpreterPoolExecutor tests, 3.14+ -------------------------

if cf_interp is not None:

    class TestInterpreterPoolExecutor(OursMixin, cf_interp.InterpreterPoolExecutorTest):
        pass

    class TestAsyncio(OursMixin, cf_interp.AsyncioTest):
        @classmethod
        def setUpClass(cls):
            # CPython's class asserts that no event loop policy is set: under
            # pytest one is (asyncio.Runner makes the default one). Unset it,
            # as CPython's class does when it is done.
            asyncio.events._set_event_loop_policy(None)
            super().setUpClass()


# -- deliberate differences ----------------------------------------------------------------

_AT_SUBMIT = (
    "we refuse a callable that cannot cross (a closure, an instance or bound method "
    "of a class defined inside a function) at once with NotShareableError, where the "
    "standard library's executor raises it (or BrokenInterpreterPool, for an "
    "initializer) later, from result()"
)

DIFFERENCES: dict[tuple[str, str], str] = {
    ("TestInterpreterPoolExecutor", "test_submit_closure"): _AT_SUBMIT,
    ("TestInterpreterPoolExecutor", "test_submit_local_instance"): _AT_SUBMIT,
    ("TestInterpreterPoolExecutor", "test_submit_instance_method"): _AT_SUBMIT,
    ("TestInterpreterPoolExecutor", "test_init_closure"): _AT_SUBMIT.replace(
        "at once", "at once, in the constructor,"
    ),
    ("TestInterpreterPoolExecutor", "test_init_instance_method"): _AT_SUBMIT.replace(
        "at once", "at once, in the constructor,"
    ),
    ("TestInterpreterPoolExecutor", "test_pickle_errors_propagate"): (
        "submit() refuses what is not callable at once with TypeError (the test submits a "
        "PickleShenanigans instance, which is not); the standard library's executor fails "
        "later, from result(), because unpickling the call fails first in the interpreter"
    ),
    ("TestInterpreterPoolExecutor", "test_idle_thread_reuse"): (
        "all max_workers interpreters start together at the first submit() (off the caller's "
        "thread), where ThreadPoolExecutor adds a thread only when none is idle: _threads has "
        "max_workers entries, not 1"
    ),
    ("TestInterpreterPoolExecutor", "test_submit_exception_in_func"): (
        "the cause of a rebuilt exception is aiosubinterp.ExecutionFailed, a subclass of "
        "concurrent.interpreters.ExecutionFailed (with the same excinfo), and the test "
        "asserts the exact type"
    ),
    ("TestInterpreterPoolExecutor", "test_init_exception_in_func"): (
        "the remote traceback is headed 'Remote traceback:' (as ProcessPoolExecutor's), not "
        "'Uncaught in the interpreter:'"
    ),
}


def _expect_difference(method, reason: str):
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        try:
            method(self, *args, **kwargs)
        except unittest.SkipTest:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure is the expected one
            pytest.xfail(f"deliberate difference: {reason} [{type(exc).__name__}: {exc}]")
        pytest.fail(f"passes now: remove it from DIFFERENCES ({reason})")

    return run


def _mark_differences() -> None:
    for (class_name, method), reason in DIFFERENCES.items():
        cls = globals().get(class_name)
        if cls is not None:  # classes of this Python's test package only
            setattr(cls, method, _expect_difference(getattr(cls, method), reason))


_mark_differences()
