#!/usr/bin/env bash
# Print the path of a CPython interpreter for one minor version.
#
#   scripts/find-python.sh 3.13     a regular (GIL) build
#   scripts/find-python.sh 3.13t    a free-threaded build (PEP 703), as
#                                   CPython names them: python3.13t
#
# Order: pyenv (newest installed patch of that minor), then python<minor> on
# PATH (skipped when it is a pyenv shim that does not resolve), then
# /usr/bin and /usr/local/bin, and for a "t" version the build that
# scripts/build-ft.sh caches (it does not build: `make venv` does). A
# candidate counts only if it runs and reports that minor version, >= 3.12
# (own GIL per interpreter, PEP 684), and is the kind of build asked for:
# GIL-enabled for "3.13", free-threaded for "3.13t" (so a venv named after
# one never silently gets the other).
set -euo pipefail

usage() {
    echo "usage: $0 MAJOR.MINOR[t]   (e.g. 3.13, 3.12, or 3.13t for a free-threaded build)" >&2
    exit 2
}

[[ $# -eq 1 ]] || usage
[[ "$1" =~ ^3\.([0-9]+)(t?)$ ]] || usage
minor="3.${BASH_REMATCH[1]}"
ft="${BASH_REMATCH[2]}"  # "t": free-threaded
if (( BASH_REMATCH[1] < 12 )); then
    echo "Python $minor is too old: aiosubinterp needs 3.12 or newer (per-interpreter GIL)" >&2
    exit 2
fi
if [[ -n "$ft" ]] && (( BASH_REMATCH[1] < 13 )); then
    echo "Python $1 does not exist: free-threaded builds start with 3.13" >&2
    exit 2
fi

# Succeeds if "$1" is a working interpreter of the requested minor version.
check() {
    local py="$1"
    [[ -x "$py" ]] || return 1
    "$py" - "$minor" "$ft" >/dev/null 2>&1 <<'PY' || return 1
import sys, sysconfig
want = tuple(int(x) for x in sys.argv[1].split("."))
ok = (
    sys.implementation.name == "cpython"
    and sys.version_info >= (3, 12)
    and sys.version_info[:2] == want
    # "3.13" wants a GIL build, "3.13t" a free-threaded one
    and bool(sysconfig.get_config_var("Py_GIL_DISABLED")) == (sys.argv[2] == "t")
)
sys.exit(0 if ok else 1)
PY
}

found() {
    echo "$1"
    exit 0
}

# 1. pyenv: newest patch release of that minor (plain X.Y.Z, or X.Y.Zt for
#    a "t" version: skips "3.13-dev", rc builds). Falls back to older
#    patches if the newest one does not run.
pyenv_root=""
if command -v pyenv >/dev/null 2>&1; then
    pyenv_root="$(pyenv root 2>/dev/null || true)"
fi
if [[ -z "$pyenv_root" && -n "${PYENV_ROOT:-}" ]]; then
    pyenv_root="$PYENV_ROOT"
fi
if [[ -z "$pyenv_root" && -n "${HOME:-}" && -d "$HOME/.pyenv" ]]; then
    pyenv_root="$HOME/.pyenv"  # pyenv installed but not on this PATH
fi
if [[ -n "$pyenv_root" && -d "$pyenv_root/versions" ]]; then
    while IFS= read -r v; do
        check "$pyenv_root/versions/$v/bin/python$minor$ft" && found "$pyenv_root/versions/$v/bin/python$minor$ft"
    done < <(ls -1 "$pyenv_root/versions" | grep -E "^${minor//./\\.}\.[0-9]+$ft$" | sort -t. -k3,3nr)
fi

# 2. python<minor> on PATH (a pyenv shim fails `import sys` when pyenv's
#    current version does not provide it; check() then skips it).
if py="$(command -v "python$minor$ft" 2>/dev/null)"; then
    check "$py" && found "$py"
fi

# 3. Usual system locations.
for py in "/usr/bin/python$minor$ft" "/usr/local/bin/python$minor$ft"; do
    check "$py" && found "$py"
done

# 4. Free-threaded: the build scripts/build-ft.sh keeps in the cache.
if [[ "$minor$ft" == 3.13t ]] && py="$(bash "$(dirname "$0")/build-ft.sh" path 2>/dev/null)"; then
    check "$py" && found "$py"
fi

if [[ -n "$ft" ]]; then
    echo "no free-threaded Python $minor$ft found: build one with scripts/build-ft.sh build (3.13t), or pyenv install $minor${ft}" >&2
    exit 1
fi
echo "no Python $minor found: install it with pyenv install $minor or your package manager" >&2
exit 1
