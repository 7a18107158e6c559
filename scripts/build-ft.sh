#!/usr/bin/env bash
# A free-threaded CPython 3.13 ("3.13t", PEP 703, ./configure --disable-gil),
# built from Debian's source package and cached outside the project.
#
#   scripts/build-ft.sh build      build and install it unless already there
#                                  (idempotent: a second run takes well under a
#                                  second); prints the interpreter's path last
#   scripts/build-ft.sh path       print the interpreter's path if built (exit 1
#                                  if not)
#   scripts/build-ft.sh available  exit 0 if this machine can build it (a
#                                  C compiler, make, and apt-get to fetch the
#                                  source; root to install missing build deps)
#
# Why from source: no Debian release ships a free-threaded python3.13 binary
# that runs on Debian 12 (glibc 2.36), and pyenv is not assumed. Debian's
# unstable suite publishes python3.13's source package (the upstream tarball
# plus Debian's patches); the upstream tarball alone configures and builds on
# Debian 12 with the usual -dev packages. Only the tarball is used: Debian's
# patches target its multiarch layout, not a private prefix.
#
# Where: AIOSUBINTERP_FT_PREFIX, default ~/.cache/aiosubinterp/py3.13t; the
# source and a build log sit next to it. The build is bounded: no PGO/LTO,
# `nice make -j2` (3.6 min measured on 2 idle cores, 2026-12-04; more when the
# machine is busy), so CI on a fresh machine can afford it.
#
# The mirror is the one apt already uses (never a hard-coded host); the
# deb-src line lives in a private apt configuration under the cache, so the
# machine's apt sources and lists are not changed.
set -euo pipefail

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/aiosubinterp"
PREFIX="${AIOSUBINTERP_FT_PREFIX:-$CACHE/py3.13t}"
WORK="$PREFIX.build"
PY="$PREFIX/bin/python3.13t"
# Suites tried in order for the source package. The mirror may be a dated
# snapshot whose index names a version it no longer serves (unstable's 3.13.18
# gave 404 here on 2026-12-04; testing's 3.13.15 downloads), so each suite is
# tried until one download succeeds; stable (3.13.5) is the last resort.
SUITES=(unstable testing stable)
# Bumped when the configure options change: an install with another stamp is
# rebuilt.
CONFIGURE_OPTS=(--disable-gil --with-ensurepip=install --without-doc-strings)
STAMP_CONTENT="v1 ${CONFIGURE_OPTS[*]}"
BUILD_DEPS=(build-essential pkg-config xz-utils libssl-dev libffi-dev zlib1g-dev libbz2-dev
    liblzma-dev libsqlite3-dev libreadline-dev libncurses-dev uuid-dev libexpat1-dev)

say() { echo "build-ft.sh: $*" >&2; }  # stdout carries only the path
die() {
    echo "build-ft.sh: $*" >&2
    exit 1
}

built() {
    [[ -x "$PY" && -f "$PREFIX/.aiosubinterp-stamp" && "$(cat "$PREFIX/.aiosubinterp-stamp")" == "$STAMP_CONTENT" ]] \
        && "$PY" -c 'import sys, sysconfig; sys.exit(not sysconfig.get_config_var("Py_GIL_DISABLED"))' 2>/dev/null
}

can_build() {
    command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1
}

# The mirror apt already uses on this machine (pythons.sh reads it).
mirror() {
    bash "$(dirname "${BASH_SOURCE[0]}")/pythons.sh" mirror
}

install_build_deps() {
    local missing=() p
    for p in "${BUILD_DEPS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ "$(id -u)" == 0 ]] || die "missing build dependencies (${missing[*]}); install them as root: apt-get install ${missing[*]}"
    say "installing build dependencies: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Downloads Debian's python3.13 source package into $WORK/src through a
# private apt configuration; prints the path of the upstream tarball.
fetch_source() {
    local m suite apt_opts tarball
    m="$(mirror)"
    mkdir -p "$WORK/apt/lists/partial" "$WORK/src"
    for suite in "${SUITES[@]}"; do
        echo "deb-src $m $suite main" >"$WORK/apt/sources.list"
        apt_opts=(-q -o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
            -o "Dir::State::Lists=$WORK/apt/lists" -o Acquire::Check-Valid-Until=false)
        say "fetching python3.13's source package from $m ($suite)"
        apt-get "${apt_opts[@]}" update >"$WORK/apt.log" 2>&1 || continue
        rm -f "$WORK"/src/python3.13_*
        (cd "$WORK/src" && apt-get "${apt_opts[@]}" --download-only source python3.13 >>"$WORK/apt.log" 2>&1) || continue
        tarball="$(ls "$WORK"/src/python3.13_*.orig.tar.* 2>/dev/null | head -1)"
        [[ -n "$tarball" ]] && { echo "$tarball"; return 0; }
    done
    tail -5 "$WORK/apt.log" >&2
    die "could not download python3.13's source package from $m (suites: ${SUITES[*]}; log: $WORK/apt.log)"
}

build() {
    mkdir -p "$(dirname "$PREFIX")"  # the cache, or where AIOSUBINTERP_FT_PREFIX points
    exec 8>"$PREFIX.lock"
    flock 8  # one build at a time; a second waits, then finds it done
    if built; then
        echo "$PY"
        return 0
    fi
    can_build || die "needs a C compiler, make and apt-get (a Debian or Ubuntu machine)"
    install_build_deps
    local tarball srcdir t0
    t0=$SECONDS
    tarball="$(fetch_source)"
    say "unpacking $(basename "$tarball")"
    rm -rf "$WORK/cpython"
    mkdir -p "$WORK/cpython"
    tar -xf "$tarball" -C "$WORK/cpython" --strip-components=1
    srcdir="$WORK/cpython"
    say "configure ${CONFIGURE_OPTS[*]} --prefix=$PREFIX; nice make -j2 (about 4 min; log: $WORK/build.log)"
    rm -rf "$PREFIX"
    (
        cd "$srcdir"
        nice -n 10 ./configure --prefix="$PREFIX" "${CONFIGURE_OPTS[@]}"
        nice -n 10 make -j2
        nice -n 10 make install
    ) >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log" >&2; die "build failed (log: $WORK/build.log)"; }
    "$PY" -c 'import sys, sysconfig; sys.exit(not sysconfig.get_config_var("Py_GIL_DISABLED"))' \
        || die "$PY is not a free-threaded build"
    # The modules the project's tests and pip need: a missing -dev package
    # makes configure skip them silently.
    "$PY" -c 'import ssl, ctypes, sqlite3, lzma, bz2, zlib, readline, decimal, uuid' \
        || die "$PY lacks a stdlib extension module (see $WORK/build.log)"
    echo "$STAMP_CONTENT" >"$PREFIX/.aiosubinterp-stamp"
    rm -rf "$WORK/cpython"  # ~500 MB of objects; the tarball stays
    say "built $("$PY" -VV | head -1) in $((SECONDS - t0)) s"
    echo "$PY"
}

case "${1:-}" in
    build) build ;;
    path) built && echo "$PY" ;;
    available) can_build ;;
    *) echo "usage: $0 build | path | available" >&2; exit 2 ;;
esac
