#!/usr/bin/env bash
# `make test`: the whole suite on every CPython the project supports.
#
#   here:    each of 3.12, 3.13, 3.14, 3.15 that scripts/find-python.sh finds on
#            this machine (on the project's machines: pyenv's 3.12.1 and 3.13.0,
#            the oldest patches supported)
#   chroot:  3.13 (latest patch), 3.14 and 3.15 from Debian unstable, in the
#            root scripts/pythons.sh provisions (needs root and apt/debootstrap)
#   3.13t:   the free-threaded build (PEP 703), here (scripts/find-python.sh
#            3.13t: pyenv, PATH, or the cache of scripts/build-ft.sh,
#            ~/.cache/aiosubinterp/py3.13t). Built first where it is missing
#            and the machine can build it (Debian's source package, nice make
#            -j2: 3.6 min on an idle 2-core machine, its packages ~2.5 min
#            more without a pip cache; then cached). FT_BUILD=0 skips the
#            build; the summary says when the free-threaded run was skipped.
#
# Test sets (tests/conftest.py): the whole suite ("full") on 3.13 here (its
# oldest patch on the project's machines) and 3.14 in the chroot, both event
# loops; "core" on the others: the suite without the files whose subject does
# not change with the Python (docs, benchmarks' tooling, demo, examples, Dask,
# serve), on asyncio only. On a slow 2-core machine the full suite on all six
# runs took over CI's 90 minutes. FULL_RUNS ("where:version" words, default
# "here:3.13 chroot:3.14") names the full runs; FULL_RUNS=all makes all full.
#
# Every run goes on after a failure; the summary lists each Python, where it
# ran, its patch and the verdict. A supported minor version that ran nowhere
# is listed as skipped with how to get it; under CI=true that fails the run,
# and so does a chroot that cannot be provisioned.
#
#   debug:   3.13 here again, built with AIOSUBINTERP_DEBUG=1 (the lock-order
#            check), on the tests in DEBUG_TESTS (empty skips it)
#
# Environment: PYTHON_VERSIONS (default "3.12 3.13 3.14 3.15": the minor
# versions looked for here), SID_VERSIONS (default "3.13 3.14 3.15"; empty
# skips the chroot), FT_VERSIONS (default "3.13t"; empty skips the
# free-threaded build), and the Makefile's PYTEST_ARGS, TEST_WALL_TIMEOUT, ...
set -uo pipefail
cd "$(dirname "$0")/.."

SUPPORTED=(3.12 3.13 3.14 3.15)
read -r -a HERE <<<"${PYTHON_VERSIONS:-${SUPPORTED[*]}}"
read -r -a SID <<<"${SID_VERSIONS-3.13 3.14 3.15}"
read -r -a FT <<<"${FT_VERSIONS-3.13t}"
MAKE="${MAKE:-make}"
FULL_RUNS="${FULL_RUNS-here:3.13 chroot:3.14}"

test_set() {  # where version -> full or core
    if [[ "$FULL_RUNS" == all || " $FULL_RUNS " == *" $1:$2 "* ]]; then echo full; else echo core; fi
}

declare -a rows=()
failed=0
declare -A covered=()
declare -A totals=([passed]=0 [failed]=0 [errors]=0 [skipped]=0)
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

# Adds the counts of pytest's closing line in $LOG to the totals. $1 is the
# run's exit code: a failed run with no failure in that line (killed by the
# timeout before pytest's closing line, no tests collected) counts as one.
count() {
    local rc="$1" line n word bad=0
    line="$(grep -E '[0-9]+ (passed|failed|error)' "$LOG" | grep -E ' in [0-9.]+s' | tail -1)"
    for word in passed failed skipped errors error; do
        n="$(grep -oE "[0-9]+ $word\b" <<<"$line" | head -1 | cut -d' ' -f1)"
        [[ -n "$n" ]] || continue
        [[ "$word" == error ]] && word=errors
        totals[$word]=$((totals[$word] + n))
        [[ "$word" == passed || "$word" == skipped ]] || bad=$((bad + n))
    done
    if [[ "$rc" != 0 && "$bad" == 0 ]]; then
        totals[failed]=$((totals[failed] + 1))
    fi
}

# Runs "$@" with its output to the terminal and to $LOG.
logged() {
    "$@" 2>&1 | tee "$LOG"
    local rc="${PIPESTATUS[0]}"
    count "$rc"
    return "$rc"
}

patch_of() {  # interpreter path -> "3.13.0"
    "$1" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "?"
}

record() {  # version where patch verdict [set]
    rows+=("$(printf '%-10s %-8s %-8s %-5s %s' "$1" "$2" "$3" "${5:-}" "$4")")
    [[ "$4" == passed ]] || failed=1
    covered[$1]=1
}

# 0. Headless Chromium for the live demo's browser test
#    (tests/test_demo_live.py; it skips, saying why, where there is none).
#    Installed on this machine only: the Debian root's runs skip that test.
if ! command -v chromium >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "=== installing Debian's chromium package (the live demo's browser test) ==="
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -q --no-install-recommends chromium >/dev/null; then
            apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null \
                || echo "WARNING: chromium could not be installed: the browser test will skip"
        fi
    else
        echo "WARNING: no chromium and not root with apt-get: the browser test will skip"
    fi
fi

