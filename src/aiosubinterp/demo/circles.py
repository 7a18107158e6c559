"""Bouncing circles: the physics every contender of the demo shares.

Worker-side module: interpreters, threads and processes import it to step
their region, so it imports neither asyncio nor anything of ours that does.

A circle is a tuple ``(id, x, y, vx, vy, r)``: tuples of ints and floats
cross between interpreters as native copies (no pickling).

One frame:

1. ``advance``: every circle moves by its velocity and bounces off the walls
   (depends on the circle alone).
2. Regions exchange circles with their neighbours: those that left the
   region (now owned by the neighbour) and copies of those within
   ``HALO`` of the shared border (ghosts).
3. ``collide``: every owned circle gets a new velocity from the elastic
   impulses of the circles it overlaps and approaches, computed from the
   state *before* this step (Jacobi style) and summed in the order of the
   neighbours' ids.

So a circle's update depends only on its neighbours' values, never on the
order in which a region stores or visits them, and every contender performs
the same float operations in the same order: the positions after K frames
are bit-for-bit equal whether one thread or N regions computed them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

__all__ = [
    "HALO",
    "R_MAX",
    "R_MIN",
    "V_MAX",
    "Params",
    "advance",
    "canvas_size",
    "channel_region",
    "collide",
    "exchange_with",
    "initial_state",
    "pipe_region",
    "queue_region",
    "region_frame",
    "run_region",
    "split",
    "step_frames",
]

R_MIN = 2.0
R_MAX = 5.0
V_MAX = 2.0
HALO = 2 * R_MAX  # two circles interact only if their centres are closer than this
CELL = HALO  # spatial grid: a circle's neighbours are in its cell or the 8 around it
AREA_PER_CIRCLE = 160.0  # canvas area per circle: about 25 % of it covered

Circle = tuple[int, float, float, float, float, float]
Params = tuple[float, float]  # canvas (width, height)
# exchange(to_left, ghosts_left, to_right, ghosts_right)
#   -> (from_left, ghosts_from_left, from_right, ghosts_from_right)
Exchange = Callable[
    [tuple[Circle, ...], tuple[Circle, ...], tuple[Circle, ...], tuple[Circle, ...]],
    tuple[tuple[Circle, ...], tuple[Circle, ...], tuple[Circle, ...], tuple[Circle, ...]],
]


def canvas_size(n: int) -> Params:
    """A 4:3 canvas whose area keeps the density the same for any number of circles."""
    area = max(n, 1) * AREA_PER_CIRCLE
    height = float(math.ceil(math.sqrt(area * 3 / 4)))
    return (float(math.ceil(area / height)), height)


def initial_state(n: int, seed: int = 0) -> tuple[Params, list[Circle]]:
    """``n`` circles on a jittered grid (no overlaps), random radii and velocities."""
    width, height = canvas_size(n)
    rng = random.Random(seed)
    cols = max(1, math.ceil(math.sqrt(n * width / height)))
    rows = math.ceil(n / cols)
    dx, dy = width / cols, height / rows
    circles: list[Circle] = []
    for i in range(n):
        r = rng.uniform(R_MIN, min(R_MAX, dx / 2 - 0.5, dy / 2 - 0.5))
        col, row = i % cols, i // cols
        x = col * dx + dx / 2 + rng.uniform(-1, 1) * (dx / 2 - r)
        y = row * dy + dy / 2 + rng.uniform(-1, 1) * (dy / 2 - r)
        angle = rng.uniform(0, 2 * math.pi)
        speed = rng.uniform(0.3, V_MAX)
        circles.append((i, x, y, speed * math.cos(angle), speed * math.sin(angle), r))
    return (width, height), circles


def split(
    circles: list[Circle], params: Params, regions: int
) -> list[tuple[float, float, list[Circle]]]:
    """Vertical strips ``(lo, hi, circles)``; a region owns the circles with lo <= x < hi."""
    width = params[0]
    if regions < 1:
        raise ValueError(f"regions must be at least 1, got {regions}")
    if width / regions < 2 * (HALO + V_MAX):
        raise ValueError(
            f"{regions} regions on a canvas {width:.0f} wide are narrower than "
            f"{2 * (HALO + V_MAX):.0f}: use fewer workers or more circles"
        )
    bounds = [width * k / regions for k in range(regions + 1)]
    out: list[tuple[float, float, list[Circle]]] = []
    for k in range(regions):
        lo, hi = bounds[k], bounds[k + 1]
        last = k == regions - 1
        out.append((lo, hi, [c for c in circles if lo <= c[1] and (last or c[1] < hi)]))
    return out


def advance(circles: list[Circle], params: Params) -> list[Circle]:
    """Move every circle by its velocity; reflect it off the walls."""
    width, height = params
    out = []
    for i, x, y, vx, vy, r in circles:
        x += vx
        y += vy
        if x < r:
            x = r + r - x
            vx = -vx
        elif x > width - r:
            x = (width - r) * 2 - x
            vx = -vx
        if y < r:
            y = r + r - y
            vy = -vy
        elif y > height - r:
            y = (height - r) * 2 - y
            vy = -vy
        out.append((i, x, y, vx, vy, r))
    return out


def collide(owned: list[Circle], ghosts: list[Circle]) -> list[Circle]:
    """New velocities of ``owned`` after the elastic impulses of the circles they touch.

    ``ghosts`` are read-only copies of neighbouring regions' circles. Masses
    are r². Each impulse is computed from the pre-step values of the pair,
    and a circle's impulses are summed in the order of the other circles'
    ids, so the result does not depend on list or grid order.
    """
    grid: dict[tuple[int, int], list[Circle]] = {}
    for group in (owned, ghosts):
        for c in group:
            key = (int(c[1] // CELL), int(c[2] // CELL))
            bucket = grid.get(key)
            if bucket is None:
                grid[key] = [c]
            else:
                bucket.append(c)
    out = []
    for c in owned:
        i, x, y, vx, vy, r = c
        cx = int(x // CELL)
        cy = int(y // CELL)
        hits = None
        for gx in (cx - 1, cx, cx + 1):
            for gy in (cy - 1, cy, cy + 1):
                bucket = grid.get((gx, gy))
                if bucket is None:
                    continue
                for o in bucket:
                    dx = o[1] - x
                    dy = o[2] - y
                    rr = r + o[5]
                    d2 = dx * dx + dy * dy
                    if d2 >= rr * rr or o[0] == i or d2 == 0.0:
                        continue
                    dot = (o[3] - vx) * dx + (o[4] - vy) * dy
                    if dot < 0.0:  # approaching: bounce
                        if hits is None:
                            hits = [o]
                        else:
                            hits.append(o)
        if hits is None:
            out.append(c)
            continue
        if len(hits) > 1:
            hits.sort()
        m = r * r
        nvx, nvy = vx, vy
        for o in hits:
            dx = o[1] - x
            dy = o[2] - y
            mo = o[5] * o[5]
            k = 2.0 * mo / (m + mo) * ((o[3] - vx) * dx + (o[4] - vy) * dy) / (dx * dx + dy * dy)
            nvx += k * dx
            nvy += k * dy
        out.append((i, x, y, nvx, nvy, r))
    return out


def region_frame(
    owned: list[Circle], lo: float, hi: float, params: Params, exchange: Exchange | None
) -> list[Circle]:
    """Step one region one frame; ``exchange`` talks to the neighbours (None: alone)."""
    moved = advance(owned, params)
    if exchange is None:
        return collide(moved, [])
    keep: list[Circle] = []
    to_left: list[Circle] = []
    to_right: list[Circle] = []
    for c in moved:
        x = c[1]
        if x < lo:
            to_left.append(c)
        elif x >= hi:
            to_right.append(c)
        else:
            keep.append(c)
    low_edge, high_edge = lo + HALO, hi - HALO
    ghosts_left = tuple(c for c in keep if c[1] < low_edge)
    ghosts_right = tuple(c for c in keep if c[1] >= high_edge)
    from_left, gh_left, from_right, gh_right = exchange(
        tuple(to_left), ghosts_left, tuple(to_right), ghosts_right
    )
    keep.extend(from_left)
    keep.extend(from_right)
    # The circles this region handed over stay visible to it as ghosts.
    ghosts = [
        *gh_left,
        *gh_right,
        *(c for c in to_left if c[1] >= lo - HALO),
        *(c for c in to_right if c[1] < hi + HALO),
    ]
    return collide(keep, ghosts)


def run_region(
    owned: list[Circle],
    lo: float,
    hi: float,
    params: Params,
    frames: int,
    exchange: Exchange | None,
) -> list[Circle]:
    """Step one region ``frames`` times; ``exchange`` talks to the neighbours (None: alone)."""
    for _ in range(frames):
        owned = region_frame(owned, lo, hi, params, exchange)
    return owned


def step_frames(circles: list[Circle], params: Params, frames: int) -> list[Circle]:
    """The single-threaded reference: the whole canvas as one region."""
    return run_region(list(circles), 0.0, params[0], params, frames, None)


def exchange_with(
    send_left: Any, recv_left: Any, send_right: Any, recv_right: Any, send: str, recv: str
) -> Exchange:
    """An exchange over anything with blocking send/recv methods (named by ``send``/``recv``)."""
    sl = getattr(send_left, send) if send_left is not None else None
    rl = getattr(recv_left, recv) if recv_left is not None else None
    sr = getattr(send_right, send) if send_right is not None else None
    rr = getattr(recv_right, recv) if recv_right is not None else None
    empty: tuple[Circle, ...] = ()

    def exchange(to_left, ghosts_left, to_right, ghosts_right):  # type: ignore[no-untyped-def]
        # Send both ways first, then receive: buffered links never deadlock.
        if sl is not None:
            sl((to_left, ghosts_left))
        if sr is not None:
            sr((to_right, ghosts_right))
        from_left, gh_left = rl() if rl is not None else (empty, empty)
        from_right, gh_right = rr() if rr is not None else (empty, empty)
        return from_left, gh_left, from_right, gh_right

    return exchange


def channel_region(
    owned: list[Circle],
    lo: float,
    hi: float,
    params: Params,
    frames: int,
    send_left: Any,
    recv_left: Any,
    send_right: Any,
    recv_right: Any,
) -> tuple[Circle, ...]:
    """A region in an aiosubinterp worker; its neighbours over channels (send_sync, recv_sync)."""
    try:
        exchange = exchange_with(
            send_left, recv_left, send_right, recv_right, "send_sync", "recv_sync"
        )
        return tuple(run_region(list(owned), lo, hi, params, frames, exchange))
    finally:
        for end in (send_left, recv_left, send_right, recv_right):
            if end is not None:
                end.close()


def queue_region(
    owned: list[Circle],
    lo: float,
    hi: float,
    params: Params,
    frames: int,
    send_left: Any,
    recv_left: Any,
    send_right: Any,
    recv_right: Any,
) -> list[Circle]:
    """A region in a thread: neighbours over ``queue.SimpleQueue`` (``put``/``get``)."""
    exchange = exchange_with(send_left, recv_left, send_right, recv_right, "put", "get")
    return run_region(list(owned), lo, hi, params, frames, exchange)


def pipe_region(control: Any, left: Any, right: Any) -> None:
    """A region in a child process: neighbours over ``multiprocessing.Pipe`` connections.

    Says "ready" on ``control`` once imported, then gets (owned, lo, hi,
    params, frames), steps, and sends the region's circles back.
    """
    control.send("ready")
    owned, lo, hi, params, frames = control.recv()
    exchange = exchange_with(left, left, right, right, "send", "recv")
    control.send(run_region(owned, lo, hi, params, frames, exchange))
    control.close()
