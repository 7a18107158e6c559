"""Cold start, part by part: where the time from pool creation to first result goes.

Every sample is a fresh process. With the event loop running and the modules
imported, the clock starts just before the pool is created and stops when the
first result of ``_work.noop(1)`` is back. Between the two, timestamps
(``time.perf_counter``, one clock for every interpreter of the process) mark
the parts:

  aiosubinterp (``async with InterpreterPool(size=2)``, then ``await pool.run``;
  ``async with`` returns once the first worker is ready, the second joins
  later, off the clock's path):
    admin thread   clock start -> a starter thread runs ``_InterpreterBackend._start_one``
                   (the first of the two workers)
    create         -> the worker's bootstrap starts running on its new thread:
                   waiting for the creation lock, ``Py_NewInterpreterFromConfig``
                   (the interpreter's own ``site`` import included), thread start
    import _core   the bootstrap's ``sys.path`` copy, blocked modules and
                   ``from aiosubinterp import _core`` (the package and _marshal)
    import _worker ``aiosubinterp._inside.worker`` (with ``_errors``), imported by
                   ``_core._worker_main``
    Runner         ``_worker.Runner(setup)``: settings, preload, initializer;
                   until the starter thread sees the worker ready
    pool ready     the first worker ready -> ``async with`` returns on the loop
    first task     -> the first result is back (resolving ``_work.noop``
                   imports ``_work`` in the worker)
  Each worker part is shown for the first worker to be ready ("w1") and the
  second ("w2"); "w2 create" starting late means creations were serialized.
  The second worker's parts overlap the first task (both are timed until
  the pool's close has waited for every start).

  stdlib (3.14+: ``concurrent.interpreters``; 3.12/3.13: the private
  ``_interpreters`` module), on a thread (``asyncio.to_thread``):
    create         ``concurrent.interpreters.create()``
    first call     ``interp.call(noop, 1)`` (3.13: ``_interpreters.exec`` of
                   ``import _work; _work.noop(1)``)
    back on loop   -> the result is back on the event loop

To see the bootstrap's parts, the aiosubinterp contender runs the pool's own
bootstrap source with timestamp lines added (they write to a pipe) and wraps
``_InterpreterBackend._start_one`` / ``_new_worker``; nothing else changes.

Measure an installed project (a wheel, ``pip install .``) or compile the
package's ``.pyc`` files first (``python -m compileall aiosubinterp``): with
``PYTHONDONTWRITEBYTECODE=1`` an editable install compiles every module again
in every new interpreter.

Run: ``python benchmarks/bench_coldstart.py [--quick] [--json] [--rounds N]``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from typing import Any

import _contenders
import _harness
import _report
import _stats
import _work

NAMES = ["aiosubinterp", "stdlib"]
OURS_PARTS = [
    "admin thread",
    "w1 create",
    "w1 import _core",
    "w1 import _worker",
    "w1 Runner",
    "w2 create",
    "w2 import _core",
    "w2 import _worker",
    "w2 Runner",
    "pool ready",
    "first task",
]
STDLIB_PARTS = ["create", "first call", "back on loop"]

# Where the timestamp lines go into the pool's bootstrap source.
_ANCHORS = (
    ("def _boot():\n    import sys\n", "    _stamp('boot')\n"),
    (
        "        from aiosubinterp import _core\n",
        "        _stamp('core')\n        from aiosubinterp._inside import worker as _worker\n        "  # noqa: E501
        "_stamp('worker')\n",
    ),
)


def _instrumented_bootstrap(source: str, fd: int) -> str:
    """The pool's bootstrap with timestamp lines added after each anchor."""
    for anchor, extra in _ANCHORS:
        if anchor not in source:
            raise RuntimeError(
                f"bench_coldstart: the pool's bootstrap changed (no {anchor!r}): update _ANCHORS"
            )
        source = source.replace(anchor, anchor + extra, 1)
    # No braces: the pool fills the source in with str.format().
    header = (
        "def _stamp(what):\n"
        "    import os, time, _thread\n"
        f"    os.write({fd}, ('%s %d %r\\n' % (what, _thread.get_ident(), time.perf_counter()))"
        ".encode())\n"
    )
    return header + source


