"""Introspection: which interpreters exist, which one runs the caller.

Worker-side module (works in main and in workers alike): no asyncio.

These functions return InterpreterInfo snapshots, not Interpreter handles.
An ``Interpreter`` owns a worker and lives in the main interpreter, on an
event loop; but the interpreter running the caller may be a pool's worker
(which has no Interpreter object), one created by other code (the stdlib's
``_interpreters``), or the caller may itself be a worker, which cannot hold
main's objects. A small immutable value that can be compared, hashed,
pickled and sent anywhere fits all of these. ``Interpreter.info()`` gives
the same value for an ``Interpreter`` handle.
"""

from __future__ import annotations

from aiosubinterp import _core

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["InterpreterInfo", "active_count", "get_current", "get_main", "list_all", "runtime_info"]


class InterpreterInfo:
    """A snapshot describing one CPython interpreter of this process.

    Attributes:
        id: CPython's interpreter id (``0`` is the main interpreter; ids are
            never reused within a process).
        is_main: whether it is the main interpreter.
        managed: whether aiosubinterp runs a worker in it (a pool's or an
            ``Interpreter``'s); False for main and for interpreters created
            by other code.

    Equal infos describe the same interpreter. Thread-safety: immutable.
    """

    __slots__ = ("id", "is_main", "managed")

    id: int
    is_main: bool
    managed: bool

    def __init__(self, id: int, is_main: bool, managed: bool) -> None:
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "is_main", is_main)
        object.__setattr__(self, "managed", managed)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"InterpreterInfo is immutable: cannot set {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return InterpreterInfo, (self.id, self.is_main, self.managed)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InterpreterInfo):
            return NotImplemented
        return self.id == other.id

    def __hash__(self) -> int:
        return hash(("InterpreterInfo", self.id))

    def is_alive(self) -> bool:
        """Whether this interpreter still exists (not destroyed yet)."""
        return self.id in _core.list_interpreter_ids()

    def __repr__(self) -> str:
        kind = "main" if self.is_main else ("worker" if self.managed else "other")
        return f"<aiosubinterp.InterpreterInfo id={self.id} {kind}>"


def _managed_ids() -> set[int]:
    return {interp_id for _, interp_id, _ in _core.live_workers()}


def _info(interp_id: int, main_id: int, managed: set[int]) -> InterpreterInfo:
    return InterpreterInfo(interp_id, interp_id == main_id, interp_id in managed)


def get_current() -> InterpreterInfo:
    """The interpreter running the caller: main, or the worker a task runs in."""
    return _info(_core.current_interpreter_id(), _core.main_interpreter_id(), _managed_ids())


def get_main() -> InterpreterInfo:
    """The main interpreter."""
    main_id = _core.main_interpreter_id()
    return InterpreterInfo(main_id, True, False)


def list_all() -> list[InterpreterInfo]:
    """Every interpreter alive in this process, main first (also those other code created)."""
    main_id = _core.main_interpreter_id()
    managed = _managed_ids()
    infos = [_info(i, main_id, managed) for i in _core.list_interpreter_ids()]
    infos.sort(key=lambda info: (not info.is_main, info.id))
    return infos


def active_count() -> int:
    """Number of interpreters alive in this process, main included (like threading.active_count)."""
    return len(_core.list_interpreter_ids())


def runtime_info() -> dict[str, Any]:
    """What this Python and machine offer: the facts ``python -m aiosubinterp info`` prints.

    Returns a new dict (plain values, safe to log or send anywhere) with:

    - ``version``: aiosubinterp's version;
    - ``python``: the Python version, e.g. ``"3.13.0"``;
    - ``per_interpreter_gil``: whether interpreters get a GIL of their own
      (PEP 684, CPython 3.12+);
    - ``free_threaded``: whether this is a free-threaded build (no GIL at all);
    - ``cpus``: CPUs in the machine; ``default_size``: the CPUs this process
      may use, which is the default number of workers of a pool;
    - ``wakeup``: how workers wake the event loop, ``"eventfd"`` or ``"pipe"``
      (``AIOSUBINTERP_WAKEUP=pipe`` forces the pipe);
    - ``blocked_modules``: C accelerator modules kept out of workers on this
      Python because of CPython bugs there (workers use the pure-Python
      fallback; see the docs' list of CPython bugs);
    - ``main_interpreter_id``: the main interpreter's id.

    Raises ValueError if ``AIOSUBINTERP_WAKEUP`` names no mechanism.
    """
    import os
    import platform
    import sys
    import sysconfig

    from aiosubinterp import _quirks
    from aiosubinterp._engine import hub, lifecycle
    from aiosubinterp._version import __version__

    return {
        "version": __version__,
        "python": platform.python_version(),
        "per_interpreter_gil": sys.version_info >= (3, 12),
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "cpus": os.cpu_count(),
        "default_size": lifecycle.default_size(),
        "wakeup": hub.wakeup_mechanism(),
        "blocked_modules": tuple(_quirks.blocked_modules()),
        "main_interpreter_id": _core.main_interpreter_id(),
    }
