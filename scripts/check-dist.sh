#!/usr/bin/env bash
# `make check-dist`: what `make dist` put in ./dist/ works where it is installed.
#
#   1. No compiler: for each Python of CHECK_DIST_VERSIONS (default "3.13",
#      found here), a fresh venv gets the wheel of dist/ for that Python and
#      the test runner's packages, as binary wheels only (--only-binary
#      :all:; on a free-threaded Python without uvloop, which has no cp313t
#      wheel), with no C compiler to be found: PATH is a folder of links to
#      every program of the usual PATH except the C/C++ compilers (cc, gcc,
#      c++, g++, clang, ... and their triplet-named variants), and CC=false,
#      CXX=false. Shown, not assumed: `command -v cc gcc` fails there. Then a
#      smoke set of the suite (CHECK_DIST_TESTS, default the pool, channel,
#      cancellation, shared buffer, executor and dist tests: the engine, in
#      about 30 s; not the whole suite, ~45 minutes on 2 cores) runs against
#      the installed package: tests/ and examples/ (which tests run) are
#      copied into an empty folder beside pyproject.toml (for pytest's
#      settings) and nothing else, pytest runs there from its console script
#      (which, unlike `python -m`, does not put the current folder on
#      sys.path), and where `aiosubinterp` and its compiled module come from
#      is printed and must be the venv's site-packages.
#      CHECK_DIST_SID_VERSIONS (default none; "3.14 3.15" for those) runs
#      the same inside the Debian root (scripts/pythons.sh run), ~25 s each.
#   2. The sdist: unpacked into an empty folder, a wheel built from it (with
#      the compiler, by `python -m build --wheel` on DIST_TOOLS_PYTHON),
#      installed into a fresh venv, imported, and one task run in a pool.
#
# Needs `make dist` first. Leaves nothing behind (temporary folders).
set -euo pipefail
cd "$(dirname "$0")/.."
PROJECT="$PWD"
SELF="$PROJECT/scripts/check-dist.sh"

MAKE="${MAKE:-make}"
TOOLS="${DIST_TOOLS_PYTHON:-3.13}"
read -r -a VERSIONS <<<"${CHECK_DIST_VERSIONS:-3.13}"
read -r -a SID <<<"${CHECK_DIST_SID_VERSIONS:-}"
TESTS="${CHECK_DIST_TESTS:-tests/test_pool.py tests/test_channel.py tests/test_cancel.py tests/test_buffer.py tests/test_executor.py tests/test_dist.py}"
# The packages the smoke set needs, with pyproject.toml's test extra's bounds.
RUNNER_PACKAGES=(pytest pytest-asyncio pytest-timeout uvloop)

die() {
    echo "check-dist.sh: $*" >&2
    exit 1
}

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

