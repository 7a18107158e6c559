"""What the suite tests is what ships; the version is written once.

The suite runs against the project installed as `make test` installs it
(INSTALL=wheel, the default: a wheel built from the unpacked sdist,
installed where no C compiler can be found; scripts/install-wheel.sh) or,
for development, an editable install (INSTALL=editable): the first test
checks the package imported is the one the Makefile says it installed.

The version (src/aiosubinterp/_version.py): `aiosubinterp.__version__`,
`python -m aiosubinterp --version`, the installed distribution's metadata
and pyproject.toml (which reads it from _version.py) agree, and asking for
it stays cheap (no importlib.metadata). Also run by scripts/check-dist.sh
against a wheel with only tests/ beside it: the pyproject check then skips.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

import aiosubinterp as asi
import aiosubinterp._core

PYPROJECT = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
VERSION_PY = PYPROJECT.parent / "src" / "aiosubinterp" / "_version.py"
# PEP 440's public version scheme, without epochs or local parts.
PEP440 = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")


def _under(path: str, folder: pathlib.Path) -> bool:
    return pathlib.Path(path).resolve().is_relative_to(folder.resolve())


def test_the_suite_tests_the_package_the_makefile_installed():
    # AIOSUBINTERP_TEST_INSTALL is set by `make test-here`; run by hand, the
    # install is recognised from its metadata (PEP 610's direct_url.json).
    site = pathlib.Path(sys.prefix)
    direct = importlib.metadata.distribution("aiosubinterp").read_text("direct_url.json")
    editable = bool(direct and json.loads(direct).get("dir_info", {}).get("editable"))
    mode = os.environ.get("AIOSUBINTERP_TEST_INSTALL") or ("editable" if editable else "wheel")
    files = (asi.__file__, aiosubinterp._core.__file__)
    if mode == "editable":
        assert editable, "the Makefile says editable, but aiosubinterp is not an editable install"
        assert all(_under(f, PYPROJECT.parent / "src") for f in files), files
        return
    assert mode == "wheel", mode
    assert not editable, "an editable install where the Makefile installs a wheel"
    assert all(_under(f, site) for f in files), f"not imported from {site}: {files}"
    assert not any(_under(f, PYPROJECT.parent / "src") for f in files), files
    provenance = site / "ship" / "provenance.txt"
    if not provenance.exists():
        # A venv of scripts/check-dist.sh: the wheel of dist/, no record.
        assert not (PYPROJECT.parent / "src").exists(), f"{provenance} is missing"
        return
    record = dict(line.split(" ", 1) for line in provenance.read_text().splitlines())
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert record["sdist"] == f"aiosubinterp-{asi.__version__}.tar.gz", record
    assert record["wheel"].startswith(f"aiosubinterp-{asi.__version__}-{tag}-{tag}"), record
    assert record["installed-without-compiler"] == "yes", record
    assert record["compiled"] == aiosubinterp._core.__file__, record
    # A child process started the way the tests start them (the checkout's
    # root and tests/ on PYTHONPATH, its working folder the root) imports
    # the installed package too: the root holds no importable package.
    root = PYPROJECT.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "tests")]))
    code = "import aiosubinterp._core as c; print(c.__file__)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=root
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == aiosubinterp._core.__file__


def test_version_is_the_metadata_version():
    assert PEP440.fullmatch(asi.__version__), asi.__version__
    assert importlib.metadata.version("aiosubinterp") == asi.__version__
    assert "__version__" in dir(asi)


def test_cli_version():
    proc = subprocess.run(
        [sys.executable, "-m", "aiosubinterp", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"aiosubinterp {asi.__version__}\n"


def test_version_is_cheap():
    # In a fresh process: importing the package and reading the version load
    # neither importlib.metadata (~40 ms on 3.13) nor the compiled module.
    code = (
        "import sys, aiosubinterp; v = aiosubinterp.__version__; "
        "print(v, 'importlib.metadata' in sys.modules, 'aiosubinterp._core' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.split() == [asi.__version__, "False", "False"]


@pytest.mark.skipif(not VERSION_PY.exists(), reason="not a checkout (an installed package)")
def test_pyproject_reads_the_one_version():
    project = tomllib.loads(PYPROJECT.read_text())
    assert "version" not in project["project"], "the version lives in aiosubinterp/_version.py"
    assert "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "aiosubinterp._version.__version__"
    source = VERSION_PY.read_text()
    assert re.findall(r'^__version__ = "(.*)"$', source, re.M) == [asi.__version__]
