"""Profiling the work done in worker interpreters: the caller's side.

``pool.profile()`` makes a Profile and hangs it on the pool's engine; while it
is there, _InterpreterBackend._submit hands every job to Profile.wrap(), which turns it
into a call of aiosubinterp._inside.profiling.run_profiled with the original
job and a send end of the profile's channel. Each interpreter measures itself
with cProfile around the job and sends the job's statistics back as bytes
(marshal), which this side merges per interpreter. When no profile is on, the
only cost is the engine's ``if self._profile is not None`` at submit.

``python -m aiosubinterp profile script.py`` (profile_script) switches on one
process-wide Profile that every pool created meanwhile picks up.
"""

from __future__ import annotations

import marshal
import math
import os
import pstats
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

from aiosubinterp import _core

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["Profile", "join_process_profile", "profiling_unsupported"]

_WORKER_MODULE = "aiosubinterp._inside.profiling"
_WORKER_FUNCTION = "run_profiled"

Raw = dict[tuple[str, int, str], tuple[Any, ...]]  # cProfile's stats dict

# The Profile of `python -m aiosubinterp profile`: pools created while it is
# set profile into it from their start.
_process_profile: Profile | None = None


def join_process_profile(engine: Any) -> None:
    """Called at a pool's creation: join the process-wide Profile, if one is on."""
    profile = _process_profile
    if profile is not None and not profile.closed:
        profile._attach(engine)


def profiling_unsupported() -> str | None:
    """Why profiling cannot run on this CPython, or None."""
    if sys.version_info < (3, 13):
        import platform

        return (
            f"profiling interpreters needs CPython 3.13 or newer (this is "
            f"{platform.python_version()}): on 3.12, cProfile's C module (_lsprof) does not load "
            "in a subinterpreter, and trying corrupts the heap. Profile on 3.13, or run the "
            "work with a ProcessPool and profile there."
        )
    return None


def merge_into(into: Raw, stats: Raw) -> None:
    """Add cProfile stats dict `stats` to `into` (as pstats.Stats.add does)."""
    for func, (cc, nc, tt, ct, callers) in stats.items():
        old = into.get(func)
        if old is None:
            into[func] = (cc, nc, tt, ct, dict(callers))
            continue
        merged = dict(old[4])
        for caller, value in callers.items():
            before = merged.get(caller)
            if before is None:
                merged[caller] = value
            elif isinstance(value, tuple):
                merged[caller] = tuple(a + b for a, b in zip(before, value, strict=True))
            else:
                merged[caller] = before + value
        into[func] = (old[0] + cc, old[1] + nc, old[2] + tt, old[3] + ct, merged)


class _Loaded:
    """What pstats.Stats() loads from: an object with create_stats() and .stats."""

    def __init__(self, stats: Raw) -> None:
        self.stats = stats

    def create_stats(self) -> None:
        pass


def make_stats(raw: Raw) -> pstats.Stats:
    """A pstats.Stats of a copy of raw (an empty Stats when raw is empty)."""
    if not raw:
        return pstats.Stats()
    copy: Raw = {}
    merge_into(copy, raw)
    return pstats.Stats(_Loaded(copy))  # type: ignore[arg-type]


