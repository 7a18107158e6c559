"""CPU-bound pure-Python work for `demo --kind primes` and the `info` probe.

Worker-side: interpreters import it, so no asyncio here.
"""

from __future__ import annotations

__all__ = ["count_primes", "probe_import"]


def count_primes(start: int, stop: int) -> int:
    """Count primes in [start, stop) by trial division: pure Python, no I/O, no C helpers."""
    count = 0
    for n in range(max(start, 2), stop):
        if n % 2 == 0:
            count += n == 2
            continue
        d = 3
        while d * d <= n:
            if n % d == 0:
                break
            d += 2
        else:
            count += 1
    return count


def probe_import(name: str) -> str:
    """Import ``name`` in this interpreter; return its version or "ok"."""
    import importlib

    module = importlib.import_module(name)
    return str(getattr(module, "__version__", "") or "ok")
