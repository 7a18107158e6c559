"""fallback="copy": a private copy of each refusing extension module in each interpreter.

Every test that loads a copy runs in a child process and checks its exit
code: a regression there may crash the process (research: single-phase
modules, a reused path, the override without a copy). Nothing in this test
process depends on a copy loading. Worker functions: tests/copyfuncs.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import childproc
import pytest

import aiosubinterp as asi
from aiosubinterp._engine import copies as engine_copies
from aiosubinterp._engine.fallback import copies_unavailable

LOOPS = ["asyncio", "uvloop"]
FREE_THREADED = bool(__import__("sysconfig").get_config_var("Py_GIL_DISABLED"))
# Free-threaded builds and 3.12 refuse copies: test_pythons_without_copies_refuse_them.
NO_COPIES = copies_unavailable()
needs_copies = pytest.mark.skipif(
    NO_COPIES is not None,
    reason="fallback='copy' is refused on this Python (see the test of that refusal)",
)


def run_child(
    tmp_path, body: str, loop_kind: str = "asyncio", env: dict | None = None, timeout: float = 120
) -> tuple[dict, str]:
    """Run `async def main()` (body) in a fresh process; (its reports, its stderr).

    The child reports with report(key, value): one JSON line each. It must
    exit with 0: a crash at exit (a copy unloaded wrongly) fails the test.
    """
    source = (
        textwrap.dedent("""
        import asyncio, json, os, sys, warnings
        import aiosubinterp as asi
        import copyfuncs

        def report(key, value):
            print("REPORT " + json.dumps([key, value]), flush=True)

        def failure(coro_or_exc):
            return f"{type(coro_or_exc).__name__}: {coro_or_exc}"
    """)
        + textwrap.dedent(body)
        + textwrap.dedent(f"""
        if {loop_kind!r} == "uvloop":
            import uvloop
            uvloop.run(main())
        else:
            asyncio.run(main())
        report("done", True)
    """)
    )
    old = dict(os.environ)
    try:
        os.environ.update(env or {})
        proc = childproc.run_child(tmp_path, source, timeout)
    finally:
        os.environ.clear()
        os.environ.update(old)
    reports = {}
    for line in proc.stdout.splitlines():
        if line.startswith("REPORT "):
            key, value = json.loads(line[7:])
            reports[key] = value
    assert proc.returncode == 0, (
        f"the child exited with {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
        f"stderr:\n{proc.stderr[-4000:]}"
    )
    assert reports.get("done"), proc.stdout + proc.stderr
    return reports, proc.stderr


def have(*modules: str) -> list[str]:
    """The modules of the `copies` extra that this venv has (none of them on 3.13t)."""
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is not None]


@needs_copies
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_refusing_packages_run_in_interpreters_from_private_copies(tmp_path, loop_kind):
    packages = have("orjson", "pydantic", "lxml")
    reports, _ = run_child(
        tmp_path,
        f"""
        async def main():
            async with asi.InterpreterPool(2, fallback="copy") as pool:
                results = await asyncio.gather(*[pool.run(copyfuncs.numpy_where)
                                                 for _ in range(6)])
                report("numpy", results)
                for name in {packages!r}:
                    fn = getattr(copyfuncs, name + "_digest")
                    report(name, await asyncio.gather(*[pool.run(fn) for _ in range(6)]))
                stats = pool.statistics()
                report("stats", stats)
                report("folder_existed", os.path.isdir(stats["copies_folder"]))
                # numpy's core finds OpenBLAS through $ORIGIN/../../numpy.libs: linked.
                report("libs_linked", sorted(
                    name for name in os.listdir(stats["copies_folder"])
                    if os.path.islink(os.path.join(stats["copies_folder"], name, "numpy.libs"))))
            report("folder_after_close", os.path.exists(stats["copies_folder"]))
            import numpy
            report("main_numpy", [copyfuncs.numpy_digest(), numpy.__file__])
            for name in {packages!r}:
                report("main_" + name, getattr(copyfuncs, name + "_digest")())
    """,
        loop_kind,
    )
    main_digest, main_file = reports["main_numpy"]
    folder = reports["stats"]["copies_folder"]
    cores = set()
    for digest, numpy_file, (core_name, *maps) in reports["numpy"]:
        assert digest == main_digest
        assert core_name == "numpy._core._multiarray_umath"
        assert numpy_file == main_file  # its Python files are the installed ones
        ours = [m for m in maps if m.startswith(folder + os.sep)]
        assert ours, maps
        cores.update(ours)
    # Each of the two interpreters mapped a core of its own; none is the installed file.
    assert len(cores) == 2, cores
    assert reports["folder_existed"] and not reports["folder_after_close"]
    assert reports["libs_linked"] == ["i1", "i2"]
    stats = reports["stats"]
    assert stats["copies"] >= 2 and stats["copies_bytes"] > 1_000_000, stats
    for name in packages:
        assert set(reports[name]) == {reports["main_" + name]}, name


@needs_copies
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_single_phase_modules_are_refused_before_their_init_runs(tmp_path, loop_kind):
    msgspec = bool(have("msgspec"))
    reports, _ = run_child(
        tmp_path,
        f"""
        async def main():
            async with asi.Interpreter(fallback="copy") as interp:
                if {msgspec!r}:
                    try:
                        await interp.run(copyfuncs.msgspec_encode)
                    except asi.ModuleRefusedError as exc:
                        report("msgspec", [exc.name, str(exc)])
                    report("msgspec_in_main", "msgspec" in sys.modules)
                try:
                    await interp.run(copyfuncs.rational_tests)
                except asi.ModuleRefusedError as exc:
                    report("rational", [exc.name, str(exc)])
                report("numpy_after", (await interp.run(copyfuncs.numpy_where))[0])
            import numpy
            report("main_numpy", copyfuncs.numpy_digest())
    """,
        loop_kind,
    )
    name, message = reports["rational"]
    assert name == "numpy._core._rational_tests"
    assert "single-phase" in message and "processes" in message
    # numpy itself still works in that interpreter.
    assert reports["numpy_after"] == reports["main_numpy"]
    if msgspec:
        name, message = reports["msgspec"]
        assert name == "msgspec._core" and "single-phase" in message
        # Its init never ran: it would have imported msgspec into main (3.13+).
        assert reports["msgspec_in_main"] is False


@needs_copies
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_copy_where_safe_and_processes_otherwise(tmp_path, loop_kind):
    if not have("msgspec"):
        pytest.skip("msgspec (the single-phase example) has no wheel for this Python")
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                async with asi.InterpreterPool(2, fallback=("copy", "process")) as pool:
                    # Functions route by their module: copyfuncs goes to processes
                    # once msgspec refused, so the interpreter's part comes first.
                    report("numpy", await pool.run(copyfuncs.numpy_where))
                    report("pids", [os.getpid(), await pool.run(copyfuncs.pid)])
                    report("msgspec", (await pool.run(copyfuncs.msgspec_encode)).decode())
                    report("pid_after", await pool.run(copyfuncs.pid))
            report("warnings", [str(w.message) for w in caught
                                if w.category is asi.FallbackWarning])
    """,
        loop_kind,
    )
    assert reports["msgspec"] == '{"a":1}'
    assert any("msgspec._core" in w for w in reports["warnings"]), reports["warnings"]
    numpy_maps = reports["numpy"][2][1:]
    assert any("aiosubinterp-copies-" in m for m in numpy_maps), numpy_maps
    main_pid, worker_pid = reports["pids"]
    assert main_pid == worker_pid  # numpy's module ran in an interpreter, not a process
    assert reports["pid_after"] != main_pid  # ... and on processes once msgspec refused


