"""How values, functions and exceptions cross between interpreters.

Worker-side module: imported inside interpreters, so it must not import
asyncio. The compiled module encodes builtin immutables natively and calls
``dumps``/``loads`` here for everything else (pickle protocol 5).

Functions cross by reference (module and qualified name). Functions of the
user's script (``__main__``) are found in a worker by importing that script
under the name ``__aiosubinterp_main__``, as multiprocessing's spawn does.
A function defined inside another function that captures nothing (no
closure) crosses as its code object, bound in the worker to the globals of
its module there (see ``by_code``).

A function no worker can import by name, because it was defined in an
interactive session (Jupyter, the REPL, ``python -c``, stdin), crosses by
value: pickled with cloudpickle (its code and the globals it uses), once per
function object, and loaded in the worker by plain pickle (see ``by_value``).
Values (arguments, results, channel items) whose pickle refers to such a
class or function are pickled again with cloudpickle, which sends those by
value, and only they pay for it (see ``_by_value_or_raise``): in main when
the plain pickle names the interactive ``__main__``, in a worker when it
fails for a class that came by value. Main loads a class of its own that
comes back as that class itself (cloudpickle's class tracker).
"""

import sys

# Neither `from __future__ import annotations` nor `import types`: this module
# is imported in every worker at start-up, and each costs ~0.4-0.7 ms of every
# interpreter's start. The types it needs are taken from objects at hand.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import types
    from typing import Any


def _plain_function() -> None:
    pass


_FunctionType = type(_plain_function)
_BuiltinFunctionType = type(len)
_CodeType = type(_plain_function.__code__)

__all__ = [
    "JOB_CALL",
    "JOB_EXEC",
    "MAIN_ALIAS",
    "Resolver",
    "by_code",
    "by_value",
    "call_payload",
    "describe_exception",
    "dumps",
    "dumps_ends",
    "dumps_oob",
    "function_ref",
    "import_module",
    "loads",
]

MAIN_ALIAS = "__aiosubinterp_main__"

# The job kinds of the compiled queue (_core.JOB_KIND_CALL/_EXEC; _core is not
# imported here at module level).
JOB_CALL = 1
JOB_EXEC = 2

# This worker's Resolver (Resolver.install: an interpreter's Runner, a worker
# process's loop); None in main. Unpickling asks it for the user's script.
resolver: "Resolver | None" = None


# pickle is imported on first use: a worker whose tasks only move builtin
# immutables never needs it, and it costs ~7 ms of each interpreter's start.
_pickle = None
_Unpickler = None
_EndPickler = None
_EndNotPicklable: type[BaseException] = TypeError  # _core.EndNotPicklableError once loaded


def import_module(name: str) -> object:
    """importlib.import_module(name), without importing importlib for an absolute name
    (it is not imported in workers at start-up: ~0.4-0.7 ms of each interpreter's start)."""
    if name.startswith("."):  # a relative name: import_module's own error
        import importlib

        return importlib.import_module(name)
    __import__(name)
    return sys.modules[name]


def import_main_script(kind: str, where: str) -> "types.ModuleType":
    """Import the user's main script in a worker, as multiprocessing's spawn does:
    by module name (kind "module", for ``python -m``) or from its file, under
    MAIN_ALIAS so that its ``if __name__ == "__main__":`` block does not run."""
    import importlib

    if kind == "module":
        return importlib.import_module(where)
    from importlib import util as import_util

    spec = import_util.spec_from_file_location(MAIN_ALIAS, where)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {where!r}")
    module = import_util.module_from_spec(spec)
    sys.modules[MAIN_ALIAS] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MAIN_ALIAS]
        raise
    return module


