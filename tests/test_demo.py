"""The circles zoo: same physics in every contender; the pictures show the circles."""

from __future__ import annotations

import pytest
from PIL import Image

from aiosubinterp.demo import circles as physics
from aiosubinterp.demo import missing, render, zoo


@pytest.fixture(autouse=True, scope="module")
def _resource_tracker():
    # Spawning processes starts multiprocessing's resource tracker once per
    # process, and it keeps a pipe open: start it before the fd snapshot.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


@pytest.mark.parametrize("workers", [2, 3])
async def test_every_contender_reproduces_the_reference(workers):
    params, circles = physics.initial_state(400, seed=7)
    reference = zoo.reference_result(circles, params, 40)
    outcomes = [
        await zoo.run_contender(name, circles, params, 40, workers) for name in zoo.CONTENDERS
    ]
    assert [o.name for o in outcomes] == list(zoo.CONTENDERS)
    for outcome in outcomes:
        assert outcome.circles == reference, outcome.name  # bit for bit, every circle
        assert len(outcome.circles) == 400


def test_the_simulation_does_something():
    params, circles = physics.initial_state(400, seed=1)
    after = zoo.reference_result(circles, params, 30)
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
    params, circles = physics.initial_state(100)
    with pytest.raises(ValueError, match="narrower"):
        physics.split(circles, params, 40)


def _rgb(image, xy):
    return image.convert("RGB").getpixel(xy)


def test_frame_draws_each_circle_in_its_region_colour(tmp_path):
    width, height = 200.0, 100.0
    bounds = [0.0, 100.0, 200.0]
    circles = [(0, 30.0, 40.0, 0.0, 0.0, 8.0), (1, 150.0, 60.0, 0.0, 0.0, 5.0)]
    path = tmp_path / "f.png"
    render.frame(circles, width, height, bounds, caption="two circles").save(path)
    with Image.open(path) as png:
        assert png.format == "PNG" and png.size == (200, 100 + 18)  # canvas + caption line
        assert _rgb(png, (30, 40)) == render.PALETTE[render.region_colour(0)]
        assert _rgb(png, (150, 60)) == render.PALETTE[render.region_colour(1)]
        assert _rgb(png, (36, 40)) == render.PALETTE[render.region_colour(0)]  # inside r=8
        assert _rgb(png, (30, 52)) == render.PALETTE[render.BACKGROUND]  # outside it
        assert _rgb(png, (100, 0)) != render.PALETTE[render.BACKGROUND]  # the dashed border
        caption = png.convert("RGB").crop((0, 100, 200, 118)).getcolors()
        assert len(caption) > 1  # the caption drew something


def test_pictures_are_the_final_frame_and_the_first_frames(tmp_path):
    params, circles = physics.initial_state(300, seed=2)
    final = zoo.reference_result(circles, params, 10)
    png, gif = render.pictures(str(tmp_path), params, circles, final, 2, 10, gif_frames=4)
    width, height = params
    with Image.open(png) as image:
        assert image.size == (round(width), round(height) + 18)
        for c in final:  # away from the border, a circle's centre has its region's colour
            if abs(c[1] - width / 2) > 2 * physics.R_MAX:
                region = 0 if c[1] < width / 2 else 1
                assert (
                    _rgb(image, (int(c[1]), int(c[2])))
                    == render.PALETTE[render.region_colour(region)]
                ), c
    with Image.open(gif) as anim:
        assert anim.format == "GIF" and anim.n_frames == 4 and anim.is_animated
        assert anim.size[0] <= 480 and anim.info.get("loop") == 0
        first = anim.convert("RGB")
        anim.seek(3)
        last = anim.convert("RGB")
        assert first.tobytes() != last.tobytes()  # the circles moved
        colours = {rgb for _, rgb in last.getcolors(maxcolors=1 << 16)}
        assert render.PALETTE[render.region_colour(0)] in colours
        assert render.PALETTE[render.region_colour(1)] in colours


def test_missing_extra_names_the_extra():
    assert missing("demo", "json") is None
    message = missing("demo", "no_such_module_xyz")
    assert "no_such_module_xyz" in message and "pip install 'aiosubinterp[demo]'" in message


def _run_example(*args, timeout=120):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, os.path.join(root, "examples", args[0]), *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": root},
    )
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