def run_ours(params: dict[str, Any], loop: str) -> dict[str, Any]:
    import aiosubinterp

    _pool = _contenders.pool_module()
    pool_class = aiosubinterp.InterpreterPool
    rfd, wfd = os.pipe()
    marks: dict[str, list[tuple[int, float]]] = {}
    lock = threading.Lock()

    def mark(what: str) -> None:
        with lock:
            marks.setdefault(what, []).append((threading.get_ident(), time.perf_counter()))

    real_bootstrap = _pool._BOOTSTRAP
    boot_source = _instrumented_bootstrap(real_bootstrap, wfd)
    real_start_one = _pool._InterpreterBackend._start_one
    real_new_worker = _pool._InterpreterBackend._new_worker

    def start_one(self):  # type: ignore[no-untyped-def]
        mark("start_one")
        return real_start_one(self)

    def new_worker(self):  # type: ignore[no-untyped-def]
        mark("new_worker")
        out = real_new_worker(self)
        mark("ready")
        return out

    _pool._BOOTSTRAP = boot_source
    _pool._InterpreterBackend._start_one = start_one  # type: ignore[method-assign]
    _pool._InterpreterBackend._new_worker = new_worker  # type: ignore[method-assign]

    async def body() -> dict[str, Any]:
        await asyncio.sleep(0)
        c0 = time.process_time()
        t0 = time.perf_counter()
        async with pool_class(size=_contenders.WORKERS) as pool:
            t_ready = time.perf_counter()
            r = await pool.run(_work.noop, 1)
            t_first = time.perf_counter()
            cpu = time.process_time() - c0
        if r != 1:
            raise AssertionError(f"noop(1) returned {r!r}")
        return {"t0": t0, "t_ready": t_ready, "t_first": t_first, "cpu": cpu}

    try:
        res = _contenders.run_async(body, loop)
    finally:
        _pool._BOOTSTRAP = real_bootstrap
    os.close(wfd)
    raw = b""
    while chunk := os.read(rfd, 65536):
        raw += chunk
    os.close(rfd)
    # Worker stamps: (what, worker thread ident, time); the admin side's
    # new_worker/ready are per starter thread, in the same order as the boots.
    boots: dict[int, dict[str, float]] = {}
    for line in raw.decode().splitlines():
        what, ident, t = line.split()
        boots.setdefault(int(ident), {})[what] = float(t)
    # (new_worker, ready) per starter thread, in the order the workers got ready.
    began = dict(marks.get("new_worker", []))
    pairs = sorted((t, began[ident]) for ident, t in marks.get("ready", []))
    readies = [ready for ready, _ in pairs]
    starts = [start for _, start in pairs]
    if len(boots) != _contenders.WORKERS or len(pairs) != _contenders.WORKERS:
        raise AssertionError(
            f"expected {_contenders.WORKERS} workers, saw boots {boots} and marks {marks}"
        )
    workers = sorted(boots.values(), key=lambda b: b["worker"])
    t0 = res["t0"]
    ms = 1000.0
    parts = {"admin thread": (min(t for _, t in marks["start_one"]) - t0) * ms}
    for i, (b, ready) in enumerate(zip(workers, readies, strict=True), 1):
        # A worker's creation starts when its starter thread called _new_worker;
        # with serialized creation the second one waits for the first's lock.
        parts[f"w{i} create"] = (b["boot"] - starts[i - 1]) * ms
        parts[f"w{i} import _core"] = (b["core"] - b["boot"]) * ms
        parts[f"w{i} import _worker"] = (b["worker"] - b["core"]) * ms
        parts[f"w{i} Runner"] = (ready - b["worker"]) * ms
    parts["pool ready"] = (res["t_ready"] - readies[0]) * ms
    parts["first task"] = (res["t_first"] - res["t_ready"]) * ms
    return {
        "parts": parts,
        "ready_ms": (res["t_ready"] - t0) * ms,
        "first_result_ms": (res["t_first"] - t0) * ms,
        "cpu_ms": res["cpu"] * ms,
        "w1_ready_ms": (readies[0] - t0) * ms,
        "info": f"InterpreterPool(size={_contenders.WORKERS}), {_pool.__file__}",
    }


