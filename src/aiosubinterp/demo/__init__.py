"""The demo and the bench command of ``python -m aiosubinterp``, built on the public API only.

- :mod:`~aiosubinterp.demo.circles`: the physics of the bouncing circles
  (worker-side: interpreters, threads and processes import it);
- :mod:`~aiosubinterp.demo.work`: the primes demo's work and the ``info``
  and ``check`` probes (worker-side);
- :mod:`~aiosubinterp.demo.zoo`: the contenders (one thread, threads,
  processes, interpreters) and the ``demo`` command's table;
- :mod:`~aiosubinterp.demo.live`: ``demo --serve``, the contenders at the
  same time in a web page (``live.html``; aiohttp, the ``demo`` extra);
- :mod:`~aiosubinterp.demo.stream`: the contenders streaming their frames
  to the main interpreter (``demo --serve`` and the table's every-frame
  column), and :mod:`~aiosubinterp.demo.livework`, their region loops
  (worker-side);
- :mod:`~aiosubinterp.demo.primes`: ``demo --kind primes``;
- :mod:`~aiosubinterp.demo.render`: the PNG and GIF of the circles (Pillow,
  the ``demo`` extra);
- :mod:`~aiosubinterp.demo.bench`: the ``bench`` command, its report and
  charts (matplotlib and rich, the ``bench`` extra);
- :mod:`~aiosubinterp.demo.info`: the ``info`` command;
- :mod:`~aiosubinterp.demo.check`: the ``check`` command (will a module
  load in a worker?), its table of probes.

Worker interpreters import this package (to reach ``circles`` and
``work``): it imports nothing at its top level beyond what is below.
"""

__all__ = ["missing"]


def missing(extra: str, *modules: str) -> str | None:
    """None if every module imports here; else a message naming the extra that installs them."""
    import importlib.util

    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (
        f"{', '.join(absent)} not installed: pip install 'aiosubinterp[{extra}]' "
        f"(or, from a clone, `make venv`, which installs the {extra} extra)"
    )
