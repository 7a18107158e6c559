"""Public exception classes, and rebuilding remote exceptions in the caller.

Worker-side module: imported inside interpreters, so it must not import asyncio.
"""

from __future__ import annotations

__all__ = [
    "BrokenChannelError",
    "BrokenPoolError",
    "ChannelClosedError",
    "EndOfChannel",
    "ExecutionFailed",
    "FallbackWarning",
    "ForkWarning",
    "InterpreterError",
    "ModuleRefusedError",
    "NotShareableError",
    "PoolClosedError",
    "WorkerCrashedError",
    "WouldBlock",
    "rebuild",
]


class InterpreterError(Exception):
    """Base class of aiosubinterp's own errors."""


class ExecutionFailed(InterpreterError):
    """A task raised an exception inside its interpreter.

    Raised alone when the remote exception could not be rebuilt in the
    caller's interpreter; otherwise it is the ``__cause__`` of the rebuilt
    exception, so the remote traceback shows under it.

    Attributes:
        type_name: ``module.qualname`` of the remote exception's type.
        remote_traceback: the remote traceback, formatted in the interpreter.
    """

    def __init__(self, message: str, type_name: str = "", remote_traceback: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback

    def __reduce__(self):  # keep both attributes through pickling
        return (type(self), (self.args[0], self.type_name, self.remote_traceback))

    def __str__(self) -> str:
        if not self.remote_traceback:
            return str(self.args[0])
        return f'{self.args[0]}\n\nRemote traceback:\n"""\n{self.remote_traceback.rstrip()}\n"""'


class NotShareableError(InterpreterError, TypeError):
    """A value cannot be sent to another interpreter (a lambda, a closure, an unpicklable object)."""


class PoolClosedError(InterpreterError, RuntimeError):
    """The pool or interpreter is closed (or closing) and accepts no new work."""


class BrokenPoolError(InterpreterError, RuntimeError):
    """The pool could not start its interpreters (preload or initializer failed)."""


class ModuleRefusedError(InterpreterError, ImportError):
    """An extension module refuses to load in a subinterpreter with its own GIL."""


_REFUSAL = "does not support loading in subinterpreters"


def refusal_from(exc: BaseException) -> ModuleRefusedError | None:
    """If exc is CPython's "module X does not support loading in subinterpreters", explain it."""
    if not isinstance(exc, ImportError) or isinstance(exc, ModuleRefusedError):
        return None
    # An ImportError raised while handling a refusal is explained by it: on
    # 3.12, xml.etree.ElementTree's parser says "No module named expat" when
    # pyexpat refused to load.
    refusal: BaseException | None = exc
    for _ in range(8):
        if not isinstance(refusal, ImportError) or _REFUSAL in str(refusal):
            break
        refusal = refusal.__cause__ or refusal.__context__
    if not isinstance(refusal, ImportError) or _REFUSAL not in str(refusal):
        return None
    text = str(refusal)
    module = refusal.name or text.split("module ", 1)[-1].split(" ", 1)[0]
    return ModuleRefusedError(
        f"the extension module {module!r} refuses to load in a subinterpreter with its own "
        "GIL (it was not built for multiple interpreters). Run this function where the "
        "module can load instead: in the main interpreter with asyncio.to_thread(), or in a "
        "process pool (concurrent.futures.ProcessPoolExecutor); keep the imports of that "
        "module out of the functions you send to aiosubinterp.",
        name=module,
    )


def rebuild(info: tuple) -> BaseException:
    """Turn a remote exception description into the exception the awaiter should see.

    info is (type_name, message, traceback_text, exception_or_None): the last
    item was pickled in the worker and unpickled here, or is None when that
    was impossible.
    """
    type_name, message, tb_text, exc = info
    wrapper = ExecutionFailed(f"{type_name}: {message}" if message else type_name, type_name, tb_text)
    if exc is None or not isinstance(exc, BaseException):
        return wrapper
    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit, StopIteration,
                        StopAsyncIteration)):
        # These steer control flow (asyncio lets the first two escape its
        # loop): delivered as a plain failure, never re-raised as themselves.
        wrapper.args = (f"the task raised {type_name}({message}) in its interpreter",)
        return wrapper
    if tb_text:
        exc.__cause__ = wrapper
    return exc


class EndOfChannel(Exception):
    """Flow signal: every send end of the channel is closed and its buffer is drained.

    ``async for`` / ``for`` over a receive end stop on it. From ``select()``,
    ``index`` says which of the given receive ends ended (else it is None).
    """

    def __init__(self, *args: object, index: int | None = None) -> None:
        super().__init__(*args)
        self.index = index


class WouldBlock(Exception):
    """Flow signal: a ``*_nowait`` channel operation cannot complete right now."""


class ChannelClosedError(InterpreterError, RuntimeError):
    """This channel end is closed (by this code or another task): it cannot be used any more."""


class BrokenChannelError(InterpreterError, RuntimeError):
    """Every receive end of the channel is closed: nobody can ever receive what is sent."""


# -- process backend (aiosubinterp._process) --------------------------------------


class WorkerCrashedError(BrokenPoolError):
    """The worker process running the task died (``os._exit``, a signal, a crash in C).

    Only that task fails: the process pool starts a new worker in its place.
    """


class ForkWarning(RuntimeWarning):
    """``os.fork()`` (or anything that forks) next to live interpreters.

    CPython cannot fork a process that has subinterpreters: the child dies in
    CPython's own after-fork code (or hangs, on 3.12). Issued once per
    process, just before the first such fork; the parent and its pools are not
    affected. Silence it with ``warnings.filterwarnings("ignore",
    category=aiosubinterp.ForkWarning)`` once the fork is known to be harmless.
    """


class FallbackWarning(UserWarning):
    """An InterpreterPool(fallback="process") sends a module's functions to worker processes.

    Issued once per module, the first time one of its functions fails in an
    interpreter because an extension module refuses subinterpreters.
    """
