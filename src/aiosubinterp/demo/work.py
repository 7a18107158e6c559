"""CPU-bound pure-Python work for `demo --kind primes`, the `info` probe and the `check` probe.

Worker-side: interpreters import it, so no asyncio here.
"""

from __future__ import annotations

__all__ = ["count_primes", "probe_import", "probe_module"]


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


def probe_module(name: str, code: str) -> dict[str, str]:
    """Import ``name`` in this interpreter, then run ``code`` (which sets ``result``).

    ImportErrors propagate: the pool turns a refusal into ModuleRefusedError
    on the way back. Other exceptions come back as text, since their classes
    may not exist in the caller (which must not import the module to find out).
    """
    import importlib
    import warnings

    try:
        module = importlib.import_module(name)
    except ImportError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the caller as text
        return {"status": "failed", "step": "import", "error": _one_line(exc)}
    with warnings.catch_warnings():  # some packages deprecate __version__ (markupsafe)
        warnings.simplefilter("ignore")
        version = str(getattr(module, "__version__", "") or "")
    namespace: dict[str, object] = {"__name__": "__check__"}
    try:
        exec(code, namespace)
    except ImportError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the caller as text
        return {"status": "failed", "step": "call", "error": _one_line(exc), "version": version}
    result = repr(namespace.get("result"))
    return {
        "status": "works",
        "version": version,
        "result": result if len(result) <= 60 else result[:57] + "...",
    }


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
