"""gunicorn's worker class for bench_serve.py: uvicorn's worker on h11 and asyncio, no lifespan.

``gunicorn -k _serveworker.H11AsyncioWorker``: the same HTTP parser and loop
as ``python -m aiosubinterp serve`` (uvicorn's worker class would take
httptools and uvloop when they are installed). The class lives in the
``uvicorn-worker`` package now; uvicorn's own (deprecated) copy is the
fallback. Imported by gunicorn's processes only, never by the served app.
"""

from typing import Any, ClassVar

try:
    from uvicorn_worker import UvicornWorker
except ImportError:  # uvicorn before the split into uvicorn-worker
    from uvicorn.workers import UvicornWorker


class H11AsyncioWorker(UvicornWorker):  # type: ignore[misc]
    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {"loop": "asyncio", "http": "h11", "lifespan": "off"}
