"""``python -m aiosubinterp check MODULE...``: will these modules load, and work, in a worker?

Each module is tried in a child process of its own (an import can crash
CPython, and must not take the caller with it): the child opens an
``InterpreterPool(1)``, imports the module in the worker and makes one
representative call (``PROBES``; a module without an entry is only
imported), then reports one of:

- ``works``: imported and called; its version;
- ``refused``: it refuses own-GIL interpreters (``ModuleRefusedError``);
  ``InterpreterPool(fallback="process")`` or ``ProcessPool`` runs it;
- ``copy`` (with ``--fallback copy``): refused, but a private copy per
  interpreter works: two interpreters make 20 probe calls at once, all with
  the same answer; the disk (and so about the memory) each interpreter pays;
- ``crashed``: the child died (a signal or an exit code), with the last
  lines of its stderr;
- ``not installed``;
- ``failed``: another exception, at the import or in the call;
- ``timeout``: no answer within ``--timeout`` seconds (the child is killed).

Exit code: 0 if every module works, 1 otherwise (2 for a usage error).
Public API only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from typing import NamedTuple

__all__ = ["PROBES", "Probe", "check_module", "run_check"]


class Probe(NamedTuple):
    """A representative call: ``what`` is shown, ``code`` runs in the worker and sets ``result``."""

    what: str
    code: str


# What the worker calls after importing the module named on the left. The
# calls stay offline and small: each says "the C parts of this package run here".
PROBES: dict[str, Probe] = {
    "json": Probe("json.dumps", "import json\nresult = json.dumps({'a': [1, 2.5, None]})"),
    "yaml": Probe(
        "yaml.safe_dump, safe_load",
        "import yaml\nresult = yaml.safe_load(yaml.safe_dump({'a': [1, 2]}))",
    ),
    "jinja2": Probe(
        "jinja2.Template(...).render()",
        "import jinja2\nresult = jinja2.Template('Hello {{ name }}!').render(name='worker')",
    ),
    "markupsafe": Probe(
        "markupsafe.escape", "import markupsafe\nresult = str(markupsafe.escape('<b>&</b>'))"
    ),
    "orjson": Probe(
        "orjson.dumps, loads", "import orjson\nresult = orjson.loads(orjson.dumps({'a': [1, 2.5]}))"
    ),
    "ujson": Probe(
        "ujson.dumps, loads", "import ujson\nresult = ujson.loads(ujson.dumps({'a': [1, 2.5]}))"
    ),
    "simplejson": Probe(
        "simplejson.dumps", "import simplejson\nresult = simplejson.dumps({'a': [1, 2.5]})"
    ),
    "msgpack": Probe(
        "msgpack.packb, unpackb",
        "import msgpack\nresult = msgpack.unpackb(msgpack.packb({'a': [1, 2]}))",
    ),
    "regex": Probe(
        "regex.match", "import regex\nresult = regex.match(r'(?<w>\\w+)', 'hello world')['w']"
    ),
    "lxml": Probe(
        "lxml.etree.fromstring",
        "import lxml.etree\nresult = lxml.etree.fromstring('<a><b>x</b></a>').findtext('b')",
    ),
    "bs4": Probe(
        "bs4.BeautifulSoup(..., 'html.parser').get_text",
        "import bs4\n"
        "result = bs4.BeautifulSoup('<p>Hi <b>there</b></p>', 'html.parser').get_text()",
    ),
    "dateutil": Probe(
        "dateutil.parser.parse",
        "import dateutil.parser\n"
        "result = dateutil.parser.parse('2026-12-04T10:00:00+01:00').isoformat()",
    ),
    "attrs": Probe(
        "attrs.define on a class",
        "import attrs\n"
        "@attrs.define\nclass Point:\n    x: int\n    y: int = 0\n"
        "result = repr(Point(1))",
    ),
    "pydantic": Probe(
        "BaseModel.model_validate",
        "import pydantic\n"
        "class User(pydantic.BaseModel):\n    id: int\n    name: str\n"
        "result = User.model_validate({'id': '3', 'name': 'x'}).id",
    ),
    "sqlalchemy": Probe(
        "create_engine('sqlite://'), select 1",
        "import sqlalchemy\n"
        "engine = sqlalchemy.create_engine('sqlite://')\n"
        "with engine.connect() as conn:\n"
        "    result = conn.execute(sqlalchemy.text('select 1')).scalar()\n"
        "engine.dispose()",
    ),
    "PIL": Probe(
        "PIL.Image.new",
        "import PIL.Image\nresult = PIL.Image.new('RGB', (4, 4), 'red').getpixel((0, 0))",
    ),
    "numpy": Probe("numpy.arange", "import numpy\nresult = int(numpy.arange(10).sum())"),
    "pandas": Probe(
        "pandas.DataFrame",
        "import pandas\nresult = int(pandas.DataFrame({'a': [1, 2]})['a'].sum())",
    ),
    "sympy": Probe(
        "sympy.simplify", "import sympy\nresult = str(sympy.simplify('sin(x)**2 + cos(x)**2'))"
    ),
    "networkx": Probe(
        "networkx.shortest_path",
        "import networkx\nresult = networkx.shortest_path(networkx.path_graph(5), 0, 4)",
    ),
    "markdown": Probe(
        "markdown.markdown", "import markdown\nresult = markdown.markdown('# Hi *there*')"
    ),
    "pygments": Probe(
        "pygments.highlight",
        "import pygments, pygments.formatters, pygments.lexers\n"
        "result = pygments.highlight('x = 1', pygments.lexers.PythonLexer(),\n"
        "                            pygments.formatters.HtmlFormatter())",
    ),
    "cryptography": Probe(
        "hashes.Hash(SHA256)",
        "from cryptography.hazmat.primitives import hashes\n"
        "h = hashes.Hash(hashes.SHA256())\nh.update(b'x')\n"
        "result = h.finalize().hex()",
    ),
    "requests": Probe(
        "requests.Request(...).prepare(), no network",
        "import requests\nresult = requests.Request(\n"
        "    'GET', 'https://example.org/', params={'q': 1}).prepare().url",
    ),
    "httpx": Probe(
        "httpx.Request(...), no network",
        "import httpx\nresult = str(httpx.Request(\n"
        "    'GET', 'https://example.org/', params={'q': 1}).url)",
    ),
    "urllib3": Probe(
        "urllib3.util.parse_url",
        "import urllib3\nresult = urllib3.util.parse_url('https://example.org/x').host",
    ),
    "charset_normalizer": Probe(
        "charset_normalizer.from_bytes",
        "import charset_normalizer\n"
        "result = charset_normalizer.from_bytes(\n"
        "    'h\\u00e9llo w\\u00f6rld'.encode('utf-8')).best().encoding",
    ),
    "idna": Probe("idna.encode", "import idna\nresult = idna.encode('b\\u00fccher.de')"),
    "click": Probe("click.style", "import click\nresult = click.style('hi', fg='red')"),
    "rich": Probe(
        "rich.text.Text.from_markup",
        "import rich.text\nresult = rich.text.Text.from_markup('[b]hi[/b]').plain",
    ),
    "tqdm": Probe(
        "tqdm over a range", "import tqdm\nresult = sum(tqdm.tqdm(range(4), disable=True))"
    ),
    "psutil": Probe("psutil.cpu_count", "import psutil\nresult = psutil.cpu_count()"),
}

# Seconds a child may take for one module: importing pandas or sympy in a
# fresh interpreter on a busy machine takes several.
DEFAULT_TIMEOUT = 60.0

_MARK = "aiosubinterp-check:"
_REFUSER = re.compile(r"extension module '([^']+)'")


# fallback="copy": the stress run of a refused module, in private copies.
COPY_WORKERS = 2
COPY_CALLS = 20


def _child(name: str, code: str, fallback: str = "") -> None:
    """Runs in the child process: probe ``name`` in a worker, print one marked JSON line.

    With fallback "copy", a refused module is tried again in private copies:
    COPY_WORKERS interpreters make COPY_CALLS probe calls at once, and every
    answer must be the same.
    """
    import asyncio

    import aiosubinterp as asi
    from aiosubinterp.demo.work import probe_module

    async def in_copies() -> dict[str, str]:
        async with asi.InterpreterPool(COPY_WORKERS, fallback="copy") as pool:
            try:
                outcomes = await asyncio.gather(
                    *[pool.run(probe_module, name, code) for _ in range(COPY_CALLS)]
                )
            except asi.ModuleRefusedError as exc:
                found = _REFUSER.search(str(exc))
                reason = str(exc).partition("cannot isolate it: ")[2].partition(". Run")[0]
                return {
                    "status": "refused",
                    "refuser": found.group(1) if found else name,
                    "copy": reason or _first_line(exc),
                }
            stats = pool.statistics()
        results = {o.get("result", o.get("error", "")) for o in outcomes}
        first = outcomes[0]
        if first["status"] != "works" or len(results) != 1:
            return {
                "status": "failed",
                "step": first.get("step", "call"),
                "error": first.get("error")
                or f"the {COPY_CALLS} calls in private copies disagreed: {sorted(results)[:3]}",
            }
        per = int(stats["copies_bytes"]) / COPY_WORKERS / 2**20
        return {
            **first,
            "status": "copy",
            "mib": f"{per:.1f}",
            "files": str(int(stats["copies"]) // COPY_WORKERS),
        }

    async def probe() -> dict[str, str]:
        async with asi.InterpreterPool(1) as pool:
            try:
                outcome: dict[str, str] = await pool.run(probe_module, name, code)
                return outcome
            except asi.ModuleRefusedError as exc:
                found = _REFUSER.search(str(exc))
                refused = {"status": "refused", "refuser": found.group(1) if found else name}
            except ModuleNotFoundError as exc:
                if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                    return {"status": "not installed"}
                return {"status": "failed", "error": _first_line(exc)}
            except Exception as exc:  # noqa: BLE001 - any other failure is the answer
                return {"status": "failed", "error": _first_line(exc)}
        if fallback != "copy":
            return refused
        return await in_copies()

    outcome = asyncio.run(probe())
    # After the pool is closed, and in main only: reading the metadata does
    # not import the module.
    if outcome["status"] != "not installed":
        outcome["version"] = _version(name) or outcome.get("version", "")
    print(_MARK, json.dumps(outcome), flush=True)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _version(name: str) -> str:
    """The installed distribution's version of module ``name``; "stdlib"; or "" if unknown."""
    import importlib.metadata

    top = name.partition(".")[0]
    if top in sys.stdlib_module_names:
        return "stdlib"
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _tail(stderr: str, lines: int = 3) -> str:
    kept = [line.strip()[:200] for line in stderr.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def check_module(
    name: str, timeout: float = DEFAULT_TIMEOUT, fallback: str = ""
) -> dict[str, object]:
    """Probe ``name`` in a worker of a fresh child process; the outcome as a JSON-ready dict.

    Keys: ``module``, ``status`` (works, copy, refused, crashed, not installed,
    failed, timeout), ``version``, ``detail`` (one line for people), and
    where they apply ``call``, ``result``, ``returncode``, ``signal``,
    ``stderr``, ``mib_per_interpreter``. ``copy`` (only with fallback="copy")
    means refused, but it works in a private copy per interpreter.
    """
    probe = PROBES.get(name, Probe("import only", "result = None"))
    argv = [
        sys.executable,
        "-c",
        "import sys; from aiosubinterp.demo.check import _child; _child(*sys.argv[1:])",
        name,
        probe.code,
        fallback,
    ]
    report: dict[str, object] = {
        "module": name,
        "status": "",
        "version": "",
        "detail": "",
        "call": probe.what,
    }
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:  # run() killed the child
        stdout, stderr = _text(exc.stdout), _text(exc.stderr)
        code = None
    outcome: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            outcome = json.loads(line[len(_MARK) :])
    report["version"] = outcome.get("version", "")
    if code is None:
        report["status"] = "timeout"
        report["detail"] = (
            f"no answer within {timeout:g} s, child killed"
            if not outcome
            else f"the probe answered {outcome['status']!r}, then the child hung "
            f"at exit; killed after {timeout:g} s"
        )
        report["stderr"] = _tail(stderr)
        return report
    if code != 0:
        report.update(status="crashed", returncode=code, stderr=_tail(stderr, 5))
        if code < 0:
            report["signal"] = _signal_name(-code)
        ended = f"killed by {report['signal']}" if code < 0 else f"exit code {code}"
        when = "" if not outcome else f" after the probe answered {outcome['status']!r} (at exit)"
        report["detail"] = f"the child process died{when}: {ended}"
        if stderr.strip():
            report["detail"] = f"{report['detail']}; stderr: {_tail(stderr)}"
        return report
    if not outcome:  # exit code 0 and no answer: something in the child ate it
        report.update(
            status="failed", detail="the child exited without an answer", stderr=_tail(stderr)
        )
        return report
    status = outcome["status"]
    report["status"] = status
    if status == "works":
        report["result"] = outcome.get("result", "")
        report["detail"] = (
            "imported" if name not in PROBES else f"{probe.what} -> {outcome.get('result', '')}"
        )
    elif status == "copy":
        plural = "" if outcome["files"] == "1" else "s"
        report["result"] = outcome.get("result", "")
        report["mib_per_interpreter"] = float(outcome["mib"])
        report["detail"] = (
            f"refused, works in a private copy per interpreter "
            f'(InterpreterPool(fallback="copy")): {outcome["mib"]} MiB, '
            f"{outcome['files']} file{plural} each; {COPY_CALLS} calls in "
            f"{COPY_WORKERS} interpreters at once agree"
        )
    elif status == "refused" and "copy" in outcome:
        report["detail"] = (
            f"{outcome['refuser']} refuses own-GIL interpreters and a private "
            f"copy cannot isolate it ({outcome['copy']}); ProcessPool or "
            'InterpreterPool(fallback=("copy", "process")) runs it'
        )
    elif status == "refused":
        report["detail"] = (
            f"{outcome['refuser']} refuses own-GIL interpreters; "
            'InterpreterPool(fallback="copy") may load a private copy '
            '(check --fallback copy), fallback="process" or ProcessPool '
            "runs it"
        )
    elif status == "not installed":
        report["detail"] = f"no module named {name!r} for {sys.executable}"
    else:
        where = {"import": "at import", "call": f"in {probe.what}"}.get(outcome.get("step", ""))
        report["detail"] = f"{where}: {outcome['error']}" if where else outcome["error"]
    return report


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def run_check(
    modules: list[str], as_json: bool, timeout: float, jobs: int, fallback: str = ""
) -> int:
    """The ``check`` command: one line per module (or JSON); 0 if all work, else 1.

    With fallback "copy", a module that works in private copies counts as working.
    """
    import platform
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(jobs, len(modules)))) as ex:
        reports = list(ex.map(lambda m: check_module(m, timeout, fallback), modules))
    ok = all(r["status"] in ("works", "copy") for r in reports)
    if as_json:
        print(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "executable": sys.executable,
                    "all_work": ok,
                    "modules": reports,
                },
                indent=2,
            )
        )
        return 0 if ok else 1
    width = max(len(m) for m in modules)
    for r in reports:
        version = str(r["version"] or "-")
        print(f"{r['module']:<{width}}  {r['status']:<13}  {version:<10}  {r['detail']}")
    works = sum(r["status"] == "works" for r in reports)
    copies = sum(r["status"] == "copy" for r in reports)
    more = f", {copies} more in private copies" if fallback == "copy" else ""
    print(
        f"\n{works} of {len(reports)} work in a worker interpreter{more} "
        f"(CPython {platform.python_version()}, {os.path.basename(sys.executable)})."
    )
    return 0 if ok else 1
