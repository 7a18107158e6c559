"""The documentation site (docs/, mkdocs.yml): examples run, the reference is complete, it builds.

- Every ```python block of docs/**/*.md is a complete script, run in a child
  process (childproc.run_child) that must exit with 0; on every Python.
  A block's first lines may carry markers:
    ``# not run: <reason>``      a fragment, or code that needs a server or
                                 a cluster: kept few (MAX_NOT_RUN);
    ``# requires: a, b``         skipped, saying so, when a module is not
                                 installed (``numpy``), the Python is older
                                 (``python>=3.13``) or free-threaded (``gil``).
- The API reference (docs/reference/*.md) documents every name of
  ``aiosubinterp.__all__`` once, and nothing private.
- The stub's docstrings of the compiled module's public names (the reference
  reads them: griffe does not import the extension) are the module's own.
- The site does not show the markers (docs/hooks/markers.py removes exactly
  the lines read here).
- ``make docs`` (``mkdocs build --strict``, its own venv .venv-docs) builds the
  site, and headless Chromium renders its home page, an API page and a
  tutorial with marked examples: the
  screenshots are checked for size and content, the DOM for the API names.
  On one Python only (3.13, GIL build): the site does not depend on the
  Python the suite runs on. Set AIOSUBINTERP_DOCS_SCREENSHOTS=folder to keep
  the screenshots.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from browser import chromium, headless
from childproc import run_child

import aiosubinterp

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
# Fragments and code that needs a server or a cluster: a few, each saying why.
MAX_NOT_RUN = 5
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"^# (not run|requires): *(.*)$")


def _page_blocks(text: str) -> list[tuple[int, str, dict[str, str]]]:
    """(line, source, markers) of every ```python block of one page's markdown."""
    found = []
    for match in FENCE.finditer(text):
        source = match.group(1)
        markers = {}
        for line in source.splitlines():
            m = MARKER.match(line)
            if not m:
                break
            markers[m.group(1)] = m.group(2).strip()
        found.append((text.count("\n", 0, match.start()) + 2, source, markers))
    return found


def _blocks() -> list[tuple[str, int, str, dict[str, str]]]:
    """(page, line, source, markers) of every ```python block under docs/."""
    return [
        (str(page.relative_to(DOCS)), line, source, markers)
        for page in sorted(DOCS.rglob("*.md"))
        for line, source, markers in _page_blocks(page.read_text())
    ]


BLOCKS = _blocks()
RUN = [b for b in BLOCKS if "not run" not in b[3]]


def _missing(requires: str) -> str | None:
    """Why this Python cannot run a block marked ``# requires: ...`` (None: it can)."""
    for item in filter(None, (r.strip() for r in requires.split(","))):
        if item == "gil":
            if FREE_THREADED:
                return "needs a GIL-enabled build (this one is free-threaded)"
        elif item.startswith("python>="):
            wanted = tuple(int(p) for p in item.removeprefix("python>=").split("."))
            if sys.version_info[: len(wanted)] < wanted:
                return f"needs Python {item.removeprefix('python>=')} or newer"
        elif importlib.util.find_spec(item) is None:
            return f"needs {item}, not installed here"
    return None


def test_the_docs_have_examples_and_few_are_not_run():
    assert len(RUN) >= 15, [b[:2] for b in RUN]
    not_run = [(page, line, m["not run"]) for page, line, _, m in BLOCKS if "not run" in m]
    assert all(reason for *_, reason in not_run), f"a `# not run:` without a reason: {not_run}"
    assert len(not_run) <= MAX_NOT_RUN, not_run
    for page, line, _, markers in BLOCKS:
        assert set(markers) <= {"not run", "requires"}, (page, line, markers)


def test_every_run_block_parses():
    for page, line, source, _ in RUN:
        ast.parse(source, f"{page}:{line}")


@pytest.mark.parametrize(
    ("page", "line", "source", "markers"), RUN, ids=[f"{p}:{n}" for p, n, *_ in RUN]
)
def test_example_runs(tmp_path, page, line, source, markers):
    why = _missing(markers.get("requires", ""))
    if why:
        pytest.skip(f"{page}:{line} {why}")
    # A warning is the example's own business here, not an error (the suite's
    # -W error does not reach the child anyway); its exit code is the check.
    proc = run_child(tmp_path, source, timeout=90)
    assert proc.returncode == 0, (
        f"{page}:{line} exited with {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
        f"stderr:\n{proc.stderr[-3000:]}"
    )


