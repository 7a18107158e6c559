"""The version number: written once (aiosubinterp/_version.py), the same everywhere.

`aiosubinterp.__version__`, `python -m aiosubinterp --version`, the installed
distribution's metadata and pyproject.toml (which reads it from _version.py)
agree, and asking for it stays cheap (no importlib.metadata). Runs against
the checkout (editable install) and against an installed wheel
(scripts/check-dist.sh), where the package's sources are not beside the
tests: the pyproject check then skips.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

import aiosubinterp as asi

PYPROJECT = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
VERSION_PY = PYPROJECT.parent / "aiosubinterp" / "_version.py"
# PEP 440's public version scheme, without epochs or local parts.
PEP440 = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")


def test_version_is_the_metadata_version():
    assert PEP440.fullmatch(asi.__version__), asi.__version__
    assert importlib.metadata.version("aiosubinterp") == asi.__version__
    assert "__version__" in dir(asi)


def test_cli_version():
    proc = subprocess.run([sys.executable, "-m", "aiosubinterp", "--version"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"aiosubinterp {asi.__version__}\n"


def test_version_is_cheap():
    # In a fresh process: importing the package and reading the version load
    # neither importlib.metadata (~40 ms on 3.13) nor the compiled module.
    code = ("import sys, aiosubinterp; v = aiosubinterp.__version__; "
            "print(v, 'importlib.metadata' in sys.modules, 'aiosubinterp._core' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
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
