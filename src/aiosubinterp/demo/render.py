"""Pictures of the circles: the final frame as a PNG, the first frames as an animated GIF.

Drawn and encoded by Pillow (the ``demo`` extra). Each circle is filled with
the colour of the region (strip) that owns it; dashed lines mark the region
borders, and a caption says what the picture shows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from PIL import Image, ImageDraw, ImageFont

from aiosubinterp.demo import circles as _circles
from aiosubinterp.demo.circles import Circle, Params

__all__ = ["BACKGROUND", "PALETTE", "frame", "pictures", "region_colour"]

# Index 0 background, 1 region borders and caption, 2.. one colour per region (cycled).
PALETTE: list[tuple[int, int, int]] = [
    (18, 20, 28),
    (150, 150, 170),
    (79, 195, 247),
    (255, 167, 38),
    (102, 187, 106),
    (239, 83, 80),
    (171, 71, 188),
    (255, 238, 88),
    (38, 198, 218),
    (141, 110, 99),
]
BACKGROUND = 0
_BORDER = 1
_REGION_COLOURS = len(PALETTE) - 2
_CAPTION_HEIGHT = 18  # pixels below the canvas for the caption line
_CAPTION_FONT_SIZE = 12


def region_colour(region: int) -> int:
    """The palette index region ``region`` (0-based, left to right) is drawn in."""
    return 2 + region % _REGION_COLOURS


def frame(
    circles: Iterable[Sequence[float]],
    width: float,
    height: float,
    bounds: Sequence[float],
    scale: float = 1.0,
    caption: str = "",
) -> Image.Image:
    """One frame as a palette image: filled circles coloured by region, dashed borders.

    ``bounds`` are the region borders from 0 to ``width``; a ``caption``
    adds a line of text below the canvas.
    """
    w, h = max(1, round(width * scale)), max(1, round(height * scale))
    image = Image.new("P", (w, h + (_CAPTION_HEIGHT if caption else 0)), BACKGROUND)
    image.putpalette([v for rgb in PALETTE for v in rgb])
    draw = ImageDraw.Draw(image)
    for b in bounds[1:-1]:  # inner region borders, dashed
        px = min(w - 1, int(b * scale))
        for py in range(0, h, 6):
            draw.line([(px, py), (px, min(h - 1, py + 2))], fill=_BORDER)
    for c in circles:
        x, y, r = c[1] * scale, c[2] * scale, c[5] * scale
        region = 0
        while region < len(bounds) - 2 and c[1] >= bounds[region + 1]:
            region += 1
        draw.ellipse([x - r, y - r, x + r, y + r], fill=region_colour(region))
    if caption:
        # Pillow's bundled scalable font (the bitmap default is 10 px, hard to read).
        font = ImageFont.load_default(size=_CAPTION_FONT_SIZE)
        draw.text((4, h + 2), caption, fill=_BORDER, font=font)
    return image


def pictures(
    out_dir: str,
    params: Params,
    initial: list[Circle],
    final: list[Circle],
    workers: int,
    frames_run: int,
    gif_frames: int = 40,
    every: int = 3,
    scale: float = 1.0,
) -> tuple[str, str]:
    """Write ``circles_final.png`` and ``circles_first_frames.gif`` into ``out_dir``.

    The PNG is ``final`` (after ``frames_run`` frames). The GIF's frames
    are recomputed with the reference step (every contender's result is
    checked equal to it), one in ``every``, at most 480 pixels wide, 60 ms
    each, looping. Returns both paths.
    """
    os.makedirs(out_dir, exist_ok=True)
    width, height = params
    bounds = [width * k / workers for k in range(workers + 1)]
    png = os.path.join(out_dir, "circles_final.png")
    frame(
        final,
        width,
        height,
        bounds,
        scale,
        caption=f"{len(final):,} circles after {frames_run} frames; colour = the strip "
        f"(of {workers}) that owns the circle, dashed = strip border",
    ).save(png, optimize=True)
    gif_scale = min(scale, 480 / width)
    images = []
    state = list(initial)
    for k in range(gif_frames):
        images.append(
            frame(
                state,
                width,
                height,
                bounds,
                gif_scale,
                caption=f"frame {k * every} of {len(initial):,} circles in {workers} strips",
            )
        )
        state = _circles.step_frames(state, params, every)
    gif = os.path.join(out_dir, "circles_first_frames.gif")
    images[0].save(gif, save_all=True, append_images=images[1:], duration=60, loop=0)
    return png, gif