def _markers_hook():
    spec = importlib.util.spec_from_file_location("markers_hook", DOCS / "hooks" / "markers.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_hides_exactly_the_markers_this_test_reads():
    """docs/hooks/markers.py (mkdocs.yml's hook) drops the marker lines from the
    rendered pages: every block loses its markers and nothing else."""
    hook = _markers_hook()
    marked = 0
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        shown = hook.on_page_markdown(text, page=None, config=None, files=None)
        before, after = _page_blocks(text), _page_blocks(shown)
        assert len(after) == len(before), page
        for (line, source, markers), (_, rendered, left) in zip(before, after, strict=True):
            assert not left, f"{page}:{line} still shows {left}"
            kept = source.splitlines(keepends=True)[len(markers) :]
            assert rendered == "".join(kept), f"{page}:{line}"
            marked += bool(markers)
        # Outside python blocks the page is unchanged.
        assert FENCE.sub("", shown) == FENCE.sub("", text), page
    assert marked >= 5  # the pages have marked blocks for the hook to act on
    # A marker-like line that is not at the top of a block stays (the tests do not read it).
    inner = "```python\nimport sys\n# requires: numpy\n```\n"
    assert hook.strip_markers(inner) == inner
    assert (
        hook.strip_markers("```python\n# requires: numpy\n# not run: x\nimport sys\n```\n")
        == "```python\nimport sys\n```\n"
    )


def _documented() -> list[str]:
    names = []
    for page in sorted(REFERENCE.glob("*.md")):
        names += re.findall(r"^::: *(\S+)", page.read_text(), re.M)
    return names


def test_the_reference_documents_every_public_name_once_and_nothing_private():
    documented = _documented()
    assert all(n.startswith("aiosubinterp.") for n in documented), documented
    short = [n.removeprefix("aiosubinterp.") for n in documented]
    private = [n for n in short if any(part.startswith("_") for part in n.split("."))]
    assert not private, f"private names in the reference: {private}"
    assert sorted(short) == sorted(set(short)), "a name is documented twice"
    assert set(short) == set(aiosubinterp.__all__), (
        f"missing: {sorted(set(aiosubinterp.__all__) - set(short))}; "
        f"not public: {sorted(set(short) - set(aiosubinterp.__all__))}"
    )


def _stub_docstrings() -> dict[str, str]:
    """Docstrings of _core.pyi's functions, classes and their members, by dotted name."""
    tree = ast.parse((ROOT / "src" / "aiosubinterp" / "_core.pyi").read_text())
    docs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node):
            docs[node.name] = ast.get_docstring(node)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and ast.get_docstring(member):
                    docs[f"{node.name}.{member.name}"] = ast.get_docstring(member)
    return docs


def _runtime_doc(obj: object) -> str:
    doc = obj.__doc__ or ""
    name = getattr(obj, "__name__", "")
    if doc.startswith(f"{name}("):  # Cython's embedded signature line
        doc = doc.split("\n", 1)[1] if "\n" in doc else ""
    return inspect.cleandoc(doc)


def test_the_stub_docstrings_of_the_compiled_public_names_are_the_modules_own():
    from aiosubinterp import _core

    stub = _stub_docstrings()
    compiled = [n for n in aiosubinterp.__all__ if hasattr(_core, n)]
    assert sorted(compiled) == ["FileDescriptor", "SharedBuffer", "SharedLock", "share"]
    if not any(_runtime_doc(getattr(_core, n)) for n in compiled):
        # Seen on the free-threaded 3.13t build: every docstring of the module is empty.
        pytest.skip("this build of aiosubinterp._core carries no docstrings to compare with")
    for name in compiled:
        assert stub.get(name) == _runtime_doc(getattr(_core, name)), (
            f"_core.pyi's docstring of {name} differs from ext/'s: copy it over"
        )
    assert stub["SharedBuffer.address"] == _runtime_doc(_core.SharedBuffer.address)


# -- the built site, in headless Chromium -------------------------------------------------

ONE_PYTHON = sys.version_info[:2] == (3, 13) and not FREE_THREADED


