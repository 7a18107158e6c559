"""Log records from workers: what a record costs when main drops it, and when main keeps it.

Each contender logs ``n`` records in one loop (``_logwork.log_n``: one
``logger.log(level, "record %d ...", i)`` per record) at one of two levels:

  dropped   DEBUG, below main's INFO on the logger: checked and dropped where
            it is logged (in a worker too: the worker got main's levels), so
            nothing crosses
  kept      INFO: handled by main's handler, a StreamHandler with a formatter
            (time, logger, level, message) writing to /dev/null

Contenders, each in its own process (main's logging set up the same way):
  main interpreter        the loop in the main interpreter itself (the baseline)
  aiosubinterp            InterpreterPool(1): the loop in a worker interpreter;
                          records cross the pool's log channel to its log thread
  aiosubinterp-processes  ProcessPool(1): the loop in a worker process; records
                          cross its socket to its reader thread

A worker's time runs from ``pool.run(log_n, ...)`` (the pool warmed up by
one run of 1,000 records, handled) to: dropped, the end of that run (one
round trip of a task included); kept, the end of ``aclose()``, which returns
once main has handled every record (so closing the pool is included: ~1 ms
for an interpreter, a few ms for a process). Records/s = records / that
time; µs per record is its inverse; "vs main" divides by the main
interpreter's records/s. An interpreter worker drops the records that find
its channel full (10,000 wait at most) and main reports how many: the
"handled" column says how many reached main's handler, and in the kept case
records/s counts those only (a process worker waits instead of dropping).

Run: ``python benchmarks/bench_logging.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

import _contenders
import _harness
import _logwork
import _report
import _stats

MAIN = "main interpreter"
INTERP = "aiosubinterp"
PROCS = "aiosubinterp-processes"
NAMES = [MAIN, INTERP, PROCS]
LEVELS = {"dropped": logging.DEBUG, "kept": logging.INFO}


class _Counting(logging.StreamHandler):  # type: ignore[type-arg]
    """Formats and writes each record (to /dev/null), and counts them."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.count = 0
        self.reached = threading.Event()
        self.wanted = 0
        self.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))

    def expect(self, count: int) -> threading.Event:
        """An event set once count records were handled since now."""
        self.count, self.wanted = 0, count
        self.reached.clear()
        if count == 0:
            self.reached.set()
        return self.reached

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        self.count += 1
        if self.count == self.wanted:
            self.reached.set()


def _setup() -> tuple[_Counting, Any]:
    sink = open(os.devnull, "w")  # closed by the caller
    handler = _Counting(sink)
    logger = logging.getLogger(_logwork.LOGGER)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    logger.propagate = False
    return handler, sink


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        n = params["records"]
        handler, sink = _setup()
        out: dict[str, Any] = {}
        try:
            if kind == MAIN:
                for case, level in LEVELS.items():
                    _logwork.log_n(1000, level)  # warm-up
                    handler.count = 0
                    start = time.perf_counter()
                    _logwork.log_n(n, level)
                    elapsed = time.perf_counter() - start
                    out[case] = {"seconds": elapsed, "handled": handler.count}
                out["info"] = "the loop in the main interpreter"
                return out

            async def body() -> None:
                import asyncio

                import aiosubinterp

                for case, level in LEVELS.items():
                    pool = (
                        aiosubinterp.InterpreterPool(1)
                        if kind == INTERP
                        else aiosubinterp.ProcessPool(1)
                    )
                    try:
                        warm = handler.expect(1000 if case == "kept" else 0)
                        await pool.run(_logwork.log_n, 1000, level)  # start, warm up
                        await asyncio.to_thread(warm.wait, 60)  # its records handled too
                        handler.expect(0)
                        start = time.perf_counter()
                        await pool.run(_logwork.log_n, n, level)
                        if case == "dropped":  # nothing crossed: nothing to wait for
                            elapsed = time.perf_counter() - start
                    finally:
                        await pool.aclose()
                    if case == "kept":  # until main handled the last record
                        elapsed = time.perf_counter() - start
                    out[case] = {"seconds": elapsed, "handled": handler.count}

            _contenders.run_async(body, loop)
            out["info"] = ("InterpreterPool(1)" if kind == INTERP else "ProcessPool(1)") + (
                ", run(log_n); kept: to the end of aclose()"
            )
            return out
        finally:
            logging.getLogger(_logwork.LOGGER).removeHandler(handler)
            sink.close()

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    n = params["records"]
    headers = ["contender", "records/s", "µs per record", "vs main", "handled"]
    tables = {
        case: _report.Table(
            headers, f"{case}: {n:,} records at {logging.getLevelName(level)}, main's level INFO"
        )
        for case, level in LEVELS.items()
    }
    rates: dict[str, dict[str, float]] = {case: {} for case in LEVELS}
    first = tables["dropped"]
    for name, good in first.each(results, also=[tables["kept"]]):
        for case, table in tables.items():
            # kept: the records main's handler got (an interpreter's full channel drops some)
            counted = [r[case]["handled"] if case == "kept" else n for r in good]
            rate = rates[case][name] = _stats.median(
                [c / r[case]["seconds"] for c, r in zip(counted, good, strict=True)]
            )
            handled = min(r[case]["handled"] for r in good)
            table.add(name, _report.fmt(rate, 0), _report.fmt(1e6 / rate, 2), "", f"{handled:,}")
    for case, table in tables.items():
        base = rates[case].get(MAIN)
        for name, rate in rates[case].items():
            if base:
                table.set(name, 3, _report.fmt_ratio(rate / base))
    targets: list[_report.Target] = []  # no target: the tables compare
    notes = [
        f"Per round and case: {n:,} records in one task after a warm-up of 1,000; "
        f"medians over {params['rounds']} rounds; handled: the fewest of the rounds.",
        *first.infos,
    ]
    summary = {
        "records_per_s": {name: rates["kept"].get(name, float("nan")) for name in rates["kept"]},
        "dropped_records_per_s": rates["dropped"],
    }
    return _report.Report(
        [tables["dropped"].section(), tables["kept"].section()], targets, notes, summary
    )


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_logging: log records from a worker, dropped by main's level or kept",
            contenders={name: contender(name) for name in NAMES},
            full={"records": 100_000, "rounds": 3},
            quick={"records": 10_000, "rounds": 1},
            report=report,
        )
    )
