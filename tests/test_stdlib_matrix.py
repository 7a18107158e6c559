"""The stdlib matrix: commonly used modules imported and exercised in several workers at once.

CPython 3.12.1 and 3.13.0 crash (heap corruption at import, at interpreter
destruction or at exit) when several interpreters import some C
accelerators (_datetime, _decimal, _hashlib and others). Each group of modules runs in a child
process: every module is imported and exercised in three workers at once and
in the main interpreter, the values must be equal, and the child must close
its interpreters and exit with code 0. Shims (C accelerators kept out of
workers, aiosubinterp._quirks.blocked_modules) must make exactly the expected
accelerators fall back to their pure-Python twins; modules that cannot load
in a subinterpreter must raise ModuleRefusedError, never crash.

If a group's child fails, each of its modules runs again alone in a child of
its own, so the failure names the module.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import textwrap

import pytest
import stdlibfuncs

from aiosubinterp import _quirks

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = pathlib.Path(__file__).resolve().parent
WORKERS = 3

GROUPS = {
    "text": [
        "email",
        "csv",
        "json",
        "re",
        "string",
        "textwrap",
        "difflib",
        "pprint",
        "unicodedata",
        "html.parser",
        "tomllib",
        "logging",
    ],
    "data": [
        "zlib",
        "gzip",
        "bz2",
        "lzma",
        "array",
        "struct",
        "base64",
        "binascii",
        "pickle",
        "copy",
        "io",
        "mmap",
    ],
    "numbers": [
        "math",
        "cmath",
        "decimal",
        "fractions",
        "statistics",
        "random",
        "secrets",
        "hashlib",
        "hmac",
        "uuid",
    ],
    "language": [
        "typing",
        "dataclasses",
        "enum",
        "functools",
        "itertools",
        "operator",
        "collections",
        "heapq",
        "bisect",
        "weakref",
        "contextvars",
    ],
    "dates": ["datetime", "zoneinfo", "sqlite3"],
    "net": [
        "socket",
        "select",
        "ssl",
        "http.client",
        "urllib.parse",
        "urllib.request",
        "xml.etree.ElementTree",
    ],
    "system": [
        "threading",
        "queue",
        "concurrent.futures",
        "multiprocessing",
        "subprocess",
        "pathlib",
        "tempfile",
        "shutil",
        "asyncio",
    ],
    "refused": ["ctypes", "readline", "curses", "cProfile", "tracemalloc", "faulthandler"],
}

# module -> [(first version, last version or None for "and later", the
# module the ModuleRefusedError names)]. On 3.12 the worker refuses known
# single-phase extensions by their package name before CPython runs their
# init (aiosubinterp._inside.worker.REFUSED_ON_312).
LATEST = None
REFUSED: dict[str, list[tuple[tuple[int, int], tuple[int, int] | None, str]]] = {
    "ctypes": [((3, 12), (3, 12), "ctypes")],
    "readline": [((3, 12), (3, 12), "readline"), ((3, 13), LATEST, "readline")],
    "curses": [((3, 12), (3, 12), "curses"), ((3, 13), LATEST, "_curses")],
    "cProfile": [((3, 12), (3, 12), "cProfile")],
    # 3.12 loads it while main has not imported it
    "tracemalloc": [((3, 13), LATEST, "_tracemalloc")],
    "faulthandler": [((3, 12), LATEST, "faulthandler")],
    # Imports fine; its parser needs pyexpat, which 3.12 refuses.
    "xml.etree.ElementTree": [((3, 12), (3, 12), "pyexpat")],
}


def refused_here(name: str) -> str | None:
    """The module a worker on this Python names when it refuses `name`, or None."""
    version = sys.version_info[:2]
    for first, last, refused in REFUSED.get(name, []):
        if first <= version and (last is None or version <= last):
            return refused
    return None


# CPython bugs that make a worker compute something else than the main
# interpreter: module -> (affected versions, what goes wrong). The matrix
# asserts the difference, so a fixed CPython shows up as a failure here.
WRONG: dict[str, tuple[tuple[int, int, int], tuple[int, int, int], str]] = {
    "enum": (
        (3, 12, 0),
        (3, 12, 5),
        "str() and format() of IntEnum/IntFlag members give their repr in a "
        "subinterpreter (CPython gh-117482, fixed in 3.12.5)",
    ),
}


def wrong_here(name: str) -> str:
    low, high, why = WRONG.get(name, ((0, 0, 0), (0, 0, 0), ""))
    return why if low <= sys.version_info[:3] < high else ""


CHILD = """
import asyncio, json, sys
import aiosubinterp as asi, stdlibfuncs, workfuncs