def _build_site() -> Path:
    """``make docs``; skips (saying why) only when .venv-docs cannot be made."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    venv = subprocess.run(
        ["make", "--no-print-directory", ".venv-docs/.docs.stamp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
    )
    if venv.returncode != 0:
        pytest.skip(
            "the docs venv (.venv-docs) could not be made (no Python 3.13, or "
            f"no package registry?):\n{(venv.stdout + venv.stderr)[-2000:]}"
        )
    build = subprocess.run(
        ["make", "--no-print-directory", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
    )
    assert build.returncode == 0, f"make docs failed:\n{(build.stdout + build.stderr)[-5000:]}"
    assert (ROOT / "site" / "index.html").is_file()
    return ROOT / "site"


def _render(browser: str, url: str, shot: Path, profile: Path) -> str:
    """Screenshot of url into shot; returns its DOM after scripts ran."""
    flags = [*headless(browser, profile), "--window-size=1280,900", "--virtual-time-budget=3000"]
    for extra in ([f"--screenshot={shot}"], ["--dump-dom"]):
        proc = subprocess.run(
            flags + extra + [url],
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
        )
        assert proc.returncode == 0, f"chromium {extra[0]} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def _check_screenshot(shot: Path) -> None:
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1280, 900), img.size
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
    # A blank or unstyled page has a handful of colours; text, the header and
    # the code blocks anti-aliased give hundreds.
    assert colours is not None and len(colours) > 200, f"{shot.name}: {len(colours or [])} colours"
    # The page is not one colour with specks: the most common one covers less than 95 %.
    assert max(colours)[0] < 0.95 * 1280 * 900, f"{shot.name} is nearly uniform"


@pytest.mark.skipif(
    not ONE_PYTHON,
    reason="the site is built and rendered on one Python only: "
    "3.13, GIL build (it does not depend on the suite's Python)",
)
@pytest.mark.timeout(300)
def test_the_site_builds_and_renders_in_headless_chromium(tmp_path):
    pytest.importorskip("PIL", reason="Pillow (the demo extra) reads the screenshots")
    # Chromium first: where there is none (the Debian root of scripts/pythons.sh,
    # whose 3.13 is not the host's), nothing is built either.
    browser = chromium()
    site = _build_site()
    keep = os.environ.get("AIOSUBINTERP_DOCS_SCREENSHOTS")
    pages = {
        "index": ("Parallel Python on every core", "InterpreterPool"),
        "reference/pools": (
            "aiosubinterp.InterpreterPool",
            "aiosubinterp.InterpreterPool.run",
            "aiosubinterp.ProcessPool",
            "aiosubinterp.Task",
        ),
        "tutorials/refused-modules": ("The refusal", "ModuleRefusedError"),
    }
    for page, wanted in pages.items():
        shot = tmp_path / f"{page.replace('/', '-')}.png"
        dom = _render(browser, (site / f"{page}.html").as_uri(), shot, tmp_path / "profile")
        for text in wanted:
            assert text in dom, f"{page}: {text!r} not in the rendered page"
        # Material's scripts ran: the search box is built by them.
        assert 'data-md-component="search' in dom, f"{page}: Material's page scripts did not run"
        # The tests' markers (`# requires: numpy`) are not shown (docs/hooks/markers.py).
        for marker in ("requires:", "not run:"):
            assert marker not in dom, f"{page}: {marker!r} shown"
        _check_screenshot(shot)
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(keep) / shot.name)
    # Every public name has its anchor on an API page.
    built = "".join(p.read_text() for p in (site / "reference").glob("*.html"))
    for name in aiosubinterp.__all__:
        assert f'id="aiosubinterp.{name}"' in built, name


def test_the_readme_is_a_front_page_whose_links_resolve():
    # At most 12 KB (the documentation holds the rest), and every relative
    # link or picture points at a file of the repository.
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024, len(text.encode())
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert len(local) > 10, local
    missing = [t for t in local if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, missing


def test_the_layout_in_how_it_works_names_every_module():
    # docs/explanation/how-it-works.md draws the package's tree: every module
    # of the package is in it, and everything it names exists.
    text = (ROOT / "docs" / "explanation" / "how-it-works.md").read_text(encoding="utf-8")
    block = text.split("```\naiosubinterp/\n", 1)[1].split("```", 1)[0]
    package = ROOT / "src" / "aiosubinterp"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if path.name == "__init__.py" and rel.parent != Path("."):
            continue  # a subpackage's door: its folder is named
        name = path.stem if rel.parts[0] == "demo" else path.name
        if not re.search(rf"(?<![\w.]){re.escape(name)}\b", block):
            missing.append(str(rel))
    assert not missing, f"how-it-works.md's layout does not name: {missing}"
    for folder in re.findall(r"^  (\w+)/", block, re.M):
        assert (package / folder).is_dir(), folder
