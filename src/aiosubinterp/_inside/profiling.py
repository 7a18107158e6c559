"""The worker side of profiling: each interpreter runs cProfile on itself, around its jobs.

While a pool profiles (aiosubinterp._engine.profiling), each job is sent as a
call of run_profiled() here, with the original job and a send end of the
profile's channel. run_profiled() enables a cProfile.Profile of this
interpreter, runs the job, disables it and sends the job's statistics back as
bytes (marshal of (interpreter id, cProfile's stats dict)): no object is
shared with main. Nothing here samples another thread's frames.

cProfile measures through sys.monitoring from 3.12 on, which is one tool per
interpreter: while a job runs here, every thread of this interpreter is
measured, and a job that enables a profiler of its own runs unprofiled (its
profiler wins). Coroutine jobs are measured from their start to their end,
their event loop's own work included; coroutines that overlap (concurrency
per interpreter > 1) share one measurement, sent when the last one ends.

Worker-side module: no asyncio at import (it runs in every worker).
"""

import marshal

from aiosubinterp import _core
from aiosubinterp._inside import marshal as _marshal

TYPE_CHECKING = False  # no `typing` import in workers
if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Any

__all__ = ["run_profiled"]

# This interpreter's measurement in progress (module globals are per
# interpreter: each worker has its own copy of this module).
_profiler: "Any" = None  # the cProfile.Profile enabled now, or None
_depth = 0  # jobs (and coroutines) inside it
_send: "Any" = None  # where it goes when the last one ends


def _start(send: object) -> None:
    """Enable a new profiler of this interpreter (the first job in: _depth is 1)."""
    global _profiler, _send
    import cProfile

    if _profiler is not None:  # left on by an _end() interrupted before disable()
        try:
            _profiler.disable()
        except Exception:  # noqa: BLE001
            pass
    profiler: cProfile.Profile | None = cProfile.Profile()
    try:
        profiler.enable()  # type: ignore[union-attr]
    except ValueError:  # the job's own profiler holds sys.monitoring's profiler slot
        profiler = None
    _profiler, _send = profiler, send


def _end() -> None:
    global _profiler, _depth, _send
    _depth -= 1
    if _depth:
        return
    profiler, send = _profiler, _send
    if profiler is None:
        return
    profiler.disable()
    _profiler = _send = None
    profiler.create_stats()
    stats = profiler.stats
    # Our own calls, at the end of the measurement: _end() and its disable().
    for key in [
        k
        for k in stats
        if k[2] == "<method 'disable' of '_lsprof.Profiler' objects>"
        or (k[2] == "_end" and k[0] == __file__)
    ]:
        del stats[key]
    if not stats:
        return
    try:
        send._send_nowait(marshal.dumps((_core.current_interpreter_id(), stats)))
    except Exception:  # noqa: BLE001 - the profile ended meanwhile (its channel is closed)
        pass


async def _profiled_coroutine(coro: "Coroutine[Any, Any, Any]", started: list[bool]) -> "Any":
    started.append(True)
    try:
        return await coro
    finally:
        _end()


def _end_unstarted(started: list[bool], coro: "Coroutine[Any, Any, Any]") -> None:
    """A profiled coroutine closed before it started (its finally never ran)."""
    if not started:
        coro.close()
        _end()


_probe = _profiled_coroutine(None, [])  # type: ignore[arg-type]
_CoroutineType = type(_probe)
_probe.close()
del _probe


def run_profiled(send: object, kind: int, payload: object) -> object:
    """Run the job (kind, payload) with this interpreter's profiler on; send its statistics.

    send is the profile channel's send end (unbounded: sending never waits).
    """
    global _depth
    # The worker's own resolver (its cache): found as the job would be unprofiled.
    resolver = _marshal.resolver
    if resolver is None:
        raise RuntimeError("aiosubinterp: run_profiled() runs only in a worker")
    fn, args, kw, _ = resolver.job(kind, payload)
    # Counted before the `try`: no interruption (a cancel's KeyboardInterrupt
    # is checked at calls and loops) can land between the two.
    _depth += 1
    try:
        if _depth == 1:
            _start(send)
        result = fn(*args, **kw) if kw else fn(*args)
    except BaseException:
        _end()
        raise
    if type(result) is _CoroutineType:
        # Measured until it ends; _end() then, or when it is dropped unstarted.
        import weakref

        started: list[bool] = []
        wrapper = _profiled_coroutine(result, started)
        weakref.finalize(wrapper, _end_unstarted, started, result)
        return wrapper
    _end()
    return result
