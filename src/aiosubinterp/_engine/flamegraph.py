"""Flame graphs and reports of a profile: SVG (drawn here, no dependency), speedscope JSON, text.

cProfile records, for each function, its callers and the time spent in each
caller -> callee edge, not whole stacks. The stacks here are rebuilt from
those edges: a function's time under a given stack is its time from that
caller, split in proportion where the caller itself appears under several
stacks. The widths are exact at the first two levels and approximate below
(the usual gprof-style estimate); the SVG says so in its subtitle.
"""

from __future__ import annotations

import html
import io
import json
import os
import pstats
import zlib
from typing import Any

__all__ = ["folded_stacks", "render_svg", "speedscope_json", "text_report"]

Func = tuple[str, int, str]
Raw = dict[Func, tuple[Any, ...]]

_MAX_DEPTH = 64


def label(func: Func) -> str:
    """A short name: ``function (file.py:line)``, or the built-in's own name."""
    filename, line, name = func
    if filename == "~" and line == 0:
        return name.strip("<>")
    return f"{name} ({os.path.basename(filename)}:{line})"


def folded_stacks(raw: Raw, min_fraction: float = 0.001) -> dict[tuple[Func, ...], float]:
    """{stack (root first): self seconds} estimated from cProfile's caller -> callee edges.

    Each frame is as wide as its time under that stack: its own time plus its
    callees'. Branches narrower than min_fraction of the total are folded into
    their parent's own time. A recursive call (a function already on the
    stack) is not expanded again: its time stays with the stack above it.
    """
    children: dict[Func, list[tuple[Func, float]]] = {}
    roots: list[Func] = []
    for func, (_cc, _nc, _tt, _ct, callers) in raw.items():
        if not callers:
            roots.append(func)
        for caller, edge in callers.items():
            edge_ct = edge[3] if isinstance(edge, tuple) else 0.0
            if caller != func:
                children.setdefault(caller, []).append((func, edge_ct))
    total = sum(raw[r][3] for r in roots)
    out: dict[tuple[Func, ...], float] = {}
    if total <= 0:
        return out
    floor = total * min_fraction

    def expand(func: Func, stack: tuple[Func, ...], weight: float) -> None:
        ct = raw[func][3]
        scale = weight / ct if ct > 0 else 0.0
        parts = []
        if len(stack) < _MAX_DEPTH:
            parts = [
                (child, edge_ct * scale)
                for child, edge_ct in children.get(func, ())
                if child not in stack and child in raw
            ]
        # cProfile's edges can add up to more than the caller's time (a
        # generator's resumptions inside the call that drives it): squeeze
        # them into the caller's width.
        spent = sum(part for _, part in parts)
        if spent > weight > 0:
            parts = [(child, part * weight / spent) for child, part in parts]
        own = weight
        for child, part in parts:
            if part >= floor:  # narrower ones stay in this frame's own time
                expand(child, (*stack, child), part)
                own -= part
        if own > 0:
            out[stack] = out.get(stack, 0.0) + own

    for root in sorted(roots, key=lambda f: -raw[f][3]):
        weight = raw[root][3]
        if weight >= floor:
            expand(root, (root,), weight)
    return out


def _color(name: str) -> str:
    """A warm colour, stable for a name (flame graph convention)."""
    h = zlib.crc32(name.encode())
    r = 205 + h % 50
    g = 80 + (h >> 8) % 130
    b = 40 + (h >> 16) % 50
    return f"rgb({r},{g},{b})"


def _tree(stacks: dict[tuple[Func, ...], float]) -> dict[str, Any]:
    root: dict[str, Any] = {"total": 0.0, "children": {}}
    for stack, seconds in stacks.items():
        node = root
        node["total"] += seconds
        for func in stack:
            node = node["children"].setdefault(func, {"total": 0.0, "children": {}})
            node["total"] += seconds
    return root