class Resolver:
    """What a worker's jobs call, found from their payloads: the one place that does it.

    Used by the three runtimes that run calls: an interpreter's Runner
    (_inside.worker), a worker process's job loop (_process.worker) and the
    profiler's wrapper of a job (_inside.profiling), which finds the job it
    wraps through ``marshal.resolver``. A call payload is made by
    ``call_payload`` in the caller: ``(module, target, args, kwargs[,
    context])``. A function crosses by module and qualified name (found here
    once, then cached), or, with module None, as the target itself (a
    function sent by value or by code). A function of the user's script
    (module ``__main__``) is found by importing that script here under
    MAIN_ALIAS (``main_module``), as multiprocessing's spawn does.

    Thread-safety: the worker's thread, which runs its jobs; no lock (the
    unpickling that calls main_module() on a thread a task started did not
    take one either).
    """

    __slots__ = ("_functions", "_main", "_main_ref", "_namespace", "_process")

    def __init__(self, main_ref: "tuple[str, str] | None", process: bool = False) -> None:
        """main_ref: how to import the user's script here (kind, where), or None when it
        has no file (an interactive session, ``python -c``). process: in a worker
        process rather than an interpreter (the wording of errors)."""
        self._main_ref = main_ref
        self._process = process
        self._main: types.ModuleType | None = None
        self._functions: dict[tuple[str, str], object] = {}
        self._namespace = sys.modules["__main__"].__dict__  # where exec jobs run

    def install(self) -> None:
        """Make this the worker's resolver (unpickling and the profiler use it)."""
        global resolver
        resolver = self

    def uninstall(self) -> None:
        """Forget the cache; the worker has no resolver any more (its last job ran)."""
        global resolver
        if resolver is self:
            resolver = None
        self._functions.clear()

    def main_module(self) -> "types.ModuleType":
        """The user's script, imported here under MAIN_ALIAS on first use."""
        if self._main is not None:
            return self._main
        worker = "a worker process" if self._process else "a worker"
        if self._main_ref is None:
            from aiosubinterp._errors import NotShareableError

            raise NotShareableError(
                "this function is defined in the main script, but the main script has no file "
                f"{worker} can import (interactive session or -c). Move it to a module."
            )
        kind, where = self._main_ref
        try:
            module = import_main_script(kind, where)
        except BaseException as exc:
            from aiosubinterp import _errors

            refused = _errors.refusal_from(exc)
            detail = str(refused or exc).rstrip(".")
            place = "a new process" if self._process else "an interpreter"
            guard = "guard the script's top-level code with `if __name__ == '__main__':`"
            message = (
                f"a function of the main script {where!r} was sent to {worker}, which had to "
                f"import that script and failed: {type(exc).__name__}: {detail}. Keep worker "
                f"functions in a module that imports cleanly in {place}"
                + ("." if guard in detail else f", and {guard}.")
            )
            if refused is not None:  # keeps its type: fallback="process" looks for it
                raise _errors.ModuleRefusedError(message, name=refused.name) from exc
            raise ImportError(message) from exc
        self._main = module
        return module

    def function(self, module: str, qualname: str) -> object:
        """The object ``module.qualname`` here (imported on first use, then cached)."""
        key = (module, qualname)
        fn = self._functions.get(key)
        if fn is None:
            mod = self.main_module() if module == "__main__" else import_module(module)
            fn = _getattr_path(mod, qualname)
            self._functions[key] = fn
        return fn

    def job(self, kind: int, payload: "Any") -> "tuple[Any, tuple[object, ...], Any, Any]":
        """(callable, args, kwargs or None, context or None) of a queued job.

        A call (JOB_CALL) payload is (module, target, args, kwargs[, context]):
        context is ((module, name, value), ...) for each of the pool's
        ``context_vars`` the caller had set when it submitted
        (aiosubinterp._engine.context; see ``context_var``). An exec job
        (JOB_EXEC) is source text, run in this interpreter's ``__main__``.
        """
        if kind == JOB_CALL:
            if len(payload) == 4:
                module, target, args, kw = payload
                context = None
            else:
                module, target, args, kw, context = payload
            if module is None:
                fn = callable_target(target)
            else:  # the cache read inline: this runs for every job
                fn = self._functions.get((module, target))
                if fn is None:
                    fn = self.function(module, target)
            return fn, args, dict(kw) if kw else None, context
        if kind == JOB_EXEC:
            code = compile(payload, "<aiosubinterp exec>", "exec")
            return exec, (code, self._namespace), None, None
        raise ValueError(f"aiosubinterp: unknown job kind {kind}")

    def call(self, payload: "tuple[Any, ...]") -> "tuple[Any, tuple[object, ...], Any, Any]":
        """As job() for a call payload (a worker process's jobs are all calls)."""
        return self.job(JOB_CALL, payload)

    def context_var(self, module: str, name: str) -> "Any":
        """This worker's own ContextVar ``module.name``: a clear error when it is
        missing here or is something else."""
        from _contextvars import ContextVar  # the builtin module: no `contextvars` import

        where = f"{module}.{name}"
        try:
            var = self.function(module, name)
        except BaseException as exc:
            from aiosubinterp._errors import refusal_from

            refused = refusal_from(exc) if isinstance(exc, ImportError) else None
            raise RuntimeError(
                f"the context variable {where} (in the pool's context_vars) could not be found "
                f"in this worker: {type(exc).__name__}: {refused or exc}. A context variable "
                "crosses by module and name: keep it at the top level of a module that imports "
                "cleanly in a worker."
            ) from exc
        if type(var) is not ContextVar:
            raise TypeError(
                f"the context variable {where} (in the pool's context_vars) is a "
                f"{type(var).__name__} in this worker, not a contextvars.ContextVar: the module "
                "must define it the same way in every interpreter and process."
            )
        return var


def _end_slot(index: int) -> object:
    """Stands for a channel end in a pickle made by dumps_ends/dumps_oob; loads() resolves it."""
    raise RuntimeError("aiosubinterp: a channel end reference was unpickled outside a transfer")