run_here() {  # version interpreter patch: the suite on it, here, recorded
    local set
    set="$(test_set here "$1")"
    echo "=== Python $1 here: $2 ($3), test set $set ==="
    if logged "$MAKE" --no-print-directory test-here PYTHON_VERSIONS="$1" TEST_SET="$set"; then
        record "$1" here "$3" passed "$set"
    else
        record "$1" here "$3" FAILED "$set"
    fi
}

# 1. Pythons on this machine, one make run each.
for v in "${HERE[@]}"; do
    if ! py="$(bash scripts/find-python.sh "$v" 2>/dev/null)"; then
        continue
    fi
    run_here "$v" "$py" "$(patch_of "$py")"
done

# 1b. The free-threaded build, here (built into the cache first if missing).
ft_note=""
for v in "${FT[@]}"; do
    if ! py="$(bash scripts/find-python.sh "$v" 2>/dev/null)"; then
        if [[ "${FT_BUILD:-1}" != 0 && "$v" == 3.13t ]] && bash scripts/build-ft.sh available; then
            echo "=== building the free-threaded $v (scripts/build-ft.sh; once, then cached) ==="
            py="$(bash scripts/build-ft.sh build | tail -1)" || { record "$v" here "(build)" FAILED; continue; }
        elif [[ "${FT_BUILD:-1}" == 0 ]]; then
            ft_note="$v: not found, and FT_BUILD=0 skips its build"
            continue
        else
            ft_note="$v: not found, and this machine cannot build it (needs cc, make, apt-get: see scripts/build-ft.sh)"
            continue
        fi
    fi
    run_here "$v" "$py" "$(patch_of "$py")t"
done

# 2. Today's Pythons in the Debian unstable root.
sid_note=""
if [[ ${#SID[@]} -gt 0 ]]; then
    if bash scripts/pythons.sh available || [[ -n "$(bash scripts/pythons.sh versions)" ]]; then
        if bash scripts/pythons.sh provision; then
            for v in "${SID[@]}"; do
                patch="$(bash scripts/pythons.sh run "python$v" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "?")"
                set="$(test_set chroot "$v")"
                echo "=== Python $v in the Debian unstable root ($patch), test set $set ==="
                if logged bash scripts/pythons.sh run "$MAKE" --no-print-directory test-here PYTHON_VERSIONS="$v" TEST_SET="$set"; then
                    record "$v" chroot "$patch" passed "$set"
                else
                    record "$v" chroot "$patch" FAILED "$set"
                fi
            done
        else
            sid_note="the Debian unstable root could not be provisioned (see above)"
            failed=1
        fi
    else
        sid_note="no chroot here (scripts/pythons.sh needs root and apt-get or debootstrap)"
    fi
fi

# 3. The lock order (ext/includes/lockorder.h), checked: a debug build
#    (AIOSUBINTERP_DEBUG=1 aborts on a mutex taken out of order, or a GIL
#    taken while holding one) runs the channel, cancellation, share, review
#    and stress tests on 3.13 here. Last, because it rebuilds .venv-3.13's
#    extension in place; the next make rebuilds the release build by itself.
DEBUG_TESTS="${DEBUG_TESTS-tests/test_locks_and_timeouts.py tests/test_crossing_edge_cases.py tests/test_channel.py tests/test_channel_ends.py tests/test_cancel.py tests/test_buffer.py tests/test_worker_races.py tests/stress}"
if [[ -n "$DEBUG_TESTS" ]] && py="$(bash scripts/find-python.sh 3.13 2>/dev/null)"; then
    echo "=== Python 3.13 here, debug build (lock order checked): $DEBUG_TESTS ==="
    if logged "$MAKE" --no-print-directory test-here PYTHON_VERSIONS=3.13 AIOSUBINTERP_DEBUG=1 \
            PYTEST_ARGS="$DEBUG_TESTS" TEST_SET=core; then
        record "3.13 debug" here "$(patch_of "$py")" passed core
    else
        record "3.13 debug" here "$(patch_of "$py")" FAILED core
    fi
fi

echo
echo "=== test matrix ==="
printf '%-10s %-8s %-8s %-5s %s\n' python where patch set result
for r in "${rows[@]}"; do echo "$r"; done
for v in "${SUPPORTED[@]}"; do
    if [[ -z "${covered[$v]:-}" ]]; then
        printf '%-10s %-8s %-8s %-5s %s\n' "$v" - - - "SKIPPED: not found (pyenv install $v, or as root: bash scripts/pythons.sh provision)"
        if [[ "${CI:-}" == true ]]; then failed=1; fi
    fi
done
if [[ -n "$ft_note" ]]; then
    echo "free-threaded build skipped: $ft_note"
fi
if [[ -n "$sid_note" ]]; then
    echo "chroot skipped: $sid_note; 3.13's latest patch, 3.14 and 3.15 were not tested there"
    if [[ "${CI:-}" == true ]]; then failed=1; fi
fi
if [[ ${#rows[@]} -eq 0 ]]; then
    echo "ERROR: no Python >= 3.12 found: nothing was tested"
    exit 1
fi
if [[ "${totals[passed]}" == 0 ]]; then
    echo "ERROR: no test passed on any Python"
    failed=1
fi
# pytest's counts summed over every Python (one line, as test runners close).
echo "total: ${totals[passed]} passed, $((totals[failed] + totals[errors])) failed, ${totals[skipped]} skipped"
exit "$failed"
