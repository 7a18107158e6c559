"""Functions the fallback="copy" tests send to interpreters: each uses one refusing package
and returns plain data (a digest the main interpreter computes the same way)."""

from __future__ import annotations

import os
import sys
import zlib


def mapped(fragment: str) -> list[str]:
    """Paths of this process's mappings whose path contains fragment (one per file)."""
    seen: list[str] = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if fragment in path and path not in seen:
                seen.append(path)
    return seen


def numpy_digest() -> int:
    import numpy as np

    rng = np.random.default_rng(1)
    m = rng.random((60, 60))
    parts = [
        np.arange(10**5).sum(),
        np.linalg.inv(m @ m.T + np.eye(60)).round(6),
        np.sqrt(np.arange(1000.0)).round(9),
        np.fft.fft(np.arange(16.0)).real.round(9),
        np.array(["a", "bc"]).astype("U3"),
    ]
    return zlib.crc32(repr(parts).encode())


def numpy_where() -> tuple[int, str, list[str]]:
    """This interpreter's numpy digest, the file its core was loaded from, the copies mapped."""
    import numpy as np

    core = sys.modules["numpy._core._multiarray_umath"]
    return numpy_digest(), np.__file__, [core.__name__, *mapped("_multiarray_umath")]


def orjson_digest() -> int:
    import datetime
    import uuid

    import orjson

    data = {
        "a": [1, 2.5, "x"],
        "t": datetime.datetime(2020, 1, 2, 3, 4, 5),
        "u": uuid.UUID(int=5),
        "n": None,
    }
    text = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    return zlib.crc32(text + repr(orjson.loads(text)).encode())


def pydantic_digest() -> int:
    import pydantic

    class Order(pydantic.BaseModel):
        id: int
        items: list[str] = []

    order = Order.model_validate({"id": "7", "items": ["a", "b"]})
    try:
        Order.model_validate({"id": "seven"})
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]["type"]
    return zlib.crc32((order.model_dump_json() + error).encode())


def lxml_digest() -> int:
    from lxml import etree

    root = etree.fromstring(b"<a><b n='1'>x</b><b n='2'>y</b></a>")
    try:
        etree.fromstring(b"<a>")
    except etree.XMLSyntaxError as exc:
        error = type(exc).__name__
    return zlib.crc32((repr([b.get("n") for b in root.xpath("//b")]) + error).encode())


def msgspec_encode() -> bytes:
    import msgspec

    return bytes(msgspec.json.encode({"a": 1}))


def rational_tests() -> str:
    """numpy (from a copy) and then its single-phase test helper."""
    import numpy  # noqa: F401
    from numpy._core import _rational_tests

    return repr(_rational_tests.rational(1, 2))


def uvloop_version() -> str:
    import uvloop

    return str(uvloop.__version__)


def pid() -> int:
    return os.getpid()


def import_at_once(names: list[str]) -> tuple[list[str], int]:
    """Import names on one thread each, at once; (errors, the check's override left after).

    The override left must be 0 (none): a load from a copy lifts the check only
    while it runs, whatever the order threads finish in.
    """
    import _imp
    import importlib
    import threading

    errors: list[str] = []
    start = threading.Barrier(len(names))

    def one(name: str) -> None:
        start.wait()
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported
            errors.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left = _imp._override_multi_interp_extensions_check(0)
    return errors, left
