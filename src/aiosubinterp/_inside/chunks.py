"""What InterpreterPoolExecutor.map(..., chunksize=n) runs in a worker: one call per chunk.

Worker-side module: imported inside interpreters, so it must not import
asyncio (nor anything of ours that does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["run_chunk"]


def run_chunk(fn: Callable[..., Any], chunk: Iterable[tuple[Any, ...]]) -> list[Any]:
    """[fn(*args) for args in chunk]: a chunk crosses as one job and comes back as one list."""
    return [fn(*args) for args in chunk]
