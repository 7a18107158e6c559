#!/usr/bin/env bash
# Print the path of a CPython interpreter for one minor version.
#
#   scripts/find-python.sh 3.13
#
# Order: pyenv (newest installed patch of that minor), then python<minor> on
# PATH (skipped when it is a pyenv shim that does not resolve), then
# /usr/bin and /usr/local/bin. A candidate counts only if it runs and reports
# that minor version, >= 3.12 (own GIL per interpreter, PEP 684), and a
# GIL-enabled build.
set -euo pipefail

usage() {
    echo "usage: $0 MAJOR.MINOR   (e.g. 3.13 or 3.12)" >&2
    exit 2
}

[[ $# -eq 1 ]] || usage
minor="$1"
[[ "$minor" =~ ^3\.([0-9]+)$ ]] || usage
if (( BASH_REMATCH[1] < 12 )); then
    echo "Python $minor is too old: aiosubinterp needs 3.12 or newer (per-interpreter GIL)" >&2
    exit 2
fi

# Succeeds if "$1" is a working interpreter of the requested minor version.
check() {
    local py="$1"
    [[ -x "$py" ]] || return 1
    "$py" - "$minor" >/dev/null 2>&1 <<'PY' || return 1
import sys, sysconfig
want = tuple(int(x) for x in sys.argv[1].split("."))
ok = (
    sys.implementation.name == "cpython"
    and sys.version_info >= (3, 12)
    and sys.version_info[:2] == want
    and not sysconfig.get_config_var("Py_GIL_DISABLED")  # no free-threaded "t" builds
)
sys.exit(0 if ok else 1)
PY
}

found() {
    echo "$1"
    exit 0
}

# 1. pyenv: newest patch release of that minor (plain X.Y.Z only: skips
#    "3.13.0t", "3.13-dev", rc builds). Falls back to older patches if the
#    newest one does not run.
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
        check "$pyenv_root/versions/$v/bin/python$minor" && found "$pyenv_root/versions/$v/bin/python$minor"
    done < <(ls -1 "$pyenv_root/versions" | grep -E "^${minor//./\\.}\.[0-9]+$" | sort -t. -k3,3nr)
fi

# 2. python<minor> on PATH (a pyenv shim fails `import sys` when pyenv's
#    current version does not provide it; check() then skips it).
if py="$(command -v "python$minor" 2>/dev/null)"; then
    check "$py" && found "$py"
fi

# 3. Usual system locations.
for py in "/usr/bin/python$minor" "/usr/local/bin/python$minor"; do
    check "$py" && found "$py"
done

echo "no Python $minor found: install it with pyenv install $minor or your package manager" >&2
exit 1
