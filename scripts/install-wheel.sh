#!/usr/bin/env bash
# Usage: scripts/install-wheel.sh VENV
#
# Installs the project into VENV the way users get it (the Makefile's
# .ext.stamp rule with INSTALL=wheel, the default; `make test` tests this):
#
#   1. the sdist, made from this checkout by setuptools' PEP 517 hook with
#      VENV's setuptools and Cython (pyproject.toml's build requirements,
#      which VENV has): what MANIFEST.in ships, nothing else;
#   2. unpacked into an empty folder, VENV/ship/src/, and a binary wheel
#      built there (the same hook; the build switches AIOSUBINTERP_DEBUG and
#      AIOSUBINTERP_SANITIZE apply): a file the sdist forgot fails here;
#   3. the wheel installed into VENV where no C compiler can be found (PATH
#      without cc, gcc, clang...: scripts/no-compiler.sh; CC=false), shown,
#      not assumed; pip uninstalls an earlier (editable) install first;
#   4. imported from outside the checkout: aiosubinterp and its compiled
#      module must come from VENV's site-packages.
#
# VENV/ship/provenance.txt records the sdist, the wheel and the compiler
# check; tests/test_dist.py reads it. The checkout's root has no importable
# package (the src/ layout), so the suite, its child processes and their
# interpreters all import this installed copy.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(cd "$1" && pwd)"
py="$venv/bin/python"
ship="$venv/ship"
rm -rf "$ship"
mkdir -p "$ship/sdist" "$ship/src" "$ship/wheel"

hook() {  # hook NAME OUTDIR: setuptools' PEP 517 build_NAME into OUTDIR, prints the file's name
    "$py" -c 'import sys; from setuptools import build_meta as b; print(getattr(b, "build_" + sys.argv[1])(sys.argv[2]))' \
        "$1" "$2" | tail -1
}

sdist="$(hook sdist "$ship/sdist")"
tar -xzf "$ship/sdist/$sdist" -C "$ship/src"
src=("$ship"/src/*/)
echo "sdist $sdist: $(find "${src[0]}" -type f | wc -l) files, unpacked into an empty folder"
wheel="$(cd "${src[0]}" && hook wheel "$ship/wheel" 2>"$ship/wheel-build.log")" \
    || { tail -40 "$ship/wheel-build.log"; echo "install-wheel.sh: the wheel did not build from the sdist" >&2; exit 1; }
echo "wheel $wheel: built from the unpacked sdist"

bash scripts/no-compiler.sh "$ship/no-cc-bin"
(
    export PATH="$ship/no-cc-bin" CC=false CXX=false
    if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; then
        echo "install-wheel.sh: a C compiler is still on PATH" >&2
        exit 1
    fi
    "$py" -m pip install -q --no-deps --no-index --force-reinstall "$ship/wheel/$wheel"
)
echo "installed where no C compiler can be found (cc, gcc not on PATH; CC=false)"

cd "$ship"
"$py" - "$sdist" "$wheel" <<'PY'
import sys, sysconfig
import aiosubinterp, aiosubinterp._core as core
site = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
for f in (aiosubinterp.__file__, core.__file__):
    assert any(f.startswith(s) for s in site), f"{f} is not in the venv's site-packages {site}"
with open("provenance.txt", "w") as out:
    out.write(f"sdist {sys.argv[1]}\nwheel {sys.argv[2]}\ninstalled-without-compiler yes\n"
              f"package {aiosubinterp.__file__}\ncompiled {core.__file__}\n")
print(f"aiosubinterp {aiosubinterp.__version__}: {core.__file__}")
PY
