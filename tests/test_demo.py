"""The circles zoo: same physics in every contender, and the pictures are valid files."""

from __future__ import annotations

import asyncio
import struct
import zlib

import pytest

from aiosubinterp import _circles, _render, _zoo


@pytest.fixture(autouse=True, scope="module")
def _resource_tracker():
    # Spawning processes starts multiprocessing's resource tracker once per
    # process, and it keeps a pipe open: start it before the fd snapshot.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


@pytest.mark.parametrize("workers", [2, 3])
def test_every_contender_reproduces_the_reference(workers):
    params, circles = _circles.initial_state(400, seed=7)
    reference = _zoo.reference_result(circles, params, 40)

    async def main():
        return [await _zoo.run_contender(name, circles, params, 40, workers)
                for name in _zoo.CONTENDERS]

    outcomes = asyncio.run(main())
    assert [o.name for o in outcomes] == list(_zoo.CONTENDERS)
    for outcome in outcomes:
        assert outcome.circles == reference, outcome.name  # bit for bit, every circle
        assert len(outcome.circles) == 400


def test_the_simulation_does_something():
    params, circles = _circles.initial_state(400, seed=1)
    after = _zoo.reference_result(circles, params, 30)
    width, height = params
    assert all(c[5] <= c[1] <= width - c[5] and c[5] <= c[2] <= height - c[5] for c in after)
    # Some circles collided: their speed changed (walls keep it).
    speed = {c[0]: round(c[3] ** 2 + c[4] ** 2, 9) for c in circles}
    assert sum(speed[c[0]] != round(c[3] ** 2 + c[4] ** 2, 9) for c in after) > 20
    # Momentum-weighted energy is conserved by each pairwise bounce only
    # approximately (simultaneous contacts); it must not blow up.
    def energy(cs):
        return sum(c[5] ** 2 * (c[3] ** 2 + c[4] ** 2) for c in cs)
    assert energy(after) < 1.5 * energy(circles)


def test_strips_too_narrow_are_refused():
    params, circles = _circles.initial_state(100)
    with pytest.raises(ValueError, match="narrower"):
        _circles.split(circles, params, 40)


def _decode_gif(data: bytes) -> tuple[int, int, list[bytes]]:
    """A small independent GIF decoder (LZW) to check our encoder."""
    assert data[:6] == b"GIF89a"
    w, h, flags = struct.unpack("<HHB", data[6:11])
    pos = 13 + 3 * (2 << (flags & 7))
    frames = []
    while data[pos] != 0x3B:
        if data[pos] == 0x21:  # extension: skip sub-blocks
            pos += 2
            while data[pos]:
                pos += data[pos] + 1
            pos += 1
            continue
        assert data[pos] == 0x2C
        pos += 10
        min_size = data[pos]
        pos += 1
        raw = bytearray()
        while data[pos]:
            raw += data[pos + 1:pos + 1 + data[pos]]
            pos += data[pos] + 1
        pos += 1
        clear, eoi = 1 << min_size, (1 << min_size) + 1
        size, bits, value, out = min_size + 1, 0, 0, bytearray()
        table: list[bytes] = []
        prev = None
        for byte in raw:
            value |= byte << bits
            bits += 8
            while bits >= size:
                code = value & ((1 << size) - 1)
                value >>= size
                bits -= size
                if code == clear:
                    table = [bytes((i,)) for i in range(clear)] + [b"", b""]
                    size, prev = min_size + 1, None
                    continue
                if code == eoi:
                    bits = -10**9
                    break
                if prev is None:
                    entry = table[code]
                else:
                    entry = table[code] if code < len(table) else prev + prev[:1]
                    if len(table) < 4096:
                        table.append(prev + entry[:1])
                        if len(table) == (1 << size) and size < 12:
                            size += 1
                out += entry
                prev = entry
        frames.append(bytes(out))
    return w, h, frames


def test_gif_and_png_round_trip(tmp_path):
    import random

    rng = random.Random(3)
    frames = [bytes(rng.choice((0, 0, 0, 1, 2, 5)) for _ in range(97 * 61)) for _ in range(3)]
    frames.append(bytes(97 * 61))  # long runs
    path = tmp_path / "t.gif"
    _render.write_gif(str(path), 97, 61, frames)
    w, h, decoded = _decode_gif(path.read_bytes())
    assert (w, h) == (97, 61)
    assert decoded == frames

    png = tmp_path / "t.png"
    _render.write_png(str(png), 97, 61, frames[0])
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4:idat])[0]
    rows = zlib.decompress(data[idat + 4:idat + 4 + length])
    assert b"".join(rows[y * 98 + 1:(y + 1) * 98] for y in range(61)) == frames[0]


def test_render_writes_the_pictures(tmp_path):
    params, circles = _circles.initial_state(300, seed=2)
    final = _zoo.reference_result(circles, params, 10)
    png, gif = _zoo.render(str(tmp_path), params, circles, final, 2, gif_frames=4)
    with open(gif, "rb") as f:
        w, h, frames = _decode_gif(f.read())
    assert len(frames) == 4 and all(len(f) == w * h for f in frames)
    assert any(set(f) - {0, 1} for f in frames)  # circles were drawn
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _run_example(*args, timeout=120):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, os.path.join(root, "examples", args[0]), *args[1:]],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_circles_example():
    out = _run_example("circles.py", "400", "10")
    assert "same positions as single-threaded: True" in out


def test_uvloop_server_example():
    out = _run_example("uvloop_server.py", "--duration", "0.5", "--heavy-n", "3000")
    for setup in ("inline", "to_thread", "aiosubinterp"):
        row = next(line for line in out.splitlines() if line.strip().startswith(setup))
        heavy_rps, light_rps = (float(v) for v in row.split()[1:3])
        assert heavy_rps > 0 and light_rps > 0, row
    assert "light p99, inline / aiosubinterp" in out
