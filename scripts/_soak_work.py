"""The soak's workloads: one function per refusing package, seed in, digest out.

Imported by name in worker interpreters (``InterpreterPool(fallback="copy")``)
and in the main interpreter, which computes the expected digest of each seed
the same way. Each function imports its package when called (a worker loads
the private copy at its first call). Nothing here imports aiosubinterp.
"""

from __future__ import annotations

import zlib

__all__ = ["WORKLOADS", "lxml_work", "numpy_work", "orjson_work", "pydantic_work"]

_models: dict[str, type] = {}


def numpy_work(seed: int) -> int:
    import numpy as np

    rng = np.random.default_rng(seed)
    m = rng.random((80, 80))
    v = rng.standard_normal(4096)
    parts = [
        np.linalg.inv(m @ m.T + np.eye(80)).round(6),
        np.sort(v)[::512].round(9),
        np.fft.rfft(v).real[:32].round(6),
        np.einsum("ij,jk->ik", m[:8], m[:, :8]).round(9),
        np.char.upper(np.array([f"s{seed}", "ab", "xyz"])),
        np.unique(rng.integers(0, 50, 500), return_counts=True),
        np.datetime64("2020-01-01") + np.arange(3) * seed,
    ]
    return zlib.crc32(repr(parts).encode())


def orjson_work(seed: int) -> int:
    import datetime
    import uuid

    import orjson

    data = {
        "id": seed,
        "items": [{"n": i, "x": i * 0.5 + seed, "s": "é" * (i % 4)} for i in range(200)],
        "t": datetime.datetime(2020, 1, 1 + seed % 28, 3, 4, 5),
        "u": uuid.UUID(int=seed),
        "nested": {"a": [None, True, False, -seed], "b": {"c": [1.5e300, -0.0]}},
    }
    text = orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    back = orjson.loads(text)
    try:
        orjson.loads(b"{" + text[: seed % 50])
        error = "none"
    except orjson.JSONDecodeError as exc:
        error = str(exc)
    return zlib.crc32(text + repr(back).encode() + error.encode())


def lxml_work(seed: int) -> int:
    from lxml import etree

    root = etree.Element("root", seed=str(seed))
    for i in range(300):
        child = etree.SubElement(root, "item", n=str(i))
        child.text = f"value {i * seed}"
    text = etree.tostring(root)
    parsed = etree.fromstring(text)
    found = parsed.xpath(f"//item[@n mod {seed % 7 + 2} = 0]/text()")
    try:
        etree.fromstring(text[: 40 + seed % 100])
        error = "none"
    except etree.XMLSyntaxError as exc:
        error = type(exc).__name__ + str(exc.position)
    return zlib.crc32(text + repr(found).encode() + error.encode())


def _order_model() -> type:
    # Built once per interpreter: pydantic's schema build is the slow part.
    if "Order" not in _models:
        import pydantic

        class Line(pydantic.BaseModel):
            sku: str
            qty: pydantic.PositiveInt
            price: float

        class Order(pydantic.BaseModel):
            id: int
            lines: list[Line]
            note: str | None = None

        _models["Order"] = Order
    return _models["Order"]


def pydantic_work(seed: int) -> int:
    import pydantic

    order_model = _order_model()
    raw = {
        "id": str(seed),
        "lines": [{"sku": f"k{i}", "qty": str(i + 1), "price": i / 3} for i in range(50)],
    }
    order = order_model.model_validate(raw)
    bad = dict(raw, lines=[{"sku": "x", "qty": -seed, "price": "no"}])
    try:
        order_model.model_validate(bad)
        errors = "none"
    except pydantic.ValidationError as exc:
        errors = repr([(e["type"], e["loc"]) for e in exc.errors()])
    return zlib.crc32((order.model_dump_json() + errors).encode())


WORKLOADS = {
    "numpy": numpy_work,
    "orjson": orjson_work,
    "lxml": lxml_work,
    "pydantic": pydantic_work,
}
