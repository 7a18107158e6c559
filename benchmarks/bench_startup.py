"""Cold start of a 2-worker pool to its first result, and the memory its warm workers add.

Every sample is a fresh process. Inside it, after the imports and with the
event loop running, the clock starts just before the pool is created and
stops when the first task's result is back. The first task,
``_work.first_task(text)``, needs json, re and collections (it imports them
on first use, unless ``preload=`` did already). Then both workers run a task
(so both are warm) and we read memory:

  RSS added = VmRSS of this process after - before the pool, plus the VmRSS
              of every live descendant process (worker processes, forkserver,
              resource tracker), from /proc/<pid>/status;
  PSS added = the same with Pss (/proc/<pid>/smaps_rollup), which splits the
              pages a forked child still shares with its parent.

Contenders, each sample in its own process:
  aiosubinterp            ``async with InterpreterPool(size=2)`` then ``await pool.run(...)``
  aiosubinterp+preload    the same with ``preload=("json", "re", "collections")``
  procpool-fork           ``ProcessPoolExecutor(2, fork)``, ``await loop.run_in_executor(...)``
  procpool-forkserver     the same with the forkserver start method
  stdlib-executor         ``concurrent.futures.InterpreterPoolExecutor(2)``, ``await
                          loop.run_in_executor(...)`` (3.14+)
  stdlib-interpreters     ``ThreadPoolExecutor(2)`` whose threads each make one
                          ``concurrent.interpreters.create()`` on first use and run
                          ``interp.call(fn, ...)``, via ``loop.run_in_executor`` (3.14+)
  aiointerpreters         ``with aiointerpreters.Runner(workers=2).start()`` then ``await
                          runner.run(...)`` (PyPI, 3.14+)

Contenders this Python does not have are skipped, with the reason printed.
The executors and aiointerpreters create their interpreters lazily or in the
background: their first result needs one interpreter, and so does ours
(``async with`` returns once the first interpreter is ready; the second joins
as it comes up).

Targets: start to first result no slower than the fork-based process
pool, preload makes the first task cheap; memory of the warm workers (RSS
added) <= 0.5 x what the (fork) process pool adds. On 3.14+: first result no
slower than the standard library's own interpreters (concurrent.interpreters,
created on the executor's threads).

Run: ``python benchmarks/bench_startup.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import _contenders
import _harness
import _machine
import _report
import _stats
import _work

PRELOAD = ("json", "re", "collections")
NAMES = [
    "aiosubinterp",
    "aiosubinterp+preload",
    "procpool-fork",
    "procpool-forkserver",
    "stdlib-executor",
    "stdlib-interpreters",
    "aiointerpreters",
]


async def _warm(call) -> list[Any]:
    """Run warm tasks, WORKERS at a time, until every worker ran one (at most 5 rounds).

    A forkserver pool starts its second process on demand, and the first may
    take both tasks of a round while the second is still starting.
    """
    results: list[Any] = []
    for _ in range(5):
        results += await asyncio.gather(*(call() for _ in range(_contenders.WORKERS)))
        if len({(r[0], r[1]) for r in results}) >= _contenders.WORKERS:
            break
    return results


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        text = _work.FIRST_TASK_TEXT
        want = _work.first_task(text)
        ours = kind.startswith("aiosubinterp")
        t_imp = time.perf_counter()
        if ours:
            import aiosubinterp

            pool_class = aiosubinterp.InterpreterPool  # resolves the lazy import of _pool/_core
        else:
            # What the contender's runner imports, imported before the clock
            # starts, as for aiosubinterp.
            import concurrent.futures
            import concurrent.futures.process
            import multiprocessing  # noqa: F401

            if kind.startswith("stdlib-"):
                import concurrent.interpreters

                _ = concurrent.futures.InterpreterPoolExecutor  # a lazy attribute on 3.14
            elif kind == "aiointerpreters":
                import aiointerpreters.runner  # noqa: F401
        import_s = time.perf_counter() - t_imp

        async def body() -> dict[str, Any]:
            await asyncio.sleep(0)
            mem0 = _machine.tree_memory()
            out: dict[str, Any] = {"import_ms": import_s * 1000}
            t0 = time.perf_counter()
            if ours:
                preload = PRELOAD if kind.endswith("+preload") else ()
                async with pool_class(size=_contenders.WORKERS, preload=preload) as pool:
                    t_ready = time.perf_counter()
                    first = await pool.run(_work.first_task, text)
                    t_first = time.perf_counter()
                    await pool.run(_work.first_task, text)
                    t_next = time.perf_counter()
                    where = await _warm(lambda: pool.run(_work.warm_task, 0.05, text))
                    mem1 = _machine.tree_memory()
                    t_close = time.perf_counter()
                out["ready_ms"] = (t_ready - t0) * 1000
                out["first_task_ms"] = (t_first - t_ready) * 1000
                out["close_ms"] = (time.perf_counter() - t_close) * 1000
                out["info"] = f"InterpreterPool(size={_contenders.WORKERS}, preload={preload!r})"
            else:
                # The shared runners: the process pools and the stdlib executor
                # call loop.run_in_executor, as a user would.
                async with _contenders.open_runner(kind, loop, warm=False) as runner:
                    first = await runner.run(_work.first_task, text)
                    t_first = time.perf_counter()
                    await runner.run(_work.first_task, text)
                    t_next = time.perf_counter()
                    where = await _warm(lambda: runner.run(_work.warm_task, 0.05, text))
                    mem1 = _machine.tree_memory()
                    t_close = time.perf_counter()
                out["close_ms"] = (time.perf_counter() - t_close) * 1000
                out["info"] = runner.info
            if first != want or any(w[2] != want for w in where):
                raise AssertionError(f"first_task returned {first!r}, expected {want!r}")
            workers_seen = len({(w[0], w[1]) for w in where})
            out.update(
                {
                    "first_result_ms": (t_first - t0) * 1000,
                    "next_task_ms": (t_next - t_first) * 1000,
                    "rss_added_kib": mem1["rss_self"] - mem0["rss_self"] + mem1["rss_children"],
                    "pss_added_kib": (
                        mem1["pss_self"]
                        + mem1["pss_children"]
                        - mem0["pss_self"]
                        - mem0["pss_children"]
                    ),
                    "rss_self_added_kib": mem1["rss_self"] - mem0["rss_self"],
                    "processes_added": mem1["children"] - mem0["children"],
                    "workers_seen": workers_seen,
                }
            )
            return out

        return _contenders.run_async(body, loop)

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    start = _report.Table(
        [
            "contender",
            "first result p50 ms",
            "p99 ms",
            "max ms",
            "ready ms",
            "first task ms",
            "next task ms",
            "import ms",
        ],
        "Start to first result (ms):",
    )
    mem = _report.Table(
        [
            "contender",
            "RSS added MiB",
            "per worker",
            "PSS added MiB",
            "of which this process",
            "processes added",
        ],
        "Memory added by 2 warm workers:",
    )
    first: dict[str, float] = {}
    rss: dict[str, float] = {}
    pss: dict[str, float] = {}
    summary: dict[str, Any] = {}
    infos = []
    mib = 1024.0
    for name, good in start.each(results, also=[mem]):
        s = _stats.summarize(_stats.collect(good, "first_result_ms"))
        first[name] = s["p50"]

        def med(key: str, good: list[dict[str, Any]] = good) -> float:
            return _stats.median(_stats.collect(good, key))

        start.add(
            name,
            *_report.latency_cells(s),
            _report.fmt(s["max"]),
            _report.fmt(med("ready_ms")),
            _report.fmt(med("first_task_ms"), 2),
            _report.fmt(med("next_task_ms"), 2),
            _report.fmt(med("import_ms")),
        )
        rss[name] = med("rss_added_kib") / mib
        pss[name] = med("pss_added_kib") / mib
        mem.add(
            name,
            _report.fmt(rss[name]),
            _report.fmt(rss[name] / _contenders.WORKERS),
            _report.fmt(pss[name]),
            _report.fmt(med("rss_self_added_kib") / mib),
            f"{med('processes_added'):g}",
        )
        seen = min(_stats.collect(good, "workers_seen"))
        infos.append(
            f"{name}: {good[0]['info']}"
            + (
                ""
                if seen >= _contenders.WORKERS
                else f" (only {seen:g} worker(s) ran the warm tasks in some sample)"
            )
        )
        summary[name] = {
            "first_result_ms": s,
            "rss_added_mib": rss[name],
            "pss_added_mib": pss[name],
            "ready_ms": med("ready_ms"),
            "first_task_ms": med("first_task_ms"),
        }
    fork = "procpool-fork"
    targets = []
    for ours in ("aiosubinterp", "aiosubinterp+preload"):
        targets.append(
            _report.Target(
                f"{ours}: first result / fork pool's",
                _stats.ratio(first.get(ours), first.get(fork)),
                "<=",
                1.0,
                note="ProcessPoolExecutor(2, fork), p50",
            )
        )
    for ours in ("aiosubinterp", "aiosubinterp+preload"):
        targets.append(
            _report.Target(
                f"{ours}: RSS added / fork pool's",
                _stats.ratio(rss.get(ours), rss.get(fork)),
                "<=",
                0.5,
                note="ProcessPoolExecutor(2, fork), 2 warm workers",
            )
        )
    for anchor, what in (
        ("stdlib-interpreters", "concurrent.interpreters"),
        ("stdlib-executor", "InterpreterPoolExecutor"),
    ):
        targets.append(
            _report.Target(
                f"aiosubinterp: first result / stdlib {what}'s",
                _stats.ratio(first.get("aiosubinterp"), first.get(anchor)),
                "<=",
                1.0,
                note="3.14+, p50",
            )
        )
    targets.append(
        _report.Target(
            "(info) aiosubinterp: RSS added / stdlib executor's",
            _stats.ratio(rss.get("aiosubinterp"), rss.get("stdlib-executor")),
            "<=",
            1.0,
            note="3.14+, 2 warm workers",
        )
    )
    targets.append(
        _report.Target(
            "(info) aiosubinterp: PSS added / fork pool's",
            _stats.ratio(pss.get("aiosubinterp"), pss.get(fork)),
            "<=",
            0.5,
            note="PSS: forked workers share their parent's pages",
        )
    )
    targets.append(
        _report.Target(
            "(info) aiosubinterp: RSS added / forkserver pool's",
            _stats.ratio(rss.get("aiosubinterp"), rss.get("procpool-forkserver")),
            "<=",
            0.5,
            note="forkserver + resource tracker + 2 workers",
        )
    )
    n = params["rounds"]
    notes = [
        f"{n} fresh processes per contender; p50/p99/max over them (with {n} samples the p99 "
        "is close to the max).",
        "first result: from just before the pool is created to the first result (for "
        "aiosubinterp, `async with InterpreterPool(...)` then `await pool.run(first_task)`); "
        "ready: the `async with` (the first interpreter created and preloaded); first task: "
        "ready to first result; next task: a second first_task call; import: importing the pool's "
        "module (done before the clock starts).",
        "Memory read after both workers ran a task (json, re and collections imported in each). "
        "RSS counts the pages a forked worker shares with its parent in both; PSS splits them. "
        "The memory target is checked on RSS; the PSS line shows that forked workers, "
        "sharing their parent's pages copy-on-write, add less unique memory than interpreters.",
        *infos,
    ]
    return _report.Report([start.section(), mem.section()], targets, notes, summary)


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_startup: cold start of a 2-worker pool to first result, and its memory",
            contenders={name: contender(name) for name in NAMES},
            full={"rounds": 15},
            quick={"rounds": 2},
            report=report,
            child_timeout=(60.0, 15.0),
        )
    )
