"""ASGI applications for tests/test_serve.py, served by ``python -m aiosubinterp serve``.

Each interpreter of the server imports this module itself. ``app`` is a plain
ASGI 3 callable; ``starlette_app`` the same routes on Starlette.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import aiosubinterp

# Filled by the lifespan startup, in each interpreter: the test reads it back.
LIFESPAN: dict[str, object] = {}


def _interp() -> int:
    return aiosubinterp.get_current().id


async def _reply(send, body: bytes, content_type: bytes = b"text/plain", status: int = 200):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _ws_echo(scope, receive, send):
    """Accepts; answers each text message with "<interpreter id>:<text>"."""
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        await send({"type": "websocket.send", "text": f"{_interp()}:{message.get('text')}"})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"]["started_in"] = _interp()
                LIFESPAN["startup"] = _interp()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                marker = os.environ.get("SERVE_TEST_SHUTDOWN_DIR")
                if marker:  # one file per interpreter that ran its lifespan shutdown
                    with open(os.path.join(marker, f"shutdown-{_interp()}"), "w") as f:
                        f.write("done")
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await _ws_echo(scope, receive, send)
        return
    path = scope["path"][len(scope["root_path"]) :]  # the server's path includes root_path
    if path == "/":
        await _reply(send, b"Hello, world!")
    elif path == "/json":
        body = json.dumps(
            {
                "interpreter": _interp(),
                "started_in": scope["state"]["started_in"],
                "root_path": scope["root_path"],
                "method": scope["method"],
                "query": scope["query_string"].decode(),
            }
        ).encode()
        await _reply(send, body, b"application/json")
    elif path == "/echo":
        await _reply(send, await _read_body(receive))
    elif path == "/stream":
        count = int(scope["query_string"].decode().partition("=")[2] or 5)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        for i in range(count):
            await send({"type": "http.response.body", "body": b"chunk %d\n" % i, "more_body": True})
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b""})
    elif path == "/slow":
        # Writes ?path= + ".started", then answers once the file ?path= exists
        # (the test creates it).
        target = scope["query_string"].decode().partition("=")[2]
        with open(target + ".started", "w") as f:
            f.write(str(_interp()))
        while not os.path.exists(target):
            await asyncio.sleep(0.02)
        await _reply(send, b"slow done")
    elif path == "/late":
        # The head at once, the body once the file ?path= exists.
        target = scope["query_string"].decode().partition("=")[2]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        while not os.path.exists(target):
            await asyncio.sleep(0.02)
        await send({"type": "http.response.body", "body": b"late body"})
    elif path == "/hang":
        # Blocks this interpreter's event loop until the file ?path= exists.
        target = scope["query_string"].decode().partition("=")[2]
        with open(target + ".started", "w") as f:
            f.write(str(_interp()))
        while not os.path.exists(target):
            time.sleep(0.01)  # noqa: ASYNC251 - blocking the loop is the point
        await _reply(send, b"unblocked")
    elif path == "/modules":
        await _reply(send, json.dumps(sorted(sys.modules)).encode(), b"application/json")
    elif path == "/error":
        raise RuntimeError("the application failed on purpose")
    elif path == "/exit":
        raise SystemExit(3)  # ends this interpreter's serve task: the server replaces it
    else:
        await _reply(send, b"not found", status=404)


async def fails_once_flagged(scope, receive, send):
    """``app``, whose lifespan startup fails once the file $SERVE_TEST_FAIL_FLAG exists."""
    if scope["type"] == "lifespan" and os.path.exists(os.environ["SERVE_TEST_FAIL_FLAG"]):
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "flagged"})
        return
    await app(scope, receive, send)


async def failing_startup(scope, receive, send):
    assert scope["type"] == "lifespan"
    await receive()
    await send({"type": "lifespan.startup.failed", "message": "no database here"})


def make_starlette():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    async def plaintext(request):
        return PlainTextResponse("Hello, world!")

    async def as_json(request):
        return JSONResponse({"interpreter": _interp(), "started_in": request.state.started_in})

    async def stream(request):
        async def lines():
            for i in range(3):
                yield f"line {i}\n"

        return StreamingResponse(lines(), media_type="text/plain")

    async def lifespan(app):
        yield {"started_in": _interp()}

    return Starlette(
        routes=[Route("/", plaintext), Route("/json", as_json), Route("/stream", stream)],
        lifespan=lifespan,
    )


not_callable = 42