class Profile:
    """A profile of the tasks that ran in a pool's interpreters while it was on.

    Made by ``InterpreterPool.profile()`` (or ``Interpreter.profile()``); on
    from then until ``close()`` or the end of its ``with`` / ``async with``
    block. Each interpreter runs `cProfile` on itself around every task
    submitted meanwhile (workers started or replaced meanwhile included) and
    sends the task's statistics back as bytes; nothing samples another
    thread's frames. A task submitted while the profile is on counts if it
    ends before the profile is closed.

    Thread-safety: all methods may be called from any thread.
    """

    def __init__(self, parent: Profile | None = None) -> None:
        from aiosubinterp._channels.ends import open_channel

        # Unbounded: a worker sends without waiting; drained at each submit
        # and whenever the statistics are read.
        self._send, self._recv = open_channel(math.inf)
        self._lock = threading.Lock()
        self._per: dict[int, Raw] = {}
        self._engines: weakref.WeakSet[Any] = weakref.WeakSet()
        self._closed = False
        self._tasks = 0
        # The process-wide profile this one stands in for on its engine (under
        # `python -m aiosubinterp profile`): it gets the statistics too, and
        # the engine back when this one closes.
        self._parent = parent

    # -- engine side -------------------------------------------------------------

    def _attach(self, engine: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("this profile is closed: make a new one with pool.profile()")
            self._engines.add(engine)
        engine._profile = self

    def wrap(self, kind: int, payload: object) -> tuple[int, object]:
        """The job (kind, payload) as a profiled call (called by the engine at submit);
        unchanged once this profile is closed."""
        self._drain()
        with self._lock:
            if self._closed:
                return kind, payload
            self._tasks += 1
        if kind == _core.JOB_KIND_CALL and len(payload) > 4:  # type: ignore[arg-type]
            # The pool's context_vars: the worker sets them around the outer
            # call (run_profiled), and so around the task it runs.
            inner, context = payload[:4], payload[4]  # type: ignore[index]
            return _core.JOB_KIND_CALL, (
                _WORKER_MODULE,
                _WORKER_FUNCTION,
                (self._send, kind, inner),
                (),
                context,
            )
        return _core.JOB_KIND_CALL, (
            _WORKER_MODULE,
            _WORKER_FUNCTION,
            (self._send, kind, payload),
            (),
        )

    def _drain(self) -> None:
        from aiosubinterp._errors import EndOfChannel, WouldBlock

        got = []
        with self._lock:
            if self._recv.closed:
                return
            while True:
                try:
                    data = self._recv.recv_nowait()
                except (WouldBlock, EndOfChannel):
                    break
                interp, stats = marshal.loads(data)
                merge_into(self._per.setdefault(interp, {}), stats)
                got.append((interp, stats))
        parent = self._parent
        if got and parent is not None:
            with parent._lock:
                for interp, stats in got:
                    merge_into(parent._per.setdefault(interp, {}), stats)

    # -- user side ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the profile stopped collecting."""
        return self._closed

    @property
    def tasks(self) -> int:
        """How many tasks were submitted while the profile was on (a submit refused for
        unshareable arguments included)."""
        return self._tasks

    def close(self) -> None:
        """Stop profiling (idempotent): tasks submitted from now on are not measured.

        What finished before is kept; statistics sent by tasks that finish
        later are dropped.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            engines = list(self._engines)
            self._engines.clear()
        parent = self._parent
        for engine in engines:
            if engine._profile is self:
                engine._profile = parent if parent is not None and not parent.closed else None
        self._drain()
        with self._lock:
            self._recv.close()
            self._send.close()

    def per_interpreter(self) -> dict[int, pstats.Stats]:
        """{interpreter id: pstats.Stats of what ran there}, so far."""
        self._drain()
        with self._lock:
            return {interp: make_stats(raw) for interp, raw in sorted(self._per.items())}

    def raw(self) -> Raw:
        """cProfile's stats dict of every interpreter together, so far (a copy)."""
        self._drain()
        merged: Raw = {}
        with self._lock:
            for raw in self._per.values():
                merge_into(merged, raw)
        return merged

    def stats(self) -> pstats.Stats:
        """One pstats.Stats of every interpreter's statistics together, so far.

        Times add up across interpreters: with four interpreters busy for a
        second each, the total is four seconds.
        """
        return make_stats(self.raw())

    def dump(self, path: str | Any) -> None:
        """Write stats() to path in pstats' format (``python -m pstats path``, snakeviz)."""
        import os

        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"Profile.dump() needs a file path, got {type(path).__name__} {path!r}")
        with open(path, "wb") as f:
            marshal.dump(self.raw(), f)

    def __enter__(self) -> Profile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Profile:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "on"
        return f"<aiosubinterp Profile {state}, {self._tasks} tasks, {len(self._per)} interpreters>"


def start(engine: Any) -> Profile:
    """engine.profile(): a new Profile attached to engine."""
    why = profiling_unsupported()
    if why is not None:
        raise RuntimeError(why)
    current = engine._profile
    if current is not None and not current.closed and current is not _process_profile:
        raise RuntimeError(
            f"{type(engine).__name__}.profile(): this {engine._kind} is already being profiled "
            "(a profile is on until its block ends or close()); close that one first"
        )
    profile = Profile(current if current is not None and not current.closed else None)
    profile._attach(engine)
    return profile


def start_process_profile() -> Profile:
    """Switch on the process-wide profile every pool created from now on joins."""
    global _process_profile
    why = profiling_unsupported()
    if why is not None:
        raise RuntimeError(why)
    _process_profile = Profile()
    return _process_profile


def stop_process_profile() -> None:
    global _process_profile
    profile, _process_profile = _process_profile, None
    if profile is not None:
        profile.close()


def write_outputs(profile: Profile, out: str, title: str) -> list[str]:
    """Write profile.txt, profile.pstats, flamegraph.svg and profile.speedscope.json in out."""
    from aiosubinterp._engine import flamegraph

    raw = profile.raw()
    per = profile.per_interpreter()
    total = sum(v[3] for v in raw.values() if not v[4])  # the roots' cumulative times
    summary = (
        f"{profile.tasks} task{'s' if profile.tasks != 1 else ''} profiled in "
        f"{len(per)} interpreter{'s' if len(per) != 1 else ''}, {total:.3f} s of work"
    )
    written = []

    def put(name: str, data: str | bytes) -> None:
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        written.append(path)

    put("profile.txt", flamegraph.text_report(make_stats(raw), per, f"{title}: {summary}"))
    put("profile.pstats", marshal.dumps(raw))
    put(
        "flamegraph.svg",
        flamegraph.render_svg(
            raw,
            title,
            f"{summary}; stacks estimated from cProfile's caller -> callee times "
            "(exact for the two lowest rows, approximate above)",
        ),
    )
    put("profile.speedscope.json", flamegraph.speedscope_json(raw, title))
    return written


def profile_script(script: str, args: list[str], out: str) -> int:
    """``python -m aiosubinterp profile``: run script as __main__ with every pool it creates
    profiled; write the report files in out. Returns the script's exit status.

    Raises ValueError (before running anything) for a script that is not a
    file or an out that is not a folder.
    """
    import runpy

    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise ValueError(
            f"cannot profile {script!r}: no such file (give the path of a Python script)"
        )
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"-o {out!r} is a file; give a folder for the report files")
    why = profiling_unsupported()
    if why is not None:
        raise ValueError(why)
    os.makedirs(out, exist_ok=True)
    profile = start_process_profile()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv[:] = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    status: int = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    finally:
        stop_process_profile()
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        written = write_outputs(profile, out, f"aiosubinterp profile: {os.path.basename(path)}")
        print(
            f"aiosubinterp profile: {profile.tasks} tasks profiled; wrote " + ", ".join(written),
            file=sys.stderr,
        )
    return status