@needs_copies
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_replaced_interpreters_and_every_front_door_get_fresh_copies(tmp_path, loop_kind):
    reports, _ = run_child(
        tmp_path,
        """
        import concurrent.futures

        async def main():
            async with asi.InterpreterPool(1, fallback="copy",
                                           max_tasks_per_interpreter=1) as pool:
                report("recycled", [await pool.run(copyfuncs.numpy_where) for _ in range(3)])
            with asi.InterpreterPoolExecutor(1, fallback="copy") as executor:
                report("executor", executor.submit(copyfuncs.numpy_where).result(60))
            import numpy
            report("main_numpy", copyfuncs.numpy_digest())
    """,
        loop_kind,
    )
    paths = []
    for digest, _file, (_name, *maps) in reports["recycled"]:
        assert digest == reports["main_numpy"]
        paths.append([m for m in maps if "aiosubinterp-copies-" in m])
    # Each incarnation mapped one more copy, at a path never used before.
    new = [set(b) - set(a) for a, b in zip([[], *paths], paths, strict=False)]
    assert all(len(n) == 1 for n in new), paths
    assert len(set().union(*new)) == 3
    assert reports["executor"][0] == reports["main_numpy"]


@needs_copies
def test_stale_folders_go_and_this_process_leaves_none(tmp_path):
    parent = tmp_path / "copies"
    family = parent / f"aiosubinterp-copies-{os.getuid()}"
    family.mkdir(parents=True)
    dead = family / "999999999-1-0badc0de"  # above any pid_max: never a live process
    live = family / f"{os.getpid()}-1-0badc0de"
    for folder in (dead, live):
        (folder / "i1").mkdir(parents=True)
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
            pool = asi.InterpreterPool(1, fallback="copy")
            await pool.start()
            report("pid", os.getpid())
            report("folder", pool.statistics()["copies_folder"])
            report("env", [os.environ.get("OPENBLAS_NUM_THREADS"), os.environ["OMP_NUM_THREADS"]])
            # never closed: the folder goes at exit
            pool.close()
    """,
        env={"AIOSUBINTERP_COPY_DIR": str(parent), "OMP_NUM_THREADS": "3"},
    )
    assert not dead.exists() and live.exists()
    assert reports["folder"].startswith(str(family) + os.sep)
    assert not os.path.exists(reports["folder"])
    assert not [p for p in os.listdir(family) if p.startswith(f"{reports['pid']}-")]
    # Native thread pools: one thread per worker unless the user chose.
    assert reports["env"] == ["1", "3"]


@needs_copies
def test_denied_package_is_refused_with_the_reason(tmp_path):
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            async with asi.InterpreterPool(1, fallback="copy") as pool:
                try:
                    await pool.run(copyfuncs.uvloop_version)
                except asi.ModuleRefusedError as exc:
                    report("refused", [exc.name, str(exc)])
    """,
    )
    name, message = reports["refused"]
    assert name.partition(".")[0] == "uvloop"
    if sys.version_info >= (3, 13):  # 3.12 refuses uvloop by name before any file is read
        assert "libuv" in message