async def main(names):
    interps = [asi.Interpreter() for _ in range({workers})]
    await asyncio.gather(*(i.start() for i in interps))
    try:
        for name in names:
            print("module", name, flush=True)
            # Workers first: main importing a module first can hide the crash
            # (3.13.0 survives _datetime in workers once main imported it).
            outcomes = await asyncio.gather(
                *(i.run(stdlibfuncs.exercise_stdlib, name) for i in interps),
                return_exceptions=True)
            value, loaded = stdlibfuncs.exercise_stdlib(name)
            report = {{"name": name, "main": loaded, "workers": []}}
            for out in outcomes:
                if isinstance(out, asi.ModuleRefusedError):
                    report["workers"].append(["refused", out.name, str(out)])
                elif isinstance(out, BaseException):
                    report["workers"].append(["error", repr(out), str(out.__cause__ or "")])
                elif out[0] != value:
                    report["workers"].append(["mismatch", repr(out[0]), repr(value)])
                else:
                    report["workers"].append(["ok", out[1]])
            print("result", json.dumps(report), flush=True)
        # 3.12.1 aborted at exit once workers had pickled values and raised exceptions.
        for i in interps:
            assert await i.run(workfuncs.echo, [{{1: workfuncs.Point(1, 2)}}]) == [
                {{1: workfuncs.Point(1, 2)}}]
            try:
                await i.run(workfuncs.raise_custom, "x")
            except workfuncs.CustomError:
                pass
    finally:
        await asyncio.gather(*(i.aclose() for i in interps))
    print("closed", flush=True)

