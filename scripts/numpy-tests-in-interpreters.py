#!/usr/bin/env python
"""numpy's own test files, run by pytest inside worker interpreters with private copies.

The proof of ``fallback="copy"`` for numpy: each file runs with pytest inside a worker of
``InterpreterPool(2, fallback="copy")`` (two workers at once, each taking
files from the pool's queue) and, as the baseline, in the main interpreter of
a plain process; a table per file compares the counts, and every test whose
outcome differs is listed with its one-line reason.

Two modes for the interpreters (``--modes``):

- ``as-is``: numpy's files unchanged. A file that imports one of numpy's
  single-phase test helpers at module level (``_rational_tests``,
  ``_umath_tests``, ...; refused with ModuleRefusedError before their init
  runs) fails to collect: the table says so and counts the baseline's tests
  that could not run.
- ``placeholder``: each refused helper is replaced by a placeholder module
  whose every name raises the refusal when used (calls, attributes, pickling);
  a test that used a placeholder is counted as "refused" (whatever it did
  after), not as passed or failed. The other tests ran for real.
- ``parameters`` (with ``as-is`` the default): placeholders, and each
  ``parametrize`` entry built from a refused helper at collection time
  (test_multiarray's and test_ufunc's ``np.array(..., dtype=rational)``,
  which fail the whole file even with placeholders) is replaced, in the code
  pytest compiles, by a parameter skipped as "refused" with the entry's own
  id. The files on disk are not changed.

Every run happens in a child process (the interpreters' and the baseline's),
so a crash is reported with its exit code instead of ending the script.
Worker code: scripts/_numpy_suite_work.py (importable by name in workers).

    python scripts/numpy-tests-in-interpreters.py            # the default files
    python scripts/numpy-tests-in-interpreters.py --files _core/tests/test_einsum.py
    python scripts/numpy-tests-in-interpreters.py --json out.json

Exit status: 0 if every test that ran in an interpreter without touching a
refused helper has the baseline's outcome (fork is listed, not excused), else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FILES = [
    "_core/tests/test_multiarray.py",
    "_core/tests/test_umath.py",
    "_core/tests/test_ufunc.py",
    "_core/tests/test_einsum.py",
    "random/tests/test_generator_mt19937.py",
    "_core/tests/test_numeric.py",
    "linalg/tests/test_linalg.py",
]
OUTCOMES = ["passed", "failed", "skipped", "xfailed", "xpassed", "error", "refused"]


def numpy_dir() -> str:
    """The installed numpy package folder, found without importing numpy (main stays clean)."""
    import importlib.util

    spec = importlib.util.find_spec("numpy")
    if spec is None or spec.origin is None:
        sys.exit("numpy is not installed in this Python")
    return os.path.dirname(spec.origin)


# -- children -----------------------------------------------------------------------------


def append(out: str, item: list) -> None:
    """One JSON line per finished file: what a child that crashes later already did."""
    with open(out, "a") as f:
        f.write(json.dumps(item, default=str) + "\n")


def child_interpreters(files: list[str], mode: str, out: str, workers: int) -> None:
    """Each file in a worker of InterpreterPool(workers, fallback="copy"); one JSON line each."""
    sys.path[:0] = [ROOT, HERE]  # workers get main's sys.path
    import _numpy_suite_work as work

    import aiosubinterp as asi

    async def main() -> None:
        async with asi.InterpreterPool(workers, fallback="copy") as pool:

            async def one(path: str) -> None:
                start = time.perf_counter()
                try:
                    result = await pool.run(work.run_file, path, mode)
                except Exception as exc:  # noqa: BLE001 - reported per file, the others go on
                    result = {"exception": f"{type(exc).__name__}: {exc}"}
                result["wall"] = round(time.perf_counter() - start, 2)
                append(out, [path, result])

            await asyncio.gather(*[one(path) for path in files])
            stats = pool.statistics()
        append(out, ["<statistics>", {"copies": stats.get("copies")}])

    asyncio.run(main())


def child_baseline(files: list[str], out: str) -> None:
    """Each file in this process's main interpreter, one after the other."""
    sys.path[:0] = [HERE]
    import _numpy_suite_work as work

    for path in files:
        start = time.perf_counter()
        result = work.run_file(path, "as-is")
        result["wall"] = round(time.perf_counter() - start, 2)
        append(out, [path, result])


def spawn(kind: str, files: list[str], mode: str, workers: int, timeout: float) -> dict:
    """Run a child; {"rc", "seconds", "results": {path: result}, "stderr"}."""
    fd, out = tempfile.mkstemp(prefix="numpy-suite-", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")  # as fallback="copy" sets it in the other child
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        kind,
        "--mode",
        mode,
        "--workers",
        str(workers),
        "--out",
        out,
        "--",
        *files,
    ]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        rc, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stderr = "timeout", str(exc.stderr or "")
    results = {}
    with open(out) as f:
        for line in f:
            path, result = json.loads(line)
            results[path] = result
    os.unlink(out)
    return {
        "rc": rc,
        "seconds": round(time.perf_counter() - start, 1),
        "results": results,
        "stderr": stderr[-3000:],
    }


# -- the report ---------------------------------------------------------------------------