def render_svg(raw: Raw, title: str, subtitle: str = "", width: int = 1200) -> str:
    """A self-contained flame graph (SVG) of raw: roots at the bottom, width = time."""
    stacks = folded_stacks(raw)
    tree = _tree(stacks)
    total = tree["total"]
    row, pad, top = 18, 10, 58
    depth = max((len(s) for s in stacks), default=0)
    height = top + (depth + 1) * row + 52
    scale = (width - 2 * pad) / total if total > 0 else 0.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Verdana, sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#fdfdf6"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="17">'
        f"{html.escape(title)}</text>",
        f'<text x="{width / 2}" y="42" text-anchor="middle" fill="#555">'
        f"{html.escape(subtitle)}</text>",
    ]
    base = height - 52  # y of the bottom edge of the root row

    def draw(children: dict[Func, Any], x: float, level: int) -> None:
        for func, node in sorted(children.items(), key=lambda kv: -kv[1]["total"]):
            w = node["total"] * scale
            if w >= 0.5:
                y = base - (level + 1) * row
                name = label(func)
                share = node["total"] / total * 100
                tip = f"{name}: {node['total']:.6f} s ({share:.1f}%)"
                parts.append(
                    f"<g><title>{html.escape(tip)}</title>"
                    f'<rect x="{x:.2f}" y="{y}" width="{max(w - 0.5, 0.5):.2f}" '
                    f'height="{row - 1}" fill="{_color(func[2])}" rx="2"/>'
                )
                fits = int((w - 6) / 7.2)
                if fits >= 3:
                    text = name if len(name) <= fits else name[: fits - 2] + ".."
                    parts.append(
                        f'<text x="{x + 3:.2f}" y="{y + row - 5}">{html.escape(text)}</text>'
                    )
                parts.append("</g>")
                draw(node["children"], x, level + 1)
            x += w

    draw(tree["children"], pad, 0)
    # The time axis: seconds of work, from 0 to the total.
    parts.append(
        f'<line x1="{pad}" y1="{base + 3}" x2="{width - pad}" y2="{base + 3}" stroke="#555"/>'
    )
    for i in range(5):
        x = pad + (width - 2 * pad) * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<line x1="{x:.2f}" y1="{base + 3}" x2="{x:.2f}" y2="{base + 8}" '
            f'stroke="#555"/><text x="{x:.2f}" y="{base + 21}" text-anchor="{anchor}" '
            f'fill="#555">{total * i / 4:.3g} s</text>'
        )
    parts.append(
        f'<text x="{pad}" y="{height - 8}" fill="#555">width: time in the workers '
        f"(total {total:.3f} s, summed over interpreters); bottom: the tasks, above: what they "
        "called; hover a frame for its seconds</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def speedscope_json(raw: Raw, name: str) -> str:
    """The folded stacks as a speedscope file (https://www.speedscope.app), sampled kind."""
    stacks = folded_stacks(raw)
    index: dict[Func, int] = {}
    frames: list[dict[str, Any]] = []
    samples: list[list[int]] = []
    weights: list[float] = []
    for stack, seconds in sorted(stacks.items()):
        ids = []
        for func in stack:
            i = index.get(func)
            if i is None:
                i = index[func] = len(frames)
                frames.append({"name": label(func), "file": func[0], "line": func[1]})
            ids.append(i)
        samples.append(ids)
        weights.append(seconds)
    total = sum(weights)
    doc = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": name,
                "unit": "seconds",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            }
        ],
        "name": name,
        "exporter": "aiosubinterp",
    }
    return json.dumps(doc)


def text_report(
    merged: pstats.Stats, per_interpreter: dict[int, pstats.Stats], heading: str, limit: int = 25
) -> str:
    """pstats' tables, top `limit` functions by cumulative time: merged, then per interpreter."""
    out = io.StringIO()
    out.write(f"{heading}\n\n")
    out.write(f"== all interpreters together ({len(per_interpreter)}) ==\n")
    merged.stream = out  # type: ignore[attr-defined]
    if merged.stats:  # type: ignore[attr-defined]
        merged.sort_stats("cumulative").print_stats(limit)
    else:
        out.write("no task ran in an interpreter while profiling\n")
    for interp, stats in per_interpreter.items():
        out.write(f"\n== interpreter {interp} ==\n")
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats("cumulative").print_stats(limit)
    return out.getvalue().rstrip("\n") + "\n"
