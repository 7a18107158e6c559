"""Public exception classes, and rebuilding remote exceptions in the caller.

Worker-side module: imported inside interpreters, so it must not import asyncio.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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


def _stdlib_bases() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Extra bases of (ExecutionFailed, NotShareableError): ``concurrent.interpreters``' (3.14+).

    So that code written for the standard library's interpreters catches
    ours. NotShareableError comes from the C module ``_interpreters``.
    ExecutionFailed is defined in ``concurrent.interpreters``, whose import
    (queues, pickle) would lengthen every worker's start: in a worker
    interpreter ours derives from it only if something there imported it.
    """
    if sys.version_info < (3, 14):
        return (), ()
    try:
        import _interpreters
    except ImportError:  # a build without subinterpreters
        return (), ()
    stdlib: Any = sys.modules.get("concurrent.interpreters")
    if stdlib is None and _interpreters.get_current()[0] == _interpreters.get_main()[0]:
        import concurrent.interpreters

        stdlib = concurrent.interpreters
    failed = getattr(stdlib, "ExecutionFailed", None)
    return ((failed,) if failed is not None else ()), (_interpreters.NotShareableError,)


_FAILED_BASES, _NOT_SHAREABLE_BASES = _stdlib_bases()


class _RemoteType:
    """``excinfo.type`` of ExecutionFailed: the remote exception type's names."""

    def __init__(self, module: str, qualname: str) -> None:
        self.__module__ = module
        self.__qualname__ = qualname
        self.__name__ = qualname.rpartition(".")[2]

    def __repr__(self) -> str:
        return f"<remote type {self.__module__}.{self.__qualname__}>"


class _ExcInfo:
    """``excinfo`` of ExecutionFailed, with the fields of concurrent.interpreters' snapshot."""

    __slots__ = ("errdisplay", "formatted", "msg", "type")

    def __init__(self, type_: _RemoteType, msg: str, traceback_text: str) -> None:
        self.type = type_
        self.msg = msg
        name = (
            type_.__name__
            if type_.__module__ == "builtins"
            else (f"{type_.__module__}.{type_.__qualname__}")
        )
        self.formatted = f"{name}: {msg}" if msg else name
        self.errdisplay = traceback_text

    def __repr__(self) -> str:
        return f"<excinfo {self.formatted!r}>"


def _split_type_name(type_name: str) -> tuple[str, str]:
    """("module", "qualname") of "module.qualname": the longest prefix that is a known module."""
    parts = type_name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        if module in sys.modules:
            return module, ".".join(parts[cut:])
    if len(parts) == 1:
        return "builtins", type_name
    return parts[0], ".".join(parts[1:])