def _load_pickle() -> "Any":  # the pickle module
    global _pickle, _Unpickler, _EndPickler, _EndNotPicklable
    import pickle

    from aiosubinterp import _core

    end_type = _core.ChannelEnd

    class Unpickler(pickle.Unpickler):
        def __init__(self, file, *, buffers=None, ends=None) -> None:
            super().__init__(file, buffers=buffers)
            self._ends = ends

        def find_class(self, module: str, name: str):
            if module == "__main__" and resolver is not None:
                return _getattr_path(resolver.main_module(), name)
            if module == MAIN_ALIAS and resolver is None:
                module = "__main__"
            if module == __name__ and name == "_end_slot" and self._ends is not None:
                return self._ends.__getitem__
            if module == "cloudpickle.cloudpickle" and resolver is None:
                if name == "_make_skeleton_class":
                    return _make_class_keeping_known
                if name == "_class_setstate":
                    return _class_setstate_unless_known
            return super().find_class(module, name)

    class EndPickler(pickle.Pickler):
        """Leaves channel ends out of the pickle: they cross natively beside it."""

        def __init__(self, file, buffer_callback=None) -> None:
            super().__init__(file, protocol=5, buffer_callback=buffer_callback)
            self.ends: list[object] = []

        def reducer_override(self, obj: object) -> object:
            if isinstance(obj, end_type):
                self.ends.append(obj)  # the memo makes each end come here once
                return _end_slot, (len(self.ends) - 1,)
            return NotImplemented

    _pickle, _Unpickler, _EndPickler = pickle, Unpickler, EndPickler
    _EndNotPicklable = _core.EndNotPicklableError
    return pickle


# In main: classes of main that came back by value (a worker's result), whose
# definition main keeps as it is (see _make_class_keeping_known).
_known_classes: "Any" = None


def _make_class_keeping_known(*args: object) -> type:
    """cloudpickle's _make_skeleton_class, noting when it is one of main's own classes.

    A class sent by value from main and back is main's own class again
    (cloudpickle's class tracker); cloudpickle would then set its methods to
    the copies that came back, whose globals are a copy of main's, so that a
    global rebound in main later (a cell run again) would not be seen.
    """
    global _known_classes
    from cloudpickle import cloudpickle

    tracked = cloudpickle._DYNAMIC_CLASS_TRACKER_BY_ID.get(args[4])
    cls: type = cloudpickle._make_skeleton_class(*args)
    if tracked is not None and cls is tracked:
        if _known_classes is None:
            import weakref

            _known_classes = weakref.WeakSet()
        _known_classes.add(cls)
    return cls


def _class_setstate_unless_known(cls: type, state: object) -> type:
    if _known_classes is not None and cls in _known_classes:
        return cls
    from cloudpickle import cloudpickle

    result: type = cloudpickle._class_setstate(cls, state)
    return result


def dumps(obj: object) -> bytes:
    """A plain pickle (protocol 5); channel ends in obj are refused (EndNotPicklableError)."""
    return (_pickle or _load_pickle()).dumps(obj, protocol=5)


def _dumps_collecting(obj: object, buffer_callback) -> tuple[bytes, list[object]]:
    import io

    file = io.BytesIO()
    pickler = _EndPickler(file, buffer_callback)  # type: ignore[misc]
    pickler.dump(obj)
    return file.getvalue(), pickler.ends


def dumps_ends(obj: object) -> tuple[bytes, list[object]]:
    """(pickle of obj, the channel ends it refers to), for the transfer encoder."""
    pickle = _pickle or _load_pickle()
    try:
        data = pickle.dumps(obj, protocol=5)
    except _EndNotPicklable:
        # Rare: ends inside a pickled object. The plain pickler is the fast
        # path (no Python call per object); only these values pay for the hook.
        return _dumps_collecting(obj, None)
    except Exception as exc:  # noqa: BLE001 - raised again unless it is a class of main
        return _by_value_or_raise(obj, None, exc)
    if resolver is None and b"__main__" in data and _main_is_interactive():
        return _by_value_or_raise(obj, None, None)
    return data, []


def dumps_oob(obj: object, threshold: int) -> tuple[bytes, list[object], list[object]]:
    """(pickle of obj, PickleBuffers of threshold bytes or more left out-of-band,
    channel ends it refers to), for the transfer encoder."""
    pickle = _pickle or _load_pickle()
    oob: list[object] = []

    def keep_in_band(pb) -> bool:
        try:
            size = pb.raw().nbytes
        except BufferError:  # not contiguous: only in-band can copy it
            return True
        if size < threshold:
            return True
        oob.append(pb)
        return False

    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=keep_in_band)
    except _EndNotPicklable:
        oob.clear()
        data, ends = _dumps_collecting(obj, keep_in_band)
        return data, oob, ends
    except Exception as exc:  # noqa: BLE001 - raised again unless it is a class of main
        oob.clear()
        data, ends = _by_value_or_raise(obj, keep_in_band, exc)
        return data, oob, ends
    if resolver is None and b"__main__" in data and _main_is_interactive():
        oob.clear()
        data, ends = _by_value_or_raise(obj, keep_in_band, None)
        return data, oob, ends
    return data, oob, []