def run_stdlib(params: dict[str, Any], loop: str) -> dict[str, Any]:
    try:
        import concurrent.interpreters as interpreters
    except ImportError:
        interpreters = None
        try:
            import _interpreters as low
        except ImportError:
            import _xxsubinterpreters as low  # type: ignore[no-redef]

    stamps: dict[str, float] = {}
    made: list[Any] = []

    def in_thread() -> Any:
        if interpreters is not None:
            interp = interpreters.create()
            made.append(interp)
            stamps["created"] = time.perf_counter()
            r = interp.call(_work.noop, 1)
            stamps["called"] = time.perf_counter()
            return r
        iid = low.create("isolated") if sys.version_info >= (3, 13) else low.create(isolated=True)
        made.append(iid)
        stamps["created"] = time.perf_counter()
        err = low.exec(iid, "import _work\n_work.noop(1)")
        stamps["called"] = time.perf_counter()
        if err is not None:
            raise RuntimeError(f"the first exec failed: {err}")
        return 1

    def close() -> None:
        for it in made:
            if interpreters is not None:
                it.close()
            else:
                low.destroy(it)

    async def body() -> dict[str, Any]:
        await asyncio.sleep(0)
        c0 = time.process_time()
        t0 = time.perf_counter()
        try:
            r = await asyncio.to_thread(in_thread)
            t_first = time.perf_counter()
            cpu = time.process_time() - c0
        finally:
            await asyncio.to_thread(close)  # after the clock, as the pool's close is
        if r != 1:
            raise AssertionError(f"noop(1) returned {r!r}")
        return {"t0": t0, "t_first": t_first, "cpu": cpu}

    res = _contenders.run_async(body, loop)
    ms = 1000.0
    parts = {
        "create": (stamps["created"] - res["t0"]) * ms,
        "first call": (stamps["called"] - stamps["created"]) * ms,
        "back on loop": (res["t_first"] - stamps["called"]) * ms,
    }
    what = (
        "concurrent.interpreters.create() + interp.call(noop, 1) (3.14 runs the function's "
        "code in the interpreter's __main__: no import of its module)"
        if interpreters is not None
        else "_interpreters.create('isolated') + _interpreters.exec('import _work; _work.noop(1)')"
    )
    return {
        "parts": parts,
        "first_result_ms": (res["t_first"] - res["t0"]) * ms,
        "cpu_ms": res["cpu"] * ms,
        "info": f"{what}, on a thread (asyncio.to_thread); closed after the clock stops",
    }


def run_ours_at_once(params: dict[str, Any], loop: str) -> dict[str, Any]:
    """The first task submitted at once, without waiting for the pool to start.

    A task submitted to a pool that is still starting runs on the first
    interpreter that is ready, as ``async with`` returns once it is.
    """
    import aiosubinterp

    pool_class = aiosubinterp.InterpreterPool  # imports the pool's modules before the clock

    async def body() -> dict[str, Any]:
        await asyncio.sleep(0)
        c0 = time.process_time()
        t0 = time.perf_counter()
        pool = pool_class(size=_contenders.WORKERS)
        try:
            r = await pool.run(_work.noop, 1)
            t_first = time.perf_counter()
            cpu = time.process_time() - c0
        finally:
            await pool.aclose()
        if r != 1:
            raise AssertionError(f"noop(1) returned {r!r}")
        return {"t0": t0, "t_first": t_first, "cpu": cpu}

    res = _contenders.run_async(body, loop)
    ms = 1000.0
    return {
        "parts": {"first result": (res["t_first"] - res["t0"]) * ms},
        "first_result_ms": (res["t_first"] - res["t0"]) * ms,
        "cpu_ms": res["cpu"] * ms,
        "info": f"InterpreterPool(size={_contenders.WORKERS}) then at once pool.run(noop, 1), "
        "no async with / start()",
    }


