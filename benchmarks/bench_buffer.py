"""Large buffers to a worker and back: 1 MiB and 64 MiB, "return len" and "echo".

Each call sends a ``bytes`` payload (made once, before timing) to a worker:
``len`` returns its size, ``echo`` returns the payload itself, and the caller
checks the size of what came back. Every call is awaited on its own; we
report the median and p99 per call.

Contenders, each in its own process:
  aiosubinterp     ``await pool.run(fn, payload)`` on InterpreterPool(size=2):
                   payloads of 64 KiB or more cross zero-copy (the worker
                   gets a read-only memoryview of the caller's bytes; the echo
                   comes back as a view of the same memory)
  to_thread        ``await asyncio.to_thread(fn, payload)`` (no copy: same process, GIL)
  procpool-fork    ProcessPoolExecutor(2, fork) via run_in_executor (pickled through a pipe)
  shm              multiprocessing.shared_memory + the fork pool: the caller copies the
                   payload into a shared block (counted), the worker attaches by name;
                   echo returns the name and the caller reads a view of the block
  stdlib-executor  concurrent.futures.InterpreterPoolExecutor(2) via run_in_executor
                   (3.14+; arguments and results are pickled)
  stdlib-interpreters  ThreadPoolExecutor(2) via run_in_executor, each thread owning one
                   concurrent.interpreters.create(), interp.call(fn, payload) (3.14+)
  aiointerpreters  ``await runner.run(fn, payload)``, aiointerpreters.Runner(workers=2)
                   (PyPI, 3.14+; bytes cross through an interpreters queue)

Contenders this Python does not have are skipped, with the reason printed.

Also measured, for aiosubinterp: peak RSS growth (VmHWM, reset through
/proc/self/clear_refs) during 64 MiB echoes, over the payload already resident.

Targets: 64 MiB echo >= 100x faster than the fork pool,
within 10x of to_thread; peak RSS growth < 16 MiB during a 64 MiB echo.

Run: ``python benchmarks/bench_buffer.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import _bufwork
import _contenders
import _harness
import _machine
import _report
import _stats

NAMES = [
    "aiosubinterp",
    "to_thread",
    "procpool-fork",
    "shm",
    "stdlib-executor",
    "stdlib-interpreters",
    "aiointerpreters",
]
MIB = 1024 * 1024
CASES = [(1, "len"), (1, "echo"), (64, "len"), (64, "echo")]


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        async def body() -> dict[str, Any]:
            out: dict[str, Any] = {}
            runner_kind = "procpool-fork" if kind == "shm" else kind
            async with _contenders.open_runner(runner_kind, loop) as runner:
                for mib, op in CASES:
                    payload = b"\x5a" * (mib * MIB)
                    n = params["n_small"] if mib == 1 else params["n_large"]
                    if kind == "procpool-fork" and mib == 64:
                        n = max(3, n // 10)  # ~0.2 s per call: keep the run short
                    fn = _bufwork.nbytes if op == "len" else _bufwork.echo
                    call = _make_call(kind, runner, fn, op, payload)
                    for _ in range(params["warmup"]):
                        await call()
                    samples = []
                    peak = None
                    if kind == "aiosubinterp" and mib == 64 and op == "echo":
                        base = _machine.rss_kib()
                        have_peak = _machine.clear_peak_rss()
                    for _ in range(n):
                        t0 = time.perf_counter_ns()
                        size = await call()
                        samples.append((time.perf_counter_ns() - t0) / 1000)
                        if size != len(payload):
                            raise AssertionError(f"{kind} {op}: got {size} bytes back")
                    if kind == "aiosubinterp" and mib == 64 and op == "echo" and have_peak:
                        peak = _machine.peak_rss_kib() - base
                    out[f"{mib}MiB-{op}"] = samples
                    if peak is not None:
                        out["peak_kib"] = peak
                    del payload
                out["info"] = runner.info
            return out

        return _contenders.run_async(body, loop)

    return run


def _make_call(kind, runner, fn, op, payload):
    if kind != "shm":

        async def call() -> int:
            r = await runner.run(fn, payload)
            return r if op == "len" else memoryview(r).nbytes

        return call

    from multiprocessing import shared_memory

    async def call_shm() -> int:
        shm = shared_memory.SharedMemory(create=True, size=len(payload))
        try:
            shm.buf[: len(payload)] = payload
            if op == "len":
                return await runner.run(_bufwork.shm_len, shm.name)
            await runner.run(_bufwork.shm_echo, shm.name)
            view = shm.buf[: len(payload)]
            size = view.nbytes
            view.release()
            return size
        finally:
            shm.close()
            shm.unlink()

    return call_shm


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    headers = ["contender"]
    for mib, op in CASES:
        headers += [f"{mib} MiB {op} p50 µs", "p99 µs"]
    table = _report.Table(headers)
    stats: dict[tuple[str, str], dict[str, float]] = {}
    peaks = []
    for name, good in table.each(results):
        cells = []
        for mib, op in CASES:
            key = f"{mib}MiB-{op}"
            s = stats[(name, key)] = _stats.summarize(_stats.collect(good, key))
            cells += _report.latency_cells(s)
        table.add(name, *cells)
        peaks += [r["peak_kib"] for r in good if "peak_kib" in r]

    def p50(name: str, key: str) -> float | None:
        return stats.get((name, key), {}).get("p50")

    ours = p50("aiosubinterp", "64MiB-echo")
    targets = [
        _report.Target(
            "64 MiB echo: fork pool's p50 / ours",
            _stats.ratio(p50("procpool-fork", "64MiB-echo"), ours),
            ">=",
            100,
            note="ProcessPoolExecutor(fork)",
        ),
        _report.Target(
            "64 MiB echo: ours / to_thread's p50",
            _stats.ratio(ours, p50("to_thread", "64MiB-echo")),
            "<=",
            10,
            note="asyncio.to_thread",
        ),
        _report.Target(
            "peak RSS growth during 64 MiB echoes",
            max(peaks) / 1024 if peaks else None,
            "<",
            16,
            unit=" MiB",
            note="VmHWM over resident payload",
        ),
        _report.Target(
            "(info) 64 MiB echo: stdlib executor's p50 / ours",
            _stats.ratio(p50("stdlib-executor", "64MiB-echo"), ours),
            ">=",
            1,
            note="3.14+: InterpreterPoolExecutor",
        ),
        _report.Target(
            "(info) 64 MiB echo: stdlib interpreters' p50 / ours",
            _stats.ratio(p50("stdlib-interpreters", "64MiB-echo"), ours),
            ">=",
            1,
            note="3.14+: interp.call",
        ),
        _report.Target(
            "(info) 64 MiB echo: shm's p50 / ours",
            _stats.ratio(p50("shm", "64MiB-echo"), ours),
            ">=",
            1,
            note="informational, no target",
        ),
    ]
    notes = [
        f"per round: {params['n_small']} calls per 1 MiB case, {params['n_large']} per 64 MiB "
        f"case (fork pool: a tenth, at least 3), after {params['warmup']} warm-up calls; "
        f"{params['rounds']} rounds.",
        *table.infos,
    ]
    return _report.Report(
        [table.section()],
        targets,
        notes,
        {"stats": {f"{k[0]} {k[1]}": v for k, v in stats.items()}, "peak_kib": peaks},
    )


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_buffer: 1 MiB and 64 MiB to a worker and back",
            contenders={name: contender(name) for name in NAMES},
            full={"n_small": 200, "n_large": 30, "warmup": 3, "rounds": 3},
            quick={"n_small": 50, "n_large": 10, "warmup": 2, "rounds": 1},
            report=report,
            child_timeout=(300.0, 120.0),
        )
    )
