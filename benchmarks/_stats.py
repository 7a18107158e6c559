"""Statistics of the benchmarks' samples, and the per-round values they come from.

One vocabulary for every table: the median (p50) as the value, and a spread
beside it: p99 for latencies (many samples), min/max for rates (one per
batch or round), p25/p75 where samples are few fresh processes. Warm-up
calls never reach these functions: each contender runs and drops them first.

What belongs here: arithmetic on samples (percentile, median, summarize,
ratio) and picking the values out of the rounds' results (ok_rounds,
collect). Formatting them into cells is _report.py's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: int) -> float:
    """The q-th percentile (q in 0..100), interpolating between closest ranks (numpy's "linear")."""
    if not values:
        return math.nan
    if len(values) == 1 or q <= 0:  # statistics.quantiles needs two points before 3.13
        return float(min(values))
    if q >= 100:
        return float(max(values))
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def summarize(values: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean, stdev, min and max of a contender's samples (NaN when there are none)."""
    if not values:
        return {
            "n": 0,
            "p50": math.nan,
            "p99": math.nan,
            "mean": math.nan,
            "stdev": math.nan,
            "min": math.nan,
            "max": math.nan,
        }
    return {
        "n": len(values),
        "p50": median(values),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b


def ok_rounds(rounds: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """The successful rounds of a contender, and the first error message if any round failed."""
    good = [r for r in rounds if "error" not in r]
    errors = [r["error"] for r in rounds if "error" in r]
    return good, (errors[0] if errors else None)


def collect(rounds: list[dict[str, Any]], key: str) -> list[float]:
    """Per-round scalar `key`, or the concatenation of per-round lists `key`."""
    out: list[float] = []
    for r in rounds:
        value = r.get(key)
        if isinstance(value, list):
            out.extend(value)
        elif value is not None:
            out.append(value)
    return out