# A pickler (cloudpickle's) that sends classes and functions of an interactive
# __main__ by value, and everything else as the plain pickler does.
_ValuePickler: "Any" = None


def _value_pickler() -> "Any":
    """The by-value pickler class; ImportError without cloudpickle."""
    global _ValuePickler
    if _ValuePickler is None:
        import pickle

        import cloudpickle

        from aiosubinterp import _core

        end_type = _core.ChannelEnd
        by_value = cloudpickle.Pickler.reducer_override
        # cloudpickle's own test: whether an importable module holds obj.
        by_reference = cloudpickle.cloudpickle._should_pickle_by_reference

        class ValuePickler(cloudpickle.Pickler):  # type: ignore[misc]
            if cloudpickle.Pickler.__mro__[1] is pickle._Pickler:
                # The pure-Python pickler (_pickle does not load in a 3.12
                # worker): cloudpickle's `dispatch` (its reducers) hides the
                # save methods it looks up by type, and a function saved by
                # reference would fail.
                dispatch = pickle._Pickler.dispatch

            def __init__(self, file, buffer_callback=None) -> None:
                super().__init__(file, protocol=5, buffer_callback=buffer_callback)
                self.ends: list[object] = []

            def reducer_override(self, obj: object) -> object:
                if isinstance(obj, end_type):
                    self.ends.append(obj)
                    return _end_slot, (len(self.ends) - 1,)
                if (
                    isinstance(obj, (type, _FunctionType))
                    and getattr(obj, "__module__", None) not in ("__main__", "builtins")
                    and not by_reference(obj)
                ):
                    return NotImplemented  # fails by reference, as with the plain pickler
                return by_value(self, obj)

        _ValuePickler = ValuePickler
    return _ValuePickler


def _by_value_or_raise(
    obj: object, buffer_callback, error: Exception | None
) -> tuple[bytes, list[object]]:
    """(pickle of obj with the classes and functions of an interactive __main__ by value,
    the channel ends it refers to).

    error is the plain pickler's failure, raised again if this fails too or
    does not apply (only in main when __main__ is interactive, or in a worker
    that has loaded something by value). error None: the plain pickle referred
    to an interactive __main__, which no worker can import.
    """
    import io

    if error is not None and not (
        _main_is_interactive() if resolver is None else "cloudpickle" in sys.modules
    ):
        raise error
    try:
        pickler_type = _value_pickler()
    except ImportError:
        if error is not None:
            raise error from None
        from aiosubinterp._errors import NotShareableError

        raise NotShareableError(
            f"cannot send {_a(obj)} to an interpreter: it is (or holds) an instance of a class, "
            "or a function, defined in an interactive session, which a worker interpreter "
            "cannot import. Put the class in a module (a .py file) and import it, or install "
            "cloudpickle (pip install cloudpickle) to send it by value."
        ) from None
    file = io.BytesIO()
    pickler = pickler_type(file, buffer_callback)
    try:
        pickler.dump(obj)
    except Exception as exc:
        if error is not None:
            raise error from None
        from aiosubinterp._errors import NotShareableError

        raise NotShareableError(
            f"cannot send {_a(obj)} by value to an interpreter: it is (or holds) an instance "
            "of a class, or a function, defined in an interactive session, so it crosses with "
            f"its class's code and the globals that uses, and a part of those cannot be "
            f"pickled: {type(exc).__name__}: {exc}"
        ) from exc
    return file.getvalue(), pickler.ends


def _a(obj: object) -> str:
    return f"a {type(obj).__qualname__}"


def loads(
    data: bytes, buffers: list[object] | None = None, ends: list[object] | None = None
) -> object:
    import io

    if _Unpickler is None:
        _load_pickle()
    return _Unpickler(io.BytesIO(data), buffers=buffers, ends=ends).load()  # type: ignore[misc]


def _getattr_path(obj: object, qualname: str) -> object:
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


_ROUTINE_TYPES = (_FunctionType, _BuiltinFunctionType)