shopt -s nullglob
sdists=(dist/aiosubinterp-*.tar.gz)
[[ ${#sdists[@]} == 1 ]] || die "expected one sdist in dist/ (run make dist first)"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/aiosubinterp/_version.py)"

# pyproject.toml's requirement for each of RUNNER_PACKAGES (its test extra).
runner_requirements() {
    "$1" - "${RUNNER_PACKAGES[@]}" <<'PY'
import re, sys, tomllib
test = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower(): r for r in test}
for name in sys.argv[1:]:
    print(names.get(name, name))
PY
}

# 1. One Python's wheel, installed where no compiler can be found (a process
#    of its own: `set -e` holds there).
wheel_check() {
    local v="$1" py cp abi venv tests no_cc
    local -a wheels reqs
    py="$(bash scripts/find-python.sh "$v")"
    cp="cp${v//./}"
    cp="${cp%t}"
    abi="cp${v//./}"
    wheels=(dist/aiosubinterp-"$version"-"$cp"-"$abi"-*.whl)
    [[ ${#wheels[@]} == 1 ]] || die "no wheel for Python $v in dist/ (run make dist first)"
    echo "=== Python $v: $(basename "${wheels[0]}") installed where no C compiler can be found ==="
    venv="$WORK/venv"
    "$py" -m venv "$venv"
    mapfile -t reqs < <(runner_requirements "$py")
    if [[ "$v" == *t ]]; then
        # No free-threaded (cp313t) uvloop wheel: the tests run on asyncio only.
        mapfile -t reqs < <(printf '%s\n' "${reqs[@]}" | grep -v '^uvloop')
    fi
    no_cc="$WORK/no-cc-bin"
    bash "$PROJECT/scripts/no-compiler.sh" "$no_cc"
    export PATH="$venv/bin:$no_cc" CC=false CXX=false
    unset PYTHONPATH
    if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; then
        die "a C compiler is still on PATH: $(command -v cc gcc | tr '\n' ' ')"
    fi
    echo "no compiler: cc and gcc not on PATH, CC=$CC"
    "$venv/bin/python" -m pip install -q --only-binary :all: "$PROJECT/${wheels[0]}" "${reqs[@]}"
    tests="$WORK/tests"
    mkdir -p "$tests"
    cp -r "$PROJECT/tests" "$PROJECT/examples" "$tests/"
    cp "$PROJECT/pyproject.toml" "$tests/"
    cd "$tests"
    "$venv/bin/python" - <<'PY'
import sysconfig
import aiosubinterp, aiosubinterp._core as core
site = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
print(f"aiosubinterp {aiosubinterp.__version__} from {aiosubinterp.__file__}")
print(f"compiled module from {core.__file__}")
assert all(any(f.startswith(s) for s in site) for f in (aiosubinterp.__file__, core.__file__)), \
    "aiosubinterp did not come from the venv's site-packages"
PY
    # shellcheck disable=SC2086  # TESTS is a list of paths
    timeout --foreground -k 30 900 "$venv/bin/pytest" -p no:cacheprovider $TESTS
}

# 2. The sdist, unpacked into an empty folder, builds a wheel that imports.
sdist_check() {
    local src whl py t0
    echo "=== $(basename "${sdists[0]}"): unpacked into an empty folder, built, installed, imported ==="
    "$MAKE" --no-print-directory ".venv-dist-$TOOLS/.tools.stamp"
    mkdir "$WORK/sdist"
    tar -xzf "${sdists[0]}" -C "$WORK/sdist"
    src=("$WORK"/sdist/aiosubinterp-*/)
    echo "unpacked: $(find "${src[0]}" -type f | wc -l) files"
    t0=$SECONDS
    ".venv-dist-$TOOLS/bin/python" -m build --wheel --outdir "$WORK/sdist-wheel" "${src[0]}" \
        >"$WORK/sdist-build.log" 2>&1 || { tail -30 "$WORK/sdist-build.log"; exit 1; }
    whl=("$WORK"/sdist-wheel/*.whl)
    echo "built $(basename "${whl[0]}") in $((SECONDS - t0)) s"
    py="$(bash scripts/find-python.sh "$TOOLS")"
    "$py" -m venv "$WORK/venv-sdist"
    "$WORK/venv-sdist/bin/python" -m pip install -q --no-deps --no-index "${whl[0]}"
    cd "$WORK"
    "$WORK/venv-sdist/bin/python" - <<'PY'
import asyncio, math
import aiosubinterp, aiosubinterp._core

async def main():
    async with aiosubinterp.InterpreterPool(2) as pool:
        return await pool.run(math.factorial, 20)

assert asyncio.run(main()) == math.factorial(20)
print(f"aiosubinterp {aiosubinterp.__version__} from {aiosubinterp.__file__}: "
      "imported, one task run in a pool of 2")
PY
}

case "${1:-}" in
    wheel) wheel_check "$2"; exit ;;
    sdist) sdist_check; exit ;;
    "") ;;
    *) echo "usage: $0   (or, one step: $0 wheel X | sdist)" >&2; exit 2 ;;
esac

failed=()
for v in "${VERSIONS[@]}"; do
    bash "$SELF" wheel "$v" || failed+=("wheel on $v")
done
for v in "${SID[@]}"; do  # the root's copy of this tree has dist/ too
    bash scripts/pythons.sh run bash scripts/check-dist.sh wheel "$v" || failed+=("wheel on $v (Debian root)")
done
bash "$SELF" sdist || failed+=("wheel from the sdist")

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "check-dist: FAILED: ${failed[*]}"
    exit 1
fi
echo "check-dist: passed (the wheel without a compiler on ${VERSIONS[*]}${SID[*]:+, and in the Debian root on ${SID[*]}}; a wheel from the sdist on $TOOLS)"