def test_fallback_values_are_checked():
    for bad in ("copies", ("process", "copy"), ("copy", "copy"), 1, ("copy", 3)):
        with pytest.raises(ValueError, match="fallback must be None") as info:
            asi.InterpreterPool(1, fallback=bad)
        if bad == ("process", "copy"):
            assert "('copy', 'process')" in str(info.value)
    with pytest.raises(ValueError, match="Interpreter takes fallback=None or 'copy'"):
        asi.Interpreter(fallback="process")
    with pytest.raises(ValueError, match="InterpreterPoolExecutor takes fallback=None or 'copy'"):
        asi.InterpreterPoolExecutor(1, fallback=("copy", "process"))
    goods = [["copy", "process"], "process", None] + ([] if NO_COPIES else ["copy", ("copy",)])
    for good in goods:
        pool = asi.InterpreterPool(1, fallback=good)
        pool.close()


@pytest.mark.skipif(NO_COPIES is None, reason="the refusal of free-threaded builds and 3.12")
def test_pythons_without_copies_refuse_them(tmp_path):
    expected = "free-threaded build" if FREE_THREADED else "needs CPython 3.13 or newer"
    for make in (
        lambda: asi.InterpreterPool(1, fallback="copy"),
        lambda: asi.Interpreter(fallback="copy"),
        lambda: asi.InterpreterPoolExecutor(1, fallback="copy"),
    ):
        with pytest.raises(ValueError, match=expected) as info:
            make()
        assert "fallback=('copy', 'process')" in str(info.value)
    # ("copy", "process") means processes there: numpy runs, in another process.
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", asi.FallbackWarning)
                async with asi.InterpreterPool(1, fallback=("copy", "process")) as pool:
                    report("numpy", await pool.run(copyfuncs.numpy_digest))
                    report("pid", await pool.run(copyfuncs.pid))
                    report("stats", pool.statistics())
            import numpy
            report("main", [os.getpid(), copyfuncs.numpy_digest()])
    """,
    )
    assert reports["numpy"] == reports["main"][1]
    assert reports["pid"] != reports["main"][0]
    assert "copies" not in reports["stats"]


def test_parent_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AIOSUBINTERP_COPY_DIR", str(tmp_path))
    assert engine_copies.parent_folder() == str(tmp_path / f"aiosubinterp-copies-{os.getuid()}")


def test_without_fallback_the_refusal_names_the_copy_fallback(tmp_path):
    # In a child: the refused import still loads numpy's OpenBLAS, whose threads
    # would outlive the test here.
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            async with asi.InterpreterPool(1) as pool:
                try:
                    await pool.run(copyfuncs.numpy_digest)
                except asi.ModuleRefusedError as exc:
                    report("refused", str(exc))
    """,
    )
    assert "fallback='copy'" in reports["refused"]
    assert "fallback=('copy', 'process')" in reports["refused"]


@needs_copies
def test_the_default_pool_takes_its_fallback_from_the_environment(tmp_path):
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            report("numpy", await asi.run(copyfuncs.numpy_where))
            import numpy
            report("main", copyfuncs.numpy_digest())
    """,
        env={"AIOSUBINTERP_FALLBACK": "copy"},
    )
    assert reports["numpy"][0] == reports["main"]
    assert any("aiosubinterp-copies-" in m for m in reports["numpy"][2][1:])


def test_a_bad_fallback_in_the_environment_is_a_clear_error(tmp_path):
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            try:
                await asi.run(copyfuncs.pid)
            except ValueError as exc:
                report("error", str(exc))
    """,
        env={"AIOSUBINTERP_FALLBACK": "copies"},
    )
    assert reports["error"].startswith("the environment variable AIOSUBINTERP_FALLBACK='copies'")
    assert "copy,process" in reports["error"]