def function_ref(fn: object) -> tuple[str, str] | None:
    """(module, qualname) when fn can be found by name in another interpreter, else None."""
    from aiosubinterp._errors import NotShareableError

    if not isinstance(fn, _ROUTINE_TYPES):
        return None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if "<lambda>" in qualname:
        raise NotShareableError(
            f"cannot send the lambda {qualname!r} (from module {module!r}) to an interpreter: "
            "functions cross by module and name, and a lambda has no name there. "
            "Define it with `def` at the top level of a module."
        )
    if "<locals>" in qualname:
        captured = getattr(getattr(fn, "__code__", None), "co_freevars", ())
        why = (
            f"it uses the variables {', '.join(captured)} of the function around it "
            "(a closure), which cannot cross"
            if captured
            else "it is defined inside another function (a nested function), and functions "
            "cross by module and name"
        )
        raise NotShareableError(
            f"cannot send {qualname!r} (from module {module!r}) to an interpreter: {why}. "
            "Move it to the top level of a module and pass what it captured as arguments "
            "(functools.partial works)."
        )
    if module == MAIN_ALIAS:
        module = "__main__"
    mod = sys.modules.get(module)
    if mod is None:
        return None
    try:
        found = _getattr_path(mod, qualname)
    except AttributeError:
        return None
    if found is not fn:
        return None
    if module == "__main__" and resolver is None and _main_is_interactive():
        raise NotShareableError(
            f"cannot send {qualname!r}: it is defined in an interactive session, which a "
            "worker interpreter cannot import. Put it in a module (a .py file) and import it, "
            "or install cloudpickle (pip install cloudpickle) to send it by value."
        )
    return module, qualname


def _main_is_interactive() -> bool:
    """Whether __main__ has no file a worker could import (the REPL, ``python -c``, stdin)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)  # "<stdin>" for `python -`
    return getattr(main, "__spec__", None) is None and not (
        isinstance(path, str) and path.endswith(".py")
    )


def _is_interactive(fn: object) -> bool:
    """Whether fn was defined where no worker can import it: a Jupyter cell, the REPL,
    ``python -c`` or stdin (by its code's file name, or by a __main__ without a file)."""
    if type(fn) is not _FunctionType:
        return False
    filename = fn.__code__.co_filename
    if filename.startswith("<"):  # <stdin>, <string>, <console>, <ipython-input-1-...>
        return not filename.startswith("<frozen")
    if "ipykernel_" in filename:  # ipykernel's cells: /tmp/ipykernel_<pid>/<hash>.py
        import re

        return re.search(r"ipykernel_\d+[/\\]\d+\.py$", filename) is not None
    return fn.__module__ == "__main__" and resolver is None and _main_is_interactive()


class _CodeFunction:
    """A nested function that captures nothing, crossing as its code object.

    Pickles as a call of ``function_from_code`` in the receiving interpreter.
    A function that reads or writes globals of its module gets the globals
    of that module there (imported if need be): what a module-level function
    of the module sees too. One that only uses builtins and its arguments
    gets fresh globals, and its module is not imported. Defaults cross by copy.
    """

    __slots__ = ("fn", "module", "needs_module")

    def __init__(self, fn: "types.FunctionType", module: str, needs_module: bool) -> None:
        self.fn = fn
        self.module = module
        self.needs_module = needs_module

    def __reduce__(self):
        import marshal

        fn = self.fn
        return function_from_code, (
            self.module,
            fn.__globals__.get("__package__"),
            fn.__qualname__,
            marshal.dumps(fn.__code__),
            fn.__defaults__,
            fn.__kwdefaults__,
            self.needs_module,
        )

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.fn.__qualname__} by code>"


# Instructions that read or write a module's namespace. Class bodies look
# their names up there too (LOAD_NAME, LOAD_FROM_DICT_OR_GLOBALS).
_NAMESPACE_OPS = ("GLOBAL", "LOAD_NAME", "STORE_NAME", "DELETE_NAME", "DICT_OR_GLOBALS")
# code object -> whether it needs its module's globals.
_needs_module: "dict[types.CodeType, bool]" = {}


def _uses_module_globals(code: "types.CodeType", namespace: dict[str, object]) -> bool:
    """Whether code (or code nested in it) uses a name of its module, not only builtins."""
    import builtins
    import dis

    for ins in dis.get_instructions(code):
        if any(op in ins.opname for op in _NAMESPACE_OPS):
            name = ins.argval
            if (
                ins.opname != "LOAD_GLOBAL"
                or not isinstance(name, str)
                or name in namespace
                or not hasattr(builtins, name)
            ):
                return True
    return any(
        isinstance(const, _CodeType) and _uses_module_globals(const, namespace)
        for const in code.co_consts
    )


