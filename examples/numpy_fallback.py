"""numpy code, unchanged, through InterpreterPool(fallback="process").

numpy refuses to load in a subinterpreter with its own GIL. With
``fallback="process"`` the pool notices (the first call fails with
ModuleRefusedError in its interpreter), says so once with a FallbackWarning,
and runs that call and every later call of this module's functions on
worker processes; pure-Python calls of other modules stay on interpreters.
``examples/numpy_in_interpreters.py`` runs numpy *inside* interpreters
instead (``fallback="copy"``: a private copy of numpy per interpreter).

Run: ``python examples/numpy_fallback.py``
"""

from __future__ import annotations

import asyncio
import warnings

import numpy as np

import aiosubinterp


def column_means(rows: list[list[float]]) -> list[float]:
    """Plain numpy: nothing here knows where it runs."""
    return np.asarray(rows, dtype=float).mean(axis=0).round(3).tolist()


def checksum(n: int) -> int:
    return int(np.arange(n, dtype=np.int64).sum())


async def main() -> None:
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.5, 9.0]]
    async with aiosubinterp.InterpreterPool(2, fallback="process") as pool:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", aiosubinterp.FallbackWarning)
            print("means:", await pool.run(column_means, rows))
        for w in caught:
            print("warning:", w.category.__name__)
        sums = await asyncio.gather(*(pool.run(checksum, n) for n in (10, 100, 1000)))
        print("checksums:", sums)
        # A pure-Python builtin still runs in an interpreter.
        print("pure:", await pool.run(sum, range(10)))


if __name__ == "__main__":
    asyncio.run(main())
