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


def copy_loading_while_another_thread_imports(first: str, second: str) -> dict:
    """Import first on one thread and second on another, forcing the interleaving
    that broke the check: the second import reaches CPython's module creation
    while the first is inside its section with the check lifted, and the first
    then makes its module from its copy while the second is still inside.

    Returns what happened: errors, whether each thread reached its step, the
    check's override left after (0: none).
    """
    import _imp
    import importlib
    import threading

    from aiosubinterp._inside import copies

    finder = next(f for f in sys.meta_path if isinstance(f, copies.PrivateCopies))
    first_waiting = threading.Event()  # the first thread is in its lifted section
    second_inside = threading.Event()  # the second thread is inside CPython's creation
    first_done = threading.Event()
    errors: list[str] = []
    steps: list[str] = []

    class Pausing:
        """_imp for copies.py, pausing at the two steps of the interleaving."""

        def __getattr__(self, name: str) -> object:
            return getattr(_imp, name)

        def create_dynamic(self, spec: object) -> object:
            name, origin = spec.name, spec.origin or ""  # type: ignore[attr-defined]
            if name.startswith(first + ".") or name == first:
                if origin.startswith(finder.root) and not first_waiting.is_set():
                    first_waiting.set()
                    steps.append("first in its section")
                    if not second_inside.wait(60):
                        errors.append("the second thread never reached module creation")
                    try:
                        return _imp.create_dynamic(spec)
                    finally:
                        first_done.set()
            elif name == second and not second_inside.is_set():
                second_inside.set()
                steps.append("second inside creation")
                if not first_done.wait(60):
                    errors.append("the first thread never finished its module")
            return _imp.create_dynamic(spec)

    def one(name: str) -> None:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            first_done.set()  # never leave the other thread waiting
            second_inside.set()

    copies._imp = Pausing()  # type: ignore[assignment]
    try:
        a = threading.Thread(target=one, args=(first,))
        a.start()
        if not first_waiting.wait(60):
            errors.append("the first thread never reached its section")
        b = threading.Thread(target=one, args=(second,))
        b.start()
        a.join()
        b.join()
    finally:
        copies._imp = _imp  # type: ignore[assignment]
    left = _imp._override_multi_interp_extensions_check(0)  # type: ignore[attr-defined]
    return {"errors": errors, "steps": steps, "left": left}


def import_again_after_a_failed_copy(name: str) -> tuple[str, str]:
    """Import name with its first load from a copy failing; then import it again.

    Returns (the first error, the files of a second copy mapped, and what the
    module's dumps(1) returns).
    """
    import _imp
    import importlib

    from aiosubinterp._inside import copies

    class FailingOnce:
        failed = ""

        def __getattr__(self, attr: str) -> object:
            return getattr(_imp, attr)

        def create_dynamic(self, spec: object) -> object:
            finder = next(f for f in sys.meta_path if isinstance(f, copies.PrivateCopies))
            if not self.failed and (spec.origin or "").startswith(finder.root):  # type: ignore[attr-defined]
                self.failed = "failed"
                raise ImportError("a load from a copy failed (on purpose)")
            return _imp.create_dynamic(spec)

    copies._imp = FailingOnce()  # type: ignore[assignment]
    try:
        try:
            importlib.import_module(name)
            first = "no error"
        except ImportError as exc:
            first = str(exc)
    finally:
        copies._imp = _imp  # type: ignore[assignment]
    module = importlib.import_module(name)
    return first, f"{mapped('/.attempt2/' + name + '/')} {type(module.dumps(1)).__name__}"
