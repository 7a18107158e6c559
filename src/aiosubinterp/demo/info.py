"""``python -m aiosubinterp info``: Python, per-interpreter GIL, cores, wakeup, module probe."""

from __future__ import annotations

import os
import sys

import aiosubinterp as asi

__all__ = ["run_info"]

_PROBE_MODULES = (
    "json",
    "re",
    "math",
    "collections",
    "datetime",
    "decimal",
    "fractions",
    "hashlib",
    "pickle",
    "sqlite3",
    "ssl",
    "zlib",
    "xml.etree.ElementTree",
    "asyncio",
    "ctypes",
    "readline",
    "numpy",
    "uvloop",
)

_PROBE_SCRIPT = """
import asyncio, sys
import aiosubinterp as asi
from aiosubinterp.demo.work import probe_import

async def main(name):
    async with asi.InterpreterPool(1) as pool:
        try:
            print("OK", await pool.run(probe_import, name))
        except asi.ModuleRefusedError as exc:
            print("refused", f"{exc.name} is not built for own-GIL interpreters")
        except ModuleNotFoundError:
            print("absent", "not installed")
        except ImportError as exc:
            print("error", type(exc).__name__ + ": " + str(exc).splitlines()[0])

asyncio.run(main(sys.argv[1]))
"""


def _probe(name: str) -> tuple[str, str]:
    """Import ``name`` in a worker of a fresh child process (some imports crash CPython)."""
    import subprocess

    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, name], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return "error", "timed out after 60 s"
    status, _, detail = proc.stdout.strip().partition(" ")
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return (
            "crash" if status == "" else f"{status}, then crash",
            f"child exit code {proc.returncode}: {tail[:100]}",
        )
    return status, detail


def run_info(probe: bool) -> int:
    """The ``info`` command: print what this Python and machine offer."""
    from concurrent.futures import ThreadPoolExecutor

    info = asi.runtime_info()
    print(f"aiosubinterp {info['version']}")
    print(f"Python {info['python']} ({sys.executable})")
    own_gil = "yes" if info["per_interpreter_gil"] else "no: needs 3.12+"
    print(f"per-interpreter GIL (PEP 684): {own_gil}")
    print(f"CPUs: {info['cpus']} in the machine, {info['default_size']} usable (default pool size)")
    print(f"wakeup: {info['wakeup']}")
    print(f"C accelerators kept out of workers: {', '.join(info['blocked_modules']) or 'none'}")
    print(f"main interpreter id: {info['main_interpreter_id']}")
    if not probe:
        return 0
    print("\nimporting common modules in a worker (each in a child process):")
    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as ex:
        results = list(ex.map(_probe, _PROBE_MODULES))
    for name, (status, detail) in zip(_PROBE_MODULES, results, strict=True):
        print(f"  {name:<24} {status:<8} {detail}")
    return 0