@needs_copies
async def test_a_copy_folder_others_can_write_to_is_refused(tmp_path, monkeypatch):
    family = tmp_path / f"aiosubinterp-copies-{os.getuid()}"
    family.mkdir()
    family.chmod(0o777)
    monkeypatch.setenv("AIOSUBINTERP_COPY_DIR", str(tmp_path))
    pool = asi.InterpreterPool(1, fallback="copy")
    with pytest.raises(asi.BrokenPoolError) as info:
        await pool.start()
    await pool.aclose()
    cause = info.value.__cause__
    assert isinstance(cause, PermissionError)
    assert "nobody else can write to" in str(cause) and "drwxrwxrwx" in str(cause)
    assert os.listdir(family) == []  # nothing was written there


@needs_copies
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_threads_importing_copies_at_once_leave_the_check_on(tmp_path, loop_kind):
    names = ["numpy", "xml.dom.minidom", "json", *have("orjson", "lxml.etree", "pydantic")]
    reports, _ = run_child(
        tmp_path,
        f"""
        async def main():
            async with asi.Interpreter(fallback="copy") as interp:
                report("at_once", await interp.run(copyfuncs.import_at_once, {names!r}))
                # The check is still on for a module without a copy: a plain refusal.
                try:
                    await interp.run(copyfuncs.uvloop_version)
                except asi.ModuleRefusedError as exc:
                    report("uvloop", exc.name)
    """,
        loop_kind,
    )
    errors, left = reports["at_once"]
    assert errors == [] and left == 0
    assert reports["uvloop"].partition(".")[0] == "uvloop"


@needs_copies
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_an_import_while_a_copy_loads_on_another_thread_keeps_both_right(tmp_path, loop_kind):
    # Two threads of one interpreter import refusing modules, interleaved at the
    # worst point: the second reaches module creation while the first is
    # inside its section with the check lifted. Deciding the second's fate
    # used to turn the interpreter-wide check back on under the first, whose
    # copy CPython then refused ("does not support loading in subinterpreters").
    if len(have("orjson", "lxml")) < 2:
        pytest.fail("the copies extra (orjson, lxml) is missing from this venv")
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            async with asi.Interpreter(fallback="copy") as interp:
                report("race", await interp.run(
                    copyfuncs.copy_loading_while_another_thread_imports, "orjson", "lxml.etree"))
                report("digests", [await interp.run(copyfuncs.orjson_digest),
                                   await interp.run(copyfuncs.lxml_digest)])
    """,
        loop_kind,
    )
    race = reports["race"]
    assert race["steps"] == ["first in its section", "second inside creation"], race
    assert race["errors"] == [] and race["left"] == 0, race
    assert all(isinstance(d, int) for d in reports["digests"])


@needs_copies
def test_a_module_whose_load_from_a_copy_failed_can_be_imported_again(tmp_path):
    # The second import gets a copy at a new path (the old one's mapping is
    # what the dynamic linker would hand back). It used to be refused for
    # good: "its copy ... exists already".
    reports, _ = run_child(
        tmp_path,
        """
        async def main():
            async with asi.Interpreter(fallback="copy") as interp:
                again = copyfuncs.import_again_after_a_failed_copy
                report("again", await interp.run(again, "orjson"))
    """,
    )
    first, second = reports["again"]
    assert first == "a load from a copy failed (on purpose)"
    assert "/.attempt2/orjson/orjson." in second and second.endswith(" bytes"), second


@needs_copies
def test_numpy_in_interpreters_example_runs():
    # The example runs numpy in interpreters from private copies: a process of its own.
    proc = subprocess.run(
        [sys.executable, os.path.join(childproc.ROOT, "examples", "numpy_in_interpreters.py")],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": childproc.ROOT},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4, proc.stdout
    row = (
        r"{}: \d+ tasks/s, same results: True, in this process: {}, "
        r"16 MiB array \* 2: [\d.]+ ms, correct: True"
    )
    assert re.fullmatch(row.format(re.escape('interpreters (fallback="copy")'), "True"), lines[0])
    assert re.fullmatch(r"private copies: [1-9]\d* files, \d+ MiB on disk", lines[1])
    assert re.fullmatch(row.format(re.escape("processes (ProcessPool)"), "False"), lines[2])
    assert re.fullmatch(row.format(re.escape("threads (asyncio.to_thread)"), "True"), lines[3])
