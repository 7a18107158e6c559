"""Channel throughput and latency: interpreter <-> event loop, against the usual anchors.

Four measurements per contender, each in its own process:
  small  interp->loop   items/s: 200,000 small items (ints, short strings) from a producer
                        to a consumer on the event loop (buffer of 1,024)
  small  loop->interp   items/s: the same, from the loop to a consumer in the worker
  1 MiB  interp->loop   MB/s: 300 chunks of 1 MiB bytes (buffer of 8)
  1 MiB  loop->interp   MB/s: the same direction reversed
  ping-pong             p50/p99 of one round trip through two rendezvous channels
                        (loop -> worker echo -> loop), 2,000 after 200 warm-up

Contenders:
  aiosubinterp     open_channel(); the worker (an InterpreterPool(1) task) uses
                   send_sync / ``for x in recv``; the loop uses ``await send()`` /
                   ``async for``. Ping-pong uses maxsize=0 channels.
  mp.Queue         multiprocessing.Queue to/from a child process (fork); the parent
                   uses blocking get/put (no event loop: the most favourable case
                   for it). Ping-pong through two queues.
  thread+asyncio.Queue  a thread feeds an asyncio.Queue with loop.call_soon_threadsafe
                   (interp->loop direction only; the bytes are shared, not copied).

Not measured (missing): CPython 3.13's private ``_interpqueues`` (its public wrapper
polls with sleeps; a fair contender needs more work).

Targets: small items interp->loop >= 5 x mp.Queue and >= 2 x
thread+asyncio.Queue; ping-pong p50 < 50 us; 1 MiB chunks >= 3 x mp.Queue.

Run: ``python benchmarks/bench_channel.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import _chanwork
import _contenders
import _harness
import _report
import _stats

NAMES = ["aiosubinterp", "mp.Queue", "thread+asyncio.Queue"]
MIB = 1 << 20


def _ours(params: dict[str, Any], loop: str) -> dict[str, Any]:
    import aiosubinterp

    n, nb, npp, warm = params["n_small"], params["n_big"], params["n_ping"], params["warmup"]

    async def body() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with aiosubinterp.InterpreterPool(1) as pool:
            await pool.run(_chanwork.small_item, 1)
            # small, interp -> loop
            send, recv = aiosubinterp.open_channel(1024)
            t0 = time.perf_counter()
            task = pool.submit(_chanwork.chan_produce_small, send, n)  # it closes `send`
            count = 0
            async for _ in recv:
                count += 1
            out["small_i2l"] = count / (time.perf_counter() - t0)
            await task
            # small, loop -> interp
            send, recv = aiosubinterp.open_channel(1024)
            task = pool.submit(_chanwork.chan_consume, recv)
            t0 = time.perf_counter()
            s = send.send
            for i in range(n):
                await s(i if i & 1 else _chanwork.SMALL[i & 3])
            send.close()
            got, _ = await task
            out["small_l2i"] = got / (time.perf_counter() - t0)
            # 1 MiB, interp -> loop
            send, recv = aiosubinterp.open_channel(8)
            t0 = time.perf_counter()
            task = pool.submit(_chanwork.chan_produce_big, send, nb, MIB)  # it closes `send`
            total = 0
            async for chunk in recv:
                total += len(chunk)
            out["big_i2l"] = total / MIB / (time.perf_counter() - t0)
            await task
            # 1 MiB, loop -> interp
            send, recv = aiosubinterp.open_channel(8)
            task = pool.submit(_chanwork.chan_consume, recv)
            chunk = b"x" * MIB
            t0 = time.perf_counter()
            for _ in range(nb):
                await send.send(chunk)
            send.close()
            _, total = await task
            out["big_l2i"] = total / MIB / (time.perf_counter() - t0)
            # ping-pong over rendezvous channels
            a_send, a_recv = aiosubinterp.open_channel(0)
            b_send, b_recv = aiosubinterp.open_channel(0)
            task = pool.submit(_chanwork.chan_echo, a_recv, b_send)  # it closes `b_send`
            lat = []
            for i in range(warm + npp):
                t0 = time.perf_counter()
                await a_send.send(i)
                await b_recv.recv()
                if i >= warm:
                    lat.append((time.perf_counter() - t0) * 1e6)
            a_send.close()
            await task
            out["ping_us"] = lat
        return out

    return _contenders.run_async(body, loop)


def _mpq(params: dict[str, Any], loop: str) -> dict[str, Any]:
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    n, nb, npp, warm = params["n_small"], params["n_big"], params["n_ping"], params["warmup"]
    out: dict[str, Any] = {}
    # small, child -> parent
    q = ctx.Queue()
    t0 = time.perf_counter()
    p = ctx.Process(target=_chanwork.mpq_produce_small, args=(q, n))
    p.start()
    count = 0
    while q.get() is not None:
        count += 1
    out["small_i2l"] = count / (time.perf_counter() - t0)
    p.join()
    # small, parent -> child
    q, res = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_chanwork.mpq_consume, args=(q, res))
    p.start()
    t0 = time.perf_counter()
    for i in range(n):
        q.put(i if i & 1 else _chanwork.SMALL[i & 3])
    q.put(None)
    got, _ = res.get()
    out["small_l2i"] = got / (time.perf_counter() - t0)
    p.join()
    # 1 MiB, child -> parent
    q = ctx.Queue(8)
    t0 = time.perf_counter()
    p = ctx.Process(target=_chanwork.mpq_produce_big, args=(q, nb, MIB))
    p.start()
    total = 0
    while (x := q.get()) is not None:
        total += len(x)
    out["big_i2l"] = total / MIB / (time.perf_counter() - t0)
    p.join()
    # 1 MiB, parent -> child
    q, res = ctx.Queue(8), ctx.Queue()
    p = ctx.Process(target=_chanwork.mpq_consume, args=(q, res))
    p.start()
    chunk = b"x" * MIB
    t0 = time.perf_counter()
    for _ in range(nb):
        q.put(chunk)
    q.put(None)
    _, total = res.get()
    out["big_l2i"] = total / MIB / (time.perf_counter() - t0)
    p.join()
    # ping-pong
    qa, qb = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_chanwork.mpq_echo, args=(qa, qb))
    p.start()
    lat = []
    for i in range(warm + npp):
        t0 = time.perf_counter()
        qa.put(i)
        qb.get()
        if i >= warm:
            lat.append((time.perf_counter() - t0) * 1e6)
    qa.put(None)
    qb.get()
    p.join()
    out["ping_us"] = lat
    return out


def _thread(params: dict[str, Any], loop: str) -> dict[str, Any]:
    n, nb = params["n_small"], params["n_big"]

    async def body() -> dict[str, Any]:
        ev = asyncio.get_running_loop()
        out: dict[str, Any] = {}
        for key, count, make in (
            ("small_i2l", n, _chanwork.small_item),
            ("big_i2l", nb, lambda i, c=b"x" * MIB: c),
        ):
            # A thread cannot wait on an asyncio.Queue: it posts each put to the loop
            # (unbounded on the thread side, as users do with call_soon_threadsafe).
            q: asyncio.Queue = asyncio.Queue()
            done = object()

            def producer(count=count, make=make, q=q, done=done) -> None:
                post = ev.call_soon_threadsafe
                put = q.put_nowait
                for i in range(count):
                    post(put, make(i))
                post(put, done)

            t0 = time.perf_counter()
            th = threading.Thread(target=producer)
            th.start()
            got = total = 0
            while (x := await q.get()) is not done:
                got += 1
                if type(x) is bytes:
                    total += len(x)
            th.join()
            dt = time.perf_counter() - t0
            out[key] = got / dt if key == "small_i2l" else total / MIB / dt
        return out

    return _contenders.run_async(body, loop)


CONTENDERS = {"aiosubinterp": _ours, "mp.Queue": _mpq, "thread+asyncio.Queue": _thread}


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        [
            "contender",
            "small items/s interp->loop",
            "small items/s loop->interp",
            "1 MiB MB/s interp->loop",
            "1 MiB MB/s loop->interp",
            "ping-pong p50 us",
            "ping-pong p99 us",
        ]
    )
    med: dict[str, dict[str, float]] = {}
    keys = ["small_i2l", "small_l2i", "big_i2l", "big_l2i"]
    for name, good in table.each(results):
        m = {
            k: _stats.median(_stats.collect(good, k)) if k in good[0] else float("nan")
            for k in keys
        }
        if "ping_us" in good[0]:
            s = _stats.summarize(_stats.collect(good, "ping_us"))
            m["ping_p50"], m["ping_p99"] = s["p50"], s["p99"]
        med[name] = m
        table.add(
            name,
            *(_report.fmt(m[k], 0) for k in keys),
            _report.fmt(m.get("ping_p50"), 1),
            _report.fmt(m.get("ping_p99"), 1),
        )
    ours = med.get("aiosubinterp", {})
    mpq = med.get("mp.Queue", {})
    thr = med.get("thread+asyncio.Queue", {})
    r = _stats.ratio
    targets = [
        _report.Target(
            "small items/s interp->loop / mp.Queue's",
            r(ours.get("small_i2l"), mpq.get("small_i2l")),
            ">=",
            5,
            note="multiprocessing.Queue, child process -> parent",
        ),
        _report.Target(
            "small items/s interp->loop / thread+asyncio.Queue's",
            r(ours.get("small_i2l"), thr.get("small_i2l")),
            ">=",
            2,
            note="thread feeding asyncio.Queue via call_soon_threadsafe",
        ),
        _report.Target(
            "rendezvous ping-pong p50 (round trip)",
            ours.get("ping_p50", float("nan")),
            "<",
            50,
            unit="us",
            note="absolute",
        ),
        _report.Target(
            "1 MiB MB/s interp->loop / mp.Queue's",
            r(ours.get("big_i2l"), mpq.get("big_i2l")),
            ">=",
            3,
            note="multiprocessing.Queue",
        ),
        _report.Target(
            "1 MiB MB/s loop->interp / mp.Queue's",
            r(ours.get("big_l2i"), mpq.get("big_l2i")),
            ">=",
            3,
            note="multiprocessing.Queue",
        ),
    ]
    notes = [
        f"Per round: {params['n_small']:,} small items, {params['n_big']} x 1 MiB chunks, "
        f"{params['n_ping']:,} ping-pongs after {params['warmup']} warm-up; medians over "
        f"{params['rounds']} round(s); latency percentiles over all rounds' samples.",
        "mp.Queue's parent side blocks in get()/put() with no event loop; its rates include "
        "starting the child (fork, a few ms).",
        "thread+asyncio.Queue: items are shared objects (no copy); it only measures the "
        "thread -> loop direction.",
    ]
    return _report.Report([table.section()], targets, notes, {"medians": med})


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_channel: channel items/s, MB/s and ping-pong latency",
            contenders=CONTENDERS,
            full={"n_small": 200_000, "n_big": 300, "n_ping": 2000, "warmup": 200, "rounds": 3},
            quick={"n_small": 20_000, "n_big": 30, "n_ping": 300, "warmup": 50, "rounds": 1},
            report=report,
        )
    )
