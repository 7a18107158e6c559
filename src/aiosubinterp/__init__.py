"""aiosubinterp: parallel Python on every core, awaited from asyncio.

Runs functions in CPython subinterpreters that each have their own GIL, on
their own OS threads, and lets asyncio (or uvloop) code await them.

This package is imported inside every worker interpreter too, so it loads
its asyncio-facing parts lazily: a worker never imports asyncio through us.
"""

# Every worker imports this package: no `from __future__ import annotations`
# (it imports the __future__ module, ~0.4 ms of each interpreter's start) and
# not `from typing import TYPE_CHECKING` (typing costs ~8 ms).
TYPE_CHECKING = False

__all__ = [
    "BrokenChannelError",
    "BrokenInterpreterPool",
    "BrokenPoolError",
    "ChannelClosedError",
    "DaskInterpreterExecutor",
    "DaskInterpreterPlugin",
    "DaskPool",
    "EndOfChannel",
    "ExecutionFailed",
    "FallbackWarning",
    "FileDescriptor",
    "ForkWarning",
    "Interpreter",
    "InterpreterError",
    "InterpreterInfo",
    "InterpreterPool",
    "InterpreterPoolExecutor",
    "ModuleRefusedError",
    "NotShareableError",
    "PoolClosedError",
    "ProcessPool",
    "RecvChannel",
    "SendChannel",
    "SharedBuffer",
    "SharedLock",
    "Task",
    "WorkerCrashedError",
    "WouldBlock",
    "active_count",
    "get_current",
    "get_main",
    "list_all",
    "open_channel",
    "run",
    "runtime_info",
    "select",
    "select_sync",
    "serve",
    "share",
]

_LAZY = {
    # aiosubinterp/_version.py: the one place of the version (pyproject.toml reads it too)
    "__version__": "_version",
    "BrokenPoolError": "_errors",
    "ExecutionFailed": "_errors",
    "InterpreterError": "_errors",
    "ModuleRefusedError": "_errors",
    "NotShareableError": "_errors",
    "PoolClosedError": "_errors",
    "FallbackWarning": "_errors",
    "ForkWarning": "_errors",
    "WorkerCrashedError": "_errors",
    "ProcessPool": "_process.pool",
    "BrokenInterpreterPool": "_engine.executor",
    "InterpreterPoolExecutor": "_engine.executor",
    "Interpreter": "_engine.pool",
    "InterpreterInfo": "_introspect",
    "active_count": "_introspect",
    "get_current": "_introspect",
    "get_main": "_introspect",
    "list_all": "_introspect",
    "runtime_info": "_introspect",
    "InterpreterPool": "_engine.pool",
    "run": "_engine.pool",
    "Task": "_engine.task",
    "BrokenChannelError": "_errors",
    "ChannelClosedError": "_errors",
    "EndOfChannel": "_errors",
    "WouldBlock": "_errors",
    "RecvChannel": "_channels.ends",
    "SendChannel": "_channels.ends",
    "open_channel": "_channels.ends",
    "select": "_channels.select",
    "select_sync": "_channels.select",
    "serve": "_serve.main",
    "FileDescriptor": "_core",
    "share": "_core",
    "SharedBuffer": "_core",
    "SharedLock": "_core",
    # Dask: imported on first use only, so dask and distributed stay optional.
    "DaskInterpreterExecutor": "_dask.executor",
    "DaskInterpreterPlugin": "_dask.executor",
    "DaskPool": "_dask.pool",
}

if TYPE_CHECKING:
    from aiosubinterp._channels.ends import RecvChannel as RecvChannel
    from aiosubinterp._channels.ends import SendChannel as SendChannel
    from aiosubinterp._channels.ends import open_channel as open_channel
    from aiosubinterp._channels.select import select as select
    from aiosubinterp._channels.select import select_sync as select_sync
    from aiosubinterp._core import FileDescriptor as FileDescriptor
    from aiosubinterp._core import SharedBuffer as SharedBuffer
    from aiosubinterp._core import SharedLock as SharedLock
    from aiosubinterp._core import share as share
    from aiosubinterp._dask.executor import DaskInterpreterExecutor as DaskInterpreterExecutor
    from aiosubinterp._dask.executor import DaskInterpreterPlugin as DaskInterpreterPlugin
    from aiosubinterp._dask.pool import DaskPool as DaskPool
    from aiosubinterp._engine.executor import BrokenInterpreterPool as BrokenInterpreterPool
    from aiosubinterp._engine.executor import InterpreterPoolExecutor as InterpreterPoolExecutor
    from aiosubinterp._engine.pool import Interpreter as Interpreter
    from aiosubinterp._engine.pool import InterpreterPool as InterpreterPool
    from aiosubinterp._engine.pool import run as run
    from aiosubinterp._engine.task import Task as Task
    from aiosubinterp._errors import BrokenChannelError as BrokenChannelError
    from aiosubinterp._errors import BrokenPoolError as BrokenPoolError
    from aiosubinterp._errors import ChannelClosedError as ChannelClosedError
    from aiosubinterp._errors import EndOfChannel as EndOfChannel
    from aiosubinterp._errors import ExecutionFailed as ExecutionFailed
    from aiosubinterp._errors import FallbackWarning as FallbackWarning
    from aiosubinterp._errors import ForkWarning as ForkWarning
    from aiosubinterp._errors import InterpreterError as InterpreterError
    from aiosubinterp._errors import ModuleRefusedError as ModuleRefusedError
    from aiosubinterp._errors import NotShareableError as NotShareableError
    from aiosubinterp._errors import PoolClosedError as PoolClosedError
    from aiosubinterp._errors import WorkerCrashedError as WorkerCrashedError
    from aiosubinterp._errors import WouldBlock as WouldBlock
    from aiosubinterp._introspect import InterpreterInfo as InterpreterInfo
    from aiosubinterp._introspect import active_count as active_count
    from aiosubinterp._introspect import get_current as get_current
    from aiosubinterp._introspect import get_main as get_main
    from aiosubinterp._introspect import list_all as list_all
    from aiosubinterp._introspect import runtime_info as runtime_info
    from aiosubinterp._process.pool import ProcessPool as ProcessPool
    from aiosubinterp._serve.main import serve as serve
    from aiosubinterp._version import __version__ as __version__


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aiosubinterp' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"aiosubinterp.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})
