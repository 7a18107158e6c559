"""A FastAPI app under uvicorn whose request bodies pydantic validates inside interpreters.

Run: ``python examples/fastapi_app.py --port 8080`` (needs fastapi, and so
pydantic: the ``copies`` extra has them, ``pip install 'aiosubinterp[copies]'``;
uvicorn and httptools: the ``test`` extra). uvicorn serves it with
``loop="uvloop"`` and ``http="httptools"``; without uvloop or httptools it
says so and uses asyncio or h11 instead. Ctrl-C or SIGTERM stops it (exit
code 0). Then, on 127.0.0.1:8080:

- ``POST /score`` with a JSON body such as
  ``{"id": 7, "items": [{"name": "a", "n": 200000, "weight": 1.5}]}``:
  an interpreter of an ``InterpreterPool(fallback="copy")`` gets the raw
  bytes, validates them with a pydantic model
  (``Batch.model_validate_json``), counts the primes below each item's
  ``n`` in pure Python, and answers JSON made by ``model_dump_json``:
  each item's score (primes x weight), the total, the best item, and the
  ``interpreter_id`` and ``pid`` it was computed in. A body that does not
  validate gets 422 and pydantic's error list (``{"detail": [{"type":
  "int_parsing", "loc": ["id"], ...}]}``, FastAPI's shape). pydantic-core
  refuses interpreters with their own GIL; ``fallback="copy"`` loads a
  private copy of it in each interpreter, so validation runs there, on
  other cores, each interpreter with its own GIL (README: "numpy,
  pydantic, orjson and lxml inside interpreters");
- ``GET /ping``: answers at once, and keeps doing so while ``/score``
  requests keep every worker busy (the event loop never validates or
  computes);
- ``GET /stats``: the mode and the pool's ``statistics()`` (with
  ``copies``, ``copies_bytes``: the private copies the interpreters loaded);
- ``GET /docs``: FastAPI's OpenAPI page, ``/score``'s body schema included
  (``Batch.model_json_schema()``, computed once in main).

``--mode`` says where ``/score`` validates and computes, as in
``aiohttp_app.py`` and ``starlette_app.py`` (``benchmarks/bench_http.py
--app fastapi`` measures them the same way): ``interpreters`` (the default,
``InterpreterPool(fallback="copy")``), ``processes`` (an
``aiosubinterp.ProcessPool``: pydantic loads as usual in worker processes),
``to_thread`` (``asyncio.to_thread``: threads that share the main GIL with
the event loop) and ``inline`` (on the event loop itself: every other
request waits meanwhile). ``--mode interpreters`` stops at once, saying
so, where it cannot run: on free-threaded builds, which refuse
``fallback="copy"`` (threads run in parallel there anyway: ``--mode
to_thread``), and on CPython 3.12, where pydantic models built in several
interpreters' copies of pydantic-core corrupt the heap (measured on 3.12.1:
``free(): invalid pointer``, with 4 interpreters, or with 2 once main
imported pydantic, as FastAPI does): use 3.13+, or ``--mode processes``.

The handler does not declare the body as a pydantic parameter (FastAPI
would validate it in main, on the event loop): it passes the raw bytes on,
and the worker's answer, status and JSON bytes, goes out as it is. The
work is in ``examples/_fastapi_work.py``, which workers import by module
name, and which imports neither fastapi nor asyncio. The pool is opened and
closed by the app's lifespan: on shutdown uvicorn waits for the requests in
flight, then the pool closes and destroys its interpreters (and removes
their copies).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import sysconfig
from collections.abc import AsyncIterator
from typing import Any

try:
    import _fastapi_work as work
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, Response
except ModuleNotFoundError as exc:
    if exc.name not in ("fastapi", "pydantic", "uvicorn", "starlette"):
        raise
    NEEDS = (
        f"examples/fastapi_app.py needs {exc.name}, which is not installed for "
        f"{sys.executable}: pip install fastapi uvicorn httptools (or the project's "
        "extras: pip install -e '.[copies,test]')"
    )
    if __name__ == "__main__":
        sys.exit(NEEDS)
    raise ModuleNotFoundError(NEEDS, name=exc.name) from None

from _web_modes import add_arguments, check_mode, enter_cpu, server_options

MAX_BODY = 1 << 20  # bytes of a /score body; larger ones get 413 before any work


def interpreters_refused() -> str | None:
    """Why ``--mode interpreters`` cannot run on this CPython, or None."""
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return (
            "it needs InterpreterPool(fallback='copy'), which free-threaded builds refuse "
            "(CPython cannot lift its check for one interpreter there); use --mode "
            "to_thread (threads run in parallel on this build) or --mode processes"
        )
    if sys.version_info[:2] == (3, 12):
        return (
            "on CPython 3.12, pydantic models built in several interpreters' private "
            "copies of pydantic-core corrupt the heap (measured on 3.12.1: the process "
            'aborts, "free(): invalid pointer", with 4 interpreters, or with 2 once the '
            "main interpreter imported pydantic, as FastAPI does); use CPython 3.13+, or "
            "--mode processes"
        )
    return None


# -- endpoints ---------------------------------------------------------------------------


async def ping() -> Response:
    return PlainTextResponse("pong\n")


async def score(request: Request) -> Response:
    body = await request.body()
    if len(body) > MAX_BODY:
        return JSONResponse({"detail": f"the body is larger than {MAX_BODY} bytes"}, 413)
    # Validation and work in the worker: pydantic's answer comes back as JSON bytes.
    status, content = await request.state.run_cpu(work.score, body)
    return Response(content, status, media_type="application/json")


async def stats(request: Request) -> Response:
    cpu = request.state.cpu_pool
    return JSONResponse(
        {
            "mode": request.app.state.settings[1],
            "cpu_pool": cpu.statistics() if cpu is not None else None,
        }
    )


# -- the app and its server --------------------------------------------------------------


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    """The pool (or to_thread's threads) lives exactly as long as the app.

    Handlers see it in request.state: ``cpu_pool`` (an InterpreterPool, a
    ProcessPool, or None for to_thread and inline) and ``run_cpu`` (how
    /score runs ``fn(*args)``: an async function, per the mode).
    """
    workers, mode = app.state.settings
    async with contextlib.AsyncExitStack() as stack:
        cpu, run_cpu = await enter_cpu(stack, mode, workers, fallback="copy")
        # Warm up: each worker imports _fastapi_work and pydantic (in an
        # interpreter: loads its copy of pydantic-core) before a request needs it.
        await asyncio.gather(
            *(run_cpu(work.warm_up) for _ in range(workers or os.cpu_count() or 1))
        )
        yield {"cpu_pool": cpu, "run_cpu": run_cpu}
    # Leaving the stack closed the pool: every interpreter (and process, or thread) is gone.


def make_app(workers: int | None = None, mode: str = "interpreters") -> FastAPI:
    """The application; ``workers`` for /score (default: one per CPU), in ``mode`` (MODES)."""
    check_mode(mode)
    if mode == "interpreters" and (why := interpreters_refused()) is not None:
        raise ValueError(f"fastapi_app.py: --mode interpreters is refused here: {why}")
    app = FastAPI(title="aiosubinterp: pydantic in interpreters", lifespan=lifespan)
    app.add_api_route("/ping", ping, methods=["GET"])
    app.add_api_route(
        "/score",
        score,
        methods=["POST"],
        summary="Validate a batch (pydantic, in a worker) and score its items",
        # The body is read raw (validation runs in the worker), so FastAPI
        # cannot infer its schema: state it, from the worker's model.
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Batch"}}},
            }
        },
        responses={
            200: {"model": work.Scored},
            422: {
                "description": 'The body did not validate: pydantic\'s errors, {"detail": [...]}'
            },
        },
    )
    app.add_api_route("/stats", stats, methods=["GET"])
    app.state.settings = (workers, mode)
    _document_body(app)
    return app


def _document_body(app: FastAPI) -> None:
    """Put Batch (and the models it refers to) in the OpenAPI document's components."""
    schema = work.Batch.model_json_schema(ref_template="#/components/schemas/{model}")
    models = {**schema.pop("$defs", {}), "Batch": schema}
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:  # FastAPI builds the document once, then caches it
            document = build()
            document.setdefault("components", {}).setdefault("schemas", {}).update(models)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # uvicorn catches SIGTERM, shuts down gracefully, then raises it again
    # for the handler it found at start (this one): exit 0, as after Ctrl-C.
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, route="/score", streams=False)
    args = parser.parse_args(argv)
    try:
        app = make_app(args.workers, args.mode)
    except ValueError as exc:
        parser.exit(2, f"{exc}\n")
    loop, http = server_options()
    where = "InterpreterPool(fallback='copy')" if args.mode == "interpreters" else args.mode
    print(f"event loop: {loop}, HTTP parser: {http}; /score: {where}", flush=True)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        loop=loop,
        http=http,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        # uvicorn handles Ctrl-C itself (a clean shutdown: the pool closed),
        # then raises it again for the caller to see.
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