def by_code(fn: object) -> _CodeFunction | None:
    """A picklable stand-in for fn when it is a nested function that captures nothing, else None.

    Lambdas are not sent this way (they keep their clear error): a function
    defined with ``def`` inside another function, with no closure cells,
    whose globals are its module's.
    """
    if type(fn) is not _FunctionType or fn.__closure__ is not None:
        return None
    qualname = fn.__qualname__
    if "<locals>" not in qualname or "<lambda>" in qualname:
        return None
    module = fn.__module__
    mod = sys.modules.get(module) if isinstance(module, str) else None
    if mod is None or fn.__globals__ is not vars(mod):
        return None
    code = fn.__code__
    needs_module = _needs_module.get(code)
    if needs_module is None:
        needs_module = _uses_module_globals(code, fn.__globals__)
        if len(_needs_module) >= 1024:
            _needs_module.clear()
        _needs_module[code] = needs_module
    if module == MAIN_ALIAS:
        module = "__main__"
    elif module == "__main__" and resolver is None and needs_module:
        main = sys.modules["__main__"]
        if getattr(main, "__file__", None) is None and getattr(main, "__spec__", None) is None:
            return None  # an interactive session: function_ref says so
    return _CodeFunction(fn, module, needs_module)


def function_from_code(
    module: str,
    package: str | None,
    qualname: str,
    code: bytes,
    defaults: tuple[object, ...] | None,
    kwdefaults: dict[str, object] | None,
    needs_module: bool,
) -> "types.FunctionType":
    """Rebuild a function sent by ``by_code``, with its module's globals here if it needs them."""
    import builtins
    import marshal

    if not needs_module:
        namespace = {"__name__": module, "__package__": package, "__builtins__": builtins}
    elif module == "__main__" and resolver is not None:
        namespace = vars(resolver.main_module())
    elif module == MAIN_ALIAS and resolver is None:
        namespace = vars(sys.modules["__main__"])
    else:
        import importlib

        namespace = vars(importlib.import_module(module))
    code_obj = marshal.loads(code)
    fn = _FunctionType(code_obj, namespace, code_obj.co_name, defaults)
    fn.__qualname__ = qualname
    fn.__kwdefaults__ = kwdefaults
    return fn


class _ValueFunction:
    """An interactively defined function, crossing by value (cloudpickle's bytes).

    A call payload carries the bytes alone, as its target (bytes cross
    natively, and a worker calls ``function_from_value`` for a bytes target);
    pickled elsewhere, it is a call of ``function_from_value`` there. That
    loads the bytes with the standard pickle (cloudpickle must be importable
    there too: workers share main's sys.path).
    """

    __slots__ = ("data", "fn")

    def __init__(self, fn: object, data: bytes) -> None:
        self.fn = fn
        self.data = data

    def __reduce__(self):
        return function_from_value, (self.data,)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.fn(*args, **kwargs)  # type: ignore[operator]

    def __repr__(self) -> str:
        return f"<{getattr(self.fn, '__qualname__', self.fn)!r} by value>"


# In a worker: the bytes of a function sent by value -> that function, so a
# task of a map does not rebuild it (cloudpickle's loading is ~10-60 us).
_loaded: dict[bytes, object] = {}


def callable_target(target: object) -> "Any":
    """The callable of a call payload whose module is None: a function sent by value
    (``by_value``: its pickle, bytes) rebuilt here, else the target itself."""
    return function_from_value(target) if type(target) is bytes else target


def function_from_value(data: bytes) -> "Any":
    """Rebuild a function sent by ``by_value`` (once per distinct pickle in this interpreter)."""
    fn = _loaded.get(data)
    if fn is None:
        fn = (_pickle or _load_pickle()).loads(data)
        if len(_loaded) >= 256:
            _loaded.clear()
        _loaded[data] = fn
    return fn


# fn -> (its stand-in, the globals it used then, by name): a map over 10k
# items pickles its function once. A global rebound since (a notebook cell run
# again) pickles it anew; one mutated in place is not seen (the copy is taken
# when the function is first sent, as by Dask).
_by_value: "Any" = None


def _global_names(code: "types.CodeType") -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, _CodeType):
            names |= _global_names(const)
    return names


def by_value(fn: object) -> _ValueFunction | None:
    """A stand-in carrying fn pickled by value when it is an interactively defined
    function (see ``_is_interactive``) and cloudpickle is installed, else None.

    Raises NotShareableError naming the global (or captured variable) that
    cannot be pickled.
    """
    global _by_value
    stand_in = _cached_by_value(fn)
    if stand_in is not None:
        return stand_in
    if not _is_interactive(fn):
        return None
    if _by_value is None:
        import weakref

        _by_value = weakref.WeakKeyDictionary()
    globs: dict[str, object] = fn.__globals__  # type: ignore[attr-defined]
    code = fn.__code__  # type: ignore[attr-defined]
    try:
        import cloudpickle
    except ImportError:
        return None
    used = tuple((name, globs[name]) for name in sorted(_global_names(code)) if name in globs)
    try:
        data = cloudpickle.dumps(fn, protocol=5)
    except Exception as exc:  # any pickling failure: name the part that failed
        raise _explain_by_value(fn, used, exc, cloudpickle) from exc
    stand_in = _ValueFunction(fn, data)
    _by_value[fn] = (stand_in, used)
    return stand_in


