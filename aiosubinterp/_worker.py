"""What runs inside a worker interpreter: setup, resolving functions, running jobs.

Worker-side module: it must not import asyncio or uvloop (uvloop refuses to
load in a subinterpreter; 3.12.1 aborts at exit after one imported asyncio).
"""

from __future__ import annotations

import importlib
import sys

from aiosubinterp import _marshal
from aiosubinterp._errors import NotShareableError, refusal_from

__all__ = ["Runner", "describe_exception"]

JOB_CALL = 1
JOB_EXEC = 2


def describe_exception(exc: BaseException) -> tuple:
    """(type_name, message, traceback_text, exception_or_None), ready to cross back."""
    import traceback

    refused = refusal_from(exc)
    if refused is not None:
        refused.__cause__ = exc
        exc = refused
    tp = type(exc)
    type_name = f"{tp.__module__}.{tp.__qualname__}"
    if tp.__module__ == _marshal.MAIN_ALIAS:
        type_name = f"__main__.{tp.__qualname__}"
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = f"<unprintable {tp.__qualname__}>"
    tb_text = ""
    if exc.__traceback__ is not None:  # raised there, not made up to report a local failure
        try:
            tb_text = "".join(traceback.format_exception(exc))
        except Exception:  # noqa: BLE001
            pass
    try:
        _marshal.loads(_marshal.dumps(exc))  # only send what can be rebuilt
        carried: object = _PickledException(exc)
    except Exception:  # noqa: BLE001
        carried = None
    return (type_name, message, tb_text, carried)


class _PickledException:
    """Pickles as the exception itself, stripped of its traceback."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self):
        return _marshal.loads, (_marshal.dumps(self.exc),)


# On 3.12.1 CPython runs a single-phase extension's init function inside the
# subinterpreter before refusing it, which corrupts the heap: the process
# aborts at exit ("free(): invalid pointer"). Refuse the well-known ones
# before CPython touches them. 3.13 refuses cleanly and needs no list.
REFUSED_ON_312 = frozenset({
    "readline", "_curses", "_curses_panel", "curses", "_ctypes",
    "ctypes", "pyexpat", "_lsprof", "cProfile", "uvloop", "numpy",
})


class _RefuseKnown:
    """Meta-path finder that refuses REFUSED_ON_312 modules up front (3.12 only)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.partition(".")[0]
        if name in REFUSED_ON_312 or top in REFUSED_ON_312:
            raise ImportError(f"module {name} does not support loading in subinterpreters",
                              name=name)
        return None


class Runner:
    """Per-worker state: setup, function cache, the job dispatcher."""

    def __init__(self, setup: tuple) -> None:
        main_ref, preload, initializer, settings = setup
        self._main_ref = main_ref
        self._main_module = None
        self._functions: dict[tuple[str, str], object] = {}
        self._namespace = sys.modules["__main__"].__dict__
        _marshal.main_importer = self.main_module
        if sys.version_info[:2] == (3, 12):
            sys.meta_path.insert(0, _RefuseKnown)
        if settings is not None:
            self.apply_settings(settings)
        for name in preload:
            try:
                importlib.import_module(name)
            except BaseException as exc:
                refused = refusal_from(exc)
                if refused is not None:
                    raise refused from exc
                raise
        if initializer is not None:
            self.run(JOB_CALL, initializer)

    def apply_settings(self, settings: tuple) -> None:
        (path,) = settings
        # No importlib.invalidate_caches(): new entries have no cached finder
        # yet, and on 3.13 it imports importlib.metadata (~40 ms, 88 modules).
        sys.path[:] = path

    def main_module(self):
        """The user's script, imported under another name (multiprocessing's spawn does the same)."""
        if self._main_module is not None:
            return self._main_module
        if self._main_ref is None:
            raise NotShareableError(
                "this function is defined in the main script, but the main script has no file "
                "a worker can import (interactive session or -c). Move it to a module."
            )
        kind, where = self._main_ref
        try:
            if kind == "module":
                module = importlib.import_module(where)
            else:
                import importlib.util

                spec = importlib.util.spec_from_file_location(_marshal.MAIN_ALIAS, where)
                if spec is None or spec.loader is None:
                    raise ImportError(f"cannot import {where!r}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[_marshal.MAIN_ALIAS] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[_marshal.MAIN_ALIAS]
                    raise
        except BaseException as exc:
            refused = refusal_from(exc)
            raise ImportError(
                f"a function of the main script {where!r} was sent to a worker, which had to "
                f"import that script and failed: {type(exc).__name__}: {refused or exc}. "
                "Keep worker functions in a module that imports cleanly in an interpreter, "
                "and guard the script's top-level code with `if __name__ == '__main__':`."
            ) from exc
        self._main_module = module
        return module

    def resolve(self, module: str, qualname: str) -> object:
        key = (module, qualname)
        fn = self._functions.get(key)
        if fn is None:
            mod = self.main_module() if module == "__main__" else importlib.import_module(module)
            fn = mod
            for part in qualname.split("."):
                fn = getattr(fn, part)
            self._functions[key] = fn
        return fn

    def run(self, kind: int, payload: object) -> object:
        if kind == JOB_CALL:
            module, target, args, kw = payload
            fn = target if module is None else self.resolve(module, target)
            try:
                return fn(*args, **dict(kw)) if kw else fn(*args)
            except ImportError as exc:
                refused = refusal_from(exc)
                if refused is not None:
                    raise refused from exc
                raise
        if kind == JOB_EXEC:
            code = compile(payload, "<aiosubinterp exec>", "exec")
            exec(code, self._namespace)
            return None
        raise ValueError(f"aiosubinterp: unknown job kind {kind}")

    def describe(self, exc: BaseException) -> tuple:
        return describe_exception(exc)

    def describe_unsendable_result(self, value: object, exc: BaseException) -> tuple:
        err = NotShareableError(
            f"the task returned a {type(value).__name__}, which cannot be sent back to the "
            f"caller: {type(exc).__name__}: {exc}. Return plain data (or a picklable object)."
        )
        return describe_exception(err)

    def describe_minimal(self, exc: BaseException) -> tuple:
        return (f"{type(exc).__module__}.{type(exc).__qualname__}", repr(exc), "", None)

    def shutdown(self) -> None:
        _marshal.main_importer = None
        self._functions.clear()