class ExecutionFailed(InterpreterError, *_FAILED_BASES):  # type: ignore[misc]
    """A task raised an exception inside its interpreter.

    Raised alone when the remote exception could not be rebuilt in the
    caller's interpreter; otherwise it is the ``__cause__`` of the rebuilt
    exception, so the remote traceback shows under it. On 3.14+ it is also a
    ``concurrent.interpreters.ExecutionFailed``.

    Attributes:
        type_name: ``module.qualname`` of the remote exception's type.
        remote_traceback: the remote traceback, formatted in the interpreter.
        excinfo: the same, shaped as ``concurrent.interpreters.ExecutionFailed.excinfo``:
            ``type`` (with ``__name__``, ``__qualname__``, ``__module__``),
            ``msg``, ``formatted``, ``errdisplay``.
    """

    def __init__(self, message: str, type_name: str = "", remote_traceback: str = "") -> None:
        # Not super().__init__: concurrent.interpreters.ExecutionFailed's
        # takes a snapshot object, not a message.
        Exception.__init__(self, message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback

    @property
    def excinfo(self) -> _ExcInfo:
        type_name = self.type_name or "builtins.Exception"
        remote = getattr(self, "_remote_type", None)
        if remote is not None:
            module, qualname = remote
        else:
            module, qualname = _split_type_name(type_name)
        message = str(self.args[0]) if self.args else ""
        prefix = f"{self.type_name}: "
        if self.type_name and message.startswith(prefix):
            message = message[len(prefix) :]
        elif message == self.type_name:
            message = ""
        return _ExcInfo(_RemoteType(module, qualname), message, self.remote_traceback)

    def __reduce__(self) -> tuple[Any, ...]:  # keep both attributes through pickling
        return (type(self), (self.args[0], self.type_name, self.remote_traceback))

    def __str__(self) -> str:
        if not self.remote_traceback:
            return str(self.args[0])
        return f'{self.args[0]}\n\nRemote traceback:\n"""\n{self.remote_traceback.rstrip()}\n"""'


class NotShareableError(InterpreterError, *_NOT_SHAREABLE_BASES, TypeError):  # type: ignore[misc]
    """A value cannot be sent to another interpreter (a lambda, a closure, an unpicklable object).

    On 3.14+ it is also a ``concurrent.interpreters.NotShareableError``.
    """


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
        if isinstance(refusal, ModuleRefusedError):  # ours (fallback="copy"): says why
            return ModuleRefusedError(str(refusal), name=refusal.name)
        refusal = refusal.__cause__ or refusal.__context__
    if not isinstance(refusal, ImportError) or _REFUSAL not in str(refusal):
        return None
    text = str(refusal)
    module = refusal.name or text.split("module ", 1)[-1].split(" ", 1)[0]
    return ModuleRefusedError(
        f"the extension module {module!r} refuses to load in a subinterpreter with its own "
        "GIL (it was not built for multiple interpreters). InterpreterPool(fallback='copy') "
        "loads a private copy of it in each interpreter where its binaries allow that, "
        "fallback=('copy', 'process') runs it on processes otherwise; or run this function "
        "where the module can load: in the main interpreter with asyncio.to_thread(), or in a "
        "process pool (aiosubinterp.ProcessPool, concurrent.futures.ProcessPoolExecutor).",
        name=module,
    )


def rebuild(info: tuple[Any, ...]) -> BaseException:
    """Turn a remote exception description into the exception the awaiter should see.

    info is (type_name, message, traceback_text, exception_or_None[, frames]):
    the fourth item was pickled in the worker and unpickled here, or is None
    when that was impossible; frames (aiosubinterp._tracebacks.capture) become
    the exception's ``__traceback__``, and the remote cause or context, with
    their own frames, hang below the ExecutionFailed that carries the text.
    """
    type_name, message, tb_text, exc = info[:4]
    frames = info[4] if len(info) > 4 else None
    summary = f"{type_name}: {message}" if message else type_name
    wrapper = ExecutionFailed(summary, type_name, tb_text)
    result: BaseException
    if exc is None or not isinstance(exc, BaseException):
        result = wrapper
    elif isinstance(
        exc, (KeyboardInterrupt, SystemExit, GeneratorExit, StopIteration, StopAsyncIteration)
    ):
        # These steer control flow (asyncio lets the first two escape its
        # loop): delivered as a plain failure, never re-raised as themselves.
        wrapper.args = (f"the task raised {type_name}({message}) in its interpreter",)
        result = wrapper
    else:
        tp = type(exc)
        wrapper._remote_type = (tp.__module__, tp.__qualname__)  # exact, for excinfo
        if tb_text:
            exc.__cause__ = wrapper
        result = exc
    if frames is not None:
        try:
            from aiosubinterp import _tracebacks
            from aiosubinterp._inside import marshal

            chain_on = wrapper if result is not wrapper and tb_text else result
            _tracebacks.attach(result, frames, chain_on, marshal.loads, _chained_failure)
        except Exception:  # noqa: BLE001 - the text form (the cause) still says where
            pass
    return result


def _chained_failure(type_name: object, message: object) -> ExecutionFailed:
    """A remote cause or context that cannot be rebuilt here."""
    summary = f"{type_name}: {message}" if message else str(type_name)
    return ExecutionFailed(summary, str(type_name))


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


# -- process backend (aiosubinterp._process.pool) --------------------------------------


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
