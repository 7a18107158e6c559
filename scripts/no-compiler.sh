#!/usr/bin/env bash
# Usage: scripts/no-compiler.sh DIR
#
# Fills DIR with links to every program on the current PATH except the C and
# C++ compilers (cc, gcc, c++, g++, clang, ... and their triplet-named
# variants). With PATH=DIR and CC=false CXX=false, nothing can compile: what
# is installed there must come as a binary wheel. Used by
# scripts/install-wheel.sh (every test venv) and scripts/check-dist.sh.
set -euo pipefail
bin="$1"
mkdir -p "$bin"
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    [[ -d "$dir" ]] || continue
    for f in "$dir"/*; do
        name="$(basename "$f")"
        [[ -x "$f" && ! -d "$f" && ! -e "$bin/$name" ]] || continue
        case "$name" in
            cc|c++|c89|c99|gcc|g++|cpp|tcc|clang|clang++|icc|icx) continue ;;
            gcc-*|g++-*|clang-*|*-gcc|*-gcc-*|*-g++|*-g++-*|*-cc|*-c++) continue ;;
        esac
        ln -s "$f" "$bin/$name"
    done
done
