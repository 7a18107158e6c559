"""The ASGI application bench_serve.py serves with every contender (plain ASGI 3, no framework).

Routes: ``/plaintext`` (13 bytes), ``/json`` (a small JSON object) and
``/cpu`` (counts the primes below 3000 in pure Python, ~1 ms: a CPU-bound
handler, where the GIL decides). Imported by each server: by each
interpreter of ``python -m aiosubinterp serve``, by each process of
``uvicorn --workers``.
"""

import json

_PLAIN = [(b"content-type", b"text/plain"), (b"content-length", b"13")]


def count_primes(n: int) -> int:
    return sum(1 for k in range(2, n) if all(k % d for d in range(2, int(k**0.5) + 1)))


async def app(scope, receive, send):
    if scope["type"] != "http":
        return  # no lifespan
    path = scope["path"]
    if path == "/plaintext":
        await send({"type": "http.response.start", "status": 200, "headers": _PLAIN})
        await send({"type": "http.response.body", "body": b"Hello, world!"})
        return
    if path == "/json":
        body = json.dumps({"message": "Hello, world!", "items": [1, 2, 3]}).encode()
    elif path == "/cpu":
        body = json.dumps({"primes": count_primes(3000)}).encode()
    else:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
