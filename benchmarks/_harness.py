"""The harness of every benchmark script: the parent and its children.

Every benchmark script is its own parent and its own children: the parent
runs ``python bench_x.py --contender NAME --params JSON`` once per contender
and round, in a fresh process each time, and reads back one JSON line that
starts with ``RESULT_MARK``. Rounds visit the contenders in a rotated order,
so a burst of outside load does not always hit the same one.

What belongs here: the command line (--quick --json --loop --rounds
--only), spawning one child per contender and round and reading its result
(killed after the time-out), the skipping of contenders a Python does not
have, the run's meta data (date, machine, Python, git revision, command,
load), and main(), which prints the report (_report.render) or the --json
document.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from _contenders import default_selection, package_version, unavailable
from _machine import cpu_model, loadavg, ncpu
from _report import Report, render, tail

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULT_MARK = "@@bench-result "
LOOPS = ("asyncio", "uvloop")
# The command line as given: a script may take its own options out of
# sys.argv (bench_http's --chart, bench_serve's --workers) before main() parses it.
ARGV = list(sys.argv)


def _git_rev() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def collect_meta(loop: str) -> dict[str, Any]:
    try:
        import aiosubinterp

        ours = f"{aiosubinterp.__version__} ({os.path.dirname(aiosubinterp.__file__)})"
    except Exception as exc:  # noqa: BLE001
        ours = f"not importable: {exc}"
    command = shlex.join(["python", *ARGV])
    if os.environ.get("PYTHONPATH"):
        command = f"PYTHONPATH={os.environ['PYTHONPATH']} {command}"
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpus": ncpu(),
        "cpu_model": cpu_model(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "platform": platform.platform(),
        "loop": loop if loop == "asyncio" else f"uvloop {package_version('uvloop')}",
        "aiosubinterp": ours,
        "git": _git_rev(),
        "command": command,
        "loadavg_start": loadavg(),
    }


def _parse_args(doc: str, names: list[str]) -> argparse.Namespace:
    first = doc.strip().splitlines()[0]
    parser = argparse.ArgumentParser(
        description=first,
        epilog=f"contenders: {', '.join(names)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small smoke run (< 20 s): fewer tasks and rounds; numbers are rough",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the results as one JSON document instead of the tables",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="asyncio",
        help="event loop for every contender (default: asyncio)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds over all contenders (each contender once per round, in a fresh process)",
    )
    parser.add_argument("--only", default=None, help="comma-separated subset of contenders to run")
    # Internal: how the parent runs one contender in a child process.
    parser.add_argument("--contender", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contender is not None and args.contender not in names:
        parser.error(f"unknown contender {args.contender!r}; choose from {', '.join(names)}")
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            parser.error(
                f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(names)}"
            )
        args.only = wanted
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def spawn_contender(
    script: str, name: str, params: dict[str, Any], loop: str, timeout: float
) -> dict[str, Any]:
    """Run one contender in a fresh `python script --contender name` and return its JSON result."""
    cmd = [
        sys.executable,
        script,
        "--contender",
        name,
        "--loop",
        loop,
        "--params",
        json.dumps(params),
    ]
    env = dict(os.environ)
    # Interpreters created by anyio (and processes started by spawn) do not
    # inherit sys.path[0] (the script's directory): put _work on PYTHONPATH.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its workers
        out, err = proc.communicate()
        return {
            "error": f"hung: killed after {timeout:g} s",
            "stderr": tail(err),
            "returncode": proc.returncode,
        }
    result = None
    for line in out.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK) :])
    if result is None:
        last = tail(err, 1) or "(no output)"
        return {
            "error": f"exit code {proc.returncode}: {last}",
            "stderr": tail(err),
            "returncode": proc.returncode,
        }
    if proc.returncode != 0:
        # A result was printed, then the process failed (e.g. an abort at exit).
        result["exit_problem"] = f"exit code {proc.returncode} after the result: {tail(err, 3)}"
    return result


def main(
    *,
    doc: str,
    title: str,
    contenders: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]],
    full: dict[str, Any],
    quick: dict[str, Any],
    report: Callable[[dict[str, list[dict[str, Any]]], dict[str, Any]], Report],
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    child_timeout: tuple[float, float] = (120.0, 20.0),
) -> int:
    """Entry point of a benchmark script: parent (run every contender) or child (run one).

    Args:
        doc: the script's docstring (its first line is the --help summary).
        title: heading of the printed report.
        contenders: name -> function(params, loop) returning a JSON-able dict,
            run in the child process.
        full, quick: parameters for a full and a --quick run; "rounds" is read here.
        report: turns {name: [result of each round]} into tables and targets.
        prepare: called in the parent to complete the parameters (calibration).
        child_timeout: seconds one child may take, (full, quick); then it is killed.
    """
    names = list(contenders)
    args = _parse_args(doc, names)
    if args.contender is not None:
        params = json.loads(args.params)
        try:
            result = contenders[args.contender](params, args.loop)
        except BaseException as exc:  # noqa: BLE001 - report any failure to the parent
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        print(RESULT_MARK + json.dumps(result), flush=True)
        return 0

    import importlib.util

    if importlib.util.find_spec("aiosubinterp") is None:
        print(
            f"warning: aiosubinterp is not importable by {sys.executable}: install it "
            f"(`make venv`, or `pip install -e .`) or set PYTHONPATH={REPO}; its rows will "
            "show the error",
            file=sys.stderr,
        )
    params = dict(quick if args.quick else full)
    if args.rounds is not None:
        params["rounds"] = args.rounds
    params["quick"] = args.quick
    meta = collect_meta(args.loop)
    if prepare is not None:
        params = prepare(params)
    chosen = args.only or default_selection(names)
    skipped = {n: reason for n in chosen if (reason := unavailable(n)) is not None}
    for name, reason in skipped.items():
        print(f"[{title}] skipping {name}: {reason}", file=sys.stderr, flush=True)
    chosen = [n for n in chosen if n not in skipped]
    if not chosen:
        print(f"[{title}] no contender can run on this Python", file=sys.stderr)
        return 1
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in chosen}
    timeout = child_timeout[1] if args.quick else child_timeout[0]
    script = os.path.abspath(sys.argv[0])
    started = time.perf_counter()
    rounds = int(params.get("rounds", 1))
    for r in range(rounds):
        order = chosen[r % len(chosen) :] + chosen[: r % len(chosen)]
        for name in order:
            print(
                f"[{title}] round {r + 1}/{rounds}: {name} ...", end="", file=sys.stderr, flush=True
            )
            t0 = time.perf_counter()
            res = spawn_contender(script, name, params, args.loop, timeout)
            results[name].append(res)
            status = f" error: {res['error']}" if "error" in res else ""
            print(f" {time.perf_counter() - t0:.1f} s{status}", file=sys.stderr, flush=True)
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["loadavg_end"] = loadavg()
    rep = report(results, params)
    problems = {
        n: [r.get("exit_problem") for r in rs if r.get("exit_problem")] for n, rs in results.items()
    }
    problems = {n: p for n, p in problems.items() if p}
    errors = {
        n: [
            {k: r.get(k) for k in ("error", "traceback", "stderr") if r.get(k)}
            for r in rs
            if "error" in r
        ]
        for n, rs in results.items()
    }
    errors = {n: e for n, e in errors.items() if e}
    if args.json:
        print(
            json.dumps(
                {
                    "benchmark": os.path.basename(script),
                    "title": title,
                    "meta": meta,
                    "params": params,
                    "summary": rep.summary,
                    "targets": [t.as_dict() for t in rep.targets],
                    "errors": errors,
                    "exit_problems": problems,
                    "skipped": skipped,
                    "notes": rep.notes,
                },
                indent=1,
                default=str,
            )
        )
        return 0
    print(render(title, meta, params, rep, errors, problems, skipped))
    return 0