def counts(result: dict | None) -> str:
    if result is None:
        return "(no result: the child ended first)"
    if "exception" in result:
        return "task failed: " + result["exception"][:200]
    c = collections.Counter(outcome for outcome, _ in result["tests"].values())
    parts = [f"{c[k]} {k}" for k in OUTCOMES if c[k]]
    if result.get("parameters_replaced"):
        parts.append(f"({result['parameters_replaced']} parametrize entries replaced)")
    if result["collect_errors"]:
        parts.append(f"{len(result['collect_errors'])} collection error(s)")
    return ", ".join(parts) or "nothing ran"


def compare(path: str, base: dict | None, runs: dict[str, dict | None], rel: str) -> list[str]:
    """The lines of one file's table and its differences; appends to the problems list."""
    lines = [f"\n## {rel}\n", "| run | outcome | seconds |", "|---|---|---|"]
    lines.append(
        f"| baseline (main interpreter) | {counts(base)} | "
        f"{base.get('seconds', '') if base else ''} |"
    )
    for mode, result in runs.items():
        lines.append(
            f"| interpreters, {mode} | {counts(result)} | "
            f"{result.get('seconds', '') if result else ''} |"
        )
    if not base or "tests" not in base:
        return lines
    for mode, result in runs.items():
        if not result or "tests" not in result:
            continue
        if result["collect_errors"] and not result["tests"]:
            for nodeid, reason in result["collect_errors"].items():
                lines.append(f"\n{mode}: collection error in {nodeid}: {reason}")
            lines.append(f"{mode}: {len(base['tests'])} tests of the baseline could not run")
            continue
        diffs = []
        for nodeid in sorted(set(base["tests"]) | set(result["tests"])):
            was = base["tests"].get(nodeid, ["absent", ""])
            now = result["tests"].get(nodeid, ["absent", ""])
            if was[0] != now[0]:
                diffs.append((nodeid, was[0], now))
        by = collections.Counter(now[0] for _, _, now in diffs)
        lines.append(
            f"\n{mode}: {len(diffs)} test(s) differ from the baseline "
            f"({', '.join(f'{n} {k}' for k, n in by.items()) or 'none'}):"
        )
        for nodeid, was, (now, reason) in diffs:
            lines.append(f"- `{nodeid}`: {was} -> {now}: {reason}")
        # Skipped in both, for another reason: not a difference of outcome, but said.
        for nodeid, (now, reason) in sorted(result["tests"].items()):
            was = base["tests"].get(nodeid)
            if now == "skipped" and was and was[0] == "skipped" and was[1] != reason:
                lines.append(
                    f"- (skipped in both) `{nodeid}`: baseline: {was[1]}; interpreters: {reason}"
                )
    return lines


def unexplained(base: dict | None, result: dict | None) -> int:
    """Tests that ran in an interpreter without using a refused helper, yet differ."""
    if not base or not result or "tests" not in result or "tests" not in base:
        return 0 if result and "tests" in result else 1
    return sum(
        1
        for nodeid, (now, _) in result["tests"].items()
        if now not in ("refused",) and base["tests"].get(nodeid, ["absent"])[0] != now
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--files", nargs="*", default=FILES, help="test files, relative to the numpy package folder"
    )
    parser.add_argument(
        "--modes",
        default="as-is,parameters",
        help="as-is, placeholder, parameters (comma-separated)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", help="write every outcome to this file")
    parser.add_argument("--child", choices=["interpreters", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="as-is", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "interpreters":
        child_interpreters(args.paths, args.mode, args.out, args.workers)
        return 0
    if args.child == "baseline":
        child_baseline(args.paths, args.out)
        return 0

    root = numpy_dir()
    paths = [os.path.join(root, rel) for rel in args.files]
    numpy_version = subprocess.run(
        [sys.executable, "-c", "import numpy; print(numpy.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"# numpy's tests in interpreters ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    print(
        f"Python {sys.version.split()[0]} ({sys.executable}), numpy {numpy_version}, "
        f'{args.workers} workers with fallback="copy"'
    )
    base = spawn("baseline", paths, "as-is", 1, args.timeout)
    runs = {}
    for mode in args.modes.split(","):
        runs[mode] = spawn("interpreters", paths, mode, args.workers, args.timeout)
    print(
        f"\nchildren: baseline rc={base['rc']} ({base['seconds']} s); "
        + "; ".join(
            f"interpreters {mode} rc={run['rc']} ({run['seconds']} s)" for mode, run in runs.items()
        )
    )
    for name, run in [("baseline", base), *runs.items()]:
        if run["rc"] != 0:
            print(f"{name} child's stderr (last lines):\n{run['stderr']}")
    problems = 0
    for rel, path in zip(args.files, paths, strict=True):
        print(
            "\n".join(
                compare(
                    path,
                    base["results"].get(path),
                    {m: r["results"].get(path) for m, r in runs.items()},
                    rel,
                )
            )
        )
        for run in runs.values():
            problems += unexplained(base["results"].get(path), run["results"].get(path))
    problems += sum(1 for run in [base, *runs.values()] if run["rc"] != 0)
    print(f"\nunexplained differences (not a refused helper) and failed children: {problems}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "python": sys.version,
                    "numpy": numpy_version,
                    "baseline": base,
                    "interpreters": runs,
                },
                f,
            )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
