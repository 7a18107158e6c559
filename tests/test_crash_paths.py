"""Paths that can take a process down run in a child process; each asserts its exit code."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

import aiosubinterp as asi
from aiosubinterp import _quirks
from aiosubinterp._engine import hub as _hub

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = pathlib.Path(__file__).resolve().parent


def run_script(tmp_path: pathlib.Path, source: str, timeout: float = 120, env: dict | None = None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(tmp_path),
        env=full_env,
    )


def test_functions_and_classes_of_the_main_script(tmp_path):
    proc = run_script(
        tmp_path,
        """
        import asyncio
        import aiosubinterp as asi

        class Box:
            def __init__(self, v):
                self.v = v

        def triple(x):
            return 3 * x

        def bump(box):
            return Box(box.v + 1)

        async def main():
            async with asi.InterpreterPool(2) as pool:
                print(await pool.run(triple, 14))
                box = await pool.run(bump, Box(1))
                print(type(box).__name__, box.v, type(box) is Box)

        if __name__ == "__main__":
            asyncio.run(main())
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["42", "Box 2 True"]


def test_functions_of_a_main_module_run_with_dash_m(tmp_path):
    (tmp_path / "mainmod_xyz.py").write_text(
        textwrap.dedent("""
        import asyncio
        import aiosubinterp as asi

        def double(x):
            return 2 * x

        async def main():
            async with asi.InterpreterPool(1) as pool:
                print(await pool.run(double, 21))

        if __name__ == "__main__":
            asyncio.run(main())
    """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.run(
        [sys.executable, "-m", "mainmod_xyz"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


def test_main_script_without_guard_gives_a_clear_error(tmp_path):
    proc = run_script(
        tmp_path,
        """
        import aiosubinterp as asi
        import workfuncs

        def triple(x):
            return 3 * x

        pool = asi.InterpreterPool(1)   # unguarded: runs again in the worker

        async def main():
            try:
                await pool.run(triple, 1)
            except ImportError as exc:
                print("ImportError:", exc)
            await pool.aclose()

        import asyncio
        if asi.__name__ and __name__ == "__main__":
            asyncio.run(main())
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("guard the script's top-level code") == 1, proc.stdout
    assert "can only be created in the main interpreter" in proc.stdout
    assert ".." not in proc.stdout


def test_worker_cannot_create_pools():
    import workfuncs

    async def main():
        async with asi.InterpreterPool(1) as pool:
            with pytest.raises(RuntimeError, match="only be created in the main interpreter"):
                await pool.run(workfuncs.make_pool)

    import asyncio

    asyncio.run(main())


def test_exit_with_an_unclosed_pool(tmp_path):
    proc = run_script(
        tmp_path,
        """
        import asyncio, warnings
        import aiosubinterp as asi, workfuncs
        warnings.simplefilter("ignore", ResourceWarning)
        pools = []

        async def main():
            pool = asi.InterpreterPool(2)
            pools.append(pool)
            print(await pool.run(workfuncs.square, 5))

        asyncio.run(main())
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "25"


def test_exit_while_tasks_run_interrupts_them(tmp_path):
    proc = run_script(
        tmp_path,
        """
        import asyncio, warnings
        import aiosubinterp as asi, workfuncs
        warnings.simplefilter("ignore", ResourceWarning)
        keep = []

        async def main():
            pool = asi.InterpreterPool(2)
            keep.append(pool)
            keep.extend(pool.submit(workfuncs.spin_forever) for _ in range(3))
            await pool.start()
            while pool.statistics()["busy"] < 2:
                await asyncio.sleep(0.01)
            print("busy")

        asyncio.run(main())
    """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "busy"


# The stdlib modules whose C parts crash CPython when several interpreters
# import them are in tests/test_stdlib_matrix.py.


def test_shims_apply_to_the_affected_versions_only():
    blocked = _quirks.blocked_modules()
    if sys.version_info[:2] == (3, 12):
        assert blocked == ("_datetime", "_zoneinfo", "_decimal", "_hashlib", "_pickle")
    elif sys.version_info[:2] == (3, 13):
        assert blocked == ("_datetime", "_zoneinfo")
    else:
        assert blocked == ()


def test_the_quirks_index_is_alive():
    # Every workaround still applies to a supported Python (a dead shim is
    # removed, not kept), and the test that proves it exists.
    import tomllib

    from aiosubinterp import _quirks

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    oldest = tuple(int(p) for p in requires.removeprefix(">=").split("."))
    assert _quirks.INDEX
    for what, last, where, proof in _quirks.INDEX:
        if last not in ("any", "cython"):
            assert tuple(int(p) for p in last.split(".")) >= oldest, (
                f"{what!r} applies up to {last} only, below requires-python {requires}: "
                f"remove the workaround ({where})"
            )
        path, _, test = proof.partition("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^(async )?def {test}\(", source, re.M), (what, proof)


def test_module_that_refuses_subinterpreters(tmp_path):
    proc = run_script(
        tmp_path,
        """
        import asyncio
        import aiosubinterp as asi, workfuncs

        async def main():
            async with asi.InterpreterPool(1) as pool:
                try:
                    await pool.run(workfuncs.import_module, "readline")
                except asi.ModuleRefusedError as exc:
                    print("refused:", exc.name, "|", exc)
                    assert isinstance(exc, ImportError)
                print(await pool.run(workfuncs.square, 3))

        asyncio.run(main())
    """,
    )
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().split("\n")
    assert first.startswith("refused: readline |")
    assert "ProcessPoolExecutor" in first and "asyncio.to_thread" in first
    assert second == "9"


@pytest.mark.skipif(sys.version_info < (3, 13), reason="3.12 refuses its own list (REFUSED_ON_312)")
@pytest.mark.parametrize(
    ("module", "refused"),
    [("readline", "readline"), ("curses", "_curses"), ("curses.panel", "_curses")],
)
async def test_stdlib_single_phase_extensions_are_refused_before_their_init(module, refused):
    # CPython refuses a single-phase extension in an own-GIL interpreter only
    # after its init ran there; these set process-wide state in it. The
    # refusal comes from the worker's own finder, before any loader runs.
    import asyncio

    import workfuncs

    from aiosubinterp._inside import worker as inside

    async with asi.InterpreterPool(2) as pool:
        origins = await asyncio.gather(
            *(pool.run(workfuncs.refusal_origin, module) for _ in range(4))
        )
        for name, filename in origins:
            assert name == refused
            assert os.path.samefile(filename, inside.__file__), filename
        with pytest.raises(asi.ModuleRefusedError, match="ProcessPoolExecutor") as info:
            await pool.run(workfuncs.import_module, module)
        assert info.value.name == refused


async def test_pipe_wakeup_fallback(monkeypatch):
    import asyncio

    import workfuncs

    monkeypatch.setenv("AIOSUBINTERP_WAKEUP", "pipe")
    assert _hub.wakeup_mechanism() == "pipe"

    # A fresh loop gets a hub with the forced mechanism.
    async def body():
        async with asi.InterpreterPool(2) as pool:
            hub = _hub.hub_for(asyncio.get_running_loop())
            assert hub.core.mechanism == "pipe"
            results = await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(500)))
            assert results == [i * i for i in range(500)]

    await asyncio.get_running_loop().run_in_executor(None, asyncio.run, body())
    monkeypatch.setenv("AIOSUBINTERP_WAKEUP", "bogus")
    with pytest.raises(ValueError, match="AIOSUBINTERP_WAKEUP='bogus'"):
        _hub.wakeup_mechanism()


def test_worker_side_modules_do_not_import_asyncio():
    # Workers import these; asyncio in a worker aborts CPython 3.12.1 at exit
    # once a loop ran, and uvloop refuses to load there.
    code = (
        "import sys, aiosubinterp, aiosubinterp._core, aiosubinterp._inside.worker, "
        "aiosubinterp._channels.ends, aiosubinterp._inside.chunks, aiosubinterp.demo.work, "
        "aiosubinterp.demo.circles, aiosubinterp._introspect; "
        "print(sorted(m for m in ('asyncio', 'uvloop') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_public_names_resolve(tmp_path):
    # In a child: resolving DaskInterpreterExecutor imports distributed, which
    # starts a thread for the rest of the process (the leak check would count
    # it against this test when no Dask test ran before it).
    proc = run_script(
        tmp_path,
        """
        import aiosubinterp as asi
        for name in asi.__all__:
            assert getattr(asi, name) is not None, name
        assert set(asi.__all__) <= set(dir(asi))
        try:
            asi.nope
        except AttributeError as exc:
            assert "no attribute 'nope'" in str(exc), exc
        else:
            raise AssertionError("asi.nope resolved")
        print("resolved", len(asi.__all__))
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("resolved ")


def test_readme_example_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    example = readme.split("## Example", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    assert len(example.strip().splitlines()) <= 12
    proc = run_script(tmp_path, example)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[5133, 5133, 5133, 5133]"