CONTENDERS = {
    "aiosubinterp": run_ours,
    "aiosubinterp, run at once": run_ours_at_once,
    "stdlib": run_stdlib,
}


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    tables = []
    summary: dict[str, Any] = {}
    infos = []
    first: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for name, rounds in results.items():
        good, error = _stats.ok_rounds(rounds)
        if not good:
            tables.append(
                (
                    f"{name}:",
                    ["part", "median ms"],
                    [["error", _report.error_cell(error or "no result")]],
                )
            )
            continue
        names = {"aiosubinterp": OURS_PARTS, "stdlib": STDLIB_PARTS}.get(name, ["first result"])
        rows = []
        parts = {}
        for part in names:
            values = [r["parts"][part] for r in good]
            parts[part] = _stats.median(values)
            rows.append([part, *_report.quartile_cells(values)])
        totals = _stats.collect(good, "first_result_ms")
        s = _stats.summarize(totals)
        first[name] = s["p50"]
        rows.append(["= first result (median of totals)", *_report.quartile_cells(totals)])
        keys = [("cpu_ms", "(CPU time of the process, all threads)")]
        if name == "aiosubinterp":
            keys += [("w1_ready_ms", "(first worker ready)"), ("ready_ms", "(async with returned)")]
        for key, label in keys:
            rows.append([label, *_report.quartile_cells(_stats.collect(good, key))])
        failed = f" ({len(rounds) - len(good)}/{len(rounds)} rounds failed)" if error else ""
        tables.append(
            (
                f"{name}{failed} ({len(good)} fresh processes):",
                ["part", "median ms", "p25", "p75"],
                rows,
            )
        )
        cpu[name] = _stats.median(_stats.collect(good, "cpu_ms"))
        summary[name] = {"parts_median_ms": parts, "first_result_ms": s, "cpu_ms": cpu[name]}
        for key, _ in keys[1:]:
            summary[name][key] = _stats.median(_stats.collect(good, key))
        infos.append(f"{name}: {good[0]['info']}")
    targets = [
        _report.Target(
            "first result / stdlib interpreter's",
            _stats.ratio(first.get("aiosubinterp"), first.get("stdlib")),
            "<=",
            1.0,
            note="create + first call, same Python, p50",
        ),
        _report.Target(
            "(info) run at once: first result / stdlib interpreter's",
            _stats.ratio(first.get("aiosubinterp, run at once"), first.get("stdlib")),
            "<=",
            1.0,
            note="no async with: the first ready worker runs it",
        ),
        _report.Target(
            "(info) CPU time to first result / stdlib's",
            _stats.ratio(cpu.get("aiosubinterp"), cpu.get("stdlib")),
            "<=",
            1.0,
            note="process CPU time, all threads: less load-dependent",
        ),
    ]
    notes = [
        f"{params['rounds']} fresh processes per contender; each part is the median over them "
        "(parts' medians need not add up to the median total).",
        "w1/w2: the first and second worker to be ready. create: from the starter thread's "
        "_new_worker() call to the bootstrap's first line on the worker thread.",
        *infos,
    ]
    return _report.Report(tables, targets, notes, summary)


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_coldstart: pool creation to first result, part by part, 2 workers",
            contenders=CONTENDERS,
            full={"rounds": 40},
            quick={"rounds": 3},
            report=report,
            child_timeout=(60.0, 20.0),
        )
    )