def _cached_by_value(fn: object) -> _ValueFunction | None:
    """fn's stand-in from an earlier call, unless a global it uses was rebound since."""
    if _by_value is None or type(fn) is not _FunctionType:
        return None
    cached = _by_value.get(fn)
    if cached is None:
        return None
    stand_in, used = cached
    globs = fn.__globals__
    for name, value in used:
        if globs.get(name, used) is not value:
            return None
    return stand_in


def _explain_by_value(
    fn: object, used: tuple[tuple[str, object], ...], error: BaseException, cloudpickle: "Any"
) -> BaseException:
    from aiosubinterp._errors import NotShareableError

    name = getattr(fn, "__qualname__", None) or repr(fn)
    cells = fn.__closure__ or ()  # type: ignore[attr-defined]
    freevars = fn.__code__.co_freevars  # type: ignore[attr-defined]
    parts = [(f"the global {n!r}", v) for n, v in used]
    for var, cell in zip(freevars, cells, strict=False):
        try:
            parts.append((f"the variable {var!r} it captures", cell.cell_contents))
        except ValueError:  # an empty cell
            pass
    defaults = fn.__defaults__ or ()  # type: ignore[attr-defined]
    parts += [(f"default value {i}", v) for i, v in enumerate(defaults)]
    culprit, reason = "a part of it", error
    for label, value in parts:
        try:
            cloudpickle.dumps(value, protocol=5)
        except Exception as exc:  # noqa: BLE001
            culprit, reason = f"{label} ({type(value).__name__})", exc
            break
    return NotShareableError(
        f"cannot send {name!r} by value to an interpreter: it is defined in an interactive "
        f"session, so it crosses with the globals it uses, and {culprit} cannot be pickled: "
        f"{type(reason).__name__}: {reason}. Create such objects inside the function (or "
        "pass them as arguments that can cross), or put the function in a module."
    )


# fn -> (module, qualname) for plain functions already checked: resolving a
# reference walks sys.modules and attributes, a visible cost per small task.
_refs: dict[object, tuple[str, str]] = {}


def call_payload(
    fn: object, args: tuple[object, ...], kwargs: dict[str, object], *, nested: bool = False
) -> tuple[object, ...]:
    """The message that asks a worker to call fn(*args, **kwargs).

    With nested=True a function defined inside another function that
    captures nothing crosses as its code (``by_code``); otherwise it is
    refused like a closure (InterpreterPool's and ProcessPool's rule today).
    A function defined interactively (``by_value``) crosses as cloudpickle's
    bytes in the target's place; a worker loads a bytes target with
    ``function_from_value``.
    """
    ref = _refs.get(fn) if type(fn) is _FunctionType else None
    if ref is None:
        sent_by_value = _cached_by_value(fn)
        if sent_by_value is not None:  # its bytes cross natively, with no pickling
            return (None, sent_by_value.data, args, tuple(kwargs.items()) if kwargs else ())
        if not callable(fn):
            raise TypeError(
                f"aiosubinterp: expected a callable to run, got {type(fn).__name__} {fn!r}"
            )
        from aiosubinterp._errors import NotShareableError

        stand_in: object = by_code(fn) if nested else None
        if stand_in is None:
            try:
                ref = function_ref(fn)
            except NotShareableError:
                stand_in = by_value(fn)  # defined interactively: by value, if it can be
                if stand_in is None:
                    raise
            else:
                if ref is None:
                    stand_in = by_value(fn)
            if stand_in is not None:  # by value: its bytes cross natively
                return (
                    None,
                    stand_in.data,
                    args,  # type: ignore[attr-defined]
                    tuple(kwargs.items()) if kwargs else (),
                )
        if stand_in is not None:
            return (None, stand_in, args, tuple(kwargs.items()) if kwargs else ())
        if ref is not None and type(fn) is _FunctionType:
            if len(_refs) >= 1024:
                _refs.clear()
            _refs[fn] = ref
    kw = tuple(kwargs.items()) if kwargs else ()
    if ref is None:
        return (None, fn, args, kw)
    return (ref[0], ref[1], args, kw)