asyncio.run(main(sys.argv[1:]))
"""


def run_child(tmp_path: pathlib.Path, names: list[str]) -> subprocess.CompletedProcess:
    script = tmp_path / "matrix_child.py"
    script.write_text(textwrap.dedent(CHILD.format(workers=WORKERS)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])
    return subprocess.run(
        [sys.executable, str(script), *names],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=str(tmp_path),
        env=env,
    )


def reports(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("result "):
            report = json.loads(line[len("result ") :])
            found[report["name"]] = report
    return found


def describe_failure(proc: subprocess.CompletedProcess) -> str:
    last = [line for line in proc.stdout.splitlines() if line.startswith("module ")][-1:]
    tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
    return f"exit code {proc.returncode}, last started: {last}\n{tail}"


def pinpoint(tmp_path: pathlib.Path, names: list[str]) -> list[str]:
    """Run each module alone in a child of its own; describe those whose child fails."""
    culprits = []
    for name in names:
        proc = run_child(tmp_path, [name])
        if proc.returncode != 0 or not proc.stdout.endswith("closed\n"):
            culprits.append(f"{name}: {describe_failure(proc)}")
    return culprits


def test_every_exercise_is_in_one_group():
    listed = [name for names in GROUPS.values() for name in names]
    assert sorted(listed) == sorted(stdlibfuncs.STDLIB_EXERCISES)
    assert len(set(listed)) == len(listed)
    assert set(REFUSED) <= set(listed)


@pytest.mark.parametrize("group", list(GROUPS))
def test_stdlib_modules_in_several_workers(tmp_path, group):
    names = GROUPS[group]
    proc = run_child(tmp_path, names)
    found = reports(proc)
    if proc.returncode != 0 or not proc.stdout.endswith("closed\n"):
        culprits = pinpoint(tmp_path, names)
        pytest.fail(
            f"the child importing {names} in {WORKERS} workers failed: {describe_failure(proc)}\n"
            + (
                "modules that fail alone:\n" + "\n".join(culprits)
                if culprits
                else "each module passes alone: it is a combination of them"
            )
        )
    assert sorted(found) == sorted(names)
    blocked = set(_quirks.blocked_modules())
    verdicts: dict[str, list[str]] = {"green": [], "shimmed": [], "refused": [], "wrong": []}
    for name in names:
        report = found[name]
        outcomes = report["workers"]
        assert len(outcomes) == WORKERS
        refused_name = refused_here(name)
        if refused_name:
            for outcome in outcomes:
                assert outcome[:2] == ["refused", refused_name], (name, outcome)
                assert "ProcessPoolExecutor" in outcome[2] and repr(refused_name) in outcome[2]
            verdicts["refused"].append(f"{name} ({refused_name})")
            continue
        why = wrong_here(name)
        if why:
            for outcome in outcomes:
                assert outcome[0] == "mismatch", (name, outcome)
            verdicts["wrong"].append(f"{name}: {why}")
            continue
        expected_loaded = [a for a in report["main"] if a not in blocked]
        for outcome in outcomes:
            assert outcome == ["ok", expected_loaded], (name, outcome)
        shimmed = sorted(set(report["main"]) - set(expected_loaded))
        if shimmed:
            verdicts["shimmed"].append(f"{name} (without {', '.join(shimmed)})")
        else:
            verdicts["green"].append(name)
    print(
        f"\nPython {sys.version.split()[0]}, {group}: "
        + "; ".join(
            f"{verdict}: {', '.join(items)}" for verdict, items in verdicts.items() if items
        )
    )


def test_keyword_calls_of_c_functions_in_successive_pools(tmp_path):
    # CPython 3.12.0-3.12.3 cache the keyword names of a C function in memory
    # of the interpreter that first calls it with keywords (gh-119213): once
    # the first pool's interpreters are destroyed, the second pool's calls use
    # the dangling cache. aiosubinterp._quirks primes those caches from main.
    script = tmp_path / "kw_child.py"
    script.write_text(
        textwrap.dedent("""
        import asyncio
        import aiosubinterp as asi, stdlibfuncs

        async def main():
            results = []
            for _ in range(3):
                async with asi.InterpreterPool(2) as pool:
                    results += await asyncio.gather(*(pool.run(stdlibfuncs.keyword_calls)
                                                      for _ in range(4)))
            assert all(r == results[0] for r in results)
            assert results[0] == stdlibfuncs.keyword_calls(), results[0]
            print("ok", flush=True)

        asyncio.run(main())
    """)
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=str(tmp_path),
        env=env,
    )
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stderr[-3000:]}"
    assert proc.stdout == "ok\n"


def test_import_error_raised_while_handling_a_refusal_is_explained_by_it():
    from aiosubinterp._errors import ModuleRefusedError, refusal_from

    try:  # what xml.etree.ElementTree.XMLParser does when pyexpat refuses to load
        try:
            raise ImportError(
                "module pyexpat does not support loading in subinterpreters", name="pyexpat"
            )
        except ImportError:
            raise ImportError("No module named expat")  # noqa: B904 - as ElementTree does
    except ImportError as exc:
        refused = refusal_from(exc)
    assert isinstance(refused, ModuleRefusedError) and refused.name == "pyexpat"
    assert "'pyexpat'" in str(refused) and "ProcessPoolExecutor" in str(refused)
    assert refusal_from(ImportError("No module named 'nothing_here'")) is None
    assert refusal_from(ValueError("does not support loading in subinterpreters")) is None


@pytest.mark.xfail(
    bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    strict=False,
    reason="free-threaded 3.13.15t: _datetime in two interpreters exited 0 here (the GIL "
    "build of 3.13.15 still crashes); the shim is kept on 3.13t until that is confirmed "
    "on more runs and patches (it only makes datetime pure Python)",
)
def test_datetime_shim_applies_exactly_where_cpython_still_crashes(tmp_path):
    # The shim keeps _datetime/_zoneinfo out of workers. It must stay as long
    # as CPython itself crashes when two interpreters import them (measured:
    # segfault or abort at exit on 3.12.1, 3.13.0 and 3.13.18, every run) and
    # must not apply where it does not (3.14.10, 3.15.2 exit 0). This canary
    # uses the stdlib's private interpreter module alone, no aiosubinterp: a
    # CPython that fixes the crash makes it fail, so the shim can go.
    script = tmp_path / "datetime_canary.py"
    script.write_text(
        textwrap.dedent("""
        try:
            import _interpreters as interps
            run = interps.exec
        except ImportError:  # 3.12
            import _xxsubinterpreters as interps
            run = interps.run_string
        ids = [interps.create() for _ in range(2)]
        for i in ids:
            run(i, "import datetime, sqlite3")
        for i in ids:
            interps.destroy(i)
        print("clean", flush=True)
    """)
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    crashes = proc.returncode != 0
    shimmed = "_datetime" in _quirks.blocked_modules()
    assert crashes == shimmed, (
        f"CPython {sys.version.split()[0]}: two interpreters importing datetime "
        f"{'crash' if crashes else 'do not crash'} (exit {proc.returncode}), but the _datetime "
        f"shim is {'on' if shimmed else 'off'}: update _quirks's blocked modules and "
        "docs/explanation/cpython-bugs.md"
    )
    if crashes:
        assert proc.returncode < 0, proc  # a signal (SIGSEGV/SIGABRT), not a Python error
