"""Run one numpy test file with pytest in this interpreter and return plain data.

Imported by name in worker interpreters (``InterpreterPool(fallback="copy")``)
and in plain processes (the baseline), so that both run the same code with the
same pytest arguments. Nothing here imports aiosubinterp.

Arguments chosen for interpreters, and used for the baseline too:

- ``--capture=sys``: pytest's default fd capture dup2()s fds 1 and 2, which
  belong to the whole process (two workers would capture each other).
- ``-p no:faulthandler``: faulthandler installs process-wide signal handlers.
- ``-p no:timeout``, ``-p no:asyncio``, ``-p no:cacheprovider``: the venv's
  plugins (SIGALRM timers, event loops, a shared cache folder) are not numpy's.
- ``--basetemp``: a folder per run (pytest's numbered folders are cleaned up
  by later runs, which would remove the other worker's).
- ``-c`` an empty ini and ``--confcutdir``: not this project's pytest settings
  (warnings as errors), numpy's own conftest.py only.

``helpers="placeholder"``: numpy's single-phase test helpers (refused in
own-GIL interpreters) are replaced by placeholder modules whose every name
raises the refusal when used, so that a file that imports one at module level
still collects; a test that touches a placeholder is reported as "refused",
whatever its outcome. Nothing is faked: such a test has no result of its own.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
import types
import uuid

__all__ = ["HELPERS", "run_file"]

# numpy's single-phase test helper modules (a private copy cannot isolate them),
# and the stdlib modules numpy's test files import at module level that CPython
# refuses in own-GIL interpreters: tracemalloc (its C module is single-phase),
# and on 3.12 ctypes. Each is tried first: one that loads is left alone.
HELPERS = (
    "numpy._core._rational_tests",
    "numpy._core._umath_tests",
    "numpy._core._struct_ufunc_tests",
    "numpy._core._operand_flag_tests",
    "numpy._core._simd",
    "tracemalloc",
    "ctypes",
)

# Uses of a placeholder so far (read before and after each test), and the last name used.
_touches: list = [0, ""]


class _Refused:
    """A name of a refused module: every use raises the refusal (and is counted)."""

    def __init__(self, qualname: str, error: BaseException) -> None:
        object.__setattr__(self, "_qualname", qualname)
        object.__setattr__(self, "_error", error)
        # pytest names a parameter by its __name__: the same test ids as the baseline's.
        object.__setattr__(self, "__name__", qualname.rpartition(".")[2])

    def _raise(self, *args: object, **kwargs: object):
        _touches[0] += 1
        _touches[1] = self._qualname
        error = self._error
        raise type(error)(f"placeholder for {self._qualname}: {error}")

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # introspection (pytest, inspect) is not a use
        self._raise()

    def __repr__(self) -> str:
        return f"<refused {self._qualname}>"

    __call__ = __getitem__ = __iter__ = __len__ = __index__ = __int__ = __float__ = _raise
    __add__ = __mul__ = __truediv__ = __lt__ = __gt__ = __array__ = __setattr__ = _raise
    __reduce__ = __reduce_ex__ = __copy__ = __deepcopy__ = _raise  # pickling is a use

    def __mro_entries__(self, bases: tuple) -> tuple:  # a class deriving from it
        self._raise()
        return ()


class _RefusedModule(types.ModuleType):
    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(name)
        self.__error = error
        self.refusal = f"{type(error).__name__}: {str(error).splitlines()[0]}"

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        # One placeholder per name, kept: `module.x is module.x` as with a real module.
        placeholder = _Refused(f"{self.__name__}.{name}", self.__error)
        setattr(self, name, placeholder)
        return placeholder


def _install_placeholders() -> dict[str, str]:
    """Import each helper; a refused one becomes a placeholder module. {name: refusal}."""
    import importlib

    refused = {}
    for name in HELPERS:
        if isinstance(sys.modules.get(name), _RefusedModule):  # this worker's earlier run
            refused[name] = sys.modules[name].refusal
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if "refuses to load" not in str(exc) and "not support" not in str(exc):
                raise
            refused[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            module = _RefusedModule(name, exc)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
    return refused


_SKIP_REFUSED = "REFUSED: a parameter built at collection from "


class _ParametersOfRefused:
    """An AST pass: parametrize entries built from a refused helper become skipped params.

    A file like test_multiarray builds a few parameters at collection time
    (``np.array([1, 2], dtype=rational)`` in a ``parametrize`` list); even with
    placeholders that fails the whole file. Each such entry (only that entry)
    is replaced by ``pytest.param(object()..., marks=skip(REFUSED ...))`` with
    the entry's own id, so the file collects with the baseline's test ids and
    those tests are reported as refused. The file on disk is not changed.
    """

    def __init__(self, refused_modules: set[str]) -> None:
        self.modules = refused_modules
        self.names: dict[str, str] = {}  # local name -> refused module

    def names_of(self, tree) -> None:
        import ast

        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if node.module in self.modules or full in self.modules:
                        self.names[alias.asname or alias.name] = (
                            full if full in self.modules else node.module
                        )
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in self.modules and alias.asname:
                        self.names[alias.asname] = alias.name

    def uses(self, node) -> str | None:
        """The refused module a call inside node uses (a bare name is left alone:
        the placeholder itself is a fine parameter, and keeps its id)."""
        import ast

        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                for sub in ast.walk(call):
                    if isinstance(sub, ast.Name) and sub.id in self.names:
                        return self.names[sub.id]
        return None

    def entry(self, node, module: str):
        import ast

        width, ident = 1, None
        if isinstance(node, ast.Tuple):
            width = len(node.elts)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "param"
        ):
            width = len(node.args)
            ident = next((k.value for k in node.keywords if k.arg == "id"), None)
        reason = ast.Constant(_SKIP_REFUSED + module)
        marks = ast.parse("pytest.mark.skip", mode="eval").body
        call = ast.Call(
            func=ast.parse("pytest.param", mode="eval").body,
            args=[
                ast.Call(func=ast.Name("object", ast.Load()), args=[], keywords=[])
                for _ in range(width)
            ],
            keywords=[
                ast.keyword(
                    "marks", ast.Call(func=marks, args=[], keywords=[ast.keyword("reason", reason)])
                )
            ]
            + ([ast.keyword("id", ident)] if ident is not None else []),
        )
        return ast.fix_missing_locations(ast.copy_location(call, node))

    def transform(self, tree) -> int:
        import ast

        self.names_of(tree)
        changed = 0
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "parametrize"
                and len(node.args) >= 2
            ):
                continue
            values = node.args[1]
            if not isinstance(values, (ast.List, ast.Tuple)):
                continue
            for i, element in enumerate(values.elts):
                module = self.uses(element)
                if module is not None:
                    values.elts[i] = self.entry(element, module)
                    changed += 1
        return changed


def _patch_collection(path: str, refused: set[str]) -> tuple:
    """Make pytest collect path with its refused parameters replaced; (undo, count box)."""
    from pathlib import Path

    from _pytest.assertion import rewrite

    target = Path(path).resolve()
    original_rewrite, original_read = rewrite._rewrite_test, rewrite._read_pyc
    changed = [0]

    def rewrite_test(fn, config):
        if Path(fn).resolve() != target:
            return original_rewrite(fn, config)
        import ast
        import importlib.util

        source = Path(fn).read_bytes()
        tree = ast.parse(source, filename=str(fn))
        changed[0] = _ParametersOfRefused(refused).transform(tree)
        rewrite.rewrite_asserts(tree, source, str(fn), config)
        return (
            importlib.util.source_hash(source),
            compile(tree, str(fn), "exec", dont_inherit=True),
        )

    def read_pyc(source, pyc, trace=lambda x: None):
        # Never the cached (unpatched) code of the target.
        return None if Path(source).resolve() == target else original_read(source, pyc, trace)

    rewrite._rewrite_test, rewrite._read_pyc = rewrite_test, read_pyc
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # no patched .pyc in numpy's __pycache__

    def undo() -> None:
        rewrite._rewrite_test, rewrite._read_pyc = original_rewrite, original_read
        sys.dont_write_bytecode = saved

    return undo, changed


def _reason(report) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0] if crash.message else ""
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return (errors or lines or [""])[-1].lstrip("E ").strip()


class _Collector:
    """The pytest plugin: one outcome and one-line reason per test id."""

    def __init__(self) -> None:
        self.tests: dict[str, list[str]] = {}
        self.collect_errors: dict[str, str] = {}
        self.collected = 0
        self._before = 0

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.collect_errors[report.nodeid] = _reason(report)[:300]

    def pytest_collection_modifyitems(self, items) -> None:
        self.collected = len(items)

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self._before = _touches[0]

    def pytest_runtest_logreport(self, report) -> None:
        nodeid = report.nodeid
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        elif report.when == "call" or report.failed or report.skipped:
            outcome = report.outcome
            if report.failed and report.when != "call":
                outcome = "error"
        else:
            return
        reason = _reason(report)
        if outcome == "skipped" and _SKIP_REFUSED in reason:
            outcome = "refused"
        old = self.tests.get(nodeid)
        if old is not None and old[0] in ("failed", "error"):
            return  # a teardown report after a failing call keeps the call's outcome
        self.tests[nodeid] = [outcome, reason[:300]]

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        if _touches[0] != self._before and nodeid in self.tests:
            outcome = self.tests[nodeid][0]
            self.tests[nodeid] = ["refused", f"{outcome} when it used {_touches[1]}"]


def run_file(path: str, helpers: str = "as-is", extra: tuple[str, ...] = ()) -> dict:
    """pytest on one test file here; its outcomes as plain data.

    Args:
        path: the test file (numpy's, installed with the wheel).
        helpers: "as-is" (imports of refused helpers fail as they do),
            "placeholder" (see the module docstring), or "parameters":
            placeholders, and parametrize entries built from a refused helper at
            collection time skipped as refused (_ParametersOfRefused).
        extra: more pytest arguments (-k, --deselect).

    Returns:
        {"rc", "seconds", "collected", "tests": {nodeid: [outcome, reason]},
        "collect_errors": {nodeid: reason}, "refused_helpers": {name: error},
        "numpy", "tail": the last lines pytest printed}.
    """
    # numpy before pytest: on 3.12 a worker that imported datetime before numpy
    # has the pure-Python datetime (its C module is single-phase there, refused),
    # and numpy's copy then fails with "module 'datetime' has no attribute
    # 'datetime_CAPI'" (measured on 3.12.1; 3.13 is not affected).
    import numpy
    import pytest

    refused = _install_placeholders() if helpers in ("placeholder", "parameters") else {}
    undo, changed = (
        _patch_collection(path, set(refused))
        if helpers == "parameters" and refused
        else (lambda: None, [0])
    )

    site = os.path.dirname(os.path.dirname(numpy.__file__))
    work = tempfile.mkdtemp(prefix="numpy-suite-")
    ini = os.path.join(work, "pytest.ini")
    with open(ini, "w") as f:
        f.write("[pytest]\n")
    args = [
        path,
        "-q",
        "-c",
        ini,
        "--rootdir",
        site,
        "--confcutdir",
        site,
        "--capture=sys",
        "--basetemp",
        os.path.join(work, "tmp-" + uuid.uuid4().hex[:8]),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:faulthandler",
        "-p",
        "no:timeout",
        "-p",
        "no:asyncio",
        "-p",
        "no:randomly",
        "-W",
        "ignore::UserWarning",
        *extra,
    ]
    collector = _Collector()
    out = io.StringIO()
    saved = sys.stdout, sys.stderr
    start = time.perf_counter()
    sys.stdout = sys.stderr = out
    try:
        rc = int(pytest.main(args, plugins=[collector]))
    finally:
        sys.stdout, sys.stderr = saved
        undo()
    seconds = time.perf_counter() - start
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return {
        "rc": rc,
        "seconds": round(seconds, 2),
        "collected": collector.collected,
        "tests": collector.tests,
        "collect_errors": collector.collect_errors,
        "refused_helpers": refused,
        "numpy": numpy.__version__,
        "parameters_replaced": changed[0],
        "numpy_file": numpy.__file__,
        "tail": out.getvalue()[-1500:],
    }


if __name__ == "__main__":  # the baseline: python _numpy_suite_work.py FILE HELPERS OUT.json
    import json

    result = run_file(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "as-is")
    with open(sys.argv[3], "w") as f:
        json.dump(result, f)