def explain_unshareable(
    fn: object,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    error: BaseException,
    *,
    nested: bool = False,
):
    """Name the part of a call that cannot be sent, for a NotShareableError."""
    from aiosubinterp._errors import NotShareableError

    name = getattr(fn, "__qualname__", None) or repr(fn)
    parts: list[tuple[str, object]] = []
    if (by_code(fn) is None or not nested) and not _is_interactive(fn) and function_ref(fn) is None:
        parts.append((f"the callable {name!r}", fn))
    parts += [(f"argument {i} of {name}() ({type(a).__name__})", a) for i, a in enumerate(args)]
    parts += [
        (f"keyword argument {k!r} of {name}() ({type(v).__name__})", v) for k, v in kwargs.items()
    ]
    culprit = "a part of the call"
    reason = error
    for label, value in parts:
        try:
            _probe(value)
        except Exception as exc:  # noqa: BLE001 - any failure names the culprit
            culprit, reason = label, exc
            where, inner, inner_exc = _locate(value, "", 0)
            if where:
                culprit = f"{label}, at {where} ({type(inner).__name__}),"
                reason = inner_exc or exc
            break
    return NotShareableError(
        f"cannot send {culprit} to an interpreter: {type(reason).__name__}: {reason}. "
        "Values cross by copy (builtin immutables natively, anything else by pickle), "
        "buffers zero-copy (aiosubinterp.share), and sockets or aiosubinterp.FileDescriptor "
        "as duplicated fds. Pass plain data (or a picklable object) instead, use "
        "aiosubinterp.SharedBuffer/SharedLock for shared state, and re-create other "
        "resources such as locks and files inside the task."
    )


def _locate(value: object, path: str, depth: int) -> tuple[str, object, BaseException | None]:
    """The deepest part of a container value that cannot be sent: (path, part, error)."""
    if depth > 20:
        return path, value, None
    if type(value) in (list, tuple):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]  # type: ignore[arg-type]
    elif type(value) is dict:
        items = []
        for k, v in value.items():  # type: ignore[attr-defined]
            items += [(f"{path} key {k!r}", k), (f"{path}[{k!r}]", v)]
    elif type(value) in (set, frozenset):
        items = [(f"{path} item {v!r}", v) for v in value]  # type: ignore[attr-defined]
    elif (
        type(getattr(value, "__dict__", None)) is dict
        and not isinstance(value, type)
        and _pickled_by_default(type(value))
    ):
        # An instance its class lets pickle send as it is: its attributes. A
        # class with pickling of its own (socket, ssl.SSLSocket) keeps its own
        # refusal, which says more than the attribute it trips on.
        items = [(f"{path}.{k}", v) for k, v in vars(value).items()]
    else:
        return path, value, None
    for sub_path, item in items:
        try:
            _probe(item)
        except Exception as exc:  # noqa: BLE001
            found, part, inner = _locate(item, sub_path, depth + 1)
            return found, part, inner or exc
    return path, value, None


def _pickled_by_default(cls: type) -> bool:
    """Whether pickle sends instances of cls as object's default does (their __dict__)."""
    return (
        cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", object.__getstate__) is object.__getstate__
    )


def _probe(value: object) -> None:
    from aiosubinterp import _core

    _core.dumps(value)


# -- how an exception crosses back ---------------------------------------------------


def _type_name(exc: BaseException) -> str:
    tp = type(exc)
    if tp.__module__ == MAIN_ALIAS:
        return f"__main__.{tp.__qualname__}"
    return f"{tp.__module__}.{tp.__qualname__}"


def _names(exc: BaseException) -> tuple[str, str]:
    """(type_name, message) of exc, whatever its __str__ does."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = f"<unprintable {type(exc).__qualname__}>"
    return _type_name(exc), message


def _rebuildable(exc: BaseException) -> bytes:
    """exc pickled, if it unpickles again (raises otherwise)."""
    data = dumps(exc)
    loads(data)
    return data


def describe_exception(exc: BaseException) -> tuple[object, ...]:
    """(type_name, message, traceback_text, exception_or_None, frames), ready to cross back.

    What a worker (interpreter or process) sends for a job's error, and what
    main sends for queued jobs failed at once. frames is _tracebacks.capture's
    plain data (the frames of exc and of its chain) or None; _errors.rebuild
    also takes the first four alone.
    """
    import traceback

    from aiosubinterp._errors import refusal_from

    refused = refusal_from(exc)
    if refused is not None:
        refused.__cause__ = exc
        exc = refused
    type_name, message = _names(exc)
    tb_text = ""
    frames = None
    if exc.__traceback__ is not None:  # raised there, not made up to report a local failure
        from aiosubinterp import _tracebacks

        try:
            tb_text = _tracebacks.format_text(exc)  # without our own frames
        except Exception:  # noqa: BLE001
            try:
                tb_text = "".join(traceback.format_exception(exc))
            except Exception:  # noqa: BLE001
                pass
        try:
            frames = _tracebacks.capture(exc, _names, _rebuildable)
        except Exception:  # noqa: BLE001 - the text form still says where
            frames = None
    try:
        _rebuildable(exc)  # only send what can be rebuilt
        carried: object = _PickledException(exc)
    except Exception:  # noqa: BLE001
        carried = None
    return (type_name, message, tb_text, carried, frames)


class _PickledException:
    """Pickles as the exception itself, stripped of its traceback."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self):
        return loads, (dumps(self.exc),)
