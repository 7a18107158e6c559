"""What make dist must have produced: check the files in a dist/ folder.

    python scripts/check_dist_contents.py DIST VERSION...

VERSIONs are the Pythons a wheel was built for (3.12, 3.13t, ...): exactly
one wheel each, and nothing else but one sdist. Checked:

- every wheel: a manylinux tag for x86_64 and the right cpXY-cpXY[t] tags;
  the compiled module, ``py.typed``, ``_core.pyi``, the demo's ``live.html``
  and the license inside; no library grafted by auditwheel (``*.libs/``: the
  extension needs none but libc); the metadata (below);
- the sdist: the ext/ sources and headers, setup.py, pyproject.toml, the
  tests and what they read, the license and README; not the generated
  ext/_core.c, nor any compiled file; the metadata;
- the metadata of both: the version of aiosubinterp/_version.py, the README
  as a Markdown long description, the SPDX license and its file, every
  classifier known to trove-classifiers (PyPI refuses unknown ones), and
  classifiers for each supported minor version and free threading.

Prints one line per file; exits 1 with the list of problems.
"""

from __future__ import annotations

import email.parser
import pathlib
import re
import sys
import tarfile
import zipfile

from trove_classifiers import classifiers as KNOWN_CLASSIFIERS

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERSION = re.search(
    r'^__version__ = "(.*)"$', (ROOT / "src" / "aiosubinterp" / "_version.py").read_text(), re.M
)
SUPPORTED = ("3.12", "3.13", "3.14", "3.15")


def metadata_problems(name: str, text: str) -> list[str]:
    meta = email.parser.Parser().parsestr(text)
    problems = []

    def want(field: str, value: str) -> None:
        if meta.get(field) != value:
            problems.append(f"{name}: {field} is {meta.get(field)!r}, expected {value!r}")

    assert VERSION is not None
    want("Name", "aiosubinterp")
    want("Version", VERSION.group(1))
    want("License-Expression", "MIT")
    want("License-File", "LICENSE")
    want("Requires-Python", ">=3.12")
    want("Description-Content-Type", "text/markdown")
    body = meta.get_payload()
    if not isinstance(body, str) or not body.lstrip().startswith("# aiosubinterp"):
        problems.append(f"{name}: the long description is not the README")
    classifiers = meta.get_all("Classifier") or []
    unknown = [c for c in classifiers if c not in KNOWN_CLASSIFIERS]
    if unknown:
        problems.append(f"{name}: classifiers unknown to trove-classifiers: {unknown}")
    for v in SUPPORTED:
        if f"Programming Language :: Python :: {v}" not in classifiers:
            problems.append(f"{name}: no classifier for Python {v}")
    if not any(
        c.startswith("Programming Language :: Python :: Free Threading ::") for c in classifiers
    ):
        problems.append(f"{name}: no free-threading classifier")
    return problems


def wheel_problems(path: pathlib.Path, version: str) -> list[str]:
    problems = []
    cp = "cp" + version.replace(".", "").removesuffix("t")
    abi = cp + ("t" if version.endswith("t") else "")
    parts = path.name.removesuffix(".whl").split("-")
    if parts[2:4] != [cp, abi]:
        problems.append(f"{path.name}: tags {parts[2:4]}, expected {[cp, abi]}")
    platforms = parts[4].split(".")
    if not all(re.fullmatch(r"manylinux(_2_\d+|2014|2010|1)_x86_64", p) for p in platforms):
        problems.append(f"{path.name}: platform {parts[4]} is not manylinux x86_64 only")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        dist_info = f"aiosubinterp-{parts[1]}.dist-info"
        needed = [
            "aiosubinterp/__init__.py",
            "aiosubinterp/_version.py",
            "aiosubinterp/py.typed",
            "aiosubinterp/_core.pyi",
            "aiosubinterp/demo/live.html",
            f"{dist_info}/licenses/LICENSE",
            f"{dist_info}/METADATA",
        ]
        problems += [f"{path.name}: lacks {n}" for n in needed if n not in names]
        so = f"aiosubinterp/_core.cpython-{abi.removeprefix('cp')}-x86_64-linux-gnu.so"
        if so not in names:
            problems.append(f"{path.name}: lacks {so}")
        grafted = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".libs")})
        if grafted:
            problems.append(f"{path.name}: auditwheel grafted libraries: {grafted}")
        if f"{dist_info}/METADATA" in names:
            problems += metadata_problems(path.name, zf.read(f"{dist_info}/METADATA").decode())
    print(f"{path.name}: {len(names)} files, {platforms[0]}")
    return problems


def sdist_problems(path: pathlib.Path) -> list[str]:
    problems = []
    with tarfile.open(path) as tf:
        top = path.name.removesuffix(".tar.gz")
        names = {m.name.removeprefix(top + "/") for m in tf.getmembers()}
        needed = [
            "PKG-INFO",
            "pyproject.toml",
            "setup.py",
            "MANIFEST.in",
            "README.md",
            "LICENSE",
            "CHANGELOG.md",
            "ext/_core.pyx",
            "ext/worker.pxi",
            "ext/includes/capi.pxd",
            "ext/includes/compat.h",
            "ext/includes/lockorder.h",
            "aiosubinterp/_version.py",
            "aiosubinterp/py.typed",
            "aiosubinterp/_core.pyi",
            "tests/conftest.py",
            "tests/test_pool.py",
            "tests/test_dist.py",
            "examples/aiohttp_app.py",
            "benchmarks/_harness.py",
            "mkdocs.yml",
            "docs/index.md",
            "docs/reference/pools.md",
        ]
        problems += [f"{path.name}: lacks {n}" for n in needed if n not in names]
        unwanted = sorted(
            n
            for n in names
            if n in ("ext/_core.c", "ext/_core.html")
            or n.endswith((".so", ".pyc"))
            or "__pycache__" in n
        )
        if unwanted:
            problems.append(f"{path.name}: holds build products: {unwanted[:5]}")
        pkg_info = tf.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        problems += metadata_problems(path.name, pkg_info.read().decode())
    print(f"{path.name}: {len(names)} entries")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dist = pathlib.Path(argv[0])
    versions = argv[1:]
    files = sorted(p for p in dist.iterdir())
    problems = []
    sdists = [p for p in files if p.name.endswith(".tar.gz")]
    wheels = [p for p in files if p.suffix == ".whl"]
    others = [p.name for p in files if p not in sdists and p not in wheels]
    if others:
        problems.append(f"{dist}: unexpected files {others}")
    if len(sdists) != 1:
        problems.append(f"{dist}: {len(sdists)} sdists, expected 1")
    for s in sdists:
        problems += sdist_problems(s)
    for v in versions:
        cp = "cp" + v.replace(".", "").removesuffix("t")
        abi = cp + ("t" if v.endswith("t") else "")
        mine = [w for w in wheels if f"-{cp}-{abi}-" in w.name]
        if len(mine) != 1:
            problems.append(f"{dist}: {len(mine)} wheels for Python {v}, expected 1")
        for w in mine:
            problems += wheel_problems(w, v)
            wheels.remove(w)
    if wheels:
        problems.append(f"{dist}: wheels for no requested Python: {[w.name for w in wheels]}")
    for p in problems:
        print(f"PROBLEM: {p}", file=sys.stderr)
    if not problems:
        print(f"{dist}: the sdist and {len(versions)} wheels are complete")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
